package gateway

import (
	"log/slog"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
)

// DefaultGrace is how long requests in flight may finish after a stop
// when RunConfig.Grace is zero.
const DefaultGrace = httplimit.DefaultGrace

// Drain marks the gateway as draining: from then on GET /health answers
// 503 {"status":"draining"}, so a readiness probe or a load balancer's
// health check takes this replica out of rotation, while every request,
// new or in flight, is still served. It cannot be undone; Run calls it
// when its context ends.
func (g *Gateway) Drain() { g.draining.Store(true) }

// Draining reports whether Drain was called.
func (g *Gateway) Draining() bool { return g.draining.Load() }

// drain runs when the gateway stops, before its port closes: Drain, then
// keep serving for delay, so that the health checks of whatever routes
// traffic here see the 503 and stop sending. httplimit.Serve then stops
// accepting connections and waits up to the grace for the requests in
// flight, streams included, to finish.
func (g *Gateway) drain(delay, grace time.Duration, log *slog.Logger) {
	g.Drain()
	log.Info("gateway draining: /health answers 503", "drain_delay", delay, "grace", grace)
	if delay > 0 {
		t := time.NewTimer(delay)
		<-t.C
	}
}
