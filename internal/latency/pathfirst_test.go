package latency

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The worked example of docs/metrics.md ("TTFT along the path"): the
// chain's first token at 100 ms.
func TestPathTTFTByHand(t *testing.T) {
	r := chainRecord()
	p, ttft, ok := r.PathWithTTFT()
	if !ok {
		t.Fatal("no path")
	}
	if want, _ := r.Path(); !cmp.Equal(want, p) {
		t.Errorf("PathWithTTFT's path differs from Path's:\n%s", cmp.Diff(want, p))
	}
	// Before the first token: the client's 4 ms, the app's 34 before its
	// upstream wait, the gateway's 3.5 before its own, the server's 35.4
	// before its decode: 76.9 ms. The other 23.1 ms spread over the three
	// links' network (9, 5.9, 9.6) and the app's unattributed 0.5 ms, in
	// proportion: × 23.1 / 25.
	want := []PathPart{
		{HopClient, "client_queue", ms(2)}, {HopClient, "connect", ms(1)}, {HopClient, "send", ms(1)},
		{"client→app", PartNetwork, ms(8.316)},
		{HopApp, "in", ms(1)}, {HopApp, "retrieval", ms(30)}, {HopApp, "rerank", ms(2)}, {HopApp, "prompt", ms(1)},
		{"app→gateway", PartNetwork, ms(5.4516)},
		{HopGateway, "gateway_in", ms(0.2)}, {HopGateway, "gateway_queue", ms(3)}, {HopGateway, "connect", ms(0.3)},
		{"gateway→server", PartNetwork, ms(8.8704)},
		{HopServer, "frontend", ms(0.4)}, {HopServer, "server_queue", ms(5)}, {HopServer, "prefill", ms(30)},
		{HopApp, PartUnattributed, ms(0.462)}, // 23.1 − the others' 22.638
	}
	if diff := cmp.Diff(want, ttft); diff != "" {
		t.Errorf("TTFT parts (-want +got):\n%s", diff)
	}
	if got := (&Path{Parts: ttft}).Sum(); got != r.FirstTokenNS-r.IntendedNS {
		t.Errorf("TTFT parts sum to %d, want %d", got, r.FirstTokenNS-r.IntendedNS)
	}
}

// A server that names only stages of its own (a RAG service answering
// directly): the rest of its time is nobody's, not the network's.
func TestPathPartialServerIsUnattributed(t *testing.T) {
	st, _ := ParseTiming(TimingValues{Header: []string{"retrieval;dur=12.5, rerank;dur=4, guardrail;dur=3"}})
	r := Record{SentNS: 0, WroteNS: ms(1), FirstTokenNS: ms(31), EndNS: ms(100), Timing: st}
	p, ttft, _ := r.PathWithTTFT()
	want := []PathPart{
		{HopClient, "client_queue", 0}, {HopClient, "connect", 0}, {HopClient, "send", ms(1)},
		{"", PartUnattributed, ms(79.5)}, // 99 − 19.5
		{HopServer, "retrieval", ms(12.5)}, {HopServer, "rerank", ms(4)}, {HopServer, "guardrail", ms(3)},
	}
	if diff := cmp.Diff(want, p.Parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	wantTTFT := []PathPart{
		{HopClient, "send", ms(1)}, {"", PartUnattributed, ms(10.5)}, // 31 − 1 − 19.5
		{HopServer, "retrieval", ms(12.5)}, {HopServer, "rerank", ms(4)}, {HopServer, "guardrail", ms(3)},
	}
	if diff := cmp.Diff(wantTTFT, ttft); diff != "" {
		t.Errorf("TTFT parts (-want +got):\n%s", diff)
	}
}

// Stages said to come before the first token that claim more than TTFT
// are cut, last first; the client's never.
func TestPathTTFTCutsStagesPastTheFirstToken(t *testing.T) {
	r := Record{SentNS: 0, WroteNS: ms(2), FirstTokenNS: ms(20), EndNS: ms(100), Timing: []HopStage{
		{HopServer, "server_queue", ms(10)}, {HopServer, "prefill", ms(15)}, {HopServer, "server_decode", ms(70)},
	}}
	_, ttft, _ := r.PathWithTTFT()
	want := []PathPart{{HopClient, "send", ms(2)}, {HopServer, "server_queue", ms(10)}, {HopServer, "prefill", ms(8)}}
	if diff := cmp.Diff(want, ttft); diff != "" {
		t.Errorf("TTFT parts (-want +got):\n%s", diff)
	}
}

// The network takes no more of TTFT than its whole length: the rest before
// the first token is unattributed.
func TestPathTTFTNetworkAtMostItsLength(t *testing.T) {
	r := Record{SentNS: 0, WroteNS: ms(1), FirstTokenNS: ms(40), EndNS: ms(85), Timing: []HopStage{
		{HopServer, "server_queue", ms(10)}, {HopServer, "prefill", ms(20)}, {HopServer, "server_decode", ms(50)},
	}}
	p, ttft, _ := r.PathWithTTFT()
	if p.Parts[3] != (PathPart{"client→server", PartNetwork, ms(4)}) { // 84 − 80
		t.Fatalf("parts %v", p.Parts)
	}
	want := []PathPart{{HopClient, "send", ms(1)}, {"client→server", PartNetwork, ms(4)},
		{HopServer, "server_queue", ms(10)}, {HopServer, "prefill", ms(20)}, {"", PartUnattributed, ms(5)}} // 40 − 31 − 4
	if diff := cmp.Diff(want, ttft); diff != "" {
		t.Errorf("TTFT parts (-want +got):\n%s", diff)
	}
}

// Whatever the hops report, the TTFT parts sum exactly to TTFT from the
// intended send.
func FuzzPathTTFTSumsExactly(f *testing.F) {
	f.Add("app.in;dur=1, app.upstream;dur=50, app.total;dur=60", "gateway_in;dur=1, decode;dur=40, total;dur=45, server_queue;dur=3, prefill;dur=9", int64(100), int64(3), int64(40))
	f.Add("a;dur=99999, b.upstream;dur=5", "b.total;dur=1, c.x;dur=2, c.upstream;dur=7", int64(10), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, header, trailer string, e2eMS, sendMS, firstMS int64) {
		e2e, send, first := (e2eMS%100000)*1e6, (sendMS%1000)*1e6, (firstMS%100000)*1e6
		if e2e < 0 || send < 0 || send > e2e || first < 0 || first > e2e {
			return
		}
		st, _ := ParseTiming(TimingValues{Header: []string{header}, Trailer: []string{trailer}})
		r := Record{IntendedNS: 0, SentNS: 1, WroteNS: 1 + send, FirstTokenNS: 1 + first, EndNS: 1 + e2e, Timing: st}
		p, ttft, ok := r.PathWithTTFT()
		if !ok {
			t.Fatal("no path")
		}
		if p.Sum() != r.EndNS {
			t.Fatalf("parts %v sum to %d, want %d", p.Parts, p.Sum(), r.EndNS)
		}
		if s := (&Path{Parts: ttft}).Sum(); s != r.FirstTokenNS {
			t.Fatalf("TTFT parts %v sum to %d, want %d", ttft, s, r.FirstTokenNS)
		}
		// A scratch that decomposed other records gives the same answer.
		sp, sttft, _ := fuzzScratch.PathWithTTFT(&r)
		if diff := cmp.Diff(p, sp, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("scratch path (-fresh +scratch):\n%s", diff)
		}
		if diff := cmp.Diff(ttft, sttft, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("scratch TTFT parts (-fresh +scratch):\n%s", diff)
		}
	})
}

