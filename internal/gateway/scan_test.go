package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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
			_, err := ScanRequest([]byte(c.body), c.chat, 512)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want one containing %q", err, c.want)
			}
		})
	}
	// Keys the gateway does not read may come in any case, once or more.
	r, err := ScanRequest([]byte(`{"model":"m",`+msgs+`,"Temperature":1,"foo":1,"foo":2}`), true, 512)
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
		g, gerr := ScanRequest(body, chat, 64)
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
