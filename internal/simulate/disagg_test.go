package simulate

import (
	"errors"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// pdEngine prices a step at 1 ms + 10 µs per token computed and pulls KV
// at 1,000 bytes per token over a 1 MB/s link with 1 ms latency.
func pdEngine() engine.Config {
	return engine.Config{
		StepTimer: engine.StepTimerFunc(func(b *perfmodel.Batch) time.Duration {
			n := 0
			for _, s := range b.Seqs {
				n += s.NewTokens
			}
			return time.Millisecond + time.Duration(n)*10*time.Microsecond
		}),
		BlockSize: 16, NumBlocks: 512, MaxModelLen: 2048, MaxNumSeqs: 8, MaxNumBatchedTokens: 512,
		KVBytesPerToken: 1000, KVLink: perfmodel.Link{Name: "test", BytesPerSecond: 1e6, Latency: time.Millisecond},
	}
}

// One request on an idle 1P1D deployment, by hand: a 40-token prompt
// prefilled in 1.4 ms on the prefill replica; its two full blocks (32
// tokens) pulled in 1 + 32 ms; the decode replica's first step computes
// the last 8 tokens in 1.08 ms; two decode steps of 1.01 ms. TTFT 35.48
// ms, E2E 37.5 ms, each hop's stage in the record, the path summing to
// E2E.
func TestDisaggregatedOneRequestByHand(t *testing.T) {
	ms := func(v float64) int64 { return int64(v * 1e6) }
	recs, res := collect(t, Config{Engine: pdEngine(), PrefillReplicas: 1, Workload: &workload.Synthetic{Input: workload.Fixed(40),
		Output: workload.Fixed(3), Turns: 1, Seed: 1}, IgnoreEOS: true, Load: workload.Load{Rate: 1, Arrival: workload.Constant, Requests: 1}})
	if len(recs) != 1 || !recs[0].OK() || len(res.Replicas) != 2 || res.Replicas[1].Name != "prefill-0" || res.Replicas[1].Requests != 1 {
		t.Fatalf("records %+v, result %+v", recs, res)
	}
	r := recs[0]
	if got := r.FirstTokenNS - r.SentNS; got != ms(35.48) {
		t.Errorf("TTFT %d, want 35.48 ms", got)
	}
	if got := r.EndNS - r.SentNS; got != ms(37.5) {
		t.Errorf("E2E %d, want 37.5 ms", got)
	}
	want := map[string]int64{"prefill.prefill_queue": 0, "prefill.prefill": ms(1.4), "server.kv_transfer": ms(33),
		"server.decode_queue": 0, "server.first_decode": ms(1.08), "server.server_decode": ms(2.02)}
	for _, s := range r.Timing {
		k := string(s.Hop) + "." + s.Name
		if w, ok := want[k]; !ok || w != s.NS {
			t.Errorf("%s = %d, want %d", k, s.NS, w)
		}
		delete(want, k)
	}
	if len(want) > 0 {
		t.Errorf("stages missing: %v", want)
	}
	p, _ := r.Path()
	if p.Sum() != r.EndNS-r.IntendedNS || len(p.Notes) > 0 {
		t.Errorf("path %+v sums to %d, E2E %d", p, p.Sum(), r.EndNS-r.IntendedNS)
	}
	if r.InputTokens != 40 || r.OutputTokens != 3 || r.Server != nil {
		t.Errorf("input %d, output %d, split %+v", r.InputTokens, r.OutputTokens, r.Server)
	}
}

// 1P for 3D under long prompts queues for the prefill replica; the same
// load on 3P1D queues for neither pool as much, and every record's path
// carries the P/D hops.
func TestDisaggregatedRatioMovesTheQueue(t *testing.T) {
	ec := h100(t)
	ec.KVLink, _ = perfmodel.LookupLink("rdma-400g")
	run := func(p, d int) (prefillQ, decodeQ time.Duration) {
		recs, _ := collect(t, Config{Engine: ec, PrefillReplicas: p, Replicas: d, Workload: synthetic(4000, 32), IgnoreEOS: true,
			Load: workload.Load{Rate: 20, Arrival: workload.Poisson, Requests: 200, Seed: 3}})
		for _, r := range recs {
			if !r.OK() {
				t.Fatalf("%s failed: %s", r.ID, r.Error)
			}
			for _, s := range r.Timing {
				switch {
				case s.Hop == latency.HopPrefill && s.Name == latency.PrefillQueue:
					prefillQ += time.Duration(s.NS)
				case s.Hop == latency.HopServer && s.Name == string(latency.TimingDecodeQueue):
					decodeQ += time.Duration(s.NS)
				}
			}
		}
		n := time.Duration(len(recs))
		return prefillQ / n, decodeQ / n
	}
	pq1, dq1 := run(1, 3)
	pq3, _ := run(3, 1)
	t.Logf("1P3D: prefill queue %v, decode queue %v; 3P1D: prefill queue %v", pq1, dq1, pq3)
	if pq1 < 10*dq1 || pq1 < 10*pq3 {
		t.Errorf("1P3D prefill queue %v, decode queue %v; 3P1D prefill queue %v: want 1P3D's prefill queue the largest by far", pq1, dq1, pq3)
	}
}

// The KV pull of TestDisaggregatedOneRequestByHand (32 tokens × 1,000
// bytes at 1 MB/s per link, 1 ms latency) on decode replicas of TP 2:
// from prefill replicas of the same TP two shards move at once (17 ms);
// from a prefill pool of its own engine at TP 1, one (33 ms).
func TestDisaggregatedTransferShardsByTP(t *testing.T) {
	ms := func(v float64) int64 { return int64(v * 1e6) }
	tests := []struct {
		name      string
		prefillTP int // 0: no engine of its own
		want      int64
	}{
		{"the same engine", 0, ms(17)},
		{"prefill TP 1", 1, ms(33)},
		{"prefill TP 4", 4, ms(17)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ec := pdEngine()
			ec.TP = 2
			cfg := Config{Engine: ec, PrefillReplicas: 1, Workload: &workload.Synthetic{Input: workload.Fixed(40),
				Output: workload.Fixed(3), Turns: 1, Seed: 1}, IgnoreEOS: true, Load: workload.Load{Rate: 1, Arrival: workload.Constant, Requests: 1}}
			if tt.prefillTP > 0 {
				pe := pdEngine()
				pe.TP = tt.prefillTP
				cfg.PrefillEngine = &pe
			}
			recs, _ := collect(t, cfg)
			if len(recs) != 1 || !recs[0].OK() {
				t.Fatalf("records %+v", recs)
			}
			for _, s := range recs[0].Timing {
				if s.Name == string(latency.TimingKVTransfer) && s.NS != tt.want {
					t.Errorf("kv_transfer %d, want %d", s.NS, tt.want)
				}
			}
		})
	}
}

