package bench

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// DefaultScrapeInterval is how often bench reads the target's /metrics
// during a run (besides at its start and end).
const DefaultScrapeInterval = 2 * time.Second

// firstScrapeTimeout bounds the scrape before the first request, which the
// run waits for.
const firstScrapeTimeout = 2 * time.Second

// serverWatch reads the target's Prometheus /metrics at the start of a
// run, every interval during it and at its end, and keeps the figures the
// report reasons with (internal/scrape's names for the target's engine).
// A target without a readable /metrics is said once and not asked again.
type serverWatch struct {
	url    string
	root   string // the target's /metrics (url until a gateway's engines replace it)
	header http.Header
	client *http.Client
	now    func() int64 // the run's clock, as the records'

	mu      sync.Mutex
	engine  scrape.Engine
	info    results.ServerInfo
	samples []results.ServerSample
	off     bool // the first scrape failed: none after it
}

// newServerWatch prepares the scrapes of t's /metrics, sending the
// target's credentials and headers as its requests do.
func newServerWatch(t Target, now func() int64) *serverWatch {
	w := &serverWatch{now: now, client: &http.Client{Timeout: 5 * time.Second, CheckRedirect: httplimit.NoRedirects}, header: http.Header{}}
	u, err := scrape.MetricsURL(t.BaseURL)
	if err != nil {
		w.off, w.info.Error = true, err.Error()
		return w
	}
	w.url, w.root = u, u
	for k, vs := range t.Headers {
		w.header[k] = append([]string(nil), vs...)
	}
	if t.APIKey != "" {
		w.header.Set("Authorization", "Bearer "+t.APIKey)
	}
	return w
}

// scrapeOnce reads /metrics once; the first read detects the engine and
// its configuration, or turns the watch off when it fails.
func (w *serverWatch) scrapeOnce(ctx context.Context) {
	w.mu.Lock()
	off, first := w.off, len(w.samples) == 0
	w.mu.Unlock()
	if off {
		return
	}
	fams, err := scrape.Get(ctx, w.client, w.url, w.header)
	at := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil && first:
		w.off = true
		w.info.Error = "the target's /metrics could not be read: " + err.Error()
		return
	case err != nil:
		return // a later failure loses one sample
	case first:
		e, ok := scrape.Detect(fams)
		gw := scrape.GatewayConfig(fams)
		if !ok && gw != nil {
			// Behind a tokentrace gateway: the engines' own /metrics
			// through it (its /upstream/metrics), from here on.
			if f, u := w.upstream(ctx); f != nil {
				fams, w.url, w.info.Via = f, u, u
				e, ok = scrape.Detect(fams)
			}
			if !ok {
				w.off, w.info.Config = true, gw
				w.info.Error = "the target is a tokentrace gateway: its configuration is recorded, the engine behind it is not scraped (its " +
					scrape.UpstreamMetricsPath + " holds no engine's names)"
				return
			}
		}
		if !ok {
			w.off = true
			w.info.Error = "the target's /metrics holds none of the metric names tokentrace knows (vLLM, SGLang, TGI, llama.cpp)"
			return
		}
		w.engine, w.info.Engine, w.info.Config = e, e.Name, e.Config(fams)
		if len(gw) > 0 && w.info.Config == nil {
			w.info.Config = map[string]string{}
		}
		for k, v := range gw { // the gateway's levers beside its engines' settings
			w.info.Config[k] = v
		}
		w.info.TokenCounters = e.TokenCounters(fams)
		if e.Name == "llamacpp" {
			w.addProps(ctx)
		}
	}
	s := w.engine.Read(fams)
	if first {
		w.info.Series = s.Has
	}
	w.samples = append(w.samples, results.ServerSample{AtNS: at, Running: s.Running, Waiting: s.Waiting,
		KVCacheUsage: s.KVUsage, Preemptions: s.Preemptions, PrefixQueries: s.PrefixQueries,
		PrefixHits: s.PrefixHits, PrefixHitRate: s.PrefixHitRate, PromptTokens: s.PromptTokens,
		GenerationTokens: s.GenerationTokens, PromptSeconds: s.PromptSeconds, GenerationSeconds: s.GenerationSeconds})
}

// upstream reads a tokentrace gateway's /upstream/metrics (its engines'
// own, labelled by replica); nil when that fails.
func (w *serverWatch) upstream(ctx context.Context) (scrape.Families, string) {
	u := strings.TrimSuffix(w.root, "/metrics") + scrape.UpstreamMetricsPath
	fams, err := scrape.Get(ctx, w.client, u, w.header)
	if err != nil {
		return nil, ""
	}
	return fams, u
}

// addProps adds llama-server's /props (its slots and context, which its
// /metrics does not expose) to the configuration; a server without it
// leaves the configuration as it was. Called with mu held, on the first
// scrape only.
func (w *serverWatch) addProps(ctx context.Context) {
	p, err := scrape.Props(ctx, w.client, w.root, w.header)
	if err != nil {
		return
	}
	if w.info.Config == nil {
		w.info.Config = map[string]string{}
	}
	for k, v := range p {
		w.info.Config[k] = v
	}
}

// run scrapes every interval until ctx ends.
func (w *serverWatch) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.scrapeOnce(ctx)
		}
	}
}

// start scrapes once now and then every interval (interval < 0: only at
// the start and end); the returned function stops it and scrapes a last
// time.
func (w *serverWatch) start(ctx context.Context, interval time.Duration) (stop func()) {
	fctx, fcancel := context.WithTimeout(ctx, firstScrapeTimeout)
	w.scrapeOnce(fctx) // the run waits for it: bounded
	fcancel()
	if interval == 0 {
		interval = DefaultScrapeInterval
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if interval > 0 {
			w.run(wctx, interval)
		}
	}()
	return func() {
		cancel()
		<-done
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer ecancel()
		w.scrapeOnce(ectx)
	}
}

// latest is the last sample read, if any (the live view's gauges).
func (w *serverWatch) latest() (results.ServerSample, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) == 0 {
		return results.ServerSample{}, false
	}
	return w.samples[len(w.samples)-1], true
}

// result is what was read: the samples and what they hold.
func (w *serverWatch) result() ([]results.ServerSample, *results.ServerInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	info := w.info
	return w.samples, &info
}
