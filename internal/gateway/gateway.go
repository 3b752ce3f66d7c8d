package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/tokentrace/tokentrace/internal/h1"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/live"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/staleconn"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Gateway is the proxy, an http.Handler. Like httputil.ReverseProxy its
// zero value is usable: with no configuration it answers every completion
// with 503, and each hook field left nil takes a working default. Give it
// upstreams with SetConfig (which hot reload calls again on change).
type Gateway struct {
	// Transport carries upstream requests; nil uses a transport tuned for
	// many concurrent streams (no compression, large idle pools).
	Transport http.RoundTripper
	// Now is the clock; nil uses time.Now.
	Now func() time.Time
	// Log receives configuration changes and upstream failures; nil uses
	// slog.Default. API keys are never logged. Set it before SetConfig:
	// a pool's scraper logs from its own goroutine.
	Log *slog.Logger
	// Metrics receives every finished request; nil records nothing.
	Metrics *Metrics
	// Live, when set (NewLiveBoard), is offered every finished request
	// and served at LivePath by AdminHandler (or beside /metrics).
	Live *live.Board
	// MetricsHandler serves GET /metrics; nil answers 404.
	MetricsHandler http.Handler
	// Tracer starts one span per request; nil traces nothing (a client's
	// traceparent is still passed upstream).
	Tracer trace.Tracer
	// NewLimiter makes the limiter of a configured API key that has
	// limits; nil uses the configuration's redis when it has one, else
	// NewLocalLimiter (in-process token buckets). A key whose
	// configuration a reload keeps keeps its limiter.
	NewLimiter func(KeyConfig) Limiter

	rt        atomic.Pointer[liveConfig]
	mu        sync.Mutex // serialises SetConfig
	initOnce  sync.Once
	transport http.RoundTripper
	idPrefix  string
	idSeq     atomic.Uint64
	// clock is g.now as a func value, made once (init): passing g.now
	// itself makes a closure each time.
	clock func() time.Time
	// base is the clock's instant at init: sinceBase's origin.
	base     time.Time
	draining atomic.Bool // set by Drain: /health answers 503
	// modelsCache holds /v1/models' last list.
	modelsCache modelsCache
	// adminApart: /health and /metrics are served by AdminHandler only.
	adminApart atomic.Bool
	// endGraceTest replaces streamEndGrace when set (tests).
	endGraceTest time.Duration
	// sentTest, when set, runs after each write of a send queue to its
	// client was timed (tests on a clock of their own).
	sentTest func()
	// noRawSend: streamed answers go through net/http's response writer
	// and the send queue's goroutine only, never below it (tests and
	// benchmarks comparing the two).
	noRawSend bool
	// bg runs the configurations' background goroutines (the pools'
	// scrapers); Close waits for them.
	bg errgroup.Group
}

// liveConfig is one configuration made live.
type liveConfig struct {
	cfg    *Config
	pools  map[string]*pool
	routes map[string]*RouteConfig
	keys   map[string]*keyState // by hex SHA-256
	redis  *redisRuntime        // nil: no redis configured
	cancel context.CancelFunc   // stops this runtime's scrapers and shared pools' loops
}

type keyState struct {
	cfg KeyConfig
	lim Limiter // nil: the key has no limits
}

// pool is a live pool: replicas, balancer, admission queue and the recent
// upstream TTFTs that set the hedging delay.
type pool struct {
	name     string
	cfg      PoolConfig
	replicas []*Replica
	balancer Balancer
	adm      *admission

	mu    sync.Mutex
	ttfts []time.Duration // ring of recent upstream TTFTs
	next  int
}

// New returns a Gateway for cfg with its own Prometheus registry serving
// /metrics. cfg must have passed Validate (ParseConfig and QuickConfig do it).
func New(cfg *Config) (*Gateway, error) { return newWithLog(cfg, nil) }

