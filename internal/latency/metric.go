package latency

import (
	"fmt"
	"strings"
)

// Metric names a per-request latency metric.
type Metric string

// The metrics. Each one's formula is in docs/metrics.md.
const (
	// TTFT is time to first token: the first output token's arrival, of
	// any kind (a reasoning model's first reasoning token, else its first
	// content token) − send start.
	TTFT Metric = "ttft"
	// TTFTAnswer is time to first answer token: the first content token's
	// arrival − send start. It is TTFT for a model that does not reason;
	// for one that does, TTFT plus the reasoning phase.
	TTFTAnswer Metric = "ttft_answer"
	// TPOT is time per output token after the first answer token:
	// (E2E − TTFTAnswer) / (output tokens − 1), output tokens being the
	// answer's (reasoning tokens apart); undefined for one output token.
	TPOT Metric = "tpot"
	// ITL is inter-token latency: the gap between consecutive output tokens.
	// A chunk carrying k tokens after a gap g contributes k gaps of g/k.
	ITL Metric = "itl"
	// ICL is inter-chunk latency: the gap between consecutive content-bearing
	// stream events, whatever their token count.
	ICL Metric = "icl"
	// E2E is end-to-end latency: last byte of the response − send start.
	E2E Metric = "e2e"
	// ClientQueue is actual send start − intended send time.
	ClientQueue Metric = "client_queue"
	// TTFTIntended is TTFT measured from the intended send time, the figure
	// free of coordinated omission.
	TTFTIntended Metric = "ttft_intended"
	// E2EIntended is E2E measured from the intended send time.
	E2EIntended Metric = "e2e_intended"
)

// Metrics lists the metrics an SLO may name.
var Metrics = []Metric{TTFT, TTFTAnswer, TPOT, ITL, ICL, E2E, ClientQueue, TTFTIntended, E2EIntended}

// ParseMetric reads a metric name, case-insensitively.
func ParseMetric(s string) (Metric, error) {
	m := Metric(strings.ToLower(strings.TrimSpace(s)))
	for _, k := range Metrics {
		if k == m {
			return m, nil
		}
	}
	names := make([]string, len(Metrics))
	for i, k := range Metrics {
		names[i] = string(k)
	}
	return "", fmt.Errorf("unknown metric %q (known: %s)", s, strings.Join(names, ", "))
}