// prefill_gpu and prefill_tensor_parallel_size give the prefill pool its
// own engine; without prefill_replicas they are refused by name, and
// naming the decode pool's own GPU and TP leaves it the decode pool's.
func TestPrefillEngineOptions(t *testing.T) {
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	base := DefaultOptions()
	base.Engine.Model, base.Engine.GPU, base.Engine.TensorParallelSize = "Llama-3.1-70B", "H100-SXM", 4
	base.Workload.Requests = 1
	tests := []struct {
		name      string
		prefill   int
		gpu       string
		tp        int
		wantTP    int    // the prefill engine's; 0: none of its own
		wantField string // the error's
	}{
		{"TP 8 prefill", 1, "", 8, 8, ""},
		{"A100 prefill at the decode TP", 2, "A100-80GB-SXM", 0, 4, ""},
		{"the decode pool's own", 1, "H100-SXM", 4, 0, ""},
		{"no prefill pool", 0, "", 2, 0, "prefill_tensor_parallel_size"},
		{"no prefill pool, a GPU", 0, "A100-80GB-SXM", 0, 0, "prefill_gpu"},
		{"negative", 1, "", -2, 0, "prefill_tensor_parallel_size"},
		{"weights that do not fit", 1, "", 1, 0, "prefill_tensor_parallel_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			o.PrefillReplicas, o.PrefillGPU, o.PrefillTensorParallelSize = tt.prefill, tt.gpu, tt.tp
			cfg, _, err := o.Config(func(string) bool { return false }, at)
			if tt.wantField != "" {
				var fe *field.Error
				if !errors.As(err, &fe) || fe.Field != tt.wantField {
					t.Fatalf("error %v, want one naming %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.wantTP == 0 && cfg.PrefillEngine != nil:
				t.Errorf("a prefill engine of its own: %s", cfg.PrefillEngine.GPU)
			case tt.wantTP > 0 && (cfg.PrefillEngine == nil || cfg.PrefillEngine.TP != tt.wantTP):
				t.Errorf("prefill engine %+v, want TP %d", cfg.PrefillEngine, tt.wantTP)
			}
			if cfg.Engine.TP != 4 {
				t.Errorf("decode TP %d, want 4", cfg.Engine.TP)
			}
		})
	}
}
