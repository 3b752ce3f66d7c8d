package live

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/browsertest"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
)

// eventReader reads a stream's events after its response head.
type eventReader struct{ r *bufio.Reader }

func newEventReader(t *testing.T, c net.Conn) *eventReader {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("events: status %d", resp.StatusCode)
	}
	return &eventReader{r: bufio.NewReaderSize(resp.Body, 64<<10)}
}

// next returns the next event's snapshot; false at the stream's end.
func (e *eventReader) next(t *testing.T) (*Snapshot, bool) {
	t.Helper()
	var data string
	for {
		line, err := e.r.ReadString('\n')
		if err != nil {
			return nil, false
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" && data != "" {
			var s Snapshot
			if err := json.Unmarshal([]byte(data), &s); err != nil {
				t.Fatalf("event: %v", err)
			}
			return &s, true
		}
		data += strings.TrimPrefix(line, "data: ")
	}
}

// drain reads the stream to its end as the page does: the last snapshot,
// and the history points kept by their time (a point newer than the last
// one kept is added).
func (e *eventReader) drain(t *testing.T, kept []Point) (*Snapshot, []Point, int) {
	t.Helper()
	var last *Snapshot
	n := 0
	for {
		s, ok := e.next(t)
		if !ok {
			return last, kept, n
		}
		n++
		for _, p := range s.History {
			if len(kept) == 0 || p.T > kept[len(kept)-1].T {
				kept = append(kept, p)
			}
		}
		last = s
	}
}

func heapNow() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestStalledStreamsBlockNothing: during a run of 500 ticks whose events
// are ≈ 20 KB each (10 MB in all, more than the sockets' buffers), one
// browser never reads and one reads its first event and then stops. The
// record path and the ticks never wait for them (the run would hang):
// the streams skip the snapshots they could not send (coalesced, and
// counted) rather than queue them, so the heap grows by less than 1 MiB
// over the same run unwatched while 11 MB were published; the run's report is the one computed without the
// board; and once each reader reads again it gets the final snapshot and
// every history point of the run (the charts miss nothing).
func TestStalledStreamsBlockNothing(t *testing.T) {
	long := strings.Repeat("w", 4000)
	b := New(Config{Warnings: func() []string { return []string{long, long, long, long, long} }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Logf("serve: %v", err)
		}
	}()
	stalled := browsertest.OpenStalledStream(t, ln.Addr().String(), "/events")
	slow := newEventReader(t, browsertest.OpenStalledStream(t, ln.Addr().String(), "/events"))
	first, ok := slow.next(t)
	if !ok {
		t.Fatal("no first event")
	}
	for b.Streams().Open != 2 {
		runtime.Gosched()
	}
	const ticks = 500
	recs := records(2 * ticks)
	alone, collAlone := New(Config{Warnings: b.cfg.Warnings}), report.NewCollector(report.Options{})
	heap0 := heapNow()
	runTicks(t, alone, recs, ticks, collAlone)
	grownAlone := int64(heapNow()) - int64(heap0)
	coll := report.NewCollector(report.Options{})
	heap0 = heapNow()
	runTicks(t, b, recs, ticks, coll)
	grown := int64(heapNow()) - int64(heap0) - grownAlone
	runtime.KeepAlive(alone)
	runtime.KeepAlive(collAlone)
	published := int64(ticks) * int64(len(b.cur.Load().delta))
	st := b.Streams()
	t.Logf("published %d snapshots (%.1f MB); streams sent %d, coalesced %d; heap +%.2f MB over the same run unwatched",
		ticks, float64(published)/1e6, st.Events, st.Coalesced, float64(grown)/1e6)
	if st.Coalesced == 0 || st.Events >= 2*ticks {
		t.Errorf("streams sent %d events and skipped %d: the unread streams should have skipped snapshots", st.Events, st.Coalesced)
	}
	if grown > 1<<20 {
		t.Errorf("heap grew %d B while %d B of snapshots were published: the streams queue what they cannot send", grown, published)
	}
	info := results.RunInfo{Mode: "closed", Concurrency: 4}
	coll.SetRun(info)
	own, want := b.Finish(int64(ticks+1)*int64(time.Second), info), coll.Report()
	if own.Summary.Requests != want.Summary.Requests || own.Summary.Succeeded != want.Summary.Succeeded ||
		own.Summary.ThroughputRPS != want.Summary.ThroughputRPS || !sameDists(own.Metrics, want.Metrics) {
		t.Errorf("the run's report with stalled streams %+v, without the board %+v", own.Summary, want.Summary)
	}
	final := b.Latest()
	for name, r := range map[string]*eventReader{"slow": slow, "stalled": newEventReader(t, stalled)} {
		var kept []Point
		if name == "slow" {
			kept = first.History
		}
		last, kept, n := r.drain(t, kept)
		if last == nil || !last.Final || last.Seq != final.Seq {
			t.Errorf("%s reader: its last event %+v, want the final snapshot %d", name, last, final.Seq)
			continue
		}
		if len(kept) != len(final.History) || kept[len(kept)-1].T != final.History[len(final.History)-1].T {
			t.Errorf("%s reader: %d history points after %d events, the run has %d", name, len(kept), n, len(final.History))
		}
	}
}

// runTicks is a run of n ticks of two records each, handed to b (and to
// coll when given) as bench does, with a snapshot a tick; it fails the
// test if the run does not end (it waited on something).
func runTicks(t *testing.T, b *Board, recs []*latency.Record, n int, coll *report.Collector) {
	t.Helper()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		for i := range n {
			for _, r := range recs[2*i : 2*i+2] {
				b.Sent()
				b.Done(r)
				if coll != nil {
					coll.Add(r)
				}
			}
			b.step(int64(i+1)*int64(time.Second), false)
		}
	}()
	select {
	case <-ran:
	case <-time.After(2 * time.Minute): // a hang guard, not a timing bound
		t.Fatal("the run blocked behind the streams that do not read")
	}
}

// sameDists reports whether two reports' distributions are equal.
func sameDists(a, b []report.Dist) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Metric != b[i].Metric || a[i].Count != b[i].Count || a[i].P50 != b[i].P50 || a[i].P99 != b[i].P99 || a[i].Mean != b[i].Mean {
			return false
		}
	}
	return true
}

// The history keeps the last 600 points; a published snapshot's history
// stays as it was published while later ticks go on (a stream may encode
// it late).
func TestHistoryBoundedAndKept(t *testing.T) {
	b := New(Config{})
	s := int64(time.Second)
	var old *Snapshot
	for i := int64(1); i <= 1500; i++ {
		b.step(i*s, false)
		if i == 700 {
			old = b.Latest()
		}
	}
	h := b.Latest().History
	if len(h) != maxHistory || h[0].T != 901 || h[len(h)-1].T != 1500 {
		t.Errorf("history of %d points from %v to %v s, want 600 from 901 to 1500", len(h), h[0].T, h[len(h)-1].T)
	}
	if len(old.History) != maxHistory || old.History[0].T != 101 || old.History[maxHistory-1].T != 700 {
		t.Errorf("the snapshot of 700 s: %d points from %v to %v s, want 600 from 101 to 700", len(old.History), old.History[0].T, old.History[len(old.History)-1].T)
	}
}
