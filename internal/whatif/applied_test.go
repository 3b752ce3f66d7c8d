package whatif

import (
	"testing"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
)

// Admission control through the gateway, by hand: 2 replicas of 8 slots
// and at most 3 waiting each are a limit of 16 in flight and 6 queued.
func TestGatewayApplied(t *testing.T) {
	d := capacity.Deployment{Engine: engine.DefaultOptions(), Replicas: 2, MaxMaxTokens: 256}
	d.Engine.MaxNumSeqs, d.Engine.MaxWaiting = 8, 3
	for _, tt := range []struct{ lever, want string }{
		{"admission-control", "concurrency=16 max-queue=6"},
		{"max-tokens-cap", "max-max-tokens=256"},
		{"max-num-seqs", ""},
	} {
		if got := gatewayApplied(tt.lever, d); got != tt.want {
			t.Errorf("gatewayApplied(%s) = %q, want %q", tt.lever, got, tt.want)
		}
	}
}
