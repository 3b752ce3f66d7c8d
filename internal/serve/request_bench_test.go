package serve

import (
	"context"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/racedetect"
)

// BenchmarkStreamRequest is one streaming completion of 4 tokens through
// serve's handler in process (no connection and no net/http server: a
// writer that flushes and keeps nothing), on an engine of 1 ms steps:
// the allocations per request of serve and its engine, from the body's
// decoding to the answer's end (BenchmarkStreamsChurn's allocs/request
// add net/http's). Time per request is mostly the engine's 5 steps.
func BenchmarkStreamRequest(b *testing.B) {
	s, err := New(testConfig(time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Engine().Run(ctx) }()
	defer func() { cancel(); <-done }()
	body := `{"model":"sim-model","prompt":"one two three four five six seven eight","max_tokens":4,"ignore_eos":true,"stream":true}`
	reqs := make([]*http.Request, b.N)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
	}
	w := &discardWriter{h: http.Header{}}
	h := s.Handler()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		clear(w.h)
		h.ServeHTTP(w, reqs[i])
	}
	b.StopTimer()
	if w.n == 0 {
		b.Fatal("no answer written")
	}
}

// TestStreamStateReused: an answer's streaming state (chunks: its SSE
// writer, chunk encoder and text buffer) is the memory of one that ended:
// once an answer released its state, setting up the next and releasing it
// allocates nothing. sync.Pool drops entries at random under -race, so
// the count is not checked there.
func TestStreamStateReused(t *testing.T) {
	s, err := New(testConfig(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, api := range []openai.API{openai.APIChat, openai.APICompletions} {
		x := &exchange{api: api, rid: "abcd-12", received: time.Now(), prompt: make([]int32, 8), p: openai.Params{Stream: true}}
		w := &discardWriter{h: http.Header{}}
		c := s.newChunks(w, nil, x)
		if !c.emit(engine.Event{At: time.Now(), Tokens: 2}, true, 0) {
			t.Fatal("emit failed")
		}
		c.release()
		if racedetect.Enabled {
			continue
		}
		if n := testing.AllocsPerRun(100, func() { s.newChunks(w, nil, x).release() }); n != 0 {
			t.Errorf("%s: setting up and releasing an answer's state allocates %v times, want 0", api, n)
		}
	}
}

// TestIDSeed: idSeed is the 64-bit FNV-1a hash of the id (hash/fnv's),
// so that a request id's text is what it was.
func TestIDSeed(t *testing.T) {
	for _, id := range []string{"", "a", "abcd-12", "0123456789abcdef-99999"} {
		h := fnv.New64a()
		h.Write([]byte(id))
		if got, want := idSeed(id), h.Sum64(); got != want {
			t.Errorf("idSeed(%q) = %x, want %x", id, got, want)
		}
	}
}
