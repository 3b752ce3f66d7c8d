package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/workload"
)

// Hand-computed: a 2 ms ticker with a 5 ms threshold woken 0.5 ms, 1 ms
// and 86 ms late (no GC cycle in the last) and 7 ms late with one cycle.
func TestLatenessCountsStalls(t *testing.T) {
	l := &lateness{period: 2 * time.Millisecond, threshold: 5 * time.Millisecond}
	l.observe(2e6, 2.5e6, 0)
	l.observe(4e6, 5e6, 0)
	l.observe(6e6, 92e6, 0)
	l.observe(94e6, 101e6, 1)
	tk := l.result()
	want := Timekeeping{Ticks: 4, TickLateP50MS: tk.TickLateP50MS, TickLateP99MS: tk.TickLateP99MS, TickLateMaxMS: 86,
		StallCount: 2, StallTotalMS: 93, TickPeriodMS: 2, StallThreshold: 5,
		Stalls: []Stall{{FromNS: 6e6, ToNS: 92e6, LateMS: 86}, {FromNS: 94e6, ToNS: 101e6, LateMS: 7, GCCycles: 1}}}
	if diff := cmp.Diff(want, tk); diff != "" {
		t.Errorf("timekeeping (-want +got):\n%s", diff)
	}
	// The histogram's P50 is the second-least lateness (1 ms) within its
	// bucket's width; the P99 the greatest.
	if tk.TickLateP50MS < 0.9 || tk.TickLateP50MS > 1.1 || tk.TickLateP99MS < 80 || tk.TickLateP99MS > 90 {
		t.Errorf("tick lateness P50 %.3f ms, P99 %.3f ms: want about 1 and 86", tk.TickLateP50MS, tk.TickLateP99MS)
	}
	w := tk.warnings()
	if len(w) != 2 || !strings.Contains(w[0], "from 0.006 s to 0.092 s") || !strings.Contains(w[0], "86.0 ms late") ||
		!strings.Contains(w[0], "no GC cycle") || !strings.Contains(w[1], "1 more interval(s)") {
		t.Errorf("warnings %q", w)
	}
}

// Only the worst maxStallsKept intervals are listed; all are counted.
func TestLatenessKeepsTheWorst(t *testing.T) {
	l := &lateness{period: time.Millisecond, threshold: time.Millisecond}
	for i := range 50 {
		due := int64(i) * 100e6
		l.observe(due, due+int64(i+2)*1e6, 0)
	}
	tk := l.result()
	if tk.StallCount != 50 || len(tk.Stalls) != maxStallsKept || tk.Stalls[0].LateMS != 32 || tk.Stalls[maxStallsKept-1].LateMS != 51 {
		t.Errorf("count %d, kept %d, first %+v last %+v", tk.StallCount, len(tk.Stalls), tk.Stalls[0], tk.Stalls[len(tk.Stalls)-1])
	}
	if w := tk.warnings(); len(w) != maxStallWarnings+1 || !strings.Contains(w[0], "51.0 ms late") || !strings.Contains(w[maxStallWarnings], "49 more") {
		t.Errorf("warnings %q", w)
	}
}

// jumpClock is the real clock plus a jump the test sets: to the watch, a
// jump is a stall of the process.
type jumpClock struct {
	Clock
	jump atomic.Int64
}

func (c *jumpClock) Now() time.Duration { return c.Clock.Now() + time.Duration(c.jump.Load()) }

// The running watch does not tick with no request in flight, and sees a
// stall while one is: the clock jumps 60 ms while it sleeps.
func TestLatenessSeesAStall(t *testing.T) {
	c := &jumpClock{Clock: NewRealClock()}
	l := newLateness(c)
	stop := l.start(context.Background())
	// Nothing in flight: no tick, however long the wait (30 ms: six periods).
	for t0 := c.Now(); c.Now()-t0 < 30*time.Millisecond; {
		time.Sleep(time.Millisecond)
	}
	if n := l.result().Ticks; n != 0 {
		t.Errorf("%d ticks with no request in flight, want none", n)
	}
	l.begin()
	defer l.end()
	for l.result().Ticks < 3 {
		time.Sleep(time.Millisecond)
	}
	c.jump.Store(int64(60 * time.Millisecond))
	// Wait for the stall the jump makes (the machine may add its own).
	deadline := time.Now().Add(10 * time.Second)
	worst := func(tk Timekeeping) float64 {
		w := 0.0
		for _, s := range tk.Stalls {
			w = max(w, s.LateMS)
		}
		return w
	}
	for worst(l.result()) < 60 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	if tk := l.result(); worst(tk) < 60 || tk.TickLateMaxMS < 60 {
		t.Errorf("the 60 ms jump was seen as %.1f ms late at worst: %+v", worst(tk), tk)
	}
}

// summary.json's started is the records' zero: every request reached the
// server after started + sent_ns and before started + first_byte_ns (one
// wall clock; the calibration before the run no longer sits between).
func TestStartedIsTheRecordsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the client's calibration")
	}
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now().Round(0)
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		arrived[r.Header.Get("X-Request-Id")] = at
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}`+"\n\n"+
			`data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"length"}]}`+"\n\n"+
			`data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	dir := filepath.Join(t.TempDir(), "run")
	cfg := Config{
		Target:   Target{BaseURL: srv.URL, Endpoint: EndpointChat, Model: "m", Stream: true, Timeout: time.Minute},
		Workload: &workload.Synthetic{Chat: true, Input: workload.Fixed(8), Output: workload.Fixed(2), Turns: 1, Seed: 1},
		Load:     workload.Load{Concurrency: 2, Requests: 10},
		OutDir:   dir, ScrapeInterval: -1,
	}
	if _, err := Run(context.Background(), cfg, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Started time.Time `json:"started"`
		Client  struct {
			Timekeeping Timekeeping `json:"timekeeping"`
		} `json:"client"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Client.Timekeeping.TickPeriodMS != 5 {
		t.Errorf("no timekeeping in summary.json: %s", b)
	}
	recs := readRecords(t, filepath.Join(dir, "requests.jsonl"))
	if len(recs) != 10 {
		t.Fatalf("%d records", len(recs))
	}
	const slack = time.Millisecond // wall clock against the monotonic one
	for _, r := range recs {
		mu.Lock()
		at, ok := arrived[r.ID]
		mu.Unlock()
		sent, first := sum.Started.Add(time.Duration(r.SentNS)), sum.Started.Add(time.Duration(r.FirstByteNS))
		if !ok || at.Before(sent.Add(-slack)) || at.After(first.Add(slack)) {
			t.Errorf("%s: arrived at the server %v after started, outside [sent %v, first byte %v]", r.ID,
				at.Sub(sum.Started), time.Duration(r.SentNS), time.Duration(r.FirstByteNS))
		}
	}
}

// BenchmarkLatenessTick is the watch's own work per wake-up (reading the
// GC counter and noting the lateness), beside the runtime's timer wake-up
// it rides on: 200 a second at TickPeriod 5 ms. It allocates nothing.
func BenchmarkLatenessTick(b *testing.B) {
	l := newLateness(NewRealClock())
	b.ReportAllocs()
	gc0 := l.gc()
	for i := 0; b.Loop(); i++ {
		due := int64(i) * int64(TickPeriod)
		gc1 := l.gc()
		l.observe(due, due+int64(i%1000)*1000, gc1-gc0)
		gc0 = gc1
	}
}
