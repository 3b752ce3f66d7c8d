package latency

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// ms is x milliseconds in nanoseconds.
func ms(x float64) int64 { return int64(math.Round(x * 1e6)) }

// chainRecord is the worked example of docs/metrics.md ("Decomposition
// along the path"): client → app → gateway → server.
func chainRecord() Record {
	st, notes := ParseTiming(TimingValues{
		Header: []string{
			"app.in;dur=1, app.retrieval;dur=30, app.rerank;dur=2, app.prompt;dur=1",
			"gateway_in;dur=0.2, gateway_queue;dur=3, connect;dur=0.3, upstream_ttft;dur=40",
		},
		Trailer: []string{
			"app.upstream;dur=150, app.guardrail;dur=5, app.post_process;dur=1, app.backpressure;dur=0.5, app.total;dur=191",
			"decode;dur=100, post_process;dur=0.5, backpressure;dur=0.1, network;dur=4.6, total;dur=144.1",
			"frontend;dur=0.4, server_queue;dur=5, prefill;dur=30, server_decode;dur=95",
		},
	})
	if len(notes) > 0 {
		panic(notes)
	}
	return Record{IntendedNS: 0, SentNS: ms(2), ConnectNS: ms(1), WroteNS: ms(4), FirstTokenNS: ms(100), EndNS: ms(204), Timing: st}
}

