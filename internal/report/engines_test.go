package report

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
)

// llamaRecord turns a synthetic request into what bench records from
// llama-server: its split is llama.cpp's timings (prompt_ms as prefill,
// predicted_ms as decode), with no queue wait.
func llamaRecord(s synthReq, id int) *latency.Record {
	s.split = true
	r := s.record(id)
	if r.Server != nil {
		r.Server = &latency.ServerSplit{PrefillNS: r.Server.PrefillNS, DecodeNS: r.Server.DecodeNS,
			Source: latency.SourceLlamaCppTimings, Engine: latency.EngineLlamaCpp, Unreported: []string{latency.SplitQueue}}
	}
	return r
}

// TestQueueInferredFromLlamaCppTimings checks the inference by hand: four
// requests pay 15 ms of HTTP and tokenization each and wait 0, 100, 300
// and 500 ms for a slot before 20 ms of prompt processing. The least gap
// (15 ms) is every request's; the rest is each one's queue wait.
func TestQueueInferredFromLlamaCppTimings(t *testing.T) {
	c := NewCollector(Options{})
	for i, wait := range []float64{0, 100, 300, 500} {
		c.Add(llamaRecord(synthReq{at: float64(i) * 1000, send: 0.5, net: 15, sq: wait, prefill: 20, tpot: 5, output: 4, input: 30}, i))
	}
	a := c.analyse()
	if a.queue == nil || a.queue.Requests != 4 || a.queue.FloorMS != 15 {
		t.Fatalf("queue inference %+v, want 4 requests, floor 15 ms", a.queue)
	}
	for k, want := range []int64{0, 100e6, 300e6, 500e6} {
		s := a.rows[a.ok[k]].stages()
		if s[stSQ] != want || s[stPrefill] != 20e6 || s[stUnattr] != 15e6 || s[stNetwork] != 0 {
			t.Errorf("request %d: queue %d, prefill %d, unattributed %d, network %d; want queue %d, prefill 20 ms, unattributed 15 ms, no network",
				k, s[stSQ], s[stPrefill], s[stUnattr], s[stNetwork], want)
		}
	}
	rep := c.Report()
	if rep.Summary.ServerEvidence[latency.SourceLlamaCppTimings] != 4 || rep.Summary.QueueInferred == nil {
		t.Errorf("summary %+v", rep.Summary)
	}
	notes := strings.Join(rep.Notes, "\n")
	for _, s := range []string{"llama.cpp's per-request timings", "4 of 4 requests: ", "queue wait inferred on 4 requests"} {
		if !strings.Contains(notes, s) {
			t.Errorf("notes lack %q:\n%s", s, notes)
		}
	}
	// Twice: the inference reads the rows, not what it wrote into them.
	if again := c.Report(); again.Summary.QueueInferred.FloorMS != 15 {
		t.Errorf("second report: floor %v", again.Summary.QueueInferred.FloorMS)
	}
}

// slotRun is a closed loop of 8 workers on llama-server's 4 slots: each
// request waits about a whole answer (1.7 s) for a slot, then 250 ms of
// prompt processing and 64 tokens at 10 ms; every request pays 15 ms of
// HTTP and tokenization. The server's /metrics show 4 processing and 4
// deferred.
func slotRun() (*results.RunInfo, []*latency.Record) {
	rng := rand.New(rand.NewPCG(3, 9))
	var recs []*latency.Record
	for i := range 200 {
		wait := 1700 + 100*rng.NormFloat64()
		if i < 4 {
			wait = 0 // the first four found a free slot
		}
		recs = append(recs, llamaRecord(synthReq{at: float64(i) * 275, send: 0.3, net: 15 + rng.Float64(), sq: wait,
			prefill: 250 + 10*rng.NormFloat64(), tpot: 10, output: 64, input: 256}, i))
	}
	run := &results.RunInfo{Mode: "closed", Concurrency: 8, Server: &results.ServerInfo{Engine: "llamacpp", Series: []string{"running", "waiting"}}}
	for k := range 50 {
		run.Samples = append(run.Samples, results.ServerSample{AtNS: int64(k) * int64(time.Second), Running: 4, Waiting: 4})
	}
	return run, recs
}

