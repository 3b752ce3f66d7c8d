package gateway

import (
	"context"
	"net/http"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// UpstreamMetricsPath answers the engines' own /metrics through the
// gateway (upstreamMetrics).
const UpstreamMetricsPath = scrape.UpstreamMetricsPath

// upstreamMetricsTimeout bounds the reading of every replica's /metrics.
const upstreamMetricsTimeout = 3 * time.Second

// upstreamMetrics answers GET /upstream/metrics: the /metrics of every
// replica of the configuration (each URL once, with its credentials),
// every series labelled replica="URL", so that a client behind the
// gateway reads the engines' gauges as it would directly — their sum over
// the replicas. A keyed gateway asks for a key, as for a request; a
// replica that does not answer in time is left out; none answering is 502.
func (g *Gateway) upstreamMetrics(w http.ResponseWriter, r *http.Request) {
	rt := g.rt.Load()
	x := &exchange{g: g, w: w, r: r, rt: rt}
	if rj := (authenticate{}).apply(x); rj != nil {
		x.refuse(rj)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), upstreamMetricsTimeout)
	defer cancel()
	merged := scrape.Families{}
	read := 0
	for _, rep := range rt.distinctReplicas() {
		if fams := rep.readMetrics(ctx, g.transport); fams != nil {
			read++
			label(fams, rep.cfg.URL, merged)
		}
	}
	if read == 0 {
		openai.WriteError(w, http.StatusBadGateway, openai.NewError(openai.TypeServer, "no replica's /metrics could be read", "", "upstream_error"), 0)
		return
	}
	names := make([]string, 0, len(merged))
	for n := range merged {
		names = append(names, n)
	}
	slices.Sort(names)
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	if r.Method == http.MethodHead {
		return
	}
	for _, n := range names {
		if _, err := expfmt.MetricFamilyToText(w, merged[n]); err != nil {
			return // the client went away
		}
	}
}

// distinctReplicas is every replica of the configuration, each URL once.
func (rt *liveConfig) distinctReplicas() []*Replica {
	seen := map[string]bool{}
	var out []*Replica
	names := make([]string, 0, len(rt.pools))
	for n := range rt.pools {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, rep := range rt.pools[n].replicas {
			if !seen[rep.cfg.URL] {
				seen[rep.cfg.URL] = true
				out = append(out, rep)
			}
		}
	}
	return out
}

// readMetrics reads the replica's /metrics; nil when it cannot.
func (r *Replica) readMetrics(ctx context.Context, tr http.RoundTripper) scrape.Families {
	var header http.Header
	if auth := r.cfg.authorization(); auth != "" {
		header = http.Header{"Authorization": {auth}}
	}
	hc := &http.Client{Transport: tr, CheckRedirect: httplimit.NoRedirects}
	fams, err := scrape.Get(ctx, hc, r.cfg.URL+"/metrics", header)
	if err != nil {
		return nil
	}
	return fams
}

// label adds fams' series to merged, each with the label replica=url.
func label(fams scrape.Families, url string, merged scrape.Families) {
	for name, f := range fams {
		m := merged[name]
		if m == nil {
			m = &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Unit: f.Unit}
			merged[name] = m
		}
		for _, s := range f.Metric {
			s = proto.Clone(s).(*dto.Metric)
			s.Label = append(s.Label, &dto.LabelPair{Name: proto.String("replica"), Value: proto.String(url)})
			m.Metric = append(m.Metric, s)
		}
	}
}