// newWithLog is New with Log set before the configuration's scrapers start
// (they log from their own goroutines, so Log cannot be set after).
func newWithLog(cfg *Config, log *slog.Logger) (*Gateway, error) {
	reg := prometheus.NewRegistry()
	m := NewMetrics()
	if err := m.Register(reg); err != nil {
		return nil, err
	}
	// The process's own cost beside what it measures: CPU seconds, heap,
	// allocations, GC pauses and goroutines (go_*, process_*), as any
	// proxy's exporter shows them; read only when /metrics is scraped.
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	g := &Gateway{Log: log, Metrics: m, MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	if err := g.SetConfig(cfg); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Gateway) init() {
	g.initOnce.Do(func() {
		// A request that meets a pooled connection its upstream already
		// closed is resent once on a fresh one (internal/staleconn).
		switch t := g.Transport.(type) {
		case nil:
			g.transport = defaultTransport()
		case *http.Transport:
			g.transport = staleconn.New(t)
		default:
			g.transport = &staleconn.Transport{Pooled: t}
		}
		g.idPrefix = newIDPrefix()
		g.clock = g.now
		g.base = g.now()
	})
}

// defaultTransport is the upstream transport of a Gateway without one:
// plain-HTTP/1.1 upstreams through internal/h1 (request and answer on the
// handler's goroutine), anything else through net/http's Transport, tuned
// for many concurrent streams (no compression, large idle pools); a
// request that meets a pooled connection its upstream already closed is
// resent once on a fresh one (internal/staleconn).
func defaultTransport() http.RoundTripper {
	dial := (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         dial,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: maxIdlePerHost,
		IdleConnTimeout:     idleConnTimeout,
		DisableCompression:  true,
		WriteBufferSize:     8 << 10,
		ReadBufferSize:      4 << 10,
	}
	st := staleconn.New(t)
	if upstreamNetHTTP {
		return st
	}
	st.Pooled = h1.New(dial, t, h1.Config{MaxIdlePerHost: maxIdlePerHost, IdleConnTimeout: idleConnTimeout,
		ReadBufferSize: 4 << 10, WriteBufferSize: 8 << 10})
	return st
}

// The upstream connections' pool: idle connections kept per host, and for
// how long.
const (
	maxIdlePerHost  = 4096
	idleConnTimeout = 90 * time.Second
)

// upstreamNetHTTP sends every upstream request through net/http's
// Transport (the tests run the suite through both paths).
var upstreamNetHTTP bool

// newLimiter makes a key's limiter: NewLimiter's when set, else the
// buckets in Redis when one is configured, else in-process ones.
func (g *Gateway) newLimiter(rr *redisRuntime, k KeyConfig) Limiter {
	switch {
	case g.NewLimiter != nil:
		return g.NewLimiter(k)
	case rr != nil:
		return g.newRedisLimiter(rr, k)
	}
	return NewLocalLimiter(k)
}

func (g *Gateway) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// sinceBase is the clock's reading as the time since g.base: with
// time.Now's clock one monotonic reading (time.Since; time.Now reads the
// wall clock too, about twice the cost on a VM's kvm-clock). The reading
// of every event of a stream (relay.next, waitReader) is one of these.
func (g *Gateway) sinceBase() time.Duration {
	if g.Now != nil {
		return g.Now().Sub(g.base)
	}
	return time.Since(g.base)
}

// log is Log (or slog.Default) with every record's credentials masked
// (redact.Handler).
func (g *Gateway) log() *slog.Logger {
	l := g.Log
	if l == nil {
		l = slog.Default()
	}
	return slog.New(redact.Handler(l.Handler()))
}

// SetConfig fills cfg's defaults, validates it and makes it live. Pools and replicas that keep
// their names and URLs keep their state (queue, outstanding counts,
// concurrency limit); requests in flight finish on the configuration they
// started with. An invalid cfg changes nothing.
func (g *Gateway) SetConfig(cfg *Config) error {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	g.init()
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.rt.Load()
	if err := g.checkAuthOff(old, cfg); err != nil {
		return err
	}
	g.warnUnboundedCharge(cfg)
	rr, err := g.openRedis(old, cfg.Redis)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	rt := &liveConfig{cfg: cfg, pools: map[string]*pool{}, routes: map[string]*RouteConfig{}, keys: map[string]*keyState{}, redis: rr, cancel: cancel}
	for _, pc := range cfg.Pools {
		p, shared := g.livePool(pc, old, rr)
		rt.pools[pc.Name] = p
		if pc.ScrapeInterval > 0 {
			g.bg.Go(func() error {
				g.scrapeLoop(ctx, p)
				return nil
			})
		}
		if shared != nil {
			g.bg.Go(func() error {
				g.shareLoop(ctx, p, shared, rr)
				return nil
			})
		}
	}
	rt.setRoutes(cfg)
	for _, k := range cfg.Keys {
		ks := &keyState{cfg: k}
		switch {
		case old != nil && old.keys[k.SHA256] != nil && old.keys[k.SHA256].cfg == k && old.redis == rr:
			ks.lim = old.keys[k.SHA256].lim
		case k.RequestsPerSecond > 0 || k.TokensPerMinute > 0:
			ks.lim = g.newLimiter(rr, k)
		}
		rt.keys[k.SHA256] = ks
	}
	g.Metrics.initSeries(rt)
	g.rt.Store(rt)
	if old != nil {
		old.cancel()
		if old.redis != nil && old.redis != rr {
			// Requests that started on the old configuration may still
			// call it, each for at most its timeout.
			c := old.redis.client
			time.AfterFunc(retireRedisAfter(old.redis.cfg), func() { _ = c.Close() })
		}
	}
	return nil
}

// errKeysLost refuses a configuration without a keys section in place of
// one with keys: a file that lost its keys would turn authentication off.
var errKeysLost = errors.New("keys: the new configuration has no keys section and would turn authentication off; write `keys: []` to turn it off")

// checkAuthOff refuses a change of authentication from on (old has keys)
// to off unless cfg says so explicitly (Keys non-nil and empty: `keys: []`
// in YAML), and logs the change as a warning when it is made.
func (g *Gateway) checkAuthOff(old *liveConfig, cfg *Config) error {
	if old == nil || len(old.cfg.Keys) == 0 || len(cfg.Keys) > 0 {
		return nil
	}
	if cfg.Keys == nil {
		return errKeysLost
	}
	g.log().Warn("config: authentication turned off (keys: []): every request is served without an API key", "keys_before", len(old.cfg.Keys))
	return nil
}

// warnUnboundedCharge warns of routes whose requests without max_tokens a
// key's tokens_per_minute charges their input only at admission (their
// output when settled, afterwards): the route has neither
// default_max_tokens nor max_max_tokens to charge instead, and one of its
// pools no context_tokens.
func (g *Gateway) warnUnboundedCharge(cfg *Config) {
	if !slices.ContainsFunc(cfg.Keys, func(k KeyConfig) bool { return k.TokensPerMinute > 0 }) {
		return
	}
	hasContext := map[string]bool{}
	for _, p := range cfg.Pools {
		hasContext[p.Name] = p.ContextTokens > 0
	}
	for _, r := range cfg.Routes {
		pools := []string{r.Pool}
		for _, lp := range r.LengthPools {
			pools = append(pools, lp.Pool)
		}
		known := !slices.ContainsFunc(pools, func(p string) bool { return p != "" && !hasContext[p] })
		if r.Length.DefaultMaxTokens == 0 && r.Length.MaxMaxTokens == 0 && !known {
			g.log().Warn("config: a key has tokens_per_minute but this route has no length.default_max_tokens or max_max_tokens and its pool no context_tokens: its requests without max_tokens are charged their input at admission and their output only once answered, so many at once pass the limit", "route", r.Model)
		}
	}
}

// livePool makes pool pc live: a pool of the running configuration old
// with its name keeps its queue (counts, adaptive limit) and hedging
// samples; a replica whose configuration is unchanged keeps its object
// (outstanding count, scraped figures), a changed one gets a new object,
// so a Replica's cfg is never written after it is shared. shared is the
// pool's slots shared through Redis (rr) when queue.shared, for its loop.
func (g *Gateway) livePool(pc PoolConfig, old *liveConfig, rr *redisRuntime) (p *pool, shared *sharedSlots) {
	var prev *pool
	if old != nil {
		prev = old.pools[pc.Name]
	}
	if prev == nil {
		p = &pool{name: pc.Name, adm: newAdmission(pc.Queue), ttfts: make([]time.Duration, 0, 256)}
	} else {
		prev.mu.Lock()
		p = &pool{name: pc.Name, adm: prev.adm, ttfts: append(make([]time.Duration, 0, 256), prev.ttfts...), next: prev.next}
		prev.mu.Unlock()
		p.adm.update(pc.Queue)
	}
	p.cfg = pc
	p.balancer = newBalancer(pc, g.now)
	for _, rc := range pc.Replicas {
		var r *Replica
		if prev != nil {
			for _, or := range prev.replicas {
				if sameReplica(or.cfg, rc) {
					r = or
				}
			}
		}
		if r == nil {
			r = &Replica{cfg: rc}
		}
		p.replicas = append(p.replicas, r)
	}
	hint := route.WaitingHint(p.replicas, 3*pc.ScrapeInterval.D())
	var onChange func(depth, inflight int, limit float64)
	if m := g.Metrics; m != nil {
		depthG, inflightG, limitG := m.QueueDepth.WithLabelValues(pc.Name), m.InFlight.WithLabelValues(pc.Name), m.Concurrency.WithLabelValues(pc.Name)
		onChange = func(depth, inflight int, limit float64) {
			depthG.Set(float64(depth))
			inflightG.Set(float64(inflight))
			limitG.Set(limit)
		}
	}
	var onFallback func(bool)
	if rr != nil && g.Metrics != nil {
		onFallback = func(allowed bool) {
			g.Metrics.RedisFallback.WithLabelValues(useAdmission, decisionLabel(allowed)).Inc()
		}
	}
	p.adm.mu.Lock() // the admission may be live (kept across a reload)
	p.adm.hint, p.adm.onChange, p.adm.onFallback = hint, onChange, onFallback
	shared = p.adm.shared
	p.adm.changedLocked()
	p.adm.mu.Unlock()
	return p, shared
}

// setRoutes indexes the configuration's routes by model, and routes a
// model a replica lists, with no route of its own, to that replica's pool
// (the first pool listing it) with no policies.
func (rt *liveConfig) setRoutes(cfg *Config) {
	for i := range cfg.Routes {
		rt.routes[cfg.Routes[i].Model] = &cfg.Routes[i]
	}
	for _, pc := range cfg.Pools {
		for _, rc := range pc.Replicas {
			for _, m := range rc.Models {
				if _, ok := rt.routes[m]; !ok {
					rt.routes[m] = &RouteConfig{Model: m, Pool: pc.Name, Length: LengthPolicy{OnExceed: "reject"}}
				}
			}
		}
	}
}

// Close stops background work (the scrapers of the live configuration;
// those of replaced ones stopped at the reload) and waits for it to end.
// retireRedisAfter is how long a replaced configuration's Redis client
// stays open for the requests that started on it.
func retireRedisAfter(cfg RedisConfig) time.Duration {
	return max(10*time.Second, 4*cfg.Timeout.D())
}

// Close stops background work (the scrapers and shared pools' loops of
// the live configuration; those of replaced ones stopped at the reload),
// waits for it to end, and closes the connections to Redis.
func (g *Gateway) Close() {
	rt := g.rt.Load()
	if rt != nil {
		rt.cancel()
	}
	_ = g.bg.Wait()
	if rt != nil && rt.redis != nil {
		_ = rt.redis.client.Close()
	}
}

func (g *Gateway) scrapeLoop(ctx context.Context, p *pool) {
	client := &http.Client{Transport: g.transport, CheckRedirect: httplimit.NoRedirects, Timeout: max(time.Second, p.cfg.ScrapeInterval.D())}
	t := time.NewTicker(p.cfg.ScrapeInterval.D())
	defer t.Stop()
	// A replica whose scrapes fail is routed and shed on without its
	// figures: say so once when it starts failing and once when it
	// recovers (every failure in between at debug level).
	failing := map[*Replica]bool{}
	for {
		for _, r := range p.replicas {
			err := r.scrape(ctx, client, g.now())
			switch {
			case ctx.Err() != nil:
			case err != nil && !failing[r]:
				failing[r] = true
				g.log().Warn("scrape failing: the replica's queue figures are ignored until it recovers", "pool", p.name, "replica", r.cfg.URL, "err", err)
			case err != nil:
				g.log().Debug("scrape failed", "pool", p.name, "replica", r.cfg.URL, "err", err)
			case failing[r]:
				delete(failing, r)
				g.log().Info("scrape recovered", "pool", p.name, "replica", r.cfg.URL)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recordTTFT remembers an upstream TTFT for the hedging delay.
func (p *pool) recordTTFT(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ttfts) < cap(p.ttfts) {
		p.ttfts = append(p.ttfts, d)
		return
	}
	p.ttfts[p.next] = d
	p.next = (p.next + 1) % len(p.ttfts)
}

// p95TTFT is the 95th percentile (nearest rank) of the recent upstream
// TTFTs; ok is false with fewer than 20 samples.
func (p *pool) p95TTFT() (time.Duration, bool) {
	p.mu.Lock()
	s := slices.Clone(p.ttfts)
	p.mu.Unlock()
	if len(s) < 20 {
		return 0, false
	}
	slices.Sort(s)
	return stats.Percentile(s, 95), true
}

// route finds the route for a public model name: its own, else "*".
func (rt *liveConfig) route(model string) *RouteConfig {
	if r, ok := rt.routes[model]; ok {
		return r
	}
	return rt.routes["*"]
}

// poolFor picks the route's pool, by length band when configured.
func (rt *liveConfig) poolFor(r *RouteConfig, req *Request) *pool {
	if len(r.LengthPools) == 0 {
		return rt.pools[r.Pool]
	}
	if i := route.Band(r.LengthPools, LengthPool.maxInput, req.InputTokens()); i >= 0 {
		return rt.pools[r.LengthPools[i].Pool]
	}
	if r.Pool != "" {
		return rt.pools[r.Pool]
	}
	return rt.pools[r.LengthPools[len(r.LengthPools)-1].Pool]
}

func (lp LengthPool) maxInput() int { return lp.MaxInputTokens }

func sameReplica(a, b ReplicaConfig) bool {
	return a.URL == b.URL && a.userinfo.String() == b.userinfo.String() && a.APIKey == b.APIKey && a.APIKeyEnv == b.APIKeyEnv && a.Kind == b.Kind && slices.Equal(a.Models, b.Models)
}
