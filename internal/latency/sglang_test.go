package latency

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSGLangMetaInfoFixtures reads the fixtures written in the shape of
// SGLang's native /generate answer. Whole answer: queue 37.5 ms; decode
// 205.2 − 152.0 = 53.2 ms; prefill = inference_time 65.2 − 53.2 = 12.0
// ms. Stream: only the last event carries the timing fields; queue 12
// ms, decode 71.0 − 40.0 = 31.0 ms, prefill 56.0 − 31.0 = 25.0 ms.
func TestSGLangMetaInfoFixtures(t *testing.T) {
	sp := func(q, p, d int64) *ServerSplit {
		return &ServerSplit{QueueNS: q, PrefillNS: p, DecodeNS: d, Source: SourceSGLangMetaInfo, Engine: EngineSGLang,
			Derived: []string{SplitPrefill, SplitDecode}}
	}
	b, err := os.ReadFile(filepath.Join("testdata", "engines", "sglang-generate.json"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sp(37_500_000, 12_000_000, 53_200_000), SplitFromSGLangMetaInfo(b)); diff != "" {
		t.Errorf("whole answer (-want +got):\n%s", diff)
	}
	s, err := os.ReadFile(filepath.Join("testdata", "engines", "sglang-generate-stream.sse"))
	if err != nil {
		t.Fatal(err)
	}
	var got []*ServerSplit
	for _, line := range bytes.Split(s, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			if sp := SplitFromSGLangMetaInfo(d); sp != nil {
				got = append(got, sp)
			}
		}
	}
	if diff := cmp.Diff([]*ServerSplit{sp(12_000_000, 25_000_000, 31_000_000)}, got); diff != "" {
		t.Errorf("stream: only the last event's split (-want +got):\n%s", diff)
	}
}

func TestParseSGLangMetaInfo(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		want      *ServerSplit
	}{
		{"no inference_time: prefill from received", `{"queue_time":0.01,"request_received_ts":100,"prefill_finished_ts":100.05,"decode_finished_ts":100.25}`,
			&ServerSplit{QueueNS: 10e6, PrefillNS: 40e6, DecodeNS: 200e6, Source: SourceSGLangMetaInfo, Engine: EngineSGLang, Derived: []string{SplitPrefill, SplitDecode}}},
		{"no prefill evidence", `{"queue_time":0.01,"prefill_finished_ts":100.05,"decode_finished_ts":100.25}`,
			&ServerSplit{QueueNS: 10e6, DecodeNS: 200e6, Source: SourceSGLangMetaInfo, Engine: EngineSGLang, Derived: []string{SplitDecode}, Unreported: []string{SplitPrefill}}},
		{"counts only (no --enable-metrics)", `{"id":"a","prompt_tokens":3,"completion_tokens":2,"cached_tokens":0}`, nil},
		{"keys are exact", `{"Queue_time":0.01,"prefill_finished_ts":1,"decode_finished_ts":2}`, nil},
		{"last before first", `{"queue_time":0.01,"prefill_finished_ts":3,"decode_finished_ts":2}`, nil},
		{"negative queue", `{"queue_time":-1,"prefill_finished_ts":1,"decode_finished_ts":2}`, nil},
		{"not an object", `[1]`, nil},
	} {
		var got *ServerSplit
		if mi, ok := ParseSGLangMetaInfo([]byte(c.raw)); ok {
			got = mi.Split()
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

func FuzzSplitFromSGLangMetaInfo(f *testing.F) {
	for _, name := range []string{"sglang-generate.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "engines", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"meta_info":{"queue_time":1e300,"inference_time":-3,"prefill_finished_ts":1,"decode_finished_ts":8e9}}`))
	f.Add([]byte(`{"meta_info":{"queue_time":0,"request_received_ts":5,"prefill_finished_ts":1,"decode_finished_ts":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sp := SplitFromSGLangMetaInfo(b)
		if sp != nil && (sp.QueueNS < 0 || sp.PrefillNS < 0 || sp.DecodeNS < 0) {
			t.Fatalf("split %+v from %q", sp, b)
		}
	})
}

func TestParseSGLangOutput(t *testing.T) {
	whole, err := os.ReadFile(filepath.Join("testdata", "engines", "sglang-generate.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, raw string
		want      SGLangOutput
		err       bool
	}{
		{"whole answer", string(whole), SGLangOutput{Text: " a filler word and another", Finish: "length", PromptTokens: 24, CompletionTokens: 5, CachedTokens: 16,
			Split: &ServerSplit{QueueNS: 37_500_000, PrefillNS: 12_000_000, DecodeNS: 53_200_000, Source: SourceSGLangMetaInfo, Engine: EngineSGLang,
				Derived: []string{SplitPrefill, SplitDecode}}}, false},
		{"running event", `{"text":" a b","output_ids":[1],"meta_info":{"id":"x","finish_reason":null,"prompt_tokens":3,"completion_tokens":2}}`,
			SGLangOutput{Text: " a b", PromptTokens: 3, CompletionTokens: 2, CachedTokens: -1}, false},
		{"error", `{"error":{"message":"too long"}}`, SGLangOutput{Error: "too long", PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}, false},
		{"keys are exact", `{"Meta_info":{}}`, SGLangOutput{}, true},
		{"no meta_info", `{"text":"a"}`, SGLangOutput{}, true},
		{"text not a string", `{"text":1,"meta_info":{}}`, SGLangOutput{}, true},
		{"finish_reason a string", `{"meta_info":{"finish_reason":"stop"}}`, SGLangOutput{}, true},
		{"error without message", `{"error":{}}`, SGLangOutput{}, true},
		{"not an object", `[]`, SGLangOutput{}, true},
		{"count not whole", `{"meta_info":{"completion_tokens":1.5,"prompt_tokens":-2}}`, SGLangOutput{PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}, false},
	} {
		got, err := ParseSGLangOutput([]byte(c.raw))
		if (err != nil) != c.err {
			t.Errorf("%s: error %v, want error %v", c.name, err, c.err)
			continue
		}
		if err == nil {
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", c.name, diff)
			}
		}
	}
}

func FuzzParseSGLangOutput(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "engines", "sglang-generate.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"error":{"message":"x"}}`))
	f.Add([]byte(`{"text":"a","meta_info":{"finish_reason":{"type":"stop"},"completion_tokens":3}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := ParseSGLangOutput(b)
		if err != nil {
			return
		}
		if o.CompletionTokens < -1 || o.PromptTokens < -1 || o.CachedTokens < -1 {
			t.Fatalf("counts %+v from %q", o, b)
		}
		if sp := o.Split; sp != nil && (sp.QueueNS < 0 || sp.PrefillNS < 0 || sp.DecodeNS < 0) {
			t.Fatalf("split %+v from %q", sp, b)
		}
	})
}
