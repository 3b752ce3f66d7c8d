package latency

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLlamaCppTimings(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		want      *ServerSplit
		timings   LlamaCppTimings
	}{
		{"llama-server's object", `{"cache_n":3,"prompt_n":21,"prompt_ms":20.25,"prompt_per_token_ms":0.96,"prompt_per_second":1037,"predicted_n":16,"predicted_ms":75.5,"predicted_per_token_ms":4.7,"predicted_per_second":211.9}`,
			&ServerSplit{PrefillNS: 20_250_000, DecodeNS: 75_500_000, Source: "llamacpp-timings", Engine: "llamacpp", Unreported: []string{"queue"}},
			LlamaCppTimings{CacheN: 3, PromptN: 21, PromptMS: 20.25, PredictedN: 16, PredictedMS: 75.5}},
		{"counts absent", `{"prompt_ms":1,"predicted_ms":2}`,
			&ServerSplit{PrefillNS: 1e6, DecodeNS: 2e6, Source: "llamacpp-timings", Engine: "llamacpp", Unreported: []string{"queue"}},
			LlamaCppTimings{CacheN: -1, PromptN: -1, PromptMS: 1, PredictedN: -1, PredictedMS: 2}},
		{"speculative fields and others", `{"prompt_ms":1,"predicted_ms":2,"draft_n":4,"draft_n_accepted":3,"note":"x"}`,
			&ServerSplit{PrefillNS: 1e6, DecodeNS: 2e6, Source: "llamacpp-timings", Engine: "llamacpp", Unreported: []string{"queue"}},
			LlamaCppTimings{CacheN: -1, PromptN: -1, PromptMS: 1, PredictedN: -1, PredictedMS: 2}},
		{"keys are exact", `{"Prompt_ms":1,"predicted_ms":2}`, nil, LlamaCppTimings{}},
		{"negative time", `{"prompt_ms":-1,"predicted_ms":2}`, nil, LlamaCppTimings{}},
		{"a string time", `{"prompt_ms":"1","predicted_ms":2}`, nil, LlamaCppTimings{}},
		{"not an object", `[1,2]`, nil, LlamaCppTimings{}},
		{"null", `null`, nil, LlamaCppTimings{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, SplitFromLlamaCppTimings([]byte(c.raw))); diff != "" {
				t.Errorf("split (-want +got):\n%s", diff)
			}
			got, ok := ParseLlamaCppTimings([]byte(c.raw))
			if ok != (c.want != nil) || got != c.timings {
				t.Errorf("ParseLlamaCppTimings = %+v, %v; want %+v", got, ok, c.timings)
			}
		})
	}
}

func TestSplitFromTGIHeaders(t *testing.T) {
	h := http.Header{}
	h.Set("X-Queue-Time", "118")
	h.Set("x-inference-time", "922")
	want := &ServerSplit{QueueNS: 118e6, DecodeNS: 922e6, Source: "tgi-headers", Engine: "tgi", Unreported: []string{"prefill"}}
	if diff := cmp.Diff(want, SplitFromTGIHeaders(h.Get)); diff != "" {
		t.Errorf("split (-want +got):\n%s", diff)
	}
	for _, bad := range []map[string]string{
		{"x-queue-time": "118"},                              // no inference time (a stream's headers)
		{"x-queue-time": "1.5", "x-inference-time": "922"},   // TGI writes whole milliseconds
		{"x-queue-time": "-1", "x-inference-time": "922"},    // negative
		{"x-queue-time": "1e300", "x-inference-time": "922"}, // not an integer
	} {
		h := http.Header{}
		for k, v := range bad {
			h.Set(k, v)
		}
		if sp := SplitFromTGIHeaders(h.Get); sp != nil {
			t.Errorf("%v: split %+v, want none", bad, sp)
		}
	}
}

func TestSplitFromOllama(t *testing.T) {
	want := &ServerSplit{PrefillNS: 342546000, DecodeNS: 4535599000, LoadNS: 1334875, Source: "ollama-durations", Engine: "ollama", Unreported: []string{"queue"}}
	got := SplitFromOllama([]byte(`{"done":true,"prompt_eval_duration":342546000,"eval_duration":4535599000,"load_duration":1334875}`))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("split (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`{"prompt_eval_duration":1}`, `{"Prompt_Eval_Duration":1,"eval_duration":2}`,
		`{"prompt_eval_duration":-1,"eval_duration":2}`, `{"prompt_eval_duration":1e300,"eval_duration":2}`, `"x"`} {
		if sp := SplitFromOllama([]byte(bad)); sp != nil {
			t.Errorf("%s: split %+v, want none", bad, sp)
		}
	}
	// A load_duration absent, negative or out of range leaves LoadNS 0.
	for _, noLoad := range []string{`{"prompt_eval_duration":1,"eval_duration":2}`, `{"prompt_eval_duration":1,"eval_duration":2,"load_duration":-5}`,
		`{"prompt_eval_duration":1,"eval_duration":2,"load_duration":1e300}`, `{"prompt_eval_duration":1,"eval_duration":2,"load_duration":"3"}`} {
		if sp := SplitFromOllama([]byte(noLoad)); sp == nil || sp.LoadNS != 0 {
			t.Errorf("%s: split %+v, want one with no load", noLoad, sp)
		}
	}
}

