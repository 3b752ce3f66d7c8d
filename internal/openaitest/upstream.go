package openaitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/sse"
)

// Timing is a Server-Timing value with the engine's split, as serve sends
// it; set Upstream.Timing to it (or to any value) to have it sent.
const Timing = "queue;dur=1.5, prefill;dur=2.5, decode;dur=3"

// Upstream is a fake OpenAI-compatible server. Set the fields that shape
// its answers, then Start it; do not change them while it serves.
//
// A completion request (any path but /v1/models and /metrics) is answered:
//   - with Status (not 0 or 200): that status and an OpenAI error body
//     (ErrorBody, or one naming the upstream);
//   - with Script: the body as is, whatever the request asked;
//   - with Endless: content without end, streamed (or one JSON body that
//     never closes, for a request that does not stream), up to Endless bytes;
//   - else, for a request with "stream": true, a generated stream: a role
//     chunk, Chunks content chunks (the first TTFT after the request, the
//     others Gap apart, or each when Gate releases it), a finish chunk, a
//     usage chunk (with UsageChunk) and [DONE] — or, for a request that
//     does not stream, one chat.completion body after TTFT.
//
// Then, with Hold, the connection stays open until the client closes it
// or Release is closed, with a keep-alive comment every KeepAlive (when
// set) meanwhile.
type Upstream struct {
	// Name names the upstream: its model in /v1/models ("<Name>-model"),
	// its whole answer ("hello from <Name>") and its error message.
	Name string
	// TTFT is the wait before the first content chunk (or the whole
	// answer); Gap, between content chunks.
	TTFT, Gap time.Duration
	// Chunks is the number of content chunks (3 when 0); the content of
	// chunk i is "t<i> ", or Words[i] when Words is set (then Chunks is
	// len(Words)).
	Chunks int
	Words  []string
	// Gate, when set, releases each content chunk: one value per chunk.
	Gate chan struct{}
	// ContinuousUsage puts usage on every content chunk (chunk i counts
	// i+1 completion tokens); UsageChunk sends the final usage chunk (no
	// choices) before [DONE]. PromptTokens is usage's prompt_tokens (3
	// when 0).
	ContinuousUsage bool
	UsageChunk      bool
	PromptTokens    int
	// Timing, when set, is sent as Server-Timing: a trailer after a
	// stream, a header on a whole answer. TimingIn "header" sends it as a
	// header on a generated stream too, "final" as the stream's last
	// comment before [DONE] (": server-timing VALUE", as a tokentrace hop
	// sends it).
	Timing   string
	TimingIn string
	// Status, when not 0 or 200, answers every completion with it and an
	// OpenAI error body: ErrorBody, or one naming the upstream.
	Status    int
	ErrorBody string
	// CutAfter > 0 closes the connection (no [DONE]) where content chunk
	// CutAfter would have been sent.
	CutAfter int
	// Script, when set, is the answer's body written as is (one write,
	// flushed), with Content-Type ScriptType (text/event-stream when
	// empty): an engine's stream or whole answer verbatim.
	Script     string
	ScriptType string
	// Header is set on every completion answer (an engine's own headers,
	// such as TGI's x-queue-time).
	Header http.Header
	// Endless streams content without end (up to this many bytes).
	Endless int64
	// Hold keeps the connection open after the answer until the client
	// closes it or Release is closed; KeepAlive > 0 sends ": keep-alive"
	// that often meanwhile.
	Hold      bool
	KeepAlive time.Duration
	Release   chan struct{}

	// Served counts completion requests, Active those in flight, Canceled
	// those whose client went away while the upstream waited, Closed
	// those whose connection the client closed first (a write failed, or
	// a held connection ended).
	Served, Active, Canceled, Closed atomic.Int64
	// Gone receives, without blocking, when a client closes a connection
	// the upstream held or was writing (make it buffered).
	Gone chan struct{}

	srv     *httptest.Server
	mu      sync.Mutex
	headers []http.Header
	bodies  []map[string]any
}

// Start serves u on a loopback test server until the test ends.
func Start(t testing.TB, u *Upstream) *Upstream {
	t.Helper()
	u.srv = httptest.NewServer(u)
	t.Cleanup(u.srv.Close)
	return u
}

// URL is the upstream's base URL (http://127.0.0.1:PORT).
func (u *Upstream) URL() string { return u.srv.URL }

