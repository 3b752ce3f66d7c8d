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

// FuzzGatewayAndServeAgree: on every body of every API (chat,
// completions, Responses, Messages, Ollama's chat), when both accept it,
// the gateway's scan and serve's decoder read the same model, stream
// flag, output limit, include_usage and input length, so no policy can
// be judged on one value and acted on with another; and the gateway
// refuses nothing serve accepts.
func FuzzGatewayAndServeAgree(f *testing.F) {
	const msgs = `"messages":[{"role":"user","content":"hi there"}]`
	for _, seed := range []struct {
		body string
		api  openai.API
	}{
		{`{"model":"m",` + msgs + `,"max_tokens":5}`, openai.APIChat},
		{`{"model":"m",` + msgs + `,"max_tokens":5,"MAX_TOKENS":5000}`, openai.APIChat},
		{`{"model":"m",` + msgs + `,"max_tokens":5,"max_tokens":5000}`, openai.APIChat},
		{`{"model":"m",` + msgs + `,"max_completion_tokens":5,"max_tokens":9}`, openai.APIChat},
		{`{"model":"m",` + msgs + `,"Max_Completion_Tokens":5000,"max_tokens":9}`, openai.APIChat},
		{`{"model":"m",` + msgs + `,"\u017ftream":true,"stream":false}`, openai.APIChat},
		{`{"model":"m","MODEL":"n",` + msgs + `}`, openai.APIChat},
		{`{"model":"m\ud800",` + msgs + `}`, openai.APIChat},
		{"{\"model\":\"m\xff\"," + msgs + "}", openai.APIChat},
		{`{"model":"m",` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"INCLUDE_USAGE":false}}`, openai.APIChat},
		{`{"model":"m","messages":[{"role":"user","content":"a","CONTENT":"b c d e f"}]}`, openai.APIChat},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b c"}]}]}`, openai.APIChat},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","TEXT":"b c d"}]}]}`, openai.APIChat},
		{`{"model":"m","prompt":"x y","max_tokens":1000,"max_completion_tokens":5}`, openai.APICompletions},
		{`{"model":"m","prompt":[1,2,3],"max_tokens":4}`, openai.APICompletions},
		{`{"model":"m","prompt":[[1,2]],"PROMPT":"a b c d"}`, openai.APICompletions},
		{`{"model":"m","prompt":["x"],"stream":true,"stream_options":{"include_usage":true}}`, openai.APICompletions},
		{`{"model":"m","input":"a b c","max_output_tokens":9,"stream":true}`, openai.APIResponses},
		{`{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"a b"}]}]}`, openai.APIResponses},
		{`{"model":"m","input":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"output_text","text":"y z"}]}],"max_output_tokens":3}`, openai.APIResponses},
		{`{"model":"m","input":"x","MAX_OUTPUT_TOKENS":3,"max_output_tokens":4}`, openai.APIResponses},
		{`{"model":"m","max_tokens":5,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"a b"}]}],"stream":true}`, openai.APIMessages},
		{`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s t"}],"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`, openai.APIMessages},
		{`{"model":"m","max_tokens":5,"Max_Tokens":500,"messages":[{"role":"user","content":"x"}]}`, openai.APIMessages},
		{`{"model":"m","messages":[{"role":"user","content":"a b"}],"options":{"num_predict":7,"temperature":0}}`, openai.APIOllama},
		{`{"model":"m","stream":false,"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"}],"options":{"num_predict":-1}}`, openai.APIOllama},
		{`{"model":"m","messages":[{"role":"user","content":"a"}],"options":{"num_predict":5,"Num_Predict":500}}`, openai.APIOllama},
	} {
		f.Add([]byte(seed.body), uint8(seed.api))
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		api := openai.APIs[int(which)%len(openai.APIs)]
		g, gerr := ScanRequest(body, api, 64)
		p, input, serr := serveReads(body, api)
		if gerr != nil && serr == nil {
			t.Fatalf("body %q (%s): the gateway refuses it (%v), serve accepts it", body, api, gerr)
		}
		if gerr != nil || serr != nil {
			return
		}
		maxTokens := g.MaxTokens
		if maxTokens == 0 && api == openai.APICompletions { // absent: serve's default
			maxTokens = 16
		}
		got := fmt.Sprintf("%q %v %d %v %d", g.Model, g.Stream, maxTokens, g.IncludeUsage && g.Stream, g.InputTokens())
		want := fmt.Sprintf("%q %v %d %v %d", p.Model, p.Stream, p.MaxTokens, p.IncludeUsage, input)
		if got != want {
			t.Fatalf("body %q (%s): gateway reads %s, serve %s (model stream max_tokens include_usage input)", body, api, got, want)
		}
	})
}

