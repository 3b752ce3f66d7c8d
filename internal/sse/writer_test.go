package sse

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriterFramesAndFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(rec)
	if err := w.Data([]byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if !rec.Flushed {
		t.Error("event was not flushed")
	}
	_ = w.Comment("keep-alive")
	_ = w.Done()
	want := "data: {\"a\":1}\n\n: keep-alive\n\ndata: [DONE]\n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
}

type wrapped struct{ http.ResponseWriter }

func (w wrapped) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func TestWriterFlushesThroughWrapper(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(wrapped{rec})
	_ = w.Data([]byte("x"))
	if !rec.Flushed {
		t.Error("event was not flushed through an Unwrap wrapper")
	}
}

// countingRW counts the writes and flushes that reach the response.
type countingRW struct {
	http.ResponseWriter
	body    strings.Builder
	writes  []string
	flushes int
	failAt  int // the write that fails (1-based); 0: none
}

func (c *countingRW) Write(b []byte) (int, error) {
	c.writes = append(c.writes, string(b))
	if c.failAt == len(c.writes) {
		return 0, errors.New("client gone")
	}
	c.body.Write(b)
	return len(b), nil
}

func (c *countingRW) Flush() { c.flushes++ }

type ready []bool

func (r *ready) Ready() bool {
	v := (*r)[0]
	*r = (*r)[1:]
	return v
}

func TestWriterFinalForm(t *testing.T) {
	for _, tc := range []struct {
		name    string
		done    []byte
		comment []string
		want    string
	}{
		{"own [DONE]", nil, []string{"server-timing ", "total;dur=1.5"}, ": server-timing total;dur=1.5\ndata: [DONE]\n\n"},
		{"upstream's [DONE] kept as read", []byte("data: [DONE]\r\n\r\n"), []string{"server-timing x"}, ": server-timing x\ndata: [DONE]\r\n\r\n"},
		{"no comment", nil, nil, "data: [DONE]\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &countingRW{ResponseWriter: httptest.NewRecorder()}
			w := NewWriter(c)
			more := ready{true, true}
			w.CoalesceWith(&more) // Final flushes anyway
			if err := w.Final(tc.done, tc.comment...); err != nil {
				t.Fatal(err)
			}
			if len(c.writes) != 1 || c.writes[0] != tc.want {
				t.Errorf("writes = %q, want one: %q", c.writes, tc.want)
			}
			if c.flushes != 1 {
				t.Errorf("flushes = %d, want 1", c.flushes)
			}
		})
	}
}

func TestWriterCoalescesOnlyWhatIsWaiting(t *testing.T) {
	c := &countingRW{ResponseWriter: httptest.NewRecorder()}
	w := NewWriter(c)
	more := ready{true, false, false}
	w.CoalesceWith(&more)
	_ = w.Event([]byte("data: 1\n\n")) // the next is waiting: no flush
	if c.flushes != 0 {
		t.Fatalf("flushed with the next event waiting")
	}
	_ = w.Event([]byte("data: 2\n\n")) // nothing waiting: flushed
	if c.flushes != 1 {
		t.Fatalf("flushes = %d after an event with nothing waiting, want 1", c.flushes)
	}
	_ = w.Data([]byte("3"))
	if c.flushes != 2 {
		t.Fatalf("flushes = %d, want 2", c.flushes)
	}
	if got, want := c.body.String(), "data: 1\n\ndata: 2\n\ndata: 3\n\n"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
}

func TestWriterQueueLeavesWithTheNextEvent(t *testing.T) {
	c := &countingRW{ResponseWriter: httptest.NewRecorder()}
	w := NewWriter(c)
	w.Queue([]byte("role"))
	if len(c.writes) != 0 {
		t.Fatalf("Queue wrote %q", c.writes)
	}
	_ = w.Event([]byte("data: tok\n\n"))
	_ = w.Data([]byte("tok2"))
	want := []string{"data: role\n\ndata: tok\n\n", "data: tok2\n\n"}
	if len(c.writes) != 2 || c.writes[0] != want[0] || c.writes[1] != want[1] {
		t.Errorf("writes = %q, want %q", c.writes, want)
	}
	if c.flushes != 2 {
		t.Errorf("flushes = %d, want 2", c.flushes)
	}
}

