package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// RunConfig is a gateway to run: either a configuration file or
// quick-start upstreams, and how it stops. A bad one gives a *field.Error
// (config, upstream, reload_interval, drain_delay, grace).
type RunConfig struct {
	ConfigPath string   // config: YAML file, watched for changes
	Upstreams  []string // upstream: quick start when ConfigPath is empty
	// ReloadInterval (reload_interval) is how often the file is checked
	// (default 2s).
	ReloadInterval time.Duration
	Log            *slog.Logger
	// DrainDelay (drain_delay) is how long the gateway keeps accepting
	// requests after ctx ends while /health answers 503, so that load
	// balancers stop sending before the port closes (0: close at once).
	DrainDelay time.Duration
	// Grace (grace) is how long requests in flight may then finish before
	// their connections are closed (default DefaultGrace).
	Grace time.Duration
	// AdminAddr (admin_addr), when set, is the host:port /health and
	// /metrics are served on instead of the data port (GET and HEAD only;
	// the data port then answers 404 for them).
	AdminAddr string
	// Live (live) serves the live view at LivePath on the admin listener
	// (it needs AdminAddr); LiveWindow is its sliding window
	// (live.DefaultWindow when 0).
	Live       bool
	LiveWindow time.Duration
}

// Validate reports a RunConfig duration that cannot work.
func (rc RunConfig) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"reload_interval", rc.ReloadInterval}, {"drain_delay", rc.DrainDelay}, {"grace", rc.Grace}} {
		if d.v < 0 {
			return field.Invalid(d.name, d.v, "must not be negative")
		}
	}
	if rc.Live && rc.AdminAddr == "" {
		return field.Errorf("live", "{live} is served on the admin listener: give its address (admin_addr, --admin-listen) too")
	}
	if rc.LiveWindow < 0 {
		return field.Invalid("live_window", rc.LiveWindow, "must not be negative")
	}
	return nil
}

// Server is a gateway whose configuration is loaded and checked, ready to
// serve.
type Server struct {
	g      *Gateway
	cfg    *Config
	loaded []byte // the file's bytes cfg was parsed from (for Watch)
	rc     RunConfig
	log    *slog.Logger
}

// NewServer loads the configuration (the file, or the quick start over the
// upstreams) and builds the gateway; an invalid configuration is refused
// before anything listens. The Server must be run with Serve.
func NewServer(rc RunConfig) (*Server, error) {
	log := rc.Log
	if log == nil {
		log = slog.Default()
	}
	log = slog.New(redact.Handler(log.Handler())) // no credential reaches a log line
	if err := rc.Validate(); err != nil {
		return nil, err
	}
	var cfg *Config
	var loaded []byte
	var err error
	switch {
	case rc.ConfigPath != "" && len(rc.Upstreams) > 0:
		return nil, field.Errorf("config", "give either {config} or {upstream}, not both")
	case rc.ConfigPath != "":
		cfg, loaded, err = LoadConfig(rc.ConfigPath)
	case len(rc.Upstreams) > 0:
		cfg, err = QuickConfig(rc.Upstreams)
		err = field.Wrap("upstream", err)
	default:
		return nil, field.Errorf("upstream", "no upstreams: give {upstream} URL (repeatable) or {config} FILE")
	}
	if err != nil {
		return nil, err
	}
	g, err := newWithLog(cfg, log)
	if err != nil {
		return nil, err
	}
	return &Server{g: g, cfg: cfg, loaded: loaded, rc: rc, log: log}, nil
}

// Serve serves the gateway on ln until ctx ends, then drains (DrainDelay)
// and shuts down gracefully: new connections are refused and requests in
// flight, streams included, get Grace to finish. It exports spans when the
// configuration names an OTLP endpoint and reloads a configuration file
// when it changes. Every goroutine it starts (the HTTP server, the reload
// watcher, the pools' scrapers) has ended when it returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	g, cfg, log := s.g, s.cfg, s.log
	defer g.Close() // stops the scrapers and waits for them
	if cfg.OTLPEndpoint != "" {
		tp, err := NewOTLPTracerProvider(ctx, cfg.OTLPEndpoint)
		if err != nil {
			ln.Close()
			return err
		}
		// Shutdown exports the spans still batched; a failure loses them.
		defer shutdownExporter(ctx, log, tp.Shutdown, "tracing: spans not exported at shutdown", cfg.OTLPEndpoint)
		g.Tracer = tp.Tracer("github.com/tokentrace/tokentrace/internal/gateway")
		if g.Metrics != nil {
			mp, err := tracing.NewMeterProvider(ctx, cfg.OTLPEndpoint, "tokentrace-gateway", 10*time.Second)
			if err != nil {
				ln.Close()
				return err
			}
			defer shutdownExporter(ctx, log, mp.Shutdown, "metrics: GenAI metrics not exported at shutdown", cfg.OTLPEndpoint)
			if g.Metrics.GenAI, err = tracing.NewGenAIServer(mp, "tokentrace"); err != nil {
				ln.Close()
				return err
			}
		}
	}
	limits := cfg.Server.limits()
	log.Info("gateway listening", "addr", ln.Addr().String(), "pools", len(cfg.Pools), "routes", len(cfg.Routes))
	grace := s.rc.Grace
	if grace == 0 {
		grace = DefaultGrace
	}

	// The server and the watcher run in one group: a server that fails
	// ends the group (its context) and so the watcher; the end of ctx
	// drains and stops the server (httplimit.Serve), and the watcher.
	grp, gctx := errgroup.WithContext(ctx)
	if s.rc.AdminAddr != "" {
		aln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.rc.AdminAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("gateway: admin listener: %w", err)
		}
		log.Info("gateway admin listening (/health, /metrics)", "addr", aln.Addr().String())
		admin := g.AdminHandler()
		if s.rc.Live {
			g.NewLiveBoard(s.rc.LiveWindow)
			grp.Go(func() error {
				g.RunLive(ctx) // ends the page's streams when ctx ends
				return nil
			})
			log.Info("gateway live view", "url", "http://"+aln.Addr().String()+LivePath+"/")
		}
		grp.Go(func() error {
			if err := limits.Serve(ctx, aln, admin, httplimit.Stop{Grace: grace}); err != nil {
				return fmt.Errorf("gateway: admin: %w", err)
			}
			return nil
		})
	}
	grp.Go(func() error {
		err := limits.Serve(ctx, ln, g, httplimit.Stop{Grace: grace, Stopping: func() { g.drain(s.rc.DrainDelay, grace, log) }})
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		log.Info("gateway stopped: every request in flight finished")
		return nil
	})
	if s.rc.ConfigPath != "" {
		iv := s.rc.ReloadInterval
		if iv <= 0 {
			iv = 2 * time.Second
		}
		grp.Go(func() error {
			Watch(gctx, s.rc.ConfigPath, s.loaded, iv, g.SetConfig, log)
			return nil
		})
	}
	return grp.Wait()
}

// shutdownExporter flushes an OTLP exporter's batched data within 5 s of
// the server's end, even when ctx is already done, and logs what a failed
// flush lost.
func shutdownExporter(ctx context.Context, log *slog.Logger, shutdown func(context.Context) error, lost, endpoint string) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		log.Error(lost, "endpoint", endpoint, "err", err)
	}
}
