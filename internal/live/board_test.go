package live

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
)

const msNS = int64(time.Millisecond)

// streamed is a successful streamed record sent at sent with its content
// chunks (one token each) at chunks, the last one its end.
func streamed(sent int64, chunks ...int64) *latency.Record {
	return &latency.Record{Stream: true, IntendedNS: sent, SentNS: sent, FirstTokenNS: chunks[0], EndNS: chunks[len(chunks)-1],
		ChunkNS: chunks, OutputTokens: len(chunks), InputTokens: 10}
}

func failed(at int64, kind latency.ErrorKind) *latency.Record {
	return &latency.Record{IntendedNS: at - 10*msNS, SentNS: at - 10*msNS, EndNS: at, ErrorKind: kind, Error: "boom"}
}

func near(got, want float64) bool { return math.Abs(got-want) <= want*0.0005+1e-9 }

func metric(t *testing.T, f Figures, name string) Metric {
	t.Helper()
	for _, m := range f.Metrics {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no %s in %+v", name, f.Metrics)
	return Metric{}
}

// The window holds the records that ended in its seconds; its figures are
// computed by hand below.
func TestWindowHandComputed(t *testing.T) {
	b := New(Config{Window: 2 * time.Second})
	s := int64(time.Second)
	// Ends in second 0: outside the window at 3.6 s.
	b.Done(streamed(0, 200*msNS, 500*msNS))
	// B: TTFT 100 ms, E2E 500 ms, 5 tokens 100 ms apart: TPOT (500−100)/4 = 100 ms.
	b.Done(streamed(2*s, 2*s+100*msNS, 2*s+200*msNS, 2*s+300*msNS, 2*s+400*msNS, 2*s+500*msNS))
	// C: TTFT 300 ms, E2E 500 ms, 3 tokens: TPOT (500−300)/2 = 100 ms.
	b.Done(streamed(3*s, 3*s+300*msNS, 3*s+400*msNS, 3*s+500*msNS))
	b.Done(failed(3*s+200*msNS, latency.FailHTTP5xx))
	b.step(3*s+600*msNS, false)
	w := b.Latest().Window
	if w.Requests != 3 || w.Succeeded != 2 || w.Failed != 1 {
		t.Fatalf("window counts %d/%d/%d, want 3 requests, 2 succeeded, 1 failed", w.Requests, w.Succeeded, w.Failed)
	}
	if len(w.Errors) != 1 || w.Errors[0] != (KindNum{"http_5xx", 1}) {
		t.Errorf("window errors %+v", w.Errors)
	}
	for _, c := range []struct {
		name          string
		n             int64
		p50, p99, avg float64
	}{
		{"ttft", 2, 100, 300, 200}, // nearest rank of {100, 300}: p50 the 1st, p99 the 2nd
		{"tpot", 2, 100, 100, 100},
		{"itl", 6, 100, 100, 100}, // B's 4 gaps and C's 2, all 100 ms
		{"e2e", 2, 500, 500, 500},
	} {
		m := metric(t, w, c.name)
		if m.Count != c.n || !near(m.P50, c.p50) || !near(m.P99, c.p99) || !near(m.Mean, c.avg) {
			t.Errorf("%s: %+v, want n %d p50 %v p99 %v mean %v", c.name, m, c.n, c.p50, c.p99, c.avg)
		}
	}
	// The split of B and C along their path sums to their mean E2E from
	// the intended send, 500 ms, and the shares to 1.
	var mean, share float64
	for _, g := range b.Latest().Stages {
		mean += g.MeanMS
		share += g.Share
	}
	if !near(mean, 500) || !near(share, 1) {
		t.Errorf("stages %+v: means sum to %v (want 500), shares to %v (want 1)", b.Latest().Stages, mean, share)
	}
	if f := b.Latest().Failures; f["http_5xx"] != 1 || len(f) != 1 {
		t.Errorf("failures since start %v", f)
	}
}

// The window counts the gaps the report's collector computed (shared)
// exactly as it counts its own: the same ITL figures over records with
// and without chunk counts, warm-up and failed ones among them.
func TestWindowSharesCollectorGaps(t *testing.T) {
	recs := spreadRecords()[:200]
	counted := streamed(0, 100*msNS, 130*msNS, 190*msNS)
	counted.ChunkTokens = []int32{1, 2, 3}
	warm := streamed(0, 100*msNS, 150*msNS)
	warm.Warmup = true
	recs = append(recs, counted, warm, failed(500*msNS, latency.FailHTTP5xx))
	shared, own := New(Config{}), New(Config{})
	own.agg.win.gaps = nil
	hits, from := 0, shared.agg.win.gaps
	shared.agg.win.gaps = func(r *latency.Record) ([]int64, bool) {
		g, ok := from(r)
		if ok {
			hits++
		}
		return g, ok
	}
	for _, b := range []*Board{shared, own} {
		for _, r := range recs {
			b.Done(r)
		}
		b.step(int64(time.Second), false)
	}
	a, o := metric(t, shared.Latest().Window, "itl"), metric(t, own.Latest().Window, "itl")
	if a != o || a.Count == 0 {
		t.Errorf("ITL with the collector's gaps %+v, with its own %+v", a, o)
	}
	if hits != 201 { // the 200 spread records and the counted one
		t.Errorf("the collector's gaps were taken for %d records, want 201", hits)
	}
}

// Rates over the window come from the counters at the ticks: 10 sends a
// second for 4 s, 5 successes a second, window 2 s.
func TestWindowRates(t *testing.T) {
	b := New(Config{Window: 2 * time.Second})
	s := int64(time.Second)
	for sec := int64(1); sec <= 4; sec++ {
		for i := range 10 {
			b.Sent()
			if i%2 == 0 {
				at := (sec-1)*s + int64(i)*50*msNS
				b.Done(streamed(at, at+10*msNS, at+20*msNS))
			}
		}
		b.step(sec*s, false)
	}
	got := b.Latest()
	if !near(got.Window.OfferedRPS, 10) || !near(got.Window.AchievedRPS, 5) {
		t.Errorf("offered %v achieved %v, want 10 and 5 per second", got.Window.OfferedRPS, got.Window.AchievedRPS)
	}
	if got.Sent != 40 || got.Done != 20 || got.InFlight != 20 {
		t.Errorf("sent %d done %d in flight %d", got.Sent, got.Done, got.InFlight)
	}
	if len(got.History) != 4 || got.History[3].T != 4 {
		t.Errorf("history %+v", got.History)
	}
}

// records is a run's worth of varied records, in the order they finished.
func records(n int) []*latency.Record {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]*latency.Record, 0, n)
	for i := range n {
		sent := int64(i) * 20 * msNS
		if rng.IntN(25) == 0 {
			out = append(out, failed(sent+30*msNS, []latency.ErrorKind{latency.FailTimeout, latency.FailHTTP5xx}[rng.IntN(2)]))
			continue
		}
		first := sent + int64(5+rng.IntN(200))*msNS
		chunks := []int64{first}
		for range 3 + rng.IntN(30) {
			chunks = append(chunks, chunks[len(chunks)-1]+int64(2+rng.IntN(40))*msNS)
		}
		out = append(out, streamed(sent, chunks...))
	}
	return out
}

