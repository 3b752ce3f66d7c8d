package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/openai"
)

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// models answers GET /v1/models with the union of every replica's models
// (asked at most once per modelsTTL, 3 s each, failures skipped), the
// models named in the configuration, and the routes' public names.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		openai.WriteError(w, http.StatusMethodNotAllowed, openai.NewError(openai.TypeInvalidRequest, "use GET", "", "method_not_allowed"), 0)
		return
	}
	rt := g.rt.Load()
	if rt == nil {
		openai.WriteError(w, http.StatusServiceUnavailable, openai.NewError(openai.TypeServer, "the gateway has no upstreams configured", "", "no_upstreams"), 0)
		return
	}
	x := &exchange{g: g, w: w, r: r, rt: rt}
	if rj := (authenticate{}).apply(x); rj != nil {
		x.refuse(rj)
		return
	}
	if rj := (keyLimits{}).apply(x); rj != nil { // a request to the key's limits, like any other
		x.refuse(rj)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(g.modelList(r.Context(), rt))
}

// modelsTTL is how long /v1/models answers from the list it last built
// (for the same configuration) before asking the replicas again.
const modelsTTL = time.Second

// modelsCache is /v1/models' last list, for the configuration it was
// built from; its lock also makes concurrent callers wait for one build.
type modelsCache struct {
	mu   sync.Mutex
	rt   *liveConfig
	at   time.Time
	body []byte
}

// modelList is /v1/models' JSON body: the cached one when built under rt
// less than modelsTTL ago, else built anew (its requests bounded by 3 s,
// whichever client asked first going away or not).
func (g *Gateway) modelList(ctx context.Context, rt *liveConfig) []byte {
	c := &g.modelsCache
	c.mu.Lock()
	defer c.mu.Unlock()
	now := g.now()
	if c.rt == rt && now.Sub(c.at) < modelsTTL && now.Sub(c.at) >= 0 {
		return c.body
	}
	body, _ := json.Marshal(map[string]any{"object": "list", "data": g.listModels(ctx, rt)})
	body = append(body, '\n')
	c.rt, c.at, c.body = rt, now, body
	return c.body
}

// listModels asks every replica of rt for its models (3 s each, failures
// skipped) and adds the models the configuration names and the routes'
// public names, sorted by id.
func (g *Gateway) listModels(ctx context.Context, rt *liveConfig) []modelEntry {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	var mu sync.Mutex
	byID := map[string]modelEntry{}
	add := func(e modelEntry) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := byID[e.ID]; !ok {
			byID[e.ID] = e
		}
	}
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for _, p := range rt.pools {
		for _, rep := range p.replicas {
			for _, m := range rep.cfg.Models {
				add(modelEntry{ID: m, Object: "model", OwnedBy: p.name})
			}
			if seen[rep.cfg.URL] {
				continue
			}
			seen[rep.cfg.URL] = true
			wg.Add(1)
			go func(rep *Replica, pool string) {
				defer wg.Done()
				models, err := g.upstreamModels(ctx, rep)
				if err != nil {
					g.log().Warn("list models: replica left out of /v1/models", "pool", pool, "replica", rep.cfg.URL, "err", err)
				}
				for _, e := range models {
					if e.OwnedBy == "" {
						e.OwnedBy = pool
					}
					add(e)
				}
			}(rep, p.name)
		}
	}
	wg.Wait()
	for name := range rt.routes {
		if name != "*" {
			add(modelEntry{ID: name, Object: "model", OwnedBy: "tokentrace-gateway"})
		}
	}
	list := make([]modelEntry, 0, len(byID))
	for _, e := range byID {
		e.Object = "model"
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	return list
}

// upstreamModels asks one replica for its /v1/models list.
func (g *Gateway) upstreamModels(ctx context.Context, rep *Replica) ([]modelEntry, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rep.cfg.URL+modelsPath, nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if auth := rep.cfg.authorization(); auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := g.transport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var body struct {
		Data []modelEntry `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("decode the model list: %w", err)
	}
	return body.Data, nil
}

// health answers GET /health: 200 {"status":"ok"} while the gateway takes
// traffic, 503 {"status":"draining"} once Drain was called (a readiness
// probe then takes the replica out of rotation); each pool's queue state
// is included for operators.
func (g *Gateway) health(w http.ResponseWriter) {
	type poolHealth struct {
		Replicas    int     `json:"replicas"`
		QueueDepth  int     `json:"queue_depth"`
		InFlight    int     `json:"in_flight"`
		Concurrency float64 `json:"concurrency_limit"`
	}
	status, code := "ok", http.StatusOK
	if g.draining.Load() {
		status, code = "draining", http.StatusServiceUnavailable
	}
	out := map[string]any{"status": status}
	if rt := g.rt.Load(); rt != nil {
		pools := map[string]poolHealth{}
		for name, p := range rt.pools {
			d, f, l := p.adm.snapshot()
			pools[name] = poolHealth{Replicas: len(p.replicas), QueueDepth: d, InFlight: f, Concurrency: l}
		}
		out["pools"] = pools
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(out)
}

// AdminHandler serves /health, /metrics and the upstreams' metrics
// (UpstreamMetricsPath), GET and HEAD only, on a listener of their own
// (RunConfig.AdminAddr); once it is asked for, the data port answers 404
// for them.
func (g *Gateway) AdminHandler() http.Handler {
	g.adminApart.Store(true)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health", "/metrics", UpstreamMetricsPath:
			g.admin(w, r)
		case LivePath, LivePath + "/", LivePath + "/events", LivePath + "/snapshot.json":
			g.serveLive(w, r)
		default:
			openai.WriteError(w, http.StatusNotFound, openai.NewError(openai.TypeNotFound, "unknown path "+r.URL.Path, "", "not_found"), 0)
		}
	})
}

// serveLive serves the live view (g.Live) under LivePath: LivePath
// itself redirects to LivePath+"/", so that the page's relative event
// stream is LivePath+"/events"; 404 when there is none.
func (g *Gateway) serveLive(w http.ResponseWriter, r *http.Request) {
	switch {
	case g.Live == nil:
		openai.WriteError(w, http.StatusNotFound, openai.NewError(openai.TypeNotFound, "the live view is not enabled", "", "not_found"), 0)
	case r.URL.Path == LivePath:
		http.Redirect(w, r, LivePath+"/", http.StatusMovedPermanently)
	default:
		http.StripPrefix(LivePath, g.Live.Handler()).ServeHTTP(w, r)
	}
}

// admin answers /health, /metrics or UpstreamMetricsPath: GET and HEAD
// only.
func (g *Gateway) admin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		openai.WriteError(w, http.StatusMethodNotAllowed, openai.NewError(openai.TypeInvalidRequest, "use GET or HEAD", "", "method_not_allowed"), 0)
		return
	}
	switch {
	case r.URL.Path == "/health":
		g.health(w)
	case r.URL.Path == UpstreamMetricsPath:
		g.upstreamMetrics(w, r)
	case g.MetricsHandler == nil:
		openai.WriteError(w, http.StatusNotFound, openai.NewError(openai.TypeNotFound, "metrics are not enabled", "", "not_found"), 0)
	default:
		g.MetricsHandler.ServeHTTP(w, r)
	}
}
