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
			ServerSplit{2e6, 3e6, 4e6, "server-timing"}, 0, true},
		{"serve, former names", []string{"frontend;dur=0.1, queue;dur=2, prefill;dur=3", "decode;dur=4"},
			ServerSplit{2e6, 3e6, 4e6, "server-timing"}, 0, true},
		{"server_queue alone", []string{"server_queue;dur=2, prefill;dur=3"},
			ServerSplit{2e6, 3e6, 0, "server-timing"}, 0, true},
		{"behind a gateway", []string{"gateway_in;dur=0.2, gateway_queue;dur=5, connect;dur=0.3",
			"decode;dur=90, post_process;dur=0.1, backpressure;dur=0.4, server_queue;dur=1, prefill;dur=7, server_decode;dur=88"},
			ServerSplit{1e6, 7e6, 88e6, "server-timing"}, 6 * time.Millisecond, true},
		{"behind a gateway, streamed (its decode stands for the server's)", []string{"gateway_in;dur=0.2, gateway_queue;dur=5, connect;dur=0.3",
			"decode;dur=90, post_process;dur=0.1, backpressure;dur=0.4, server_queue;dur=1, prefill;dur=7"},
			ServerSplit{1e6, 7e6, 90e6, "server-timing"}, 6 * time.Millisecond, true},
		{"behind a gateway, former names", []string{"gateway_in;dur=0.2, queue;dur=5, connect;dur=0.3",
			"decode;dur=90, post_process;dur=0.1, backpressure;dur=0.4, server_queue;dur=1, prefill;dur=7, server_decode;dur=88"},
			ServerSplit{1e6, 7e6, 88e6, "server-timing"}, 6 * time.Millisecond, true},
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
