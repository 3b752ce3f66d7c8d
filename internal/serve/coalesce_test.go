package serve

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// flushRecorder is a response writer that keeps what each flush sent:
// one write to the client each.
type flushRecorder struct {
	h       http.Header
	pending bytes.Buffer
	flushes []string
}

func (f *flushRecorder) Header() http.Header         { return f.h }
func (f *flushRecorder) WriteHeader(int)             {}
func (f *flushRecorder) Write(p []byte) (int, error) { return f.pending.Write(p) }
func (f *flushRecorder) FlushError() error {
	f.flushes = append(f.flushes, f.pending.String())
	f.pending.Reset()
	return nil
}

// TestStreamChunksLeaveTogether: the chunks of one engine event leave in
// one write (a chat answer's role chunk with its first token), and so does
// the last token's chunk with the [DONE] event; every other chunk is a
// write of its own, as its step ends.
func TestStreamChunksLeaveTogether(t *testing.T) {
	s, err := New(testConfig(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Engine().Run(ctx) }()
	defer func() { cancel(); <-done }()
	for _, c := range []struct {
		name, path, body string
		first            []string // in the first write with a token
	}{
		{"chat", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"ignore_eos":true,"stream":true}`,
			[]string{`"role":"assistant"`, `"delta":{"content":"`}},
		{"completions", "/v1/completions", `{"model":"sim-model","prompt":"one two","max_tokens":3,"ignore_eos":true,"stream":true}`,
			[]string{`"text":"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &flushRecorder{h: http.Header{}}
			s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body)))
			var writes []string
			for _, f := range w.flushes {
				if f != "" { // the headers' flush
					writes = append(writes, f)
				}
			}
			if len(writes) == 0 || w.pending.Len() != 0 {
				t.Fatalf("%d writes with events, %d bytes never flushed", len(writes), w.pending.Len())
			}
			for _, want := range c.first {
				if !strings.Contains(writes[0], want) {
					t.Errorf("first write %q lacks %s", writes[0], want)
				}
			}
			last := writes[len(writes)-1]
			if !strings.Contains(last, `"finish_reason":"length"`) || !strings.HasSuffix(last, "data: [DONE]\n\n") {
				t.Errorf("last write %q: want the last token's chunk and [DONE]", last)
			}
			// A reader a step behind merges steps into one chunk
			// (engine.Stream.Recv): 1 to 3 token chunks in all, each
			// between the first and the last write its own.
			for i := 1; i < len(writes)-1; i++ {
				if n := strings.Count(writes[i], "data: "); n != 1 {
					t.Errorf("write %d %q: %d events, want 1", i, writes[i], n)
				}
			}
		})
	}
}
