package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// stageTotals is a gateway's stage histograms read at one instant: per
// stage (its Server-Timing name), the seconds summed and the requests
// counted over every label set.
type stageTotals map[latency.TimingName][2]float64

// stageMetric is the Prometheus histogram of a gateway stage
// (docs/gateway.md: tokentrace_gateway_stage_NAME_seconds; the queue's
// is named queue).
func stageMetric(s latency.TimingName) string {
	name := string(s)
	if s == latency.TimingGatewayQueue {
		name = "queue"
	}
	return "tokentrace_gateway_stage_" + name + "_seconds"
}

// readStages reads the gateway's stage histograms from an exposition; nil
// when it has none (not a gateway).
func readStages(f scrape.Families) stageTotals {
	var t stageTotals
	for _, s := range latency.GatewayStages {
		fam := f[stageMetric(s)]
		if fam == nil {
			continue
		}
		var sum, n float64
		for _, m := range fam.Metric {
			if h := m.GetHistogram(); h != nil {
				sum += h.GetSampleSum()
				n += float64(h.GetSampleCount())
			}
		}
		if t == nil {
			t = stageTotals{}
		}
		t[s] = [2]float64{sum, n}
	}
	return t
}

// stageMeans is each stage's mean per request between two readings, µs,
// in path order; false when either reading is missing or no request
// ended between them.
func stageMeans(before, after stageTotals) ([]float64, bool) {
	if before == nil || after == nil {
		return nil, false
	}
	var out []float64
	for _, s := range latency.GatewayStages {
		b, a := before[s], after[s]
		n := a[1] - b[1]
		if n <= 0 {
			return nil, false
		}
		out = append(out, (a[0]-b[0])/n*1e6)
	}
	return out, true
}

// writeStages prints, for each gateway path, the mean of each of its
// stages per request over the rounds kept, as its own /metrics counted
// them: where its time went by its own account (gateway_in, queue and
// connect are before the upstream has the request, so on the TTFT's way;
// post_process and backpressure are its work on and writes of the events).
func writeStages(w io.Writer, paths []*path, res []*result) {
	for i, p := range paths {
		means, ok := stageMeans(res[i].stages[0], res[i].stages[1])
		if !ok {
			continue
		}
		var parts []string
		for k, s := range latency.GatewayStages {
			parts = append(parts, fmt.Sprintf("%s %.1f", s, means[k]))
		}
		fmt.Fprintf(w, "%s's stages, µs per request (its /metrics): %s\n", p.name, strings.Join(parts, ", "))
	}
}