// fuzzScratch is reused across the fuzz inputs of one process.
var fuzzScratch PathScratch

// One scratch reused over records of every shape gives what a fresh
// decomposition gives, and once warm allocates nothing per record.
func TestPathScratchReuse(t *testing.T) {
	chain := chainRecord()
	v1 := Record{Schema: 1, SentNS: 0, WroteNS: ms(1), FirstTokenNS: ms(40), EndNS: ms(101), GatewayNS: ms(4),
		Server: &ServerSplit{QueueNS: ms(10), PrefillNS: ms(20), DecodeNS: ms(60), Source: "server-timing"}}
	aside := Record{SentNS: 0, WroteNS: ms(1), FirstTokenNS: ms(20), EndNS: ms(100), Timing: []HopStage{
		{HopApp, "in", ms(50)}, {HopApp, "upstream", ms(50)}, {HopApp, "total", ms(20)}}}
	cut := Record{SentNS: 0, WroteNS: ms(1), FirstTokenNS: ms(30), EndNS: ms(100), Timing: []HopStage{
		{HopApp, "in", ms(10)}, {HopApp, "upstream", ms(87)}, {HopApp, "backpressure", ms(8)}, {HopApp, "total", ms(105)}}}
	records := []Record{chain, v1, aside, cut, chain, cut, v1, aside}
	var sc PathScratch
	for i := range records {
		r := &records[i]
		p, ttft, _ := r.PathWithTTFT()
		sp, sttft, ok := sc.PathWithTTFT(r)
		if !ok {
			t.Fatalf("record %d: no path", i)
		}
		if diff := cmp.Diff(p, sp, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("record %d: path (-fresh +scratch):\n%s", i, diff)
		}
		if diff := cmp.Diff(ttft, sttft, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("record %d: TTFT parts (-fresh +scratch):\n%s", i, diff)
		}
		if pp, _ := sc.Path(r); !cmp.Equal(p, pp, cmpopts.EquateEmpty()) {
			t.Errorf("record %d: scratch Path %+v, want %+v", i, pp, p)
		}
	}
	warm := []Record{chain, v1, cut}
	allocs := testing.AllocsPerRun(50, func() {
		for i := range warm {
			sc.PathWithTTFT(&warm[i])
			sc.Path(&warm[i])
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per pass over %d records with a warm scratch, want 0", allocs, len(warm))
	}
}
