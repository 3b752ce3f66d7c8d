package calibrate

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// At TP 1 no all-reduce runs, so a deployment's candidates leave its
// latency and ring step out; the empty set (the group's fit stands) comes
// first.
func TestDeploymentCandidates(t *testing.T) {
	core := []string{"compute", "memory", "step_overhead_us"}
	tp := append(append([]string(nil), core...), "all_reduce_latency_us", "ring_step_us")
	over := []string{"seq_overhead_us", "context_overhead_ns"}
	for _, c := range []struct {
		tp   int
		want [][]string
	}{
		{1, [][]string{nil, core, append(append([]string(nil), core...), over...)}},
		{4, [][]string{nil, tp, append(append([]string(nil), tp...), over...)}},
	} {
		if d := cmp.Diff(c.want, DeploymentCandidates(c.tp)); d != "" {
			t.Errorf("TP %d (-want +got):\n%s", c.tp, d)
		}
	}
}

// tinyDeployment is a deployment's rows measured by the twin itself with
// truth: three sweeps of short requests at one and four clients.
func tinyDeployment(t *testing.T, truth perfmodel.Efficiency) []PublicRow {
	t.Helper()
	var rows []PublicRow
	for _, in := range []int{64, 256, 1024} {
		for _, c := range []int{1, 4} {
			r := PublicRow{ID: fmt.Sprint(in, "-", c), Engine: "NIM (TensorRT-LLM)", Model: "Llama-3-8B", GPU: "H100-SXM", TP: 1, DType: "fp16", KVDType: "fp16",
				Input: in, Output: 8, Concurrency: c}
			pr, err := Predict(r, truth)
			if err != nil {
				t.Fatal(err)
			}
			r.TTFT, r.TPOT, r.E2E = pr.TTFT, pr.TPOT, pr.E2E
			rows = append(rows, r)
		}
	}
	return rows
}

// FitPublicConstants moves only the constants it names; the others keep
// the start exactly, and a name it does not fit is an error.
func TestFitPublicConstantsMovesOnlyTheNamed(t *testing.T) {
	start, _ := engineForDefaults(t, PublicRow{ID: "r", Engine: "vLLM", Model: "Llama-3-8B", GPU: "H100-SXM", TP: 1, DType: "fp16", KVDType: "fp16", Input: 64, Output: 8, Concurrency: 1})
	truth := start
	truth.Compute *= 0.7
	truth.Memory *= 0.8
	truth.SeqOverhead *= 3
	rows := tinyDeployment(t, truth)
	got, n, err := FitPublicConstants(context.Background(), rows, start, []string{"compute", "memory"}, 40)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || got.Compute == start.Compute || got.Memory == start.Memory {
		t.Errorf("%d predictions: compute %g → %g, memory %g → %g: want both moved", n, start.Compute, got.Compute, start.Memory, got.Memory)
	}
	got.Compute, got.Memory = start.Compute, start.Memory
	if got != start {
		t.Errorf("constants not named moved: %+v, start %+v", got, start)
	}
	if _, _, err := FitPublicConstants(context.Background(), rows, start, []string{"interconnect"}, 10); err == nil {
		t.Error("fitting interconnect: no error")
	}
	if got, n, err := FitPublicConstants(context.Background(), rows, start, nil, 10); err != nil || n != 0 || got != start {
		t.Errorf("no constants named: %d predictions, %v, constants moved %v", n, err, got != start)
	}
}

// On rows a faster deployment than its group's measured, leave-one-sweep-
// out prefers fitting constants to the group's fit, and the chosen fit
// prices the rows below the start.
func TestFitDeploymentChoosesOnTheRowsAlone(t *testing.T) {
	start, _ := engineForDefaults(t, PublicRow{ID: "r", Engine: "vLLM", Model: "Llama-3-8B", GPU: "H100-SXM", TP: 1, DType: "fp16", KVDType: "fp16", Input: 64, Output: 8, Concurrency: 1})
	truth := start
	truth.Compute *= 1.3
	truth.Memory *= 0.8
	rows := tinyDeployment(t, truth)
	f, err := FitDeployment(context.Background(), rows, start, DeploymentCandidates(1), 30, 60)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.CVLoss) != 3 || len(f.Fitted) == 0 || !(f.CVLoss[1] < f.CVLoss[0] || f.CVLoss[2] < f.CVLoss[0]) {
		t.Fatalf("chose %v by leave-one-sweep-out losses %v: want a fit, cheaper than the start", f.Fitted, f.CVLoss)
	}
	before, err := PublicLoss(rows, start)
	if err != nil {
		t.Fatal(err)
	}
	after, err := PublicLoss(rows, f.Eff)
	if err != nil {
		t.Fatal(err)
	}
	if !(after < before/4) {
		t.Errorf("loss %.4f at the start, %.4f fitted: want a quarter or less", before, after)
	}
	one := rows[:2] // one sweep: nothing to leave out
	if f, err := FitDeployment(context.Background(), one, start, DeploymentCandidates(1), 30, 60); err != nil || f.Eff != start || f.Fitted != nil {
		t.Errorf("one sweep: %v, fitted %v", err, f.Fitted)
	}
}