func TestWriterReportsAGoneClientAndRecovers(t *testing.T) {
	c := &countingRW{ResponseWriter: httptest.NewRecorder(), failAt: 1}
	w := NewWriter(c)
	if err := w.Data([]byte("a")); err == nil {
		t.Fatal("a failed write returned no error")
	}
	if c.flushes != 0 {
		t.Error("flushed after a failed write")
	}
	// The failed event is not sent again with the next one.
	if err := w.Data([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if got := c.body.String(); got != "data: b\n\n" {
		t.Errorf("body = %q, want only the second event", got)
	}
}

// noFlush is a ResponseWriter that cannot flush.
type noFlush struct{ http.ResponseWriter }

func TestWriterOnAResponseThatCannotFlush(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(noFlush{rec})
	if err := w.Data([]byte("a")); err != nil {
		t.Fatalf("a response without Flush failed the write: %v", err)
	}
	if err := w.Done(); err != nil {
		t.Fatal(err)
	}
	if got := rec.Body.String(); got != "data: a\n\ndata: [DONE]\n\n" {
		t.Errorf("body = %q", got)
	}
}

func TestWriterRoundTripsThroughReader(t *testing.T) {
	var b strings.Builder
	w := NewWriter(&b)
	_ = w.Data([]byte(`{"x":1}`))
	_ = w.Comment("ka")
	_ = w.Final(nil, "server-timing ", "t;dur=1")
	rd := NewReader(strings.NewReader(b.String()), nil, 1<<10)
	rd.KeepComment = "server-timing "
	var data []string
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		if ev.HasData {
			data = append(data, string(ev.Data))
		}
	}
	if len(data) != 2 || data[0] != `{"x":1}` || data[1] != "[DONE]" {
		t.Errorf("read back %q", data)
	}
}

// idle is a source with nothing waiting.
type idle struct{}

func (idle) Ready() bool { return false }

// discardRW is a response that flushes to nowhere: what the benchmarks
// measure is the writer alone.
type discardRW struct{ h http.Header }

func (d *discardRW) Header() http.Header         { return d.h }
func (d *discardRW) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardRW) WriteHeader(int)             {}
func (d *discardRW) Flush()                      {}

// TestWriterAllocatesNothingPerEvent is the steady-state target: no
// allocation per event, framed, relayed or final.
func TestWriterAllocatesNothingPerEvent(t *testing.T) {
	w := NewWriter(&discardRW{h: http.Header{}})
	payload := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}`)
	raw := appendData(nil, payload)
	w.CoalesceWith(idle{})
	allocs := testing.AllocsPerRun(1000, func() {
		_ = w.Data(payload)
		_ = w.Event(raw)
		w.Queue(payload)
		_ = w.Event(raw)
		_ = w.Final(nil, "server-timing ", "total;dur=12.5")
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per round of events, want 0", allocs)
	}
}

func BenchmarkWriterData(b *testing.B) {
	w := NewWriter(&discardRW{h: http.Header{}})
	payload := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(payload) + 8))
	for b.Loop() {
		_ = w.Data(payload)
	}
}

func BenchmarkWriterEvent(b *testing.B) {
	w := NewWriter(&discardRW{h: http.Header{}})
	raw := appendData(nil, []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}`))
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		_ = w.Event(raw)
	}
}

func BenchmarkWriterFinal(b *testing.B) {
	w := NewWriter(&discardRW{h: http.Header{}})
	b.ReportAllocs()
	for b.Loop() {
		_ = w.Final(nil, "server-timing ", "gateway_queue;dur=0.012, upstream_ttft;dur=20.1, total;dur=412.7")
	}
}

// FinalComment writes what Final writes for the same comment: the
// comment line shares the [DONE] event, the caller's or the writer's own.
func TestFinalCommentIsFinal(t *testing.T) {
	for _, done := range [][]byte{nil, []byte("data: [DONE]\r\n\r\n")} {
		a, b := httptest.NewRecorder(), httptest.NewRecorder()
		if err := NewWriter(a).Final(done, "server-timing ", "total;dur=1.000"); err != nil {
			t.Fatal(err)
		}
		if err := NewWriter(b).FinalComment(done, "server-timing ", []byte("total;dur=1.000")); err != nil {
			t.Fatal(err)
		}
		if a.Body.String() != b.Body.String() || !b.Flushed {
			t.Errorf("done %q: FinalComment wrote %q (flushed %v), Final %q", done, b.Body.String(), b.Flushed, a.Body.String())
		}
	}
}

// TestBeginEndDataIsData: an event encoded in place by BeginData and
// EndData leaves as Data's would, after queued events, in one write and
// flush, and allocates nothing once the buffer has grown.
func TestBeginEndDataIsData(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued []string
		want   []string
	}{
		{"alone", nil, []string{"data: {\"a\":1}\n\n"}},
		{"after a queued event", []string{"role"}, []string{"data: role\n\ndata: {\"a\":1}\n\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &countingRW{ResponseWriter: httptest.NewRecorder()}
			w := NewWriter(c)
			for _, q := range tc.queued {
				w.Queue([]byte(q))
			}
			b := append(w.BeginData(), `{"a":1}`...)
			if err := w.EndData(b); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, c.writes); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if c.flushes != 1 {
				t.Errorf("flushes = %d, want 1", c.flushes)
			}
		})
	}
	w := NewWriter(&discardRW{h: http.Header{}})
	payload := []byte(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" tok","finish_reason":null}]}`)
	if allocs := testing.AllocsPerRun(1000, func() { _ = w.EndData(append(w.BeginData(), payload...)) }); allocs != 0 {
		t.Errorf("%.1f allocations per event, want 0", allocs)
	}
}