// After Finish, the since-start figures are the report's on the same
// records and run.json: every count and percentile, exactly.
func TestFinishIsTheReport(t *testing.T) {
	slos, _ := latency.ParseSLOs("ttft:p99<=150ms,e2e:p95<=1s")
	opts := report.Options{SLOs: slos}
	coll := report.NewCollector(opts)
	b := New(Config{Report: opts})
	recs := records(700)
	for i, r := range recs {
		r.Phase = []string{"rate=40", "rate=60"}[i*2/len(recs)] // a sweep of two points
		coll.Add(r)
		b.Done(r)
		if i%100 == 99 {
			b.step(r.EndNS, false) // provisional on the way
		}
	}
	info := results.RunInfo{Mode: "open", OfferedRate: 50, Duration: 14 * time.Second}
	coll.SetRun(info)
	own := b.Finish(recs[len(recs)-1].EndNS+msNS, info)
	rep := coll.Report()
	if own.Summary.Requests != rep.Summary.Requests || len(own.Metrics) != len(rep.Metrics) {
		t.Errorf("Finish's report: %+v, the collector's: %+v", own.Summary, rep.Summary)
	}
	got := b.Latest()
	if !got.Final {
		t.Fatal("the last snapshot is not final")
	}
	sum := rep.Summary
	s := got.Since
	if s.Requests != int64(sum.Requests) || s.Succeeded != int64(sum.Succeeded) || s.Failed != int64(sum.Failed) ||
		s.OfferedRPS != sum.OfferedRPS || s.AchievedRPS != sum.ThroughputRPS {
		t.Errorf("since start %+v, report summary %+v", s, sum)
	}
	n := 0
	for _, d := range rep.Metrics {
		for _, m := range s.Metrics {
			if m.Name == d.Metric {
				n++
				if m != (Metric{Name: d.Metric, Count: d.Count, Mean: d.Mean, P50: d.P50, P90: d.P90, P99: d.P99, Max: d.Max}) {
					t.Errorf("%s: page %+v, report %+v", d.Metric, m, d)
				}
			}
		}
	}
	if n != 4 {
		t.Errorf("%d of TTFT, TPOT, ITL, E2E compared", n)
	}
	if len(got.Findings) != len(rep.Findings) {
		t.Errorf("%d findings, the report has %d", len(got.Findings), len(rep.Findings))
	}
	if len(got.Phases) != 2 || got.Phases[1].Name != rep.Phases[1].Name || got.Phases[1].ThroughputRPS != rep.Phases[1].ThroughputRPS {
		t.Errorf("phases %+v, the report's %+v", got.Phases, rep.Phases)
	}
	if got.SLOs[0].Text != "ttft:p99<=150ms" || got.SLOs[1].MaxMS != 1000 {
		t.Errorf("SLO lines %+v", got.SLOs)
	}
}