// TestLlamaCppSlotQueueing is the case: 8 workers on 4 slots is
// queueing for a slot, said with llama.cpp's evidence, with or without an
// SLO; never "streams stalled" blamed on the KV cache, never the network.
func TestLlamaCppSlotQueueing(t *testing.T) {
	for _, slo := range []string{"", "ttft:p99<=1s"} {
		t.Run(slo, func(t *testing.T) {
			var opts Options
			if slo != "" {
				opts.SLOs = mustSLOs(t, slo)
			}
			run, recs := slotRun()
			c := NewCollector(opts)
			c.SetRun(*run)
			for _, r := range recs {
				c.Add(r)
			}
			rep := c.Report()
			if len(rep.Findings) == 0 || rep.Findings[0].Rule != RuleServerQueueing {
				t.Fatalf("first finding is not server-queueing: %+v", rep.Findings)
			}
			if g := group(rep.TTFTSplit, "p95+"); g == nil || g.Largest != string(latency.TimingServerQueue) || g.share(latency.StageNetwork) != 0 {
				t.Errorf("TTFT split's tail: %+v, want the server's queue largest and no network", g)
			}
			f := rep.Findings[0]
			for _, s := range []string{"llamacpp:requests_processing peaked at 4", "llamacpp:requests_deferred at 4",
				"timings.prompt_ms", "inferred", "more requests in flight than the server has slots"} {
				if !strings.Contains(f.Evidence, s) {
					t.Errorf("evidence lacks %q: %s", s, f.Evidence)
				}
			}
			if !slices.ContainsFunc(f.Remedies, func(r string) bool { return strings.Contains(r, "-np") }) {
				t.Errorf("remedies lack the slots (-np): %q", f.Remedies)
			}
			for _, g := range rep.Findings {
				if g.Rule == RuleOutsideModel || strings.Contains(g.Evidence, "KV") || strings.Contains(strings.Join(g.Remedies, " "), "closer") {
					t.Errorf("finding blames what the evidence does not show: %+v", g)
				}
			}
		})
	}
}

// TestUnknownSplitNeverBlamesTheNetwork: without a server split a failed
// TTFT SLO's largest term is unattributed, and the finding says what is
// unknown instead of sending the client closer to the server.
func TestUnknownSplitNeverBlamesTheNetwork(t *testing.T) {
	var reqs []synthReq
	for i := range 100 {
		reqs = append(reqs, synthReq{at: float64(i) * 100, net: 5, sq: 400, prefill: 300, tpot: 10, output: 16, input: 100})
	}
	rep := collect(Options{SLOs: mustSLOs(t, "ttft:p99<=500ms")}, reqs)
	i := findingIndex(rep, "slo-breach")
	if i < 0 {
		t.Fatalf("no slo-breach finding: %+v", rep.Findings)
	}
	f := rep.Findings[i]
	if !strings.Contains(f.Evidence, "not known apart") || strings.Contains(strings.Join(f.Remedies, " "), "closer") {
		t.Errorf("finding %+v", f)
	}
}

