package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeUpstream is an OpenAI-compatible streaming server on a known
// schedule, for tests: it waits ttft, then sends chunks content chunks
// gap apart (or, when gate is set, each one after a value arrives on gate).
type fakeUpstream struct {
	name     string
	ttft     time.Duration
	gap      time.Duration
	chunks   int
	gate     chan struct{}
	status   int  // non-200 answers this status with an OpenAI error
	dieAfter int  // > 0: close the connection after this many chunks
	timing   bool // send a Server-Timing trailer queue;dur=…, prefill;dur=…
	usage    bool // continuous usage on every chunk
	pad      int  // bytes of padding added to each chunk's content

	srv      *httptest.Server
	active   atomic.Int64
	served   atomic.Int64
	canceled atomic.Int64
	mu       sync.Mutex
	headers  []http.Header
	bodies   []map[string]any
}

func newFakeUpstream(t testing.TB, f *fakeUpstream) *fakeUpstream {
	t.Helper()
	if f.chunks == 0 {
		f.chunks = 3
	}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeUpstream) URL() string { return f.srv.URL }

func (f *fakeUpstream) lastBody() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) == 0 {
		return nil
	}
	return f.bodies[len(f.bodies)-1]
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"%s-model","object":"model","created":1,"owned_by":"fake"}]}`, f.name)
		return
	case "/metrics":
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} %d\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n", f.active.Load())
		return
	}
	f.active.Add(1)
	defer f.active.Add(-1)
	f.served.Add(1)
	body, _ := io.ReadAll(r.Body)
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	f.mu.Lock()
	f.headers = append(f.headers, r.Header.Clone())
	f.bodies = append(f.bodies, m)
	f.mu.Unlock()
	if f.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `{"error":{"message":"fake upstream %s failing","type":"server_error","param":null,"code":null}}`, f.name)
		return
	}
	ctx := r.Context()
	wait := func(d time.Duration) bool {
		if f.gate != nil {
			select {
			case <-f.gate:
				return true
			case <-ctx.Done():
				f.canceled.Add(1)
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
			f.canceled.Add(1)
			return false
		}
	}
	stream, _ := m["stream"].(bool)
	if !stream {
		if !wait(f.ttft) {
			return
		}
		if f.timing {
			w.Header().Set("Server-Timing", "queue;dur=1.5, prefill;dur=2.5, decode;dur=3")
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":"%v","choices":[{"index":0,"message":{"role":"assistant","content":"hello from %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}}`, m["model"], f.name, f.chunks, 3+f.chunks)
		return
	}
	if f.timing {
		w.Header().Set("Trailer", "Server-Timing")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	fl.Flush()
	for i := range f.chunks {
		d := f.gap
		if i == 0 {
			d = f.ttft
		}
		if !wait(d) {
			return
		}
		if f.dieAfter > 0 && i == f.dieAfter {
			hj, ok := w.(http.Hijacker)
			if ok {
				c, _, err := hj.Hijack()
				if err == nil {
					_ = c.Close()
				}
			}
			return
		}
		usage := ""
		if f.usage {
			usage = fmt.Sprintf(`,"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}`, 2*(i+1), 3+2*(i+1))
		}
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"%v\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d %s\"}}]%s}\n\n", m["model"], i, strings.Repeat("p", f.pad), usage)
		fl.Flush()
	}
	fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	fmt.Fprintf(w, "data: [DONE]\n\n")
	fl.Flush()
	if f.timing {
		w.Header().Set("Server-Timing", "queue;dur=1.5, prefill;dur=2.5, decode;dur=3")
	}
}

// startGateway serves g on a test server.
func startGateway(t testing.TB, g *Gateway) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(g)
	t.Cleanup(func() { srv.Close(); g.Close() })
	return srv
}

func chatBody(model string, stream bool, content string, extra string) string {
	b, _ := json.Marshal(content)
	return fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%s}]%s}`, model, stream, b, extra)
}

func post(t testing.TB, ctx context.Context, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sseEvents reads all events of a response: data payloads and comments.
func sseEvents(t testing.TB, r io.Reader) (data, comments []string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		} else if c, ok := strings.CutPrefix(line, ": "); ok {
			comments = append(comments, c)
		}
	}
	return data, comments
}

func mustGateway(t testing.TB, yamlText string) *Gateway {
	t.Helper()
	cfg, err := ParseConfig([]byte(yamlText))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
