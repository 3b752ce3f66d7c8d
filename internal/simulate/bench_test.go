package simulate

import (
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// azureConv is the Azure LLM inference trace of conversation requests
// (2023), from Patel et al., "Splitwise: Efficient generative LLM inference
// using phase splitting", ISCA 2024; Azure/AzurePublicDataset, CC-BY 4.0.
const azureConv = "../../../shared/data/azure-llm-2023/conv.csv"

// convTrace replays the whole trace with its times multiplied by scale.
func convTrace(b *testing.B, scale float64) (*workload.Replay, workload.Load) {
	trace, err := workload.ReadTraceFile(azureConv, workload.TraceFilter{})
	if errors.Is(err, fs.ErrNotExist) {
		b.Skipf("Azure trace not found at %s (the shared data is absent)", azureConv)
	}
	if err != nil {
		b.Fatal(err)
	}
	rp, err := workload.NewReplay(trace.Rows, workload.ReplayConfig{Scale: scale, Chat: true, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	return rp, workload.Load{Arrivals: rp.Arrivals, Requests: rp.Len()}
}

// defaultEngine is simulate's default engine (serve's: Llama-3.1-8B on one
// H100-SXM with vLLM's settings).
func defaultEngine(b *testing.B) engine.Config {
	ec, _, err := engine.DefaultOptions().Config()
	if err != nil {
		b.Fatal(err)
	}
	return ec
}

// BenchmarkSimulateAzureConv measures the simulator on the whole Azure
// conversation trace (19,366 requests over an hour): on one replica at the
// trace's own times, in simulated requests per CPU-second, with and
// without the per-token instants in the records; and on 8 replicas behind
// least_outstanding and prefix_affinity at 10× the trace's rate (times
// × 0.1), in wall time per run.
func BenchmarkSimulateAzureConv(b *testing.B) {
	for _, tc := range []struct {
		name     string
		scale    float64
		replicas int
		balancer string
		noTimes  bool
		recycle  bool
	}{
		{"1-replica", 1, 1, "", false, false},
		{"1-replica-recycled", 1, 1, "", false, true},
		{"1-replica-no-token-times", 1, 1, "", true, true},
		{"8-replicas-10x", 0.1, 8, route.NameLeastOutstanding, false, true},
		{"8-replicas-10x-prefix-affinity", 0.1, 8, route.NamePrefixAffinity, false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rp, load := convTrace(b, tc.scale)
			cfg := Config{Engine: defaultEngine(b), Replicas: tc.replicas, Balancer: tc.balancer, Workload: rp, Load: load,
				IgnoreEOS: true, NoTokenTimes: tc.noTimes, RecycleRecords: tc.recycle, Model: "m"}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := process.SelfCPU()
			var n, ok int
			var end time.Duration
			for range b.N {
				res, err := Run(cfg, func(r *latency.Record) {
					n++
					if r.OK() {
						ok++
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				end = res.End
			}
			cpu := (process.SelfCPU() - cpu0).Seconds()
			b.ReportMetric(float64(n)/cpu, "req/cpu-s")
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "wall-s/run")
			b.ReportMetric(end.Seconds(), "virtual-s")
			b.ReportMetric(float64(ok)/float64(n), "ok-frac")
		})
	}
}
