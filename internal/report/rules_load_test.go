package report

import (
	"slices"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// ollamaRun is a closed loop of one worker against Ollama (its durations
// as the split, no queue wait reported), each request's model load and
// prefill given in milliseconds.
func ollamaRun(reqs ...[2]float64) *Report {
	c := NewCollector(Options{})
	at := 0.0
	for i, lp := range reqs {
		load := lp[0]
		s := synthReq{at: at, send: 0.1, net: 2 + load, prefill: lp[1], tpot: 5, output: 20, input: 64, split: true}
		r := s.record(i)
		r.Server.Source, r.Server.Engine, r.Server.Unreported = latency.SourceOllamaDurations, latency.EngineOllama, []string{latency.SplitQueue}
		r.Server.LoadNS = int64(load * msNS)
		c.Add(r)
		at = float64(r.EndNS)/msNS + 1
	}
	return c.Report()
}

func TestModelLoadRule(t *testing.T) {
	warm := make([][2]float64, 19)
	for i := range warm {
		warm[i] = [2]float64{0.1, 10}
	}
	// A cold request: 334 ms of load, and its prefill slower than the
	// warm ones' too (the first compute after a load), by less.
	rep := ollamaRun(append([][2]float64{{334, 250}}, warm...)...)
	k := slices.IndexFunc(rep.Findings, func(f Finding) bool { return f.Rule == RuleModelLoad })
	if k < 0 {
		t.Fatalf("no model-load finding: %+v", rep.Findings)
	}
	f := rep.Findings[k]
	if f.Numbers["loaded_requests"] != 1 || f.Numbers["first_load_ms"] != 334 || f.Numbers["first_ttft_ms"] < 584 {
		t.Errorf("numbers %v", f.Numbers)
	}
	for _, want := range []string{"Ollama", "load_duration", "334", "OLLAMA_KEEP_ALIVE"} {
		if !strings.Contains(f.Evidence+strings.Join(f.Remedies, " "), want) {
			t.Errorf("the finding does not say %q: %s", want, f.Evidence)
		}
	}
	// The load is no queue wait: the inferred queue of the cold request is
	// its gap less the load, about what every request pays.
	if slices.ContainsFunc(rep.Findings, func(f Finding) bool { return f.Rule == RuleServerQueueing }) {
		t.Errorf("the load is called queueing: %+v", rep.Findings)
	}
	if q := rep.Summary.QueueInferred; q == nil || q.FloorMS > 2.5 {
		t.Errorf("queue inference %+v", q)
	}

	// Warm throughout, a load under 20 ms, a load smaller than the
	// prefill's excess: none.
	for name, reqs := range map[string][][2]float64{"warm": warm, "small load": append([][2]float64{{15, 10}}, warm...),
		"a long prompt": append([][2]float64{{60, 500}}, warm...)} {
		if rep := ollamaRun(reqs...); slices.ContainsFunc(rep.Findings, func(f Finding) bool { return f.Rule == RuleModelLoad }) {
			t.Errorf("%s: a model-load finding: %+v", name, rep.Findings)
		}
	}
}

// Queueing in front of Ollama is named with Ollama's own evidence: its
// prompt processing in the tail and the wait inferred before it.
func TestServerQueueingCitesOllama(t *testing.T) {
	c := NewCollector(Options{})
	for i := range 40 {
		s := synthReq{at: float64(i) * 20, send: 0.1, net: 2 + 10*float64(i), prefill: 10, tpot: 5, output: 20, input: 64, split: true}
		r := s.record(i)
		r.Server.Source, r.Server.Engine, r.Server.Unreported = latency.SourceOllamaDurations, latency.EngineOllama, []string{latency.SplitQueue}
		c.Add(r)
	}
	rep := c.Report()
	k := slices.IndexFunc(rep.Findings, func(f Finding) bool { return f.Rule == RuleServerQueueing })
	if k < 0 {
		t.Fatalf("no queueing finding: %+v", rep.Findings)
	}
	for _, want := range []string{"OLLAMA_NUM_PARALLEL", "prompt_eval_duration", "Ollama reports no queue wait"} {
		if !strings.Contains(rep.Findings[k].Evidence, want) {
			t.Errorf("the finding does not say %q: %s", want, rep.Findings[k].Evidence)
		}
	}
}
