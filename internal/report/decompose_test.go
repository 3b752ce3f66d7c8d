package report

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// One request by hand: intended 0, sent 2 ms (client queue 2), connect
// 3 ms, written at 6 ms (send 1), first token at 56 ms with the server
// reporting 10 ms queue and 30 ms prefill (network 56 − 6 − 40 = 10), then
// 4 tokens 10 ms apart (decode 30 ms as the server says), end at 88 ms
// (stream tail 88 − 56 − 30 = 2). E2E from intended 88 ms.
func TestStagesByHand(t *testing.T) {
	r := &latency.Record{Schema: 1, ID: "h", Stream: true, IntendedNS: 0, SentNS: 2e6, ConnectNS: 3e6,
		WroteNS: 6e6, FirstTokenNS: 56e6, EndNS: 88e6, ChunkNS: []int64{56e6, 66e6, 76e6, 86e6},
		OutputTokens: 4, InputTokens: 100,
		Server: &latency.ServerSplit{QueueNS: 10e6, PrefillNS: 30e6, DecodeNS: 30e6}}
	c := NewCollector(Options{})
	c.Add(r)
	got := c.rows[0].stages()
	want := [nStages]int64{stCQ: 2e6, stConnect: 3e6, stSend: 1e6, stNetwork: 10e6, stSQ: 10e6,
		stPrefill: 30e6, stDecode: 30e6, stTail: 2e6}
	if got != want {
		t.Errorf("stages\n got %v\nwant %v", got, want)
	}
	var sum int64
	for _, v := range got {
		sum += v
	}
	if sum != 88e6 {
		t.Errorf("stages sum to %d, want E2E from intended 88e6", sum)
	}
	// Without a server split: the wait before the first token is unattributed
	// and the time after it is decode as the client saw it.
	r.Server = nil
	c = NewCollector(Options{})
	c.Add(r)
	got = c.rows[0].stages()
	want = [nStages]int64{stCQ: 2e6, stConnect: 3e6, stSend: 1e6, stUnattr: 50e6, stDecode: 32e6}
	if got != want {
		t.Errorf("no split: stages\n got %v\nwant %v", got, want)
	}
}