func TestPathByHand(t *testing.T) {
	r := chainRecord()
	p, ok := r.Path()
	if !ok {
		t.Fatal("no path")
	}
	want := []PathPart{
		{HopClient, "client_queue", ms(2)},
		{HopClient, "connect", ms(1)},
		{HopClient, "send", ms(1)},
		{"client→app", PartNetwork, ms(9)}, // (204 − 4) − 191
		{HopApp, "in", ms(1)},
		{HopApp, "retrieval", ms(30)},
		{HopApp, "rerank", ms(2)},
		{HopApp, "prompt", ms(1)},
		{"app→gateway", PartNetwork, ms(5.9)}, // app.upstream 150 − gateway total 144.1
		{HopGateway, "gateway_in", ms(0.2)},
		{HopGateway, "gateway_queue", ms(3)},
		{HopGateway, "connect", ms(0.3)},
		{"gateway→server", PartNetwork, ms(9.6)}, // upstream_ttft 40 + decode 100 − server's 130.4
		{HopServer, "frontend", ms(0.4)},
		{HopServer, "server_queue", ms(5)},
		{HopServer, "prefill", ms(30)},
		{HopServer, "server_decode", ms(95)},
		{HopGateway, "post_process", ms(0.5)},
		{HopGateway, "backpressure", ms(0.1)},
		{HopApp, "guardrail", ms(5)},
		{HopApp, "post_process", ms(1)},
		{HopApp, "backpressure", ms(0.5)},
		{HopApp, PartUnattributed, ms(0.5)}, // app.total 191 − its stages' 190.5
	}
	if diff := cmp.Diff(want, p.Parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if got, want := p.Sum(), r.EndNS-r.IntendedNS; got != want {
		t.Errorf("sum %d, want E2E from intended %d", got, want)
	}
	if diff := cmp.Diff([]Hop{HopClient, HopApp, HopGateway, HopServer}, p.Hops); diff != "" {
		t.Errorf("hops (-want +got):\n%s", diff)
	}
	if p.HiddenNS != 0 || len(p.Notes) != 0 {
		t.Errorf("hidden %d, notes %q", p.HiddenNS, p.Notes)
	}
}

// A streaming guardrail checks a token while the server makes the next:
// the server's time beyond the app's wait is cut from its last stages.
func TestPathPipelinedInnerHopIsCut(t *testing.T) {
	r := Record{SentNS: 0, WroteNS: ms(1), EndNS: ms(121), Timing: []HopStage{
		{HopApp, "upstream", ms(100)}, {HopApp, "guardrail", ms(20)},
		{HopServer, "server_queue", ms(10)}, {HopServer, "prefill", ms(20)}, {HopServer, "server_decode", ms(85)},
	}}
	p, _ := r.Path()
	want := []PathPart{
		{HopClient, "client_queue", 0}, {HopClient, "connect", 0}, {HopClient, "send", ms(1)},
		// no client→app network: app's 120 ms = 121 − 1
		{HopServer, "server_queue", ms(10)}, {HopServer, "prefill", ms(20)},
		{HopServer, "server_decode", ms(70)}, // 85 − (115 − 100)
		{HopApp, "guardrail", ms(20)},
	}
	if diff := cmp.Diff(want, p.Parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if p.HiddenNS != ms(15) {
		t.Errorf("hidden %d, want 15 ms", p.HiddenNS)
	}
	if p.Sum() != r.EndNS {
		t.Errorf("sum %d, want %d", p.Sum(), r.EndNS)
	}
}

func TestPathNoSplitIsUnattributed(t *testing.T) {
	r := Record{IntendedNS: 0, SentNS: ms(1), WroteNS: ms(2), EndNS: ms(52)}
	p, _ := r.Path()
	want := []PathPart{{HopClient, "client_queue", ms(1)}, {HopClient, "connect", 0}, {HopClient, "send", ms(1)},
		{"", PartUnattributed, ms(50)}}
	if diff := cmp.Diff(want, p.Parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if _, ok := (&Record{ErrorKind: FailTimeout, EndNS: 1}).Path(); ok {
		t.Error("a failed request has no path")
	}
}

// A hop claiming more than the request took is set aside with a note; the
// split of the others stays exact.
func TestPathSetsAsideImpossibleClaims(t *testing.T) {
	r := Record{SentNS: 0, WroteNS: ms(1), EndNS: ms(101), Timing: []HopStage{
		{HopGateway, "gateway_in", ms(1)}, {HopGateway, "upstream_ttft", ms(30)}, {HopGateway, "decode", ms(60)},
		{HopServer, "server_queue", ms(5000)}, {HopServer, "prefill", ms(20)},
	}}
	p, _ := r.Path()
	want := []PathPart{
		{HopClient, "client_queue", 0}, {HopClient, "connect", 0}, {HopClient, "send", ms(1)},
		{"client→gateway", PartNetwork, ms(9)},
		{HopGateway, "gateway_in", ms(1)},
		{HopGateway, "upstream_ttft", ms(30)}, {HopGateway, "decode", ms(60)}, // the server's report set aside
	}
	if diff := cmp.Diff(want, p.Parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "server claims 5020.000 ms, more than the 91.000 ms") {
		t.Errorf("notes %q", p.Notes)
	}
	// Stages summing past their own total.
	r.Timing = []HopStage{{HopApp, "in", ms(50)}, {HopApp, "upstream", ms(50)}, {HopApp, "total", ms(20)}}
	p, _ = r.Path()
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "more than its total") || p.Sum() != r.EndNS {
		t.Errorf("notes %q, sum %d", p.Notes, p.Sum())
	}
}

// A version 1 record reads through its server split and gateway time.
func TestPathOfVersion1Record(t *testing.T) {
	r := Record{Schema: 1, IntendedNS: 0, SentNS: 0, WroteNS: ms(1), EndNS: ms(101), GatewayNS: ms(4),
		Server: &ServerSplit{QueueNS: ms(10), PrefillNS: ms(20), DecodeNS: ms(60), Source: "server-timing"}}
	p, _ := r.Path()
	want := []PathPart{
		{HopClient, "client_queue", 0}, {HopClient, "connect", 0}, {HopClient, "send", ms(1)},
		{HopGateway, "gateway", ms(4)},
		{"gateway→server", PartNetwork, ms(6)}, // 100 − 4 − 90
		{HopServer, "server_queue", ms(10)}, {HopServer, "prefill", ms(20)}, {HopServer, "server_decode", ms(60)},
	}
	if diff := cmp.Diff(want, p.Parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
}

// Whatever the hops report, the parts sum exactly to E2E from the
// intended send.
func FuzzPathSumsExactly(f *testing.F) {
	f.Add("app.in;dur=1, app.upstream;dur=50, app.total;dur=60", "gateway_in;dur=1, decode;dur=40, total;dur=45, server_queue;dur=3, prefill;dur=9", int64(100), int64(3))
	f.Add("a;dur=99999, b.upstream;dur=5", "b.total;dur=1, c.x;dur=2, c.upstream;dur=7", int64(10), int64(0))
	f.Fuzz(func(t *testing.T, header, trailer string, e2eMS, sendMS int64) {
		e2e, send := (e2eMS%100000)*1e6, (sendMS%1000)*1e6
		if e2e < 0 || send < 0 || send > e2e {
			return
		}
		st, _ := ParseTiming(TimingValues{Header: []string{header}, Trailer: []string{trailer}})
		r := Record{IntendedNS: 0, SentNS: 1, WroteNS: 1 + send, EndNS: 1 + e2e, Timing: st}
		p, ok := r.Path()
		if !ok {
			t.Fatal("no path")
		}
		if p.Sum() != r.EndNS-r.IntendedNS {
			t.Fatalf("parts %v sum to %d, want %d", p.Parts, p.Sum(), r.EndNS-r.IntendedNS)
		}
	})
}

func TestConsecutive(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	got := Consecutive(t0, at(2), time.Time{}, at(5), at(4), at(9))
	want := []time.Duration{2 * time.Millisecond, 0, 3 * time.Millisecond, 0, 4 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A hop's last write returns after the client has read it: what its last
// stages claim beyond the client's end is cut from them; beyond what they
// hold, the hop is set aside.
func TestPathCutsAHopsTimeAfterTheClientsEnd(t *testing.T) {
	r := Record{SentNS: 0, WroteNS: ms(1), EndNS: ms(100), Timing: []HopStage{
		{HopApp, "in", ms(10)}, {HopApp, "upstream", ms(87)}, {HopApp, "backpressure", ms(8)}, {HopApp, "total", ms(105)},
	}}
	p, _ := r.Path()
	want := []PathPart{
		{HopClient, "client_queue", 0}, {HopClient, "connect", 0}, {HopClient, "send", ms(1)},
		{"client→app", PartNetwork, ms(-1)}, // 99 − 100: the handler began before the body was written
		{HopApp, "in", ms(10)}, {HopApp, "upstream", ms(87)},
		{HopApp, "backpressure", ms(3)}, // 8 − (105 − 100)
	}
	if diff := cmp.Diff(want, p.Parts); diff != "" || p.HiddenNS != ms(5) || len(p.Notes) > 0 {
		t.Errorf("hidden %d, notes %q, parts (-want +got):\n%s", p.HiddenNS, p.Notes, diff)
	}
	r.Timing[3].NS = ms(110) // 10 ms past the end: more than its 8 ms of trailing stages
	r.Timing[1].NS = ms(92)
	p, _ = r.Path()
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "app claims 110.000 ms") || p.Sum() != r.EndNS {
		t.Errorf("notes %q, sum %d", p.Notes, p.Sum())
	}
}

// A reasoning model's server_reasoning is a part of server_decode reported
// beside it: the path is the same with it as without it, and
// PathWithTTFT's parts until the first token too.
func TestPathServerReasoningIsNoStage(t *testing.T) {
	plain := chainRecord()
	r := chainRecord()
	r.Timing = append(r.Timing, HopStage{HopServer, string(TimingServerReasoning), ms(60)})
	if RoleOf(HopServer, string(TimingServerReasoning)) != RoleInfo {
		t.Fatal("server_reasoning is not RoleInfo")
	}
	want, wantTTFT, _ := plain.PathWithTTFT()
	got, gotTTFT, ok := r.PathWithTTFT()
	if !ok {
		t.Fatal("no path")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("path (-without +with server_reasoning):\n%s", diff)
	}
	if diff := cmp.Diff(wantTTFT, gotTTFT); diff != "" {
		t.Errorf("TTFT parts (-without +with server_reasoning):\n%s", diff)
	}
	// Read back from the wire under its own name, on the server's hop.
	st, notes := ParseTiming(TimingValues{Trailer: []string{"prefill;dur=30, server_reasoning;dur=60"}})
	if len(notes) > 0 || len(st) != 2 || st[1] != (HopStage{HopServer, "server_reasoning", ms(60)}) || st[1].TimingName() != TimingServerReasoning {
		t.Errorf("parsed %+v, notes %q", st, notes)
	}
}