// serveReads is what serve's decoder for api reads of body: its
// parameters and its prompt's length in tokens (the tokenizer's chat rule
// over the messages, or a completion prompt's tokens).
func serveReads(body []byte, api openai.API) (openai.Params, int, *openai.APIError) {
	var msgs []openai.ChatMessage
	var p openai.Params
	switch api {
	case openai.APICompletions:
		r, err := openai.DecodeCompletion(body)
		if err != nil {
			return p, 0, err
		}
		if r.Prompt.Tokens == nil {
			return r.Params(), tokenizer.Count(r.Prompt.Text), nil
		}
		return r.Params(), len(r.Prompt.Tokens), nil
	case openai.APIChat:
		r, err := openai.DecodeChat(body)
		if err != nil {
			return p, 0, err
		}
		p, msgs = r.Params(), r.Messages
	case openai.APIResponses:
		r, err := openai.DecodeResponses(body)
		if err != nil {
			return p, 0, err
		}
		p, msgs = r.Params(), r.Messages()
	case openai.APIMessages:
		r, err := openai.DecodeMessages(body)
		if err != nil {
			return p, 0, err
		}
		p, msgs = r.Params(), r.ChatMessages()
	default:
		r, err := openai.DecodeOllamaChat(body)
		if err != nil {
			return p, 0, err
		}
		p, msgs = r.Params(), r.ChatMessages()
	}
	tm := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		tm[i] = tokenizer.Message{Role: m.Role, Content: string(m.Content)}
	}
	return p, tokenizer.CountChat(tm), nil
}

// FuzzScanRequest: on every body of every API, an accepted request has a
// model and no negative length, and rewriting its output cap (the API's
// own field, nested for Ollama) changes nothing else the gateway reads.
func FuzzScanRequest(f *testing.F) {
	for _, seed := range []struct {
		body string
		api  openai.API
	}{
		{`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, openai.APIChat},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url"}]}]}`, openai.APIChat},
		{`{"model":"m","prompt":["a b",[1,2,3]],"max_completion_tokens":3}`, openai.APICompletions},
		{`{"model":"m","prompt":[[1,2],[3]]}`, openai.APICompletions},
		{`{"model":`, openai.APIChat},
		{`{"model":"m","input":"a b","instructions":"c","max_output_tokens":5,"stream":true}`, openai.APIResponses},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}]}`, openai.APIResponses},
		{`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"x"}]}`, openai.APIMessages},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"options":{"num_predict":4,"top_k":3}}`, openai.APIOllama},
		{`{"model":"m","messages":[{"role":"user","content":"x"}]}`, openai.APIOllama},
	} {
		f.Add([]byte(seed.body), uint8(seed.api))
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		api := openai.APIs[int(which)%len(openai.APIs)]
		r, err := ScanRequest(body, api, 64)
		if err != nil {
			return
		}
		if r.Model == "" || r.InputTokens() < 0 || r.MaxTokens < 0 {
			t.Fatalf("accepted %q (%s) as %+v", body, api, r)
		}
		field := maxTokensField[api]
		out, err := rewriteFields(body, map[string]any{field: 7})
		if err != nil {
			t.Fatalf("rewrite of an accepted %s body failed: %v", api, err)
		}
		r2, err := ScanRequest(out, api, 64)
		if err != nil || r2.Model != r.Model || r2.Stream != r.Stream || r2.InputTokens() != r.InputTokens() || r2.PrefixHash != r.PrefixHash {
			t.Fatalf("rewrite of %s changed the %s request: %+v → %+v (%v)\n%s", field, api, r, r2, err, out)
		}
		if r.MaxTokensField != "max_completion_tokens" && (r2.MaxTokens != 7 || r2.MaxTokensField != field) {
			t.Fatalf("rewrite of %s: %s %d read back from %s", field, r2.MaxTokensField, r2.MaxTokens, out)
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