// Ten requests whose E2E (from intended) is 100, 200, …, 1000 ms: the
// median band holds ranks 4–6 (400, 500, 600 ms); above the P95 and P99
// is the slowest one (rank ⌈9.5⌉ = 10 is the P95 itself, so the group is
// at least the last request).
func TestDecompositionGroupsByHand(t *testing.T) {
	// Request i (1..10): queue i×50 ms, prefill 50 ms, one decode gap of
	// i×50 − 50 ms, nothing else: E2E exactly i×100 ms.
	var reqs []synthReq
	for i := 1; i <= 10; i++ {
		n := float64(i)
		reqs = append(reqs, synthReq{at: n * 1000, sq: n * 50, prefill: 50, tpot: n*50 - 50,
			output: 2, split: true, input: 10})
	}
	rep := collect(Options{}, reqs)
	d := rep.Decomposition
	type g struct {
		Name     string
		Requests int
		TotalMS  float64
		Largest  string
	}
	var gotG []g
	for _, x := range d.Groups {
		gotG = append(gotG, g{x.Name, x.Requests, x.TotalMS, x.Largest})
	}
	wantG := []g{
		{"median", 3, 500, "server_queue"}, // mean of 400, 500, 600; queue 250 vs decode 200 vs prefill 50
		{"p95+", 1, 1000, "server_queue"},  // queue 500, decode 450
		{"p99+", 1, 1000, "server_queue"},
	}
	if diff := cmp.Diff(wantG, gotG, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	med := group(d, "median")
	if s := med.share(latency.StageServerQueue); s < 0.4999 || s > 0.5001 {
		t.Errorf("median queue share %v, want 0.5 (250 of 500 ms)", s)
	}
	if s := med.share(latency.StageDecode); s < 0.3999 || s > 0.4001 {
		t.Errorf("median decode share %v, want 0.4 (200 of 500 ms)", s)
	}
}

// Summary by hand: three requests intended at 0, 1 s and 2 s, the last
// failing; the first two end at 1.5 s and 2.5 s with 10 and 30 output
// tokens and 100 input tokens each. Duration = 2.5 s (last end − first
// intended; the failed one was sent at 2 s); throughput 2 / 2.5 = 0.8 req/s;
// output 40 / 2.5 = 16 tok/s; total 240 / 2.5 = 96 tok/s; offered
// (3 − 1) / 2 s = 1 req/s; completion (2 − 1) / (2.5 − 1.5) = 1 req/s.
func TestSummaryByHand(t *testing.T) {
	recs := []*latency.Record{
		{Schema: 1, ID: "a", IntendedNS: 0, SentNS: 0, FirstTokenNS: 0.5e9, EndNS: 1.5e9, InputTokens: 100, OutputTokens: 10},
		{Schema: 1, ID: "b", IntendedNS: 1e9, SentNS: 1e9, FirstTokenNS: 1.5e9, EndNS: 2.5e9, InputTokens: 100, OutputTokens: 30},
		{Schema: 1, ID: "c", IntendedNS: 2e9, SentNS: 2e9, ErrorKind: latency.FailHTTP5xx, Status: 503, Error: "503 Service Unavailable"},
		{Schema: 1, ID: "w", Warmup: true, IntendedNS: 0, SentNS: 0, EndNS: 9e9},
	}
	c := NewCollector(Options{SLOs: []latency.SLO{{Metric: latency.TTFT, Percentile: 99, Max: 500e6}}})
	for _, r := range recs {
		c.Add(r)
	}
	rep := c.Report()
	want := Summary{Requests: 3, Succeeded: 2, Failed: 1, Errors: map[string]int{"http_5xx": 1}, Warmup: 1,
		TopErrors: []ErrorMessage{{Kind: "http_5xx", Message: "503 Service Unavailable", Count: 1}},
		DurationS: 2.5, OfferedRPS: 1, ThroughputRPS: 0.8, CompletionRPS: 1, OutputTPS: 16, TotalTPS: 96,
		InputTokens: 200, OutputTokens: 40}
	if diff := cmp.Diff(want, rep.Summary, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	// Both successes meet TTFT ≤ 500 ms; the failure does not: attainment
	// 2/3, goodput 2 / 2.5 s.
	v := rep.SLOs[0]
	if v.Meeting != 2 || v.Attainment != 2.0/3 || v.GoodputRPS != 0.8 || v.Status != "pass" || v.ValueMS != 500 {
		t.Errorf("verdict %+v", v)
	}
}

// The request of TestStagesByHand with a server reporting 30 ms queue and
// 40 ms prefill, 20 ms more than the 50 ms the client saw between writing
// and the first token: network is 0, not −20 ms; the excess comes off the
// queue (10 ms left), so the stages still sum to E2E; the report notes the
// request's inconsistent clocks and the CSV's network_ms is 0.
func TestServerSplitOverClientTTFT(t *testing.T) {
	r := &latency.Record{Schema: 1, ID: "h", Stream: true, IntendedNS: 0, SentNS: 2e6, ConnectNS: 3e6,
		WroteNS: 6e6, FirstTokenNS: 56e6, EndNS: 88e6, ChunkNS: []int64{56e6, 66e6, 76e6, 86e6},
		OutputTokens: 4, InputTokens: 100,
		Server: &latency.ServerSplit{QueueNS: 30e6, PrefillNS: 40e6, DecodeNS: 30e6}}
	c := NewCollector(Options{})
	c.Add(r)
	got := c.rows[0].stages()
	want := [nStages]int64{stCQ: 2e6, stConnect: 3e6, stSend: 1e6, stNetwork: 0, stSQ: 10e6,
		stPrefill: 40e6, stDecode: 30e6, stTail: 2e6}
	if got != want {
		t.Errorf("stages\n got %v\nwant %v", got, want)
	}
	if !containsNote(c.Report(), "1 of 1 successful requests: the server's queue + prefill exceeded") {
		t.Errorf("no note of the inconsistent clock: %q", c.Report().Notes)
	}
	var b strings.Builder
	if err := c.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	col := slices.Index(strings.Split(lines[0], ","), "network_ms")
	if v := strings.Split(lines[1], ",")[col]; v != "0.000" {
		t.Errorf("network_ms %q, want 0.000", v)
	}
}

// The server's clock says decode took 30.01 ms where the client saw
// 30 ms between its first token (56 ms) and its end (86 ms): the stream
// tail is 0, not −0.01 ms, decode is the client's 30 ms, and the stages
// still sum to E2E; the text prints no negative stream tail.
func TestStreamTailNeverNegative(t *testing.T) {
	r := &latency.Record{Schema: 1, ID: "h", Stream: true, IntendedNS: 0, SentNS: 2e6, ConnectNS: 3e6,
		WroteNS: 6e6, FirstTokenNS: 56e6, EndNS: 86e6, ChunkNS: []int64{56e6, 66e6, 76e6, 86e6},
		OutputTokens: 4, InputTokens: 100,
		Server: &latency.ServerSplit{QueueNS: 10e6, PrefillNS: 30e6, DecodeNS: 30.01e6}}
	c := NewCollector(Options{})
	c.Add(r)
	got := c.rows[0].stages()
	want := [nStages]int64{stCQ: 2e6, stConnect: 3e6, stSend: 1e6, stNetwork: 10e6, stSQ: 10e6,
		stPrefill: 30e6, stDecode: 30e6, stTail: 0}
	if got != want {
		t.Errorf("stages\n got %v\nwant %v", got, want)
	}
	var sum int64
	for _, v := range got {
		sum += v
	}
	if sum != 86e6 {
		t.Errorf("stages sum to %d, want E2E from intended 86e6", sum)
	}
	var b strings.Builder
	if err := c.Report().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, "stream_tail") && strings.Contains(line, "-0") {
			t.Errorf("a negative stream tail printed: %q", line)
		}
	}
}
