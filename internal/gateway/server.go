package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/tokentrace/tokentrace/internal/redact"
)

// RunConfig is what `tokentrace gateway` needs: either a configuration
// file or quick-start upstreams, and where to listen.
type RunConfig struct {
	Addr       string
	ConfigPath string   // YAML file, watched for changes
	Upstreams  []string // quick start when ConfigPath is empty
	// ReloadInterval is how often the file is checked (default 2s).
	ReloadInterval time.Duration
	Log            *slog.Logger
	// Ready, if set, receives the listening address once serving.
	Ready func(addr net.Addr)
	// DrainDelay is how long the gateway keeps accepting requests after
	// ctx ends while /health answers 503, so that load balancers stop
	// sending before the port closes (0: close at once).
	DrainDelay time.Duration
	// Grace is how long requests in flight may then finish before their
	// connections are closed (default DefaultGrace).
	Grace time.Duration
}

// Validate reports a RunConfig field that cannot work.
func (rc RunConfig) Validate() error {
	if rc.DrainDelay < 0 {
		return fmt.Errorf("drain delay %s: must not be negative", rc.DrainDelay)
	}
	if rc.Grace < 0 {
		return fmt.Errorf("grace %s: must not be negative", rc.Grace)
	}
	return nil
}

// Run serves the gateway until ctx ends, then drains (Drain, DrainDelay)
// and shuts down gracefully: new connections are refused and requests in
// flight, streams included, get Grace to finish. An invalid configuration
// stops it before it listens.
func Run(ctx context.Context, rc RunConfig) error {
	log := rc.Log
	if log == nil {
		log = slog.Default()
	}
	log = slog.New(redact.Handler(log.Handler())) // no credential reaches a log line
	if err := rc.Validate(); err != nil {
		return err
	}
	var cfg *Config
	var loaded []byte
	var err error
	switch {
	case rc.ConfigPath != "" && len(rc.Upstreams) > 0:
		return errors.New("give either --config or --upstream, not both")
	case rc.ConfigPath != "":
		cfg, loaded, err = LoadConfig(rc.ConfigPath)
	case len(rc.Upstreams) > 0:
		cfg, err = QuickConfig(rc.Upstreams)
	default:
		return errors.New("no upstreams: give --upstream URL (repeatable) or --config FILE")
	}
	if err != nil {
		return err
	}
	g, err := newWithLog(cfg, log)
	if err != nil {
		return err
	}
	defer g.Close()
	if cfg.OTLPEndpoint != "" {
		tp, err := NewOTLPTracerProvider(ctx, cfg.OTLPEndpoint)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			// Shutdown exports the spans still batched; a failure loses them.
			if err := tp.Shutdown(sctx); err != nil {
				log.Error("tracing: spans not exported at shutdown", "endpoint", cfg.OTLPEndpoint, "err", err)
			}
		}()
		g.Tracer = tp.Tracer("github.com/tokentrace/tokentrace/internal/gateway")
	}
	if rc.ConfigPath != "" {
		iv := rc.ReloadInterval
		if iv <= 0 {
			iv = 2 * time.Second
		}
		go Watch(ctx, rc.ConfigPath, loaded, iv, g.SetConfig, log)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", rc.Addr)
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	limits := cfg.Server.limits()
	srv := limits.Server(g)
	ln = limits.Listener(ln)
	log.Info("gateway listening", "addr", ln.Addr().String(), "pools", len(cfg.Pools), "routes", len(cfg.Routes))
	if rc.Ready != nil {
		rc.Ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: serve: %w", err)
	case <-ctx.Done():
	}
	grace := rc.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	return g.drainAndStop(srv, rc.DrainDelay, grace, log)
}