// Close stops the upstream now (a replica that goes away).
func (u *Upstream) Close() { u.srv.Close() }

// Headers returns the headers of every completion request, in order.
func (u *Upstream) Headers() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.headers...)
}

// Bodies returns the JSON body of every completion request, in order
// (nil for one that was not a JSON object).
func (u *Upstream) Bodies() []map[string]any {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]map[string]any(nil), u.bodies...)
}

// LastBody is the last completion request's body (nil before any).
func (u *Upstream) LastBody() map[string]any {
	b := u.Bodies()
	if len(b) == 0 {
		return nil
	}
	return b[len(b)-1]
}

// ServeHTTP answers one request as the fields say.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"%s-model","object":"model","created":1,"owned_by":"fake"}]}`, u.Name)
		return
	case "/metrics":
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} %d\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n", u.Active.Load())
		return
	}
	u.Active.Add(1)
	defer u.Active.Add(-1)
	u.Served.Add(1)
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(body, &req)
	u.mu.Lock()
	u.headers = append(u.headers, r.Header.Clone())
	u.bodies = append(u.bodies, req)
	u.mu.Unlock()
	stream, _ := req["stream"].(bool)
	for k, vs := range u.Header {
		w.Header()[k] = append([]string(nil), vs...)
	}
	var ok bool
	switch {
	case u.Status != 0 && u.Status != http.StatusOK:
		u.fail(w)
		return
	case u.Script != "":
		ok = u.script(w)
	case u.Endless > 0:
		ok = u.endless(w, stream)
	case stream:
		ok = u.stream(w, r, req["model"])
	default:
		ok = u.whole(w, r, req["model"])
	}
	if ok && u.Hold {
		u.hold(w, r)
	}
}

func (u *Upstream) fail(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(u.Status)
	if u.ErrorBody != "" {
		_, _ = io.WriteString(w, u.ErrorBody)
		return
	}
	fmt.Fprintf(w, `{"error":{"message":"fake upstream %s failing","type":"server_error","param":null,"code":null}}`, u.Name)
}

// gone notes a client that closed the connection first.
func (u *Upstream) gone() {
	u.Closed.Add(1)
	if u.Gone != nil {
		select {
		case u.Gone <- struct{}{}:
		default:
		}
	}
}

func (u *Upstream) script(w http.ResponseWriter) bool {
	ct := u.ScriptType
	if ct == "" {
		ct = "text/event-stream"
	}
	w.Header().Set("Content-Type", ct)
	if u.Timing != "" {
		w.Header().Set("Trailer", "Server-Timing")
	}
	if _, err := io.WriteString(w, u.Script); err != nil {
		u.gone()
		return false
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		u.gone()
		return false
	}
	if u.Timing != "" {
		w.Header().Set("Server-Timing", u.Timing)
	}
	return true
}

// wait waits d, or for the gate; false when the client went away first.
func (u *Upstream) wait(r *http.Request, d time.Duration) bool {
	ctx := r.Context()
	if u.Gate != nil {
		select {
		case <-u.Gate:
			return true
		case <-ctx.Done():
			u.Canceled.Add(1)
			return false
		}
	}
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		u.Canceled.Add(1)
		return false
	}
}

func (u *Upstream) chunks() int {
	switch {
	case u.Words != nil:
		return len(u.Words)
	case u.Chunks == 0:
		return 3
	}
	return u.Chunks
}

func (u *Upstream) content(i int) string {
	if u.Words != nil {
		return u.Words[i]
	}
	return "t" + strconv.Itoa(i) + " "
}

func (u *Upstream) prompt() int {
	if u.PromptTokens == 0 {
		return 3
	}
	return u.PromptTokens
}

