package latency

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplitFromMetrics(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		want      *ServerSplit
	}{
		{"tokentrace", `{"queue_time_ms":2.5,"prefill_time_ms":10,"generation_time_ms":40}`,
			&ServerSplit{QueueNS: 2_500_000, PrefillNS: 10_000_000, DecodeNS: 40_000_000, Source: "vllm-metrics", Engine: "tokentrace"}},
		{"tokentrace with instants", `{"arrival_time":100.25,"frontend_time_ms":0.5,"queue_time_ms":2.5,"prefill_time_ms":10}`,
			&ServerSplit{QueueNS: 2_500_000, PrefillNS: 10_000_000, Source: "vllm-metrics", Engine: "tokentrace", FirstScheduledUnixNS: 100_253_000_000}},
		{"vLLM", `{"time_in_queue":0.5,"first_scheduled_time":100.5,"first_token_time":100.75,"last_token_time":101}`,
			&ServerSplit{QueueNS: 5e8, PrefillNS: 25e7, DecodeNS: 25e7, Source: "vllm-metrics", Engine: "vllm", FirstScheduledUnixNS: 100_500_000_000}},
		{"other field types", `{"queue_time_ms":1,"model":"m","prefill_time_ms":2}`,
			&ServerSplit{QueueNS: 1e6, PrefillNS: 2e6, Source: "vllm-metrics", Engine: "tokentrace"}},
		{"keys are exact", `{"Queue_Time_Ms":1,"prefill_time_ms":2}`, nil},
		{"vLLM without first_token_time", `{"time_in_queue":0.5,"first_scheduled_time":100.5}`, nil},
		{"not an object", `[1]`, nil},
	} {
		if diff := cmp.Diff(c.want, SplitFromMetrics([]byte(c.raw))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}
