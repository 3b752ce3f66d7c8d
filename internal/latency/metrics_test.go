package latency

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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

func TestSplitFromVLLMRequestMetrics(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		want      *ServerSplit
	}{
		{"merged object", `{"time_to_first_token_ms":85.2,"generation_time_ms":1240.5,"queue_time_ms":12.3,"mean_itl_ms":9.1,"tokens_per_second":103.2}`,
			&ServerSplit{QueueNS: 12_300_000, PrefillNS: 85_200_000, DecodeNS: 1_240_500_000, Source: "vllm-metrics", Engine: "vllm", Derived: []string{"prefill"}}},
		{"generation null", `{"time_to_first_token_ms":20,"generation_time_ms":null,"queue_time_ms":0.5,"mean_itl_ms":null,"tokens_per_second":null}`,
			&ServerSplit{QueueNS: 500_000, PrefillNS: 20_000_000, Source: "vllm-metrics", Engine: "vllm", Unreported: []string{"decode"}, Derived: []string{"prefill"}}},
		{"reasoning fields and nested objects", `{"time_to_first_token_ms":1,"time_to_first_content_token_ms":3,"queue_time_ms":2,"generation_time_ms":4,"output_token_metrics":{"reasoning":{"token_count":3}}}`,
			&ServerSplit{QueueNS: 2e6, PrefillNS: 1e6, DecodeNS: 4e6, Source: "vllm-metrics", Engine: "vllm", Derived: []string{"prefill"}}},
		{"queue null", `{"time_to_first_token_ms":85.2,"generation_time_ms":1,"queue_time_ms":null}`, nil},
		{"all null", `{"time_to_first_token_ms":null,"generation_time_ms":null,"queue_time_ms":null,"mean_itl_ms":null,"tokens_per_second":null}`, nil},
		{"negative", `{"time_to_first_token_ms":-1,"queue_time_ms":1}`, nil},
		{"keys are exact", `{"Time_To_First_Token_ms":1,"queue_time_ms":1}`, nil},
		{"null object", `null`, nil},
	} {
		if diff := cmp.Diff(c.want, SplitFromMetrics([]byte(c.raw))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestVLLMFixtures(t *testing.T) {
	for _, c := range []struct {
		file string
		want *ServerSplit
	}{
		{"vllm-answer.json", &ServerSplit{QueueNS: 12_300_000, PrefillNS: 85_200_000, DecodeNS: 1_240_500_000, Source: SourceVLLMMetrics, Engine: EngineVLLM, Derived: []string{SplitPrefill}}},
		{"vllm-stream.sse", &ServerSplit{QueueNS: 118_250_000, PrefillNS: 31_750_000, DecodeNS: 9_500_000, Source: SourceVLLMMetrics, Engine: EngineVLLM, Derived: []string{SplitPrefill}}},
		{"vllm-one-token.json", &ServerSplit{QueueNS: 500_000, PrefillNS: 20_000_000, Source: SourceVLLMMetrics, Engine: EngineVLLM, Unreported: []string{SplitDecode}, Derived: []string{SplitPrefill}}},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "engines", c.file))
		if err != nil {
			t.Fatal(err)
		}
		var raw []byte
		for _, line := range strings.Split(string(b), "\n") {
			line, _ = strings.CutPrefix(line, "data: ")
			if m, ok := memberOf([]byte(line), "metrics"); ok {
				raw = m
			}
		}
		if diff := cmp.Diff(c.want, SplitFromMetrics(raw)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.file, diff)
		}
	}
}

// memberOf is the raw member k of a JSON object.
func memberOf(b []byte, k string) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return nil, false
	}
	v, ok := m[k]
	return v, ok
}

func FuzzSplitFromMetrics(f *testing.F) {
	f.Add([]byte(`{"time_to_first_token_ms":85.2,"generation_time_ms":1240.5,"queue_time_ms":12.3,"mean_itl_ms":9.1,"tokens_per_second":103.2}`))
	f.Add([]byte(`{"queue_time_ms":2.5,"prefill_time_ms":10,"generation_time_ms":40,"arrival_time":1.7e9}`))
	f.Add([]byte(`{"time_in_queue":0.5,"first_scheduled_time":100.5,"first_token_time":100.75,"last_token_time":101}`))
	f.Add([]byte(`{"time_to_first_token_ms":1e300,"queue_time_ms":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sp := SplitFromMetrics(b)
		if sp != nil && (sp.QueueNS < 0 || sp.PrefillNS < 0 || sp.DecodeNS < 0 || sp.FirstScheduledUnixNS < 0) {
			t.Fatalf("negative split %+v from %q", sp, b)
		}
		if _, ok := ParseVLLMRequestMetrics(b); ok && (sp == nil || sp.Engine != EngineVLLM) {
			t.Fatalf("vLLM metrics read but split %+v from %q", sp, b)
		}
	})
}
