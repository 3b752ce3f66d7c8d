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
	want := map[string]time.Duration{
		"frontend": 250 * time.Microsecond, "queue": 12500 * time.Microsecond,
		"prefill": 41 * time.Millisecond, "decode": 100 * time.Millisecond,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestServerSplitFromTiming(t *testing.T) {
	s, ok := ServerSplitFromTiming([]string{"server_queue;dur=2, prefill;dur=3, decode;dur=4"})
	want := ServerSplit{QueueNS: 2e6, PrefillNS: 3e6, DecodeNS: 4e6, Source: "server-timing"}
	if !ok || s != want {
		t.Errorf("got %+v, %v; want %+v", s, ok, want)
	}
	if _, ok := ServerSplitFromTiming([]string{"frontend;dur=1"}); ok {
		t.Error("a value without queue or prefill is no split")
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
