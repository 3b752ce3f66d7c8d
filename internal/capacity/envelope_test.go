package capacity

import (
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/engine"
)

// A plan's answer is a candidate inside the twin's envelope while any
// meets the SLOs; a cheaper one outside it is shown, flagged, not chosen.
func TestPlanAnswerStaysInsideTheEnvelope(t *testing.T) {
	eng := engine.DefaultOptions()
	eng.Engine = "trtllm@0.x"
	eng, err := eng.WithEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := Deployment{Engine: eng, Replicas: 1}
	inside := &Point{Measured: 100, InputTokens: 100 * 1000, OutputTokens: 100 * 500, PeakBatch: 64, KeepsUp: true, Meets: true}
	outside := *inside
	outside.PeakBatch, outside.Preemptions = 400, 7
	pl := &Plan{Objective: Objective{TargetRate: 1}, Candidates: []*Candidate{
		{ID: 1, Deployment: d, USDPerHour: 2, Status: Meets, Check: &outside},
		{ID: 2, Deployment: d, USDPerHour: 3, Status: Meets, Check: inside},
	}}
	pl.finish()
	if pl.Best == nil || pl.Best.ID != 2 {
		t.Fatalf("answer %+v, want #2, the candidate inside the envelope", pl.Best)
	}
	c := pl.Candidates[0]
	if len(c.Outside) != 2 || !strings.Contains(c.Outside[0], "400 requests running at once") || !strings.Contains(c.Outside[1], "7 KV-cache preemptions") {
		t.Errorf("#1's flags %q", c.Outside)
	}
	pl.Candidates = pl.Candidates[:1]
	pl.Best = nil
	pl.finish()
	if pl.Best == nil || pl.Best.ID != 1 || len(pl.Best.Outside) == 0 {
		t.Errorf("with none inside, the best outside is the answer, flagged: %+v", pl.Best)
	}
}
