package calibrate

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/stats"
)

var investigate = flag.Bool("investigate", false, "print the twin against every public row")
var gapFlag = flag.Duration("gap", 0, "client turnaround")
var jitterFlag = flag.Duration("jitter", 0, "client jitter")
var roundsFlag = flag.Int("rounds", 0, "rounds")
var intakeFlag = flag.Duration("intake", 0, "intake fixed")
var intakeTokFlag = flag.Duration("intake-tok", 0, "intake per token")
var budgetFlag = flag.Int("budget", 0, "token budget")
var onlyFlag = flag.String("only", "", "row id substring")

func TestInvestigate(t *testing.T) {
	if !*investigate {
		t.Skip("-investigate")
	}
	var tt, tp, ee []float64
	rows, err := LoadPublic("../perfmodel/testdata/loaded.csv")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Concurrency < 8 || r.Concurrency > 100 || !strings.Contains(r.ID, *onlyFlag) {
			continue
		}
		g, _ := perfmodel.LookupGPU(r.GPU)
		pr, err := Predict(r, Twin{Eff: perfmodel.DefaultEfficiency(g), Gap: *gapFlag, IntakeFixed: *intakeFlag, IntakePerToken: *intakeTokFlag, Rounds: *roundsFlag, Jitter: *jitterFlag, Budget: *budgetFlag})
		if err != nil {
			t.Logf("%s: %v", r.ID, err)
			continue
		}
		e := func(p, m float64) string {
			if m == 0 {
				return "   -   "
			}
			return fmt.Sprintf("%+6.0f%%", 100*(p-m)/m)
		}
		if r.TTFT > 0 {
			tt = append(tt, math.Abs(pr.TTFT-r.TTFT)/r.TTFT)
		}
		if r.TPOT > 0 {
			tp = append(tp, math.Abs(pr.TPOT-r.TPOT)/r.TPOT)
		}
		if r.E2E > 0 {
			ee = append(ee, math.Abs(pr.E2E-r.E2E)/r.E2E)
		}
		fmt.Printf("%-50s ttft %8.1f %8.1f %s  tpot %6.2f %6.2f %s  e2e %s\n", r.ID, r.TTFT, pr.TTFT, e(pr.TTFT, r.TTFT), r.TPOT, pr.TPOT, e(pr.TPOT, r.TPOT), e(pr.E2E, r.E2E))
	}
	fmt.Printf("MEDIAN ttft %.1f%% tpot %.1f%% e2e %.1f%% (%d rows)\n", 100*median(tt), 100*median(tp), 100*median(ee), len(tt))
	_ = time.Second
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return stats.Percentile(s, 50)
}