// TestEngineFixtures reads each engine's evidence as the engine sends it
// (testdata/engines: recorded from llama-server, written from TGI's and
// Ollama's documentation and source) with its adapter.
func TestEngineFixtures(t *testing.T) {
	dir := filepath.Join("testdata", "engines")
	read := func(t *testing.T, name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("tgi", func(t *testing.T) {
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(read(t, "tgi-headers.txt"))), nil)
		if err != nil {
			t.Fatal(err)
		}
		want := &ServerSplit{QueueNS: 118e6, DecodeNS: 922e6, Source: SourceTGIHeaders, Engine: EngineTGI, Unreported: []string{SplitPrefill}}
		if diff := cmp.Diff(want, SplitFromTGIHeaders(resp.Header.Get)); diff != "" {
			t.Errorf("split (-want +got):\n%s", diff)
		}
		for _, k := range TGIHeaders {
			if resp.Header.Get(k) == "" {
				t.Errorf("the fixture lacks %s", textproto.CanonicalMIMEHeaderKey(k))
			}
		}
	})
	t.Run("ollama", func(t *testing.T) {
		want := &ServerSplit{PrefillNS: 342546000, DecodeNS: 4535599000, LoadNS: 1334875, Source: SourceOllamaDurations, Engine: EngineOllama, Unreported: []string{SplitQueue}}
		if diff := cmp.Diff(want, SplitFromOllama(bytes.TrimSpace(read(t, "ollama-chat.json")))); diff != "" {
			t.Errorf("split (-want +got):\n%s", diff)
		}
	})
	t.Run("llamacpp", func(t *testing.T) {
		var raw []byte
		for _, line := range strings.Split(string(read(t, "llamacpp-stream.sse")), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"timings"`) {
				raw = []byte(d)
			}
		}
		for name, answer := range map[string][]byte{"stream": raw, "answer": read(t, "llamacpp-answer.json")} {
			tm, ok := timingsOf(answer)
			if !ok {
				t.Fatalf("%s: no timings in the recorded exchange", name)
			}
			sp := SplitFromLlamaCppTimings(tm)
			if sp == nil || sp.PrefillNS <= 0 || sp.DecodeNS <= 0 || sp.Reports(SplitQueue) || sp.Engine != EngineLlamaCpp {
				t.Errorf("%s: split %+v from %s", name, sp, tm)
			}
			if got, _ := ParseLlamaCppTimings(tm); got.PredictedN != 16 || got.PromptN <= 0 {
				t.Errorf("%s: timings %+v: want 16 predicted tokens (max_tokens with ignore_eos) and some prompt", name, got)
			}
		}
	})
}

// timingsOf is the raw "timings" member of an answer or chunk.
func timingsOf(b []byte) ([]byte, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, false
	}
	v, ok := m["timings"]
	return v, ok
}

func FuzzParseLlamaCppTimings(f *testing.F) {
	f.Add([]byte(`{"cache_n":3,"prompt_n":21,"prompt_ms":20.25,"predicted_n":16,"predicted_ms":75.5}`))
	f.Add([]byte(`{"prompt_ms":1e308,"predicted_ms":0}`))
	f.Add([]byte(`{"prompt_ms":1,"prompt_ms":-1,"predicted_ms":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tm, ok := ParseLlamaCppTimings(b)
		sp := SplitFromLlamaCppTimings(b)
		if ok != (sp != nil) {
			t.Fatalf("ParseLlamaCppTimings ok=%v but split %v", ok, sp)
		}
		if ok && (tm.PromptMS < 0 || tm.PredictedMS < 0 || sp.Reports(SplitQueue)) {
			t.Fatalf("timings %+v, split %+v", tm, sp)
		}
	})
}

func FuzzSplitFromOllama(f *testing.F) {
	f.Add([]byte(`{"prompt_eval_duration":342546000,"eval_duration":4535599000}`))
	f.Add([]byte(`{"prompt_eval_duration":9.3e18,"eval_duration":1}`))
	f.Add([]byte(`{"prompt_eval_duration":1,"eval_duration":1,"load_duration":334000000}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if sp := SplitFromOllama(b); sp != nil && (sp.PrefillNS < 0 || sp.DecodeNS < 0 || sp.LoadNS < 0) {
			t.Fatalf("negative split %+v from %q", sp, b)
		}
	})
}

func FuzzSplitFromTGIHeaders(f *testing.F) {
	f.Add("118", "922")
	f.Add("9223372036854", "1")
	f.Fuzz(func(t *testing.T, q, inf string) {
		h := map[string]string{"x-queue-time": q, "x-inference-time": inf}
		if sp := SplitFromTGIHeaders(func(k string) string { return h[k] }); sp != nil && (sp.QueueNS < 0 || sp.DecodeNS < 0) {
			t.Fatalf("negative split %+v from %q, %q", sp, q, inf)
		}
	})
}
