package capacity

import (
	"context"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// planSpace500 is the benchmark's space: every catalog GPU at its smallest
// TP, bf16/fp8 weights, auto/fp8 KV cache, max_num_seqs 128/256, prefix
// caching off/on (no prefix is shared, so on simulates as off), and for the
// target rate the replica counts from the roofline's minimum up: 576
// candidates.
var planSpace500 = []string{
	"gpu=A100-40GB,A100-80GB-SXM,A100-80GB-PCIe,H100-SXM,H100-PCIe,H200,B200,L4,L40S,A10G,RTX-4090,MI300X",
	"tensor-parallel-size=0", "dtype=bf16,fp8", "kv-cache-dtype=auto,fp8", "max-num-seqs=128,256",
	"enable-prefix-caching=false,true",
}

// BenchmarkPlan500 plans Llama-3.1-8B for 20 req/s of 1,000-token prompts
// and 200-token answers under TTFT P99 ≤ 1 s and TPOT P99 ≤ 50 ms over the
// 576-candidate space, with the command's defaults (a minute of arrivals per
// simulation, one simulation per CPU). It reports the wall and CPU seconds
// of one plan and its simulations (docs/performance.md).
func BenchmarkPlan500(b *testing.B) {
	b.ReportAllocs()
	src := &workload.Synthetic{Chat: true, Input: workload.Fixed(1000), Output: workload.Fixed(200), Turns: 1, PrefixGroups: 1, Seed: 1}
	w, err := NewWorkload(src, workload.Load{Rate: 20, Arrival: workload.Poisson, Requests: 100}, true, "bench")
	if err != nil {
		b.Fatal(err)
	}
	s := slos(b, "ttft:p99<=1s,tpot:p99<=50ms")
	space := vary(b, planSpace500...)
	base := h100()
	base.Engine.TensorParallelSize = 0
	var pl *Plan
	for b.Loop() {
		cpu0, wall0 := cpuSeconds(), time.Now()
		pl, err = Search(context.Background(), base, space, w, Objective{SLOs: s, TargetRate: 20}, nil, SearchOptions{Options: Options{Seed: 1}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(wall0).Seconds(), "wall-s/plan")
		b.ReportMetric(cpuSeconds()-cpu0, "cpu-s/plan")
	}
	b.ReportMetric(float64(len(pl.Candidates)), "candidates")
	b.ReportMetric(float64(pl.Simulations), "simulations")
}

// cpuSeconds is the process's user + system CPU time: on a shared machine
// the wall clock says more about the neighbours than about the plan.
func cpuSeconds() float64 { return process.SelfCPU().Seconds() }
