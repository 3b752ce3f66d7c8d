package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// DefaultGrace is how long requests in flight may finish after a stop
// when RunConfig.Grace is zero.
const DefaultGrace = 10 * time.Second

// Drain marks the gateway as draining: from then on GET /health answers
// 503 {"status":"draining"}, so a readiness probe or a load balancer's
// health check takes this replica out of rotation, while every request,
// new or in flight, is still served. It cannot be undone; Run calls it
// when its context ends.
func (g *Gateway) Drain() { g.draining.Store(true) }

// Draining reports whether Drain was called.
func (g *Gateway) Draining() bool { return g.draining.Load() }

// drainAndStop stops srv gracefully: Drain, keep serving for delay (so
// that the health checks of whatever routes traffic here see the 503 and
// stop sending before the port closes), then stop accepting connections
// and wait up to grace for the requests in flight — streams included — to
// finish. Connections still open when grace expires are closed, cutting
// their streams, and the error says so.
func (g *Gateway) drainAndStop(srv *http.Server, delay, grace time.Duration, log *slog.Logger) error {
	g.Drain()
	log.Info("gateway draining: /health answers 503", "drain_delay", delay, "grace", grace)
	if delay > 0 {
		t := time.NewTimer(delay)
		<-t.C
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err == nil {
		log.Info("gateway stopped: every request in flight finished")
		return nil
	}
	_ = srv.Close()
	return fmt.Errorf("gateway: shutdown: the %s grace expired with requests in flight; their connections were closed: %w", grace, err)
}
