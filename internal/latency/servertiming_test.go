package latency

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseServerTiming(t *testing.T) {
	got := ParseServerTiming([]string{
		`frontend;dur=0.25, Queue;dur=12.5;desc="wait", prefill;dur=40`,
		`decode;dur="100", bogus, miss;desc=x, neg;dur=-1, nan;dur=NaN`,
		`prefill;dur=41`,
	})
	want := map[TimingName]time.Duration{
		"frontend": 250 * time.Microsecond, "queue": 12500 * time.Microsecond,
		"prefill": 41 * time.Millisecond, "decode": 100 * time.Millisecond,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSplitServerTiming(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    ServerSplit
		gateway time.Duration
		ok      bool
	}{
		{"serve", []string{"frontend;dur=0.1, server_queue;dur=2, prefill;dur=3", "server_decode;dur=4"},
			ServerSplit{QueueNS: 2e6, PrefillNS: 3e6, DecodeNS: 4e6, Source: "server-timing"}, 0, true},
		{"serve, former names", []string{"frontend;dur=0.1, queue;dur=2, prefill;dur=3", "decode;dur=4"},
			ServerSplit{QueueNS: 2e6, PrefillNS: 3e6, DecodeNS: 4e6, Source: "server-timing"}, 0, true},
		{"server_queue alone", []string{"server_queue;dur=2, prefill;dur=3"},
			ServerSplit{QueueNS: 2e6, PrefillNS: 3e6, DecodeNS: 0, Source: "server-timing"}, 0, true},
		{"behind a gateway", []string{"gateway_in;dur=0.2, gateway_queue;dur=5, connect;dur=0.3",
			"decode;dur=90, post_process;dur=0.1, backpressure;dur=0.4, server_queue;dur=1, prefill;dur=7, server_decode;dur=88"},
			ServerSplit{QueueNS: 1e6, PrefillNS: 7e6, DecodeNS: 88e6, Source: "server-timing"}, 6 * time.Millisecond, true},
		{"behind a gateway, streamed (its decode stands for the server's)", []string{"gateway_in;dur=0.2, gateway_queue;dur=5, connect;dur=0.3",
			"decode;dur=90, post_process;dur=0.1, backpressure;dur=0.4, server_queue;dur=1, prefill;dur=7"},
			ServerSplit{QueueNS: 1e6, PrefillNS: 7e6, DecodeNS: 90e6, Source: "server-timing"}, 6 * time.Millisecond, true},
		{"behind a gateway, former names", []string{"gateway_in;dur=0.2, queue;dur=5, connect;dur=0.3",
			"decode;dur=90, post_process;dur=0.1, backpressure;dur=0.4, server_queue;dur=1, prefill;dur=7, server_decode;dur=88"},
			ServerSplit{QueueNS: 1e6, PrefillNS: 7e6, DecodeNS: 88e6, Source: "server-timing"}, 6 * time.Millisecond, true},
		{"behind a gateway, llama.cpp's split (no queue wait reported)", []string{"gateway_in;dur=0.2, gateway_queue;dur=0, connect;dur=0.3",
			"decode;dur=90, post_process;dur=0.1, backpressure;dur=0.4, prefill;dur=7"},
			ServerSplit{PrefillNS: 7e6, DecodeNS: 90e6, Source: "server-timing", Unreported: []string{SplitQueue}}, time.Millisecond, true},
		{"behind a gateway, TGI's split (no prefill apart from decode)", []string{"gateway_in;dur=0.2, gateway_queue;dur=0, connect;dur=0.3",
			"decode;dur=0, post_process;dur=0.1, backpressure;dur=0.4, server_queue;dur=3, network;dur=1, server_decode;dur=50"},
			ServerSplit{QueueNS: 3e6, DecodeNS: 50e6, Source: "server-timing", Unreported: []string{SplitPrefill}}, time.Millisecond, true},
		{"behind a gateway that read vLLM's metrics (server_engine names the engine)", []string{"gateway_in;dur=0.2, gateway_queue;dur=0, connect;dur=0.3",
			"decode;dur=90, server_queue;dur=3, prefill;dur=7, server_decode;dur=88, server_engine;desc=vllm"},
			ServerSplit{QueueNS: 3e6, PrefillNS: 7e6, DecodeNS: 88e6, Source: "server-timing", Engine: "vllm"}, 500 * time.Microsecond, true},
		{"server_engine's desc must be a token", []string{`server_queue;dur=3, prefill;dur=7, server_engine;desc="a b"`},
			ServerSplit{QueueNS: 3e6, PrefillNS: 7e6, Source: "server-timing"}, 0, true},
		{"no split", []string{"frontend;dur=1"}, ServerSplit{}, 0, false},
	}
	for _, tt := range tests {
		got, gw, ok := SplitServerTiming(tt.in)
		if ok != tt.ok || gw != tt.gateway {
			t.Errorf("%s: ok %v gateway %v, want %v %v", tt.name, ok, gw, tt.ok, tt.gateway)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

func FuzzParseServerTiming(f *testing.F) {
	f.Add(`queue;dur=12.5, prefill;dur=40`)
	f.Add(`a;dur=1e309,b;dur=;c`)
	f.Fuzz(func(t *testing.T, v string) {
		for k, d := range ParseServerTiming([]string{v}) {
			if d < 0 || k == "" {
				t.Fatalf("bad entry %q=%v from %q", k, d, v)
			}
		}
	})
}

func TestParseTiming(t *testing.T) {
	tests := []struct {
		name  string
		in    TimingValues
		want  []HopStage
		notes []string
	}{
		{"hops in order of first appearance, each hop's stages in order",
			TimingValues{
				Header:  []string{`app.in;dur=1, app.retrieval;dur=30;desc="3 calls, parallel"`, "gateway_in;dur=0.2"},
				Trailer: []string{"app.guardrail;dur=5, upstream_ttft;dur=40, frontend;dur=0.4, server_queue;dur=5, App.Total;dur=50"},
			},
			[]HopStage{{HopApp, "in", 1e6}, {HopApp, "retrieval", 30e6}, {HopApp, "guardrail", 5e6}, {HopApp, "total", 50e6},
				{HopGateway, "gateway_in", 2e5}, {HopGateway, "upstream_ttft", 40e6},
				{HopServer, "frontend", 4e5}, {HopServer, "server_queue", 5e6}},
			nil},
		{"a trailer repeating the header is one report; the final event stands in for a trailer only",
			TimingValues{Header: []string{"server_queue;dur=2, prefill;dur=3"}, Final: []string{"server_decode;dur=3.9, total;dur=9"},
				Trailer: []string{"server_queue;dur=2, prefill;dur=3, server_decode;dur=4"}},
			[]HopStage{{HopServer, "server_queue", 2e6}, {HopServer, "prefill", 3e6}, {HopServer, "server_decode", 4e6}},
			nil},
		{"the final event without a trailer",
			TimingValues{Header: []string{"server_queue;dur=2"}, Final: []string{"server_queue;dur=2, prefill;dur=3"}},
			[]HopStage{{HopServer, "server_queue", 2e6}, {HopServer, "prefill", 3e6}},
			nil},
		{"former names, no gateway", TimingValues{Trailer: []string{"queue;dur=2, decode;dur=4"}},
			[]HopStage{{HopServer, "server_queue", 2e6}, {HopServer, "server_decode", 4e6}}, nil},
		{"former names behind a gateway", TimingValues{Header: []string{"gateway_in;dur=1, queue;dur=2"}, Trailer: []string{"decode;dur=4"}},
			[]HopStage{{HopGateway, "gateway_in", 1e6}, {HopGateway, "gateway_queue", 2e6}, {HopGateway, "decode", 4e6}}, nil},
		{"bad input is noted and never counted",
			TimingValues{
				Header: []string{`prefill;dur=abc, ;dur=3, a b;dur=1, neg;dur=-1, big;dur=1e12, cache;desc="hit", ok;dur=1`,
					`q;desc="unterminated, x;dur=9`},
				Trailer: []string{"ok;dur=2, dup;dur=1, dup;dur=1"},
			},
			[]HopStage{{HopServer, "ok", 2e6}, {HopServer, "dup", 1e6}},
			[]string{
				"server-timing header: prefill;dur=abc: dur is not a number; skipped",
				`server-timing header: malformed entry ";dur=3" (no metric name); skipped`,
				`server-timing header: malformed entry "a b;dur=1" (unexpected 'b'); skipped`,
				"server-timing header: neg;dur=-1: dur is negative; skipped",
				"server-timing header: big;dur=1e12: dur is out of range; skipped",
				`server-timing header: malformed entry "q;desc=\"unterminated, x;dur=9" (an unterminated quoted string); skipped`,
				"server-timing: ok is 1.000 ms in the header, 2.000 ms in the trailer; the trailer's kept",
				"server-timing trailer: dup reported twice (1.000, then 1.000 ms); the later kept",
			}},
	}
	for _, tt := range tests {
		got, notes := ParseTiming(tt.in)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: stages (-want +got):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(tt.notes, notes); diff != "" {
			t.Errorf("%s: notes (-want +got):\n%s", tt.name, diff)
		}
	}
}

func FuzzParseTiming(f *testing.F) {
	f.Add(`app.in;dur=1, gateway_in;dur=0.2;desc="a, b"`, `server_queue;dur=2, x;dur=-1, ;;`)
	f.Add(`a;dur="1\"2", b;dur=1e309`, `a;dur=1,a;dur=2`)
	f.Fuzz(func(t *testing.T, header, trailer string) {
		st, notes := ParseTiming(TimingValues{Header: []string{header}, Trailer: []string{trailer, header}})
		if len(notes) > MaxTimingNotes {
			t.Fatalf("%d notes", len(notes))
		}
		seen := map[HopStage]bool{}
		for _, s := range st {
			if s.NS < 0 || s.NS > maxTimingMS*1e6 || s.Hop == "" || s.Name == "" {
				t.Fatalf("bad stage %+v", s)
			}
			k := HopStage{Hop: s.Hop, Name: s.Name}
			if seen[k] {
				t.Fatalf("stage %s.%s twice", s.Hop, s.Name)
			}
			seen[k] = true
		}
	})
}

// What a hop passes on reads back as the same stages, former names
// rewritten, its own hop's left out.
func TestForwardTiming(t *testing.T) {
	v := TimingValues{Header: []string{"queue;dur=1.5, prefill;dur=2.5"},
		Trailer: []string{"decode;dur=3, app.in;dur=1, db.query;dur=0.25, server.total;dur=7, gateway_in;dur=9"}}
	got := ForwardTiming(HopGateway, TimingValues{Header: []string{"queue;dur=1.5, prefill;dur=2.5"}, Trailer: []string{"decode;dur=3, app.in;dur=1, db.query;dur=0.25"}})
	if want := "server_queue;dur=1.500, prefill;dur=2.500, server_decode;dur=3.000, app.in;dur=1.000, db.query;dur=0.250"; got != want {
		t.Errorf("forwarded %q, want %q", got, want)
	}
	st, _ := ParseTiming(v)
	for _, s := range st {
		if h, n := s.TimingName().Split(); h != s.Hop || n != s.Name {
			t.Errorf("%+v is sent as %s, read back as %s.%s", s, s.TimingName(), h, n)
		}
	}
	if got := ForwardTiming(HopApp, TimingValues{Trailer: []string{"app.in;dur=1"}}); got != "" {
		t.Errorf("a hop's own stages forwarded: %q", got)
	}
}
