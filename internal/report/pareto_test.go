package report

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// paretoSweep is four sweep points, n requests spread evenly over one
// second each, 50 ms of prefill and 11 output tokens at a fixed TPOT: the
// fourth point has the third's load with a slower decode, so it is
// dominated.
func paretoSweep() []synthReq {
	var out []synthReq
	for k, pt := range []struct {
		n    int
		tpot float64
	}{{10, 10}, {20, 12.5}, {40, 20}, {40, 25}} {
		for i := 0; i < pt.n; i++ {
			out = append(out, synthReq{at: float64(k)*10000 + float64(i)*1000/float64(pt.n),
				prefill: 50, tpot: pt.tpot, input: 100, output: 11, phase: fmt.Sprintf("p%d", k+1)})
		}
	}
	return out
}

// The Pareto points, worked by hand: per user 1000 ÷ TPOT; per GPU the
// phase's 11·n tokens over its span (the last send (n−1)/n s, then 50 ms
// of prefill and 10 TPOTs) divided by the 2 GPUs.
func TestParetoFrontAndKnee(t *testing.T) {
	rep := collect(Options{SLOs: mustSLOs(t, "tpot:p99<=15ms"), GPUs: 2}, paretoSweep())
	if rep.Pareto == nil {
		t.Fatal("no Pareto section")
	}
	perGPU := func(n int, tpot float64) float64 {
		span := float64(n-1)/float64(n) + 0.050 + 10*tpot/1000
		return float64(11*n) / span / 2
	}
	want := &Pareto{Per: "gpu", GPUs: 2, Points: []ParetoPoint{
		{Phase: "p1", PerUser: 100, PerGPU: perGPU(10, 10), Front: true, SLOsMet: true},
		{Phase: "p2", PerUser: 80, PerGPU: perGPU(20, 12.5), Front: true, SLOsMet: true},
		{Phase: "p3", PerUser: 50, PerGPU: perGPU(40, 20), Front: true},
		{Phase: "p4", PerUser: 40, PerGPU: perGPU(40, 25)},
	}, Knee: "p2"}
	if diff := cmp.Diff(want, rep.Pareto, cmpopts.EquateApprox(1e-9, 1e-9), cmpopts.IgnoreFields(Pareto{}, "KneeBasis")); diff != "" {
		t.Errorf("Pareto (-want +got):\n%s", diff)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Pareto front (tok/s per user vs tok/s per GPU (2 GPUs)): p1 (100", "SLO knee: p2"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("the text report lacks %q:\n%s", s, text.String())
		}
	}
	// Without SLOs there is no knee, and without --gpus it is per replica.
	rep = collect(Options{}, paretoSweep())
	if p := rep.Pareto; p.Knee != "" || p.Per != "replica" || math.Abs(p.Points[0].PerGPU-2*perGPU(10, 10)) > 1e-9 {
		t.Errorf("without SLOs or GPUs: knee %q, per %q, p1 %v tok/s", p.Knee, p.Per, p.Points[0].PerGPU)
	}
}

func TestMarkFront(t *testing.T) {
	for _, tc := range []struct {
		name string
		pts  [][2]float64 // per user, per GPU
		want []bool
	}{
		{"a chain", [][2]float64{{100, 10}, {80, 20}, {50, 40}}, []bool{true, true, true}},
		{"one dominates", [][2]float64{{100, 40}, {80, 20}, {50, 10}}, []bool{true, false, false}},
		{"ties both kept", [][2]float64{{100, 10}, {100, 10}}, []bool{true, true}},
		{"equal on one axis", [][2]float64{{100, 10}, {100, 20}}, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pts := make([]ParetoPoint, len(tc.pts))
			for i, p := range tc.pts {
				pts[i] = ParetoPoint{PerUser: p[0], PerGPU: p[1]}
			}
			markFront(pts)
			var got []bool
			for _, p := range pts {
				got = append(got, p.Front)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("front (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParetoChartNamesPointsItCannotDraw: a Pareto point gonum cannot
// place (an infinite tokens/s per user, off the front, the SLO knee) is
// an error naming the chart and what failed, not a chart drawn without
// its points; the other charts are still drawn.
func TestParetoChartNamesPointsItCannotDraw(t *testing.T) {
	rep := collect(Options{SLOs: mustSLOs(t, "tpot:p99<=15ms"), GPUs: 2}, paretoSweep())
	if rep.Pareto == nil {
		t.Fatal("no Pareto section")
	}
	if charts, err := rep.Charts(); err != nil || !hasChart(charts, "sweep-pareto") {
		t.Fatalf("finite points: %v, %d charts", err, len(charts))
	}
	rep.Pareto.Points[3].PerUser = math.Inf(1)
	rep.Pareto.Knee = rep.Pareto.Points[3].Phase
	charts, err := rep.Charts()
	if err == nil || !strings.Contains(err.Error(), `chart "Pareto front": Pareto front's points`) {
		t.Errorf("an infinite point: %v", err)
	}
	if hasChart(charts, "sweep-pareto") || !hasChart(charts, "sweep-curve") {
		t.Errorf("charts drawn: %d, want the curve and not the Pareto front", len(charts))
	}
}

func hasChart(charts []Chart, id string) bool {
	for _, c := range charts {
		if c.ID == id {
			return true
		}
	}
	return false
}
