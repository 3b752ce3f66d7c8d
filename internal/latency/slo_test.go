package latency

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseSLOs(t *testing.T) {
	tests := []struct {
		in   string
		want []SLO
		err  string
	}{
		{in: "", want: nil},
		{in: "ttft:p99<=1.5s,tpot:p99<=50ms,e2e:p95<=10s", want: []SLO{
			{TTFT, 99, 1500 * time.Millisecond},
			{TPOT, 99, 50 * time.Millisecond},
			{E2E, 95, 10 * time.Second},
		}},
		{in: "TTFT <= 2s", want: []SLO{{TTFT, 99, 2 * time.Second}}},
		{in: "itl:p99.9<=100ms", want: []SLO{{ITL, 99.9, 100 * time.Millisecond}}},
		{in: "e2e:max<=30s", want: []SLO{{E2E, 100, 30 * time.Second}}},
		{in: "ttft:p99<1s", err: "only <="},
		{in: "latency:p99<=1s", err: "unknown metric"},
		{in: "ttft:p0<=1s", err: "percentile"},
		{in: "ttft:p101<=1s", err: "percentile"},
		{in: "ttft:q99<=1s", err: "percentile"},
		{in: "ttft:p99<=fast", err: "threshold"},
		{in: "ttft:p99<=-1s", err: "positive"},
		{in: "ttft", err: "want METRIC"},
	}
	for _, tt := range tests {
		got, err := ParseSLOs(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseSLOs(%q) error = %v, want containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseSLOs(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseSLOs(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestSLOStringRoundTrip(t *testing.T) {
	for _, s := range []SLO{{TTFT, 99, 1500 * time.Millisecond}, {E2E, 100, time.Second}, {ITL, 99.9, time.Millisecond}} {
		got, err := ParseSLOs(s.String())
		if err != nil || len(got) != 1 || got[0] != s {
			t.Errorf("round trip of %v: got %v, %v", s, got, err)
		}
	}
}

func FuzzParseSLOs(f *testing.F) {
	for _, s := range []string{"ttft:p99<=1.5s", "tpot:p99<=50ms,e2e:p95<=10s", "e2e:max<=1s", "x<=", ":<=,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		slos, err := ParseSLOs(s)
		if err != nil {
			return
		}
		for _, o := range slos {
			if o.Max <= 0 || !(o.Percentile > 0 && o.Percentile <= 100) {
				t.Fatalf("ParseSLOs(%q) accepted invalid %+v", s, o)
			}
		}
	})
}