func (u *Upstream) usage(completion int) string {
	return fmt.Sprintf(`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, u.prompt(), completion, u.prompt()+completion)
}

func (u *Upstream) stream(w http.ResponseWriter, r *http.Request, model any) bool {
	trailer := u.Timing != "" && u.TimingIn == ""
	switch {
	case trailer:
		w.Header().Set("Trailer", "Server-Timing")
	case u.Timing != "" && u.TimingIn == "header":
		w.Header().Set("Server-Timing", u.Timing)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	sw := sse.NewWriter(w)
	if sw.Data([]byte(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)) != nil {
		u.gone()
		return false
	}
	modelJSON, _ := json.Marshal(model)
	n := u.chunks()
	for i := range n {
		d := u.Gap
		if i == 0 {
			d = u.TTFT
		}
		if !u.wait(r, d) {
			return false
		}
		if u.CutAfter > 0 && i == u.CutAfter {
			cut(w)
			return false
		}
		text, _ := json.Marshal(u.content(i))
		usage := ""
		if u.ContinuousUsage {
			usage = "," + u.usage(i+1)
		}
		ev := fmt.Sprintf(`{"id":"x","object":"chat.completion.chunk","model":%s,"choices":[{"index":0,"delta":{"content":%s}}]%s}`, modelJSON, text, usage)
		if sw.Data([]byte(ev)) != nil {
			u.gone()
			return false
		}
	}
	sw.Queue([]byte(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
	if u.UsageChunk {
		sw.Queue([]byte(`{"id":"x","object":"chat.completion.chunk","choices":[],` + u.usage(n) + `}`))
	}
	var comment []string
	if u.Timing != "" && u.TimingIn == "final" {
		comment = []string{"server-timing ", u.Timing}
	}
	if sw.Final(nil, comment...) != nil {
		u.gone()
		return false
	}
	if trailer {
		w.Header().Set("Server-Timing", u.Timing)
	}
	return true
}

// cut closes the connection under an answer.
func cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
		}
	}
}

func (u *Upstream) whole(w http.ResponseWriter, r *http.Request, model any) bool {
	if !u.wait(r, u.TTFT) {
		return false
	}
	if u.Timing != "" {
		w.Header().Set("Server-Timing", u.Timing)
	}
	w.Header().Set("Content-Type", "application/json")
	text := "hello from " + u.Name
	if u.Words != nil {
		text = strings.Join(u.Words, "")
	}
	modelJSON, _ := json.Marshal(model)
	textJSON, _ := json.Marshal(text)
	n := u.chunks()
	fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":%s,"choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],%s}`, modelJSON, textJSON, u.usage(n))
	return true
}

// endless sends content without end, up to u.Endless bytes: SSE content
// events, or one chat.completion body whose content never closes.
func (u *Upstream) endless(w http.ResponseWriter, stream bool) bool {
	var head, chunk []byte
	if stream {
		w.Header().Set("Content-Type", "text/event-stream")
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": strings.Repeat("word ", 2000)}}}})
		chunk = []byte("data: " + string(b) + "\n\n")
	} else {
		w.Header().Set("Content-Type", "application/json")
		head = []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`)
		chunk = []byte(strings.Repeat("a", 64<<10))
	}
	if _, err := w.Write(head); err != nil {
		u.gone()
		return false
	}
	for sent := int64(0); sent < u.Endless; sent += int64(len(chunk)) {
		if _, err := w.Write(chunk); err != nil {
			u.gone()
			return false
		}
	}
	end := "data: [DONE]\n\n"
	if !stream {
		end = `"}}]}`
	}
	_, _ = io.WriteString(w, end)
	return true
}

// hold keeps the connection open after the answer until the client
// closes it or Release is closed, with keep-alive comments every
// KeepAlive meanwhile.
func (u *Upstream) hold(w http.ResponseWriter, r *http.Request) {
	var tick <-chan time.Time
	if u.KeepAlive > 0 {
		tk := time.NewTicker(u.KeepAlive)
		defer tk.Stop()
		tick = tk.C
	}
	sw := sse.NewWriter(w)
	for {
		select {
		case <-r.Context().Done():
			u.gone()
			return
		case <-u.Release:
			return
		case <-tick:
			if sw.Comment("keep-alive") != nil {
				u.gone()
				return
			}
		}
	}
}

// ReadToDone reads a stream's events from r up to and including its
// [DONE] event, and returns the comment of the event that ended it whose
// text starts with keep (sse.Reader.KeepComment; "" keeps none): a proxy's
// final timing comment. It stops at [DONE], so the caller can act before
// the rest of the body (a trailer) arrives. A stream that ends without
// [DONE] is an error.
func ReadToDone(r io.Reader, keep string) ([]byte, error) {
	rd := sse.NewReader(r, nil, 0)
	rd.KeepComment = keep
	for {
		ev, err := rd.Next()
		if err != nil {
			return nil, fmt.Errorf("the stream ended without [DONE]: %w", err)
		}
		if string(ev.Data) == "[DONE]" {
			return rd.Kept, nil
		}
	}
}