// TestServerTokenCounters: llama.cpp's token counters over the run
// (llamacpp:prompt_tokens_total, tokens_predicted_total and their
// seconds) are compared with the records' sums by hand, and its time per
// generated token is quoted in the slot-queueing finding. 200 requests of
// 256 prompt and 64 output tokens: 51,200 and 12,800; the counters first
// read 1,000 and 500 (earlier traffic), then grow by exactly the run's
// tokens, or by 10 % more (another client).
func TestServerTokenCounters(t *testing.T) {
	for _, c := range []struct {
		name       string
		extra      float64
		agree      bool
		genMSTotal float64
	}{{"agree", 0, true, 12800 * 40}, {"another client", 0.1, false, 12800 * 1.1 * 40}} {
		t.Run(c.name, func(t *testing.T) {
			run, recs := slotRun()
			run.Server.Series = append(run.Server.Series, "tokens", "engine_time")
			run.Server.TokenCounters = []string{"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total",
				"llamacpp:prompt_seconds_total", "llamacpp:tokens_predicted_seconds_total"}
			n := len(run.Samples)
			for k := range run.Samples {
				f := float64(k) / float64(n-1) * (1 + c.extra)
				run.Samples[k].PromptTokens, run.Samples[k].GenerationTokens = 1000+51200*f, 500+12800*f
				run.Samples[k].PromptSeconds, run.Samples[k].GenerationSeconds = 7+51200*f*0.9/1e3, 3+c.genMSTotal*float64(k)/float64(n-1)/1e3
			}
			col := NewCollector(Options{})
			col.SetRun(*run)
			for _, r := range recs {
				col.Add(r)
			}
			rep := col.Report()
			st := rep.Summary.ServerTokens
			if st == nil {
				t.Fatal("no server_tokens in the summary")
			}
			wantP, wantG := 51200*(1+c.extra), 12800*(1+c.extra)
			if !near(st.PromptTokens, wantP) || !near(st.GeneratedTokens, wantG) || st.RecordsPromptTokens != 51200 || st.RecordsOutputTokens != 12800 {
				t.Errorf("server tokens %+v, want %v prompt and %v generated against the records' 51200 and 12800", st, wantP, wantG)
			}
			if !near(st.PromptMSPerToken, 0.9) || !near(st.GenerationMSPerToken, 40) {
				t.Errorf("ms per token: prompt %v (want 0.9), generation %v (want 40)", st.PromptMSPerToken, st.GenerationMSPerToken)
			}
			notes := strings.Join(rep.Notes, "\n")
			want := "they agree"
			if !c.agree {
				want = "they differ"
			}
			if !strings.Contains(notes, "llamacpp:prompt_tokens_total, llamacpp:tokens_predicted_total") || !strings.Contains(notes, want) {
				t.Errorf("notes lack the counters or %q:\n%s", want, notes)
			}
			if k := findingIndex(rep, "server-queueing"); k < 0 || !strings.Contains(rep.Findings[k].Evidence, "40.00 ms per generated token") {
				t.Errorf("the queueing finding does not quote the time per generated token: %+v", rep.Findings)
			}
		})
	}
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-6*math.Max(1, math.Abs(want)) }

// TestServerTokenCountersWithPrefixCache: vLLM's prompt-token counter
// (and tokentrace serve's, which reports as vLLM) counts every prompt
// token, cached ones included, llama.cpp's only those it computed. 200
// requests of 256 prompt tokens, 64 of them from the cache: vLLM's
// counter grows by 51,200 and agrees with the records' input; llama.cpp's
// grows by 38,400 and agrees with input − cached. Each answer also
// reasoned for 16 tokens, which the generation counter counts: 16,000.
func TestServerTokenCountersWithPrefixCache(t *testing.T) {
	for _, c := range []struct {
		engine, counter string
		grew            float64
		records         int64
		words           string
	}{
		{"vllm", "vllm:prompt_tokens_total", 51200, 51200, "prompt tokens (cached ones included)"},
		{"llamacpp", "llamacpp:prompt_tokens_total", 38400, 38400, "prompt tokens computed"},
	} {
		t.Run(c.engine, func(t *testing.T) {
			run, recs := slotRun()
			run.Server.Engine = c.engine
			run.Server.Series = append(run.Server.Series, "tokens")
			run.Server.TokenCounters = []string{c.counter, "generated"}
			n := len(run.Samples)
			for k := range run.Samples {
				f := float64(k) / float64(n-1)
				run.Samples[k].PromptTokens, run.Samples[k].GenerationTokens = c.grew*f, (12800+3200)*f
			}
			col := NewCollector(Options{})
			col.SetRun(*run)
			for _, r := range recs {
				r.CachedTokens, r.ReasoningTokens = 64, 16 // generated: 64 answer + 16 reasoning tokens
				col.Add(r)
			}
			rep := col.Report()
			st := rep.Summary.ServerTokens
			if st == nil || st.RecordsPromptTokens != c.records || st.RecordsOutputTokens != 16000 {
				t.Fatalf("server tokens %+v, want the records' %d prompt and 16000 generated tokens", st, c.records)
			}
			notes := strings.Join(rep.Notes, "\n")
			if !strings.Contains(notes, "they agree") || !strings.Contains(notes, c.words) {
				t.Errorf("notes lack %q and agreement:\n%s", c.words, notes)
			}
		})
	}
}
