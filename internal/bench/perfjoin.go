package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// maxPerfMetricsBytes bounds /perf_metrics' answer (about 600 bytes a
// record: 100,000 records and more).
const maxPerfMetricsBytes = 64 << 20

// fetchPerfMetrics reads TensorRT-LLM's GET /perf_metrics: the records of
// the requests finished since the last read.
func fetchPerfMetrics(ctx context.Context, t Target) ([]latency.TRTLLMPerf, error) {
	u, err := scrape.RootURL(t.BaseURL, "/perf_metrics")
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: %w", err)
	}
	t.authorize(req.Header)
	hc := &http.Client{CheckRedirect: httplimit.NoRedirects}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: GET: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("perf_metrics: GET answered %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPerfMetricsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: read: %w", err)
	}
	if len(b) > maxPerfMetricsBytes {
		return nil, fmt.Errorf("perf_metrics: answer over %d bytes", maxPerfMetricsBytes)
	}
	recs, err := latency.ParseTRTLLMPerfMetrics(b)
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: %w", err)
	}
	return recs, nil
}

// joinPerfMetrics gives each successful record without a server split the
// split of the TensorRT-LLM record whose request id its answer's id
// carries (latency.TRTLLMRequestID), and returns how many were joined.
func joinPerfMetrics(recs []*latency.Record, perf []latency.TRTLLMPerf) int {
	byID := make(map[string]*latency.ServerSplit, len(perf))
	for i := range perf {
		byID[perf[i].RequestID] = perf[i].Split
	}
	joined := 0
	for _, rec := range recs {
		if !rec.OK() || rec.Server != nil {
			continue
		}
		if sp := byID[latency.TRTLLMRequestID(rec.ServerID)]; sp != nil {
			c := *sp
			rec.Server = &c
			serverHop(rec)
			joined++
		}
	}
	return joined
}

// serverHop adds the joined split to the path of a record whose hops came
// from a gateway's Server-Timing without the server's own (the gateway
// had no evidence of it), as the gateway would have sent them, so the
// gateway's upstream_ttft and decode split into the server's stages.
func serverHop(rec *latency.Record) {
	if len(rec.Timing) == 0 {
		return
	}
	for _, st := range rec.Timing {
		if st.Hop == latency.HopServer {
			return
		}
	}
	sp := rec.Server
	rec.Timing = append(rec.Timing,
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingServerQueue), NS: sp.QueueNS},
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingPrefill), NS: sp.PrefillNS},
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingServerDecode), NS: sp.DecodeNS})
}

// joinHeld reads /perf_metrics after the run and joins them to the held
// records, saying on the log and in the evidence summary what it found;
// it returns the warnings for the client's.
func (r *run) joinHeld(ctx context.Context, held []*latency.Record) (warnings []string) {
	ask := r.sum.Evidence
	perf, err := fetchPerfMetrics(ctx, r.target)
	if err != nil {
		return []string{"TensorRT-LLM's per-request evidence not read: " + err.Error()}
	}
	n := joinPerfMetrics(held, perf)
	if ask != nil {
		ask.Joined, ask.PerfRecords = n, len(perf)
	}
	fmt.Fprintf(r.log, "bench: /perf_metrics gave %d records; %d of %d requests joined by their answer's id\n", len(perf), n, len(held))
	if n < len(held) {
		return []string{fmt.Sprintf("TensorRT-LLM's /perf_metrics joined %d of %d requests: a whole answer's id is random "+
			"(stream to join), and the server keeps at most perf_metrics_max_requests records", n, len(held))}
	}
	return nil
}
