package gateway

import (
	"encoding/json"
	"testing"

	"github.com/tokentrace/tokentrace/internal/openai"
)

func TestWithoutMember(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"id":"x","usage":{"a":1},"metrics":{"queue_time_ms":1.5}}`, `{"id":"x","usage":{"a":1}}`},
		{`{"metrics":{"q":[1,{"metrics":2}]}, "id":"x"}`, `{"id":"x"}`},
		{`{"metrics":null}`, `{}`},
		{`{ "a":1 , "metrics" : {} , "b":2 }`, `{ "a":1 , "b":2 }`},
		{`{"a":{"metrics":1}}`, `{"a":{"metrics":1}}`},
		{`{"Metrics":1,"metrics":2,"metrics":3}`, `{"Metrics":1}`},
		{`[1,2]`, `[1,2]`},
		{`{"metrics":`, `{"metrics":`},
	} {
		if got := string(withoutMember([]byte(c.in), "metrics")); got != c.want {
			t.Errorf("withoutMember(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func FuzzWithoutMember(f *testing.F) {
	f.Add([]byte(`{"id":"x","choices":[],"usage":{"prompt_tokens":8},"metrics":{"queue_time_ms":1.5}}`))
	f.Add([]byte(`{"metrics":1,"metrics":2}`))
	f.Add([]byte(` {"\u006detrics":1, "metrics" :{"a":"}"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out := withoutMember(b, "metrics")
		var before map[string]json.RawMessage
		if json.Unmarshal(b, &before) != nil {
			return
		}
		var after map[string]json.RawMessage
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("%q became %q, not JSON: %v", b, out, err)
		}
		var keys []string
		// What remains: every member but the exact key (an escaped
		// spelling of it is another key to the scanner and stays).
		for k := range before {
			if _, ok := after[k]; !ok && k != "metrics" {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			t.Fatalf("%q lost %q: %q", b, keys, out)
		}
	})
}

// TestScanAskedMetrics reads the client's own ask for a metrics object on
// chat and completions, exactly spelled.
func TestScanAskedMetrics(t *testing.T) {
	for _, c := range []struct {
		api  openai.API
		body string
		want bool
		err  bool
	}{
		{openai.APIChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"include_metrics":true}`, true, false},
		{openai.APICompletions, `{"model":"m","prompt":"x","return_metrics":true}`, true, false},
		{openai.APIChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"include_metrics":false}`, false, false},
		{openai.APIChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"Include_Metrics":true}`, false, true},
		{openai.APIChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"include_metrics":"yes"}`, false, true},
	} {
		r, err := ScanRequest([]byte(c.body), c.api, 0)
		if (err != nil) != c.err || r.AskedMetrics != c.want {
			t.Errorf("%s: asked %v, error %v", c.body, r.AskedMetrics, err)
		}
	}
}
