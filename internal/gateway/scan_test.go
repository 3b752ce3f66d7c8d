package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// TestScanRejectsKeyVariants: a policy-relevant key given twice, or in
// another case (as encoding/json, and so serve, would still take it), is
// a 400: the gateway must see the fields the upstream acts on.
func TestScanRejectsKeyVariants(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, body, want string
		chat             bool
	}{
		{"upper-case max_tokens", `{"model":"m",` + msgs + `,"max_tokens":5,"MAX_TOKENS":5000}`, "Unrecognized request argument supplied: MAX_TOKENS", true},
		{"mixed-case model", `{"model":"m","Model":"other",` + msgs + `}`, "Unrecognized", true},
		{"long s in stream", `{"model":"m",` + msgs + `,"\u017ftream":true}`, "Unrecognized", true},
		{"Kelvin sign", `{"model":"m",` + msgs + `,"max_to\u212aens":5000}`, "Unrecognized", true},
		{"escaped variant", `{"model":"m",` + msgs + `,"MAX\u005fTOKENS":5000}`, "Unrecognized", true},
		{"stream_options", `{"model":"m",` + msgs + `,"stream":true,"stream_options":{"Include_Usage":true}}`, "Unrecognized", true},
		{"message content", `{"model":"m","messages":[{"role":"user","CONTENT":"a very long prompt"}]}`, "Unrecognized", true},
		{"content part text", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","Text":"a"}]}]}`, "Unrecognized", true},
		{"completion prompt", `{"model":"m","prompt":"x","PROMPT":"y"}`, "Unrecognized", false},
		{"duplicate max_tokens", `{"model":"m",` + msgs + `,"max_tokens":5,"max_tokens":5000}`, "duplicate", true},
		{"duplicate through an escape", `{"model":"m",` + msgs + `,"max_tokens":5,"max\u005ftokens":5000}`, "duplicate", true},
		{"duplicate model", `{"model":"a","model":"b",` + msgs + `}`, "duplicate", true},
		{"duplicate content", `{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}`, "duplicate", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ScanRequest([]byte(c.body), apiOf(c.chat), 512)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want one containing %q", err, c.want)
			}
		})
	}
	// Keys the gateway does not read may come in any case, once or more.
	r, err := ScanRequest([]byte(`{"model":"m",`+msgs+`,"Temperature":1,"foo":1,"foo":2}`), openai.APIChat, 512)
	if err != nil || r.Model != "m" {
		t.Errorf("%+v %v", r, err)
	}
}

// TestKeyVariantsCannotBypassLimits: a route's max_max_tokens holds
// whatever spelling the client tries, end to end through the gateway to
// serve.
func TestKeyVariantsCannotBypassLimits(t *testing.T) {
	s := startServe(t, time.Millisecond)
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: sim, replicas: [{url: %q, kind: tokentrace}]}]
routes: [{model: %s, pool: sim, length: {max_max_tokens: 10}}]
`, serveBase(s), simModel))
	gw := startGateway(t, g)
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, body := range []string{
		`{"model":"` + simModel + `",` + msgs + `,"max_tokens":5,"MAX_TOKENS":1000,"ignore_eos":true}`,
		`{"model":"` + simModel + `",` + msgs + `,"max_tokens":5,"max_tokens":1000,"ignore_eos":true}`,
		`{"model":"` + simModel + `",` + msgs + `,"max_completion_tokens":5,"Max_Completion_Tokens":1000,"ignore_eos":true}`,
	} {
		if status, _, b := do(t, gw.URL, body, nil); status != 400 {
			t.Errorf("%s: gateway answered %d %.200s, want 400", body, status, b)
		}
		if status, _, b := do(t, serveBase(s), body, nil); status != 400 {
			t.Errorf("%s: serve answered %d %.200s, want 400", body, status, b)
		}
	}
	// /v1/completions has no max_completion_tokens: the gateway reads
	// max_tokens, as serve does.
	resp, err := http.Post(gw.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+simModel+`","prompt":"hi","max_tokens":1000,"max_completion_tokens":5,"ignore_eos":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "max_tokens") {
		t.Errorf("completion with max_tokens 1000: %d %.200s, want 400 naming max_tokens", resp.StatusCode, b)
	}
}

