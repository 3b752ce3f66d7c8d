package prediction

import "testing"

// Each remedy names the command that checks it, and a lever the gateway
// owns the gateway apply that applies it live.
func TestWhatIfNamesTheVerifyAndGatewayCommands(t *testing.T) {
	w := &Predictions{Run: "results/before"}
	for _, tt := range []struct {
		r               Remedy
		verify, gateway string
	}{
		{Remedy{Lever: "max-num-seqs", Applied: "max_num_seqs=4"}, "tokentrace verify results/before AFTER --applied max_num_seqs=4", ""},
		{Remedy{Lever: "admission-control", Applied: "max_waiting=6", GatewayApply: "concurrency=4 max-queue=6"},
			"tokentrace verify results/before AFTER --applied max_waiting=6",
			"tokentrace gateway apply --config GATEWAY.yaml concurrency=4 max-queue=6; then tokentrace verify results/before AFTER"},
		{Remedy{Lever: "admission-control", Applied: "max_waiting=6", GatewayApply: "concurrency=4 max-queue=6", Error: "does not fit"}, "", ""},
		{Remedy{Lever: "other"}, "", ""},
	} {
		if got := w.VerifyCommand(tt.r); got != tt.verify {
			t.Errorf("%s: VerifyCommand %q, want %q", tt.r.Lever, got, tt.verify)
		}
		if got := w.GatewayCommand(tt.r); got != tt.gateway {
			t.Errorf("%s: GatewayCommand %q, want %q", tt.r.Lever, got, tt.gateway)
		}
	}
	if got := (&Predictions{}).VerifyCommand(Remedy{Applied: "replicas=2"}); got != "tokentrace verify BEFORE AFTER --applied replicas=2" {
		t.Errorf("without a run: %q", got)
	}
}

// A remedy is ranked only when the twin reproduces the run and its
// prediction leaves nothing the run's own does not: no extrapolation, no
// interval outside the envelope where the baseline's is inside (a
// baseline outside — the unfitted defaults — does not unrank the rest).
func TestRanked(t *testing.T) {
	in, out := &Interval{TTFT: 0.1}, &Interval{TTFT: 5.5, Outside: true}
	x := []string{"outside the twin's envelope: 12 KV-cache preemptions"}
	for _, tt := range []struct {
		name       string
		base       *Interval
		unreliable string
		r          Remedy
		want       bool
	}{
		{"inside", in, "", Remedy{Interval80: in}, true},
		{"no interval", nil, "", Remedy{}, true},
		{"extrapolates", in, "", Remedy{Interval80: in, Extrapolates: x}, false},
		{"interval outside, baseline inside", in, "", Remedy{Interval80: out}, false},
		{"interval outside, no baseline interval", nil, "", Remedy{Interval80: out}, false},
		{"both outside", out, "", Remedy{Interval80: out}, true},
		{"both outside, remedy extrapolates further", out, "", Remedy{Interval80: out, Extrapolates: x}, false},
		{"unreliable twin", in, "the twin misses the run", Remedy{Interval80: in}, false},
	} {
		w := &Predictions{Interval80: tt.base, Unreliable: tt.unreliable}
		if got := w.Ranked(tt.r); got != tt.want {
			t.Errorf("%s: ranked %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Best is the first helpful remedy that is ranked and was simulated.
func TestBestSkipsUnranked(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	out := &Interval{TTFT: 5.5, Outside: true}
	w := &Predictions{Interval80: &Interval{TTFT: 0.1}, Remedies: []Remedy{
		{Lever: "error", Error: "does not fit"},
		{Lever: "outside", Effect: f(0.1), Interval80: out},
		{Lever: "inside", Effect: f(0.5)},
	}}
	if r, ok := w.Best(); !ok || r.Lever != "inside" {
		t.Errorf("best %q (%v), want inside", r.Lever, ok)
	}
	w.Remedies = w.Remedies[:2]
	if r, ok := w.Best(); ok {
		t.Errorf("best %q, want none: the only helpful one lies outside the envelope", r.Lever)
	}
}