// The running TTFT of the plain line: every record's, read from a
// stats.Sketch: rank 50 is 50 ms, in the bucket [49,807,360, +262,144) ns,
// read as its midpoint 49.938432 ms; rank 99 is 99 ms, in [98,566,144,
// +524,288), read as 98.828288 ms.
func TestPlainLine(t *testing.T) {
	b := New(Config{})
	for i := 1; i <= 100; i++ {
		b.Sent()
		b.Done(streamed(0, int64(i)*msNS))
	}
	b.Sent()
	b.Done(failed(5*msNS, latency.FailTimeout))
	b.step(int64(3*time.Second), false)
	s := b.Latest()
	if s.ttftP50 != 49.938432 || s.ttftP99 != 98.828288 {
		t.Errorf("running TTFT p50 %v p99 %v, want 49.938432 and 98.828288 ms", s.ttftP50, s.ttftP99)
	}
	line := PlainLine(s, "bench:")
	for _, want := range []string{"bench: sent 101  done 101  errors 1", "TTFT p50 ", " p99 ", "[3s]"} {
		if !strings.Contains(line, want) {
			t.Errorf("plain line %q lacks %q", line, want)
		}
	}
	table := Table(s, "bench:")
	for _, want := range []string{"sent 101  done 101  in flight 0  failed 1", "last 10 s", "TTFT", "TPOT", "ITL", "E2E", "failed timeout 1"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if n := strings.Count(table, "\n"); n > 14 {
		t.Errorf("table of %d lines, want a compact one", n)
	}
}

// The page, the snapshot and the events: the page carries the current
// snapshot and refers to nothing outside; /events sends the whole
// snapshot, then each new one, then the final one and ends.
func TestHandler(t *testing.T) {
	b := New(Config{})
	b.Done(streamed(0, 10*msNS, 20*msNS))
	b.step(int64(time.Second), false)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()

	page := get(t, srv.URL+"/")
	if !strings.Contains(page, `const S = {"seq":2`) {
		_, after, _ := strings.Cut(page, "const S")
		t.Errorf("the page does not carry the current snapshot: %.300s", after)
	}
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?https?:|<link|@import|<script\s+src`).FindString(page); m != "" {
		t.Errorf("the page refers to an outside resource: %q", m)
	}
	var snap Snapshot
	if err := json.Unmarshal([]byte(get(t, srv.URL+"/snapshot.json")), &snap); err != nil || snap.Seq != 2 || len(snap.History) != 1 {
		t.Fatalf("snapshot.json: %v %+v", err, snap)
	}

	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	rd := bufio.NewReader(resp.Body)
	if s := event(t, rd); s.Seq != 2 {
		t.Errorf("first event seq %d, want 2", s.Seq)
	}
	b.step(int64(2*time.Second), false)
	if s := event(t, rd); s.Seq != 3 || len(s.History) != 1 || s.History[0].T != 2 {
		t.Errorf("second event seq %d history %+v, want 3 with only its newest point", s.Seq, s.History)
	}
	b.Finish(int64(3*time.Second), results.RunInfo{})
	if s := event(t, rd); !s.Final {
		t.Errorf("third event is not final: %+v", s)
	}
	if rest, err := io.ReadAll(rd); err != nil || strings.TrimSpace(string(rest)) != "" {
		t.Errorf("the stream goes on after the final event: %q %v", rest, err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	return string(body)
}

// event reads one SSE event's snapshot.
func event(t *testing.T, rd *bufio.Reader) Snapshot {
	t.Helper()
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the events: %v", err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var s Snapshot
			if err := json.Unmarshal([]byte(data), &s); err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
}

// A client that never reads its stream holds up nothing: the board goes
// on publishing (each step returns), and Serve stops within its grace.
func TestSlowClientBlocksNothing(t *testing.T) {
	long := []string{strings.Repeat("w", 2000)}
	b := New(Config{Warnings: func() []string { return long }}) // events of ≈ 4 KB
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.Serve(ctx, ln) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	recs := records(50)
	for i := range 2000 { // 8 MB of events: more than the socket buffers hold
		if i < len(recs) {
			b.Sent()
			b.Done(recs[i])
		}
		b.step(int64(i)*int64(100*time.Millisecond), false)
	}
	b.Finish(2001*int64(100*time.Millisecond), results.RunInfo{})
	cancel()
	if err := <-served; err != nil {
		t.Logf("serve: %v (the unread stream was cut at the grace)", err)
	}
}

// With the process's CPU time known, the since-start numbers wait until
// the process has spent 300 × what the next computation is expected to
// cost: the last one's 1 ms for 1 record, × 2 records: 600 ms.
func TestSinceStartWaitsForCPU(t *testing.T) {
	var cpu time.Duration
	b := New(Config{CPU: func() time.Duration { cpu += time.Millisecond; return cpu }}) // a computation "costs" 1 ms
	defer b.watch()()
	s := int64(time.Second)
	b.Done(streamed(0, 10*msNS, 20*msNS))
	b.step(s, false)
	if got := b.Latest().SinceAtS; got != 1 {
		t.Fatalf("since start computed at %v s, want 1", got)
	}
	b.Done(streamed(s, s+10*msNS, s+20*msNS))
	b.step(10*s, false) // the wall-time floor allows it, the CPU budget not yet
	if got := b.Latest().SinceAtS; got != 1 {
		t.Errorf("since start recomputed at %v s after 2 ms of CPU, want it kept from 1 s", got)
	}
	cpu += time.Second
	b.step(20*s, false)
	if got := b.Latest().SinceAtS; got != 20 || b.Latest().Since.Requests != 2 {
		t.Errorf("since start at %v s with %d requests, want 20 s and 2", got, b.Latest().Since.Requests)
	}
}

// The since-start numbers and findings are recomputed mid-run only while
// someone watches (an /events stream, a terminal view); Finish computes
// them whoever watches.
func TestSinceStartOnlyWhileWatched(t *testing.T) {
	b := New(Config{})
	s := int64(time.Second)
	b.Done(streamed(0, 10*msNS, 20*msNS))
	b.step(s, false)
	b.step(5*s, false)
	if got := b.Latest(); got.SinceAtS != 0 || got.Since.Requests != 0 || got.Window.Requests != 1 {
		t.Fatalf("unwatched: since start at %v s with %d requests (window %d), want none computed", got.SinceAtS, got.Since.Requests, got.Window.Requests)
	}
	stop := b.watch()
	b.step(6*s, false)
	if got := b.Latest(); got.SinceAtS != 6 || got.Since.Requests != 1 {
		t.Errorf("watched: since start at %v s with %d requests, want 6 s and 1", got.SinceAtS, got.Since.Requests)
	}
	stop()
	stop() // once only
	b.Done(streamed(6*s, 6*s+10*msNS, 6*s+20*msNS))
	b.step(20*s, false)
	if got := b.Latest(); got.SinceAtS != 6 || b.watchers.Load() != 0 {
		t.Errorf("no longer watched: since start at %v s, watchers %d, want kept from 6 s and 0", got.SinceAtS, b.watchers.Load())
	}
	rep := b.Finish(21*s, results.RunInfo{})
	if got := b.Latest(); !got.Final || got.Since.Requests != 2 || int64(rep.Summary.Requests) != 2 {
		t.Errorf("final: since start %d requests (final %v), report %d, want 2", got.Since.Requests, got.Final, rep.Summary.Requests)
	}
}

// TestOfferDropsWhenFull: the gateway's hand-off takes Queue records
// between two ticks, drops and counts the rest without waiting, and takes
// again once a tick drained it; the pools' and upstreams' counts are by
// hand: pool p 3 taken (2 answered, 1 refused 429), upstream u 2.
func TestOfferDropsWhenFull(t *testing.T) {
	b := New(Config{Gateway: true, Queue: 2, Pools: func() []PoolState {
		return []PoolState{{Pool: "p", Queued: 4, InFlight: 3, Limit: 8}}
	}})
	ok := &latency.Record{SentNS: 1e8, FirstTokenNS: 2e8, EndNS: 3e8, OutputTokens: 1}
	refused := &latency.Record{SentNS: 1e8, ErrorKind: "queue_full"}
	if !b.Offer(ok, Labels{Pool: "p", Upstream: "u", Status: 200, Admitted: true}) ||
		!b.Offer(refused, Labels{Pool: "p", Status: 429}) {
		t.Fatal("the first two offers were dropped")
	}
	if b.Offer(ok, Labels{Pool: "p", Upstream: "u", Status: 200}) || !b.Full() {
		t.Fatal("a third offer was taken by a hand-off of 2")
	}
	b.Step(int64(time.Second))
	if !b.Offer(ok, Labels{Pool: "p", Upstream: "u", Status: 200, Admitted: true}) {
		t.Fatal("dropped after a tick drained the hand-off")
	}
	b.Step(int64(2 * time.Second))
	s := b.Latest()
	if s.Dropped != 1 || s.Done != 3 || s.InFlight != 3 || s.View != "gateway" {
		t.Fatalf("dropped %d done %d in flight %d view %q, want 1, 3, 3, gateway", s.Dropped, s.Done, s.InFlight, s.View)
	}
	want := []Group{
		{Kind: "pool", Name: "p", Total: 3, Admitted: 2, Succeeded: 2, Refused429: 1, Queued: 4, InFlight: 3, Limit: 8},
		{Kind: "upstream", Name: "u", Total: 2, Admitted: 2, Succeeded: 2},
	}
	for i, g := range s.Groups {
		g.Requests, g.Failed, g.RPS, g.TTFTP50, g.TTFTP99, g.E2EP50, g.E2EP99 = 0, 0, 0, 0, 0, 0, 0
		if i >= len(want) || g != want[i] {
			t.Errorf("group %d: %+v, want %+v", i, g, want)
		}
	}
	if len(s.Groups) != 2 || s.Groups[0].Requests != 3 || s.Groups[0].Failed != 1 || s.Groups[0].TTFTP50 != 100 {
		t.Errorf("pool p's window: %+v, want 3 requests, 1 failed, TTFT p50 100 ms", s.Groups[0])
	}
}