// FuzzGatewayAndServeAgree: on every body, when both accept it, the
// gateway's scan and serve's decoder read the same model, stream flag,
// output limit, include_usage and input length, so no policy can be
// judged on one value and acted on with another.
func FuzzGatewayAndServeAgree(f *testing.F) {
	const msgs = `"messages":[{"role":"user","content":"hi there"}]`
	for _, seed := range []struct {
		body string
		chat bool
	}{
		{`{"model":"m",` + msgs + `,"max_tokens":5}`, true},
		{`{"model":"m",` + msgs + `,"max_tokens":5,"MAX_TOKENS":5000}`, true},
		{`{"model":"m",` + msgs + `,"max_tokens":5,"max_tokens":5000}`, true},
		{`{"model":"m",` + msgs + `,"max_completion_tokens":5,"max_tokens":9}`, true},
		{`{"model":"m",` + msgs + `,"Max_Completion_Tokens":5000,"max_tokens":9}`, true},
		{`{"model":"m",` + msgs + `,"\u017ftream":true,"stream":false}`, true},
		{`{"model":"m","MODEL":"n",` + msgs + `}`, true},
		{`{"model":"m\ud800",` + msgs + `}`, true},
		{"{\"model\":\"m\xff\"," + msgs + "}", true},
		{`{"model":"m",` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"INCLUDE_USAGE":false}}`, true},
		{`{"model":"m","messages":[{"role":"user","content":"a","CONTENT":"b c d e f"}]}`, true},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b c"}]}]}`, true},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","TEXT":"b c d"}]}]}`, true},
		{`{"model":"m","prompt":"x y","max_tokens":1000,"max_completion_tokens":5}`, false},
		{`{"model":"m","prompt":[1,2,3],"max_tokens":4}`, false},
		{`{"model":"m","prompt":[[1,2]],"PROMPT":"a b c d"}`, false},
		{`{"model":"m","prompt":["x"],"stream":true,"stream_options":{"include_usage":true}}`, false},
	} {
		f.Add([]byte(seed.body), seed.chat)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		g, gerr := ScanRequest(body, apiOf(chat), 64)
		var p openai.Params
		var input int
		var serr *openai.APIError
		if chat {
			var r *openai.ChatCompletionRequest
			if r, serr = openai.DecodeChat(body); serr == nil {
				p = r.Params()
				msgs := make([]tokenizer.Message, len(r.Messages))
				for i, m := range r.Messages {
					msgs[i] = tokenizer.Message{Role: m.Role, Content: string(m.Content)}
				}
				input = tokenizer.CountChat(msgs)
			}
		} else {
			var r *openai.CompletionRequest
			if r, serr = openai.DecodeCompletion(body); serr == nil {
				p = r.Params()
				input = len(r.Prompt.Tokens)
				if r.Prompt.Tokens == nil {
					input = tokenizer.Count(r.Prompt.Text)
				}
			}
		}
		if gerr != nil || serr != nil {
			return
		}
		maxTokens := g.MaxTokens
		if maxTokens == 0 { // absent: serve's default
			maxTokens = map[bool]int{true: 0, false: 16}[chat]
		}
		got := fmt.Sprintf("%q %v %d %v %d", g.Model, g.Stream, maxTokens, g.IncludeUsage && g.Stream, g.InputTokens())
		want := fmt.Sprintf("%q %v %d %v %d", p.Model, p.Stream, p.MaxTokens, p.IncludeUsage, input)
		if got != want {
			t.Fatalf("body %q (chat %v): gateway reads %s, serve %s (model stream max_tokens include_usage input)", body, chat, got, want)
		}
	})
}

func FuzzScanRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`), true)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url"}]}]}`), true)
	f.Add([]byte(`{"model":"m","prompt":["a b",[1,2,3]],"max_completion_tokens":3}`), false)
	f.Add([]byte(`{"model":"m","prompt":[[1,2],[3]]}`), false)
	f.Add([]byte(`{"model":`), true)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, err := ScanRequest(body, apiOf(chat), 64)
		if err != nil {
			return
		}
		if r.Model == "" || r.InputTokens() < 0 || r.MaxTokens < 0 {
			t.Fatalf("accepted %q as %+v", body, r)
		}
		out, err := rewriteFields(body, map[string]any{"max_tokens": 7})
		if err != nil {
			t.Fatalf("rewrite of an accepted body failed: %v", err)
		}
		r2, err := ScanRequest(out, apiOf(chat), 64)
		if err != nil || r2.Model != r.Model || r2.InputTokens() != r.InputTokens() {
			t.Fatalf("rewrite changed the request: %+v → %+v (%v)", r, r2, err)
		}
	})
}

