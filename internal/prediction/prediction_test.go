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
