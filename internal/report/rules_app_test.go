package report

import (
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// appRun is a run through an application: each request's retrieval takes
// retrieval(i, input) ms before the model's server is called; the app
// reports it, its wait on the server and its guardrail, the server its
// queue, prefill and decode.
func appRun(n int, retrieval func(i, input int) float64) *Report {
	c := NewCollector(Options{})
	for i, s := range baseline(n, 10, 1) {
		s.input = 200 + 40*(i%25)
		ret := retrieval(i, s.input)
		s.net += ret + 1 // the app's retrieval and guardrail, seen from the client as time before the first token
		r := s.record(i)
		ns := func(v float64) int64 { return int64(v * msNS) }
		wrote := r.WroteNS
		upstream := r.EndNS - wrote - ns(ret) - ns(1) - ns(0.5)
		r.Timing = []latency.HopStage{
			{Hop: latency.HopApp, Name: "retrieval", NS: ns(ret)},
			{Hop: latency.HopApp, Name: "upstream", NS: upstream},
			{Hop: latency.HopApp, Name: "guardrail", NS: ns(1)},
			{Hop: latency.HopServer, Name: "server_queue", NS: r.Server.QueueNS},
			{Hop: latency.HopServer, Name: "prefill", NS: r.Server.PrefillNS},
			{Hop: latency.HopServer, Name: "server_decode", NS: r.Server.DecodeNS},
		}
		c.Add(r)
	}
	return c.Report()
}

func TestRuleAppStage(t *testing.T) {
	find := func(rep *Report) *Finding {
		for i := range rep.Findings {
			if rep.Findings[i].Rule == RuleAppStage {
				return &rep.Findings[i]
			}
		}
		return nil
	}
	// 80 ms of retrieval in front of a ~30 ms TTFT: the application's stage dominates.
	rep := appRun(300, func(int, int) float64 { return 80 })
	f := find(rep)
	if f == nil {
		t.Fatalf("no app-stage finding: %+v", rep.Findings)
	}
	if !strings.Contains(f.Title, "retrieval") || !strings.Contains(f.Evidence, "Application stage retrieval (reported by hop app)") ||
		!strings.Contains(f.Evidence, "does not scale with the prompt") || !strings.Contains(f.Evidence, "It holds steady") || !strings.Contains(f.Remedies[0], "retrieval calls in parallel") {
		t.Errorf("finding: %+v", f)
	}
	if f.Numbers["stage_share_tail"] < 0.5 || f.Numbers["stage_tail_ms"] < 79 || f.Numbers["stage_tail_ms"] > 81 {
		t.Errorf("numbers %v", f.Numbers)
	}
	// The TTFT split shows it under its hop, and no network holds it.
	g := group(rep.TTFTSplit, "median")
	if g.LargestHop != "app" || g.Largest != "retrieval" || g.share(latency.StageNetwork) > 0.1 {
		t.Errorf("TTFT median: %+v", g)
	}
	// Retrieval that grows with the prompt: it scales with its length.
	rep = appRun(300, func(_, input int) float64 { return 0.1 * float64(input) })
	if f = find(rep); f == nil || !strings.Contains(f.Evidence, "It scales with the prompt: 100.0 ms per 1k input tokens (R² 1.00)") {
		t.Errorf("finding: %+v", f)
	}
	// A 1 ms retrieval is no finding.
	if f = find(appRun(300, func(int, int) float64 { return 1 })); f != nil {
		t.Errorf("a small stage found: %+v", f)
	}
}

func TestAppRemediesByName(t *testing.T) {
	for _, tc := range []struct{ stage, want string }{
		{"retrieval", "retrieval calls in parallel"},
		{"vector_search", "retrieval calls in parallel"},
		{"rerank", "rerank fewer candidates"},
		{"guardrail", "stream the output check"},
		{"moderation", "stream the output check"},
		{"tool_call", "independent tool calls in parallel"},
		{"post_process", "off the response path"},
		{"frobnicate", "profile the stage"},
	} {
		if got := appRemedies(tc.stage); !strings.Contains(got[0], tc.want) {
			t.Errorf("%s: %q, want %q", tc.stage, got[0], tc.want)
		}
	}
}