func TestScanRequestByHand(t *testing.T) {
	cases := []struct {
		name             string
		body             string
		chat             bool
		model            string
		stream, usage    bool
		maxTokens, input int
		field            string
		wantErr          string
	}{
		// CountChat rule: 1 role token per message + content tokens.
		// "You are terse." = You, are, terse, . = 4; "Hi!" = Hi, ! = 2 → 2 + 4 + 2 = 8.
		{name: "chat", chat: true, body: `{"model":"m","stream":true,"max_tokens":7,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi!"}]}`,
			model: "m", stream: true, usage: true, maxTokens: 7, field: "max_tokens", input: 8},
		{name: "escapes and parts", chat: true, body: `{"model":"m\u0041","messages":[{"role":"user","content":[{"type":"text","text":"a\nb"},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":null}],"max_completion_tokens":3,"max_tokens":9}`,
			model: "mA", maxTokens: 3, field: "max_completion_tokens", input: 4},
		{name: "completion ids", body: `{"model":"m","prompt":[[1,2,3],"one two"]}`, model: "m", input: 5},
		{name: "malformed", chat: true, body: `{"model":"m","messages":[}`, wantErr: "not valid JSON"},
		{name: "bad escape", chat: true, body: `{"model":"m","messages":[{"role":"user","content":"\q"}]}`, wantErr: "bad escape"},
		{name: "trailing", chat: true, body: `{"model":"m","messages":[{"role":"user","content":"x"}]} x`, wantErr: "after the request"},
		{name: "no model", chat: true, body: `{"messages":[{"role":"user","content":"x"}]}`, wantErr: "'model'"},
		{name: "no messages", chat: true, body: `{"model":"m","messages":[]}`, wantErr: "non-empty"},
		{name: "no prompt", body: `{"model":"m"}`, wantErr: "'prompt'"},
		{name: "negative", chat: true, body: `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`, wantErr: "must be positive"},
		{name: "fraction", chat: true, body: `{"model":"m","max_tokens":1.5,"messages":[{"role":"user","content":"x"}]}`, wantErr: "integer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := ScanRequest([]byte(c.body), apiOf(c.chat), 512)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []any{r.Model, r.Stream, r.IncludeUsage, r.MaxTokens, r.MaxTokensField, r.InputTokens()}
			want := []any{c.model, c.stream, c.usage, c.maxTokens, c.field, c.input}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestRewriteFieldsKeepsOtherBytes(t *testing.T) {
	body := `{"model": "a", "messages":[{"role":"user","content":"x"}], "temperature": 0.5}`
	out, err := rewriteFields([]byte(body), map[string]any{"model": "b", "max_tokens": 12})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model": "b", "messages":[{"role":"user","content":"x"}], "temperature": 0.5,"max_tokens":12}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	out, err = rewriteFields([]byte(`{}`), map[string]any{"a": 1, "b": 2})
	if err != nil || string(out) != `{"a":1,"b":2}` {
		t.Errorf("empty object: %s %v", out, err)
	}
}

// FuzzScanRequestAgainstEncodingJSON checks the scanner against
// encoding/json and serve's decoder both ways: whatever it accepts is
// valid JSON that encoding/json reads with the same fields, and whatever
// it refuses, openai.DecodeChat refuses too.
func FuzzScanRequestAgainstEncodingJSON(f *testing.F) {
	f.Add([]byte(`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi \"there\"\n"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a b"}]}],"max_tokens":null}`))
	f.Add([]byte(`{"model":"m","MODEL":"n","messages":[{"role":"user","Content":"hi","content":"x"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","TEXT":"a","text":"b"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ScanRequest(body, openai.APIChat, 64)
		if err != nil {
			// The scanner refuses only what a server refuses: a body that
			// serve's decoder (openai.DecodeChat: exact, unique keys,
			// validated fields) accepts is accepted here too.
			if _, apiErr := openai.DecodeChat(body); apiErr == nil {
				t.Fatalf("refused %q (%v), which openai.DecodeChat accepts", body, err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		// encoding/json matches keys case-insensitively; the scanner
		// refuses a case variant of every key it reads, so whatever it
		// accepted has none, and encoding/json reads the same fields.
		if k := caseVariant(body); k != "" {
			t.Fatalf("accepted the case variant %q of a key it reads: %q", k, body)
		}
		var ref struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &ref); err != nil {
			t.Fatalf("accepted %q, which encoding/json cannot read: %v", body, err)
		}
		if ref.Model != r.Model || ref.Stream != r.Stream {
			t.Fatalf("scanner %q/%v, encoding/json %q/%v", r.Model, r.Stream, ref.Model, ref.Stream)
		}
		want := 0
		for _, m := range ref.Messages {
			want++
			var s string
			if json.Unmarshal(m.Content, &s) == nil {
				want += tokenizer.Count(s)
				continue
			}
			var parts []struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(m.Content, &parts) == nil {
				for _, p := range parts {
					want += tokenizer.Count(p.Text)
				}
			}
		}
		if got := r.InputTokens(); got != want {
			t.Fatalf("input tokens %d, encoding/json + tokenizer %d, body %q", got, want, body)
		}
	})
}

// caseVariant returns a key of body's top level, of a message, or of a
// content part that equals one of the keys the chat scan reads under
// Unicode case folding without being it ("" when there is none).
func caseVariant(body []byte) string {
	variant := func(obj json.RawMessage, known []string) string {
		var m map[string]json.RawMessage
		if json.Unmarshal(obj, &m) != nil {
			return ""
		}
		for k := range m {
			for _, want := range known {
				if k != want && strings.EqualFold(k, want) {
					return k
				}
			}
		}
		return ""
	}
	if k := variant(body, chatKeys); k != "" {
		return k
	}
	var top struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(body, &top)
	for _, m := range top.Messages {
		if k := variant(m, messageKeys); k != "" {
			return k
		}
		var msg struct {
			Content []json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(m, &msg)
		for _, part := range msg.Content {
			if k := variant(part, contentPartKeys); k != "" {
				return k
			}
		}
	}
	return ""
}
