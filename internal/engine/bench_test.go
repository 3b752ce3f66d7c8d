package engine

import (
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// azureConv is the Azure LLM inference trace of conversation requests
// (2023), from Patel et al., "Splitwise: Efficient generative LLM inference
// using phase splitting", ISCA 2024; Azure/AzurePublicDataset, CC-BY 4.0.
const azureConv = "../../../shared/data/azure-llm-2023/conv.csv"

// traceArrivals turns the trace into arrivals with its exact input and
// output lengths, arrival offsets divided by speedup.
func traceArrivals(b *testing.B, speedup float64, maxModelLen int) []Arrival {
	trace, err := workload.ReadTraceFile(azureConv, workload.TraceFilter{})
	if errors.Is(err, fs.ErrNotExist) {
		b.Skipf("Azure trace not found at %s (shared data absent)", azureConv)
	}
	if err != nil {
		b.Fatal(err)
	}
	arr := make([]Arrival, 0, len(trace.Rows))
	for _, r := range trace.Rows {
		in, out := max(r.Input, 1), max(r.Output, 1)
		if in+out > maxModelLen {
			continue
		}
		arr = append(arr, Arrival{At: time.Duration(float64(r.At) / speedup),
			Request: Request{PromptLen: in, MaxTokens: out, IgnoreEOS: true}})
	}
	return arr
}

// BenchmarkSimulateAzureConv measures virtual-time simulation speed on the
// Azure conversation trace's lengths, Llama-3.1-8B on one H100: at the
// trace's own arrival times (light load) and with arrivals compressed 20×
// (a busy engine: large batches, queueing, preemption).
func BenchmarkSimulateAzureConv(b *testing.B) {
	for _, tc := range []struct {
		name    string
		speedup float64
	}{{"trace-time", 1}, {"compressed-20x", 20}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg, _, err := PerfConfig(Config{MaxModelLen: 16384}, "Llama-3.1-8B", "H100-SXM", 1, 0)
			if err != nil {
				b.Fatal(err)
			}
			arr := traceArrivals(b, tc.speedup, cfg.MaxModelLen)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := process.SelfCPU()
			var steps int64
			for range b.N {
				res, err := Simulate(cfg, arr, SimOptions{})
				if err != nil {
					b.Fatal(err)
				}
				steps = res.Stats.Steps
			}
			cpu := (process.SelfCPU() - cpu0).Seconds()
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(len(arr)*b.N)/sec, "req/s")
			b.ReportMetric(float64(len(arr)*b.N)/cpu, "req/cpu-s")
			b.ReportMetric(float64(steps*int64(b.N))/sec, "steps/s")
		})
	}
}
