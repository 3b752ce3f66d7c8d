package serve

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestMetricsGolden checks the /metrics exposition against
// testdata/metrics.golden for hand-chosen observations:
//
//	request A: received 0, arrival 1 ms, scheduled 101 ms, first token 251 ms,
//	           finished 1.251 s, 10 prompt tokens, output 5 (finish length)
//	           → TTFT 0.251 s (bucket 0.5), queue 0.1 s, prefill 0.15 s,
//	             decode 1.0 s (bucket 1.0), e2e 1.251 s (bucket 1.5)
//	request B: aborted by its client
//	inter-token gaps: 20 ms and 30 ms (buckets 0.025 and 0.05)
//	write lateness: 0.3 ms (bucket 0.0005)
//	GenAI: request A as a text completion (TTFT 0.251 s in bucket 0.5,
//	       TPOT 1.0 s / 4 = 0.25 s in bucket 0.3, duration 1.251 s in
//	       bucket 1.28, usage 10 in bucket 16 and 5 in bucket 16), and a
//	       chat request that never finished (duration 5 ms in bucket
//	       0.01, error_type incomplete)
func TestMetricsGolden(t *testing.T) {
	stats := engine.Stats{Running: 3, Waiting: 2, KVUsage: 0.25, PrefixQueries: 640, PrefixHits: 320, Preemptions: 4}
	m := NewMetrics("sim-model", func() engine.Stats { return stats }, CacheInfo{
		BlockSize: 16, NumGPUBlocks: 1000, EnablePrefixCaching: true, CacheDType: "auto", GPUMemoryUtilization: 0.9,
	}, SchedulerInfo{EnableChunkedPrefill: true, MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, Policy: "fcfs", Family: "llamacpp"})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	m.firstToken(251*time.Millisecond, 10)
	m.tokens(1, 0, true)
	m.tokens(2, 20*time.Millisecond, false)
	m.tokens(2, 30*time.Millisecond, false)
	m.finished(engine.Timeline{Arrival: ms(1), Scheduled: ms(101), FirstToken: ms(251), Finished: ms(1251),
		PromptTokens: 10, OutputTokens: 5, Finish: engine.FinishLength}, t0)
	m.aborted()
	m.genAI(tracing.GenAIRequest{Operation: "text_completion", Model: "sim-model", TTFT: 251 * time.Millisecond,
		TPOT: 250 * time.Millisecond, Duration: 1251 * time.Millisecond, InputTokens: 10, OutputTokens: 5})
	m.genAI(tracing.GenAIRequest{Operation: "chat", Model: "sim-model", Duration: 5 * time.Millisecond, ErrorType: "incomplete"})
	m.lateness(300 * time.Microsecond)
	m.httpError("429")
	m.httpError("reset")

	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f); err != nil {
		t.Error(err)
	}
}

// TestMetricsFromRequests checks the counters against requests whose token
// counts are known exactly.
func TestMetricsFromRequests(t *testing.T) {
	s := startServer(t, testConfig(time.Millisecond))
	for range 3 {
		resp := post(t, context.Background(), s.URL()+"/completions",
			`{"model":"sim-model","prompt":"one two three four","max_tokens":5,"ignore_eos":true,"stream":true}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	m := s.metrics
	// The running gauge is published after the engine's step, which may
	// come a moment after the client has read the last token.
	for deadline := time.Now().Add(2 * time.Second); testutil.ToFloat64(m.running) != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"generation tokens", testutil.ToFloat64(m.generationTokens), 15},
		{"prompt tokens", testutil.ToFloat64(m.promptTokens), 12},
		{"success length", testutil.ToFloat64(m.successLength), 3},
		{"success stop", testutil.ToFloat64(m.successStop), 0},
		{"running", testutil.ToFloat64(m.running), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %g, want %g", c.name, c.got, c.want)
		}
	}
	n, err := testutil.GatherAndCount(s.Registry(), "vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds")
	if err != nil || n != 2 {
		t.Errorf("histogram series %d, %v", n, err)
	}
	if c := histCount(t, s.Registry(), "vllm:time_to_first_token_seconds"); c != 3 {
		t.Errorf("TTFT observations %d, want 3", c)
	}
	// The GenAI histograms beside them, by their Prometheus names.
	for _, name := range []string{"gen_ai_server_time_to_first_token_seconds", "gen_ai_server_time_per_output_token_seconds",
		"gen_ai_server_request_duration_seconds"} {
		if c := histCount(t, s.Registry(), name); c != 3 {
			t.Errorf("%s observations %d, want 3", name, c)
		}
	}
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	usage := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "gen_ai_client_token_usage" {
			for _, mt := range mf.GetMetric() {
				for _, l := range mt.GetLabel() {
					if l.GetName() == "gen_ai_token_type" {
						usage[l.GetValue()] += mt.GetHistogram().GetSampleSum()
					}
				}
			}
		}
	}
	if usage["input"] != 12 || usage["output"] != 15 {
		t.Errorf("gen_ai_client_token_usage sums %v, want input 12 and output 15", usage)
	}
	if c := histCount(t, s.Registry(), "tokentrace:stream_write_lateness_seconds"); c < 3 {
		t.Errorf("lateness observations %d, want at least one per request", c)
	}
}

func histCount(t *testing.T, g prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
