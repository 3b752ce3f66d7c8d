package report

import (
	"slices"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// pdRun is a disaggregated run: each request's TTFT is the prefill
// instance's queue pq(i) and 15 ms of prefill, then the decode instance's
// KV transfer kv(i), its wait dq(i) and an 8 ms first step, as the two
// instances report them (no gateway: the client's network holds the rest).
func pdRun(n int, pq, kv, dq func(i int) float64) *Report {
	c := NewCollector(Options{})
	for i, s := range baseline(n, 10, 3) {
		s.sq, s.prefill, s.split = 0, 0, false
		s.net += pq(i) + 15 + kv(i) + dq(i) + 8
		r := s.record(i)
		ns := func(v float64) int64 { return int64(v * msNS) }
		r.Timing = []latency.HopStage{
			{Hop: latency.HopPrefill, Name: latency.PrefillQueue, NS: ns(pq(i))},
			{Hop: latency.HopPrefill, Name: "prefill", NS: ns(15)},
			{Hop: latency.HopServer, Name: string(latency.TimingKVTransfer), NS: ns(kv(i))},
			{Hop: latency.HopServer, Name: string(latency.TimingDecodeQueue), NS: ns(dq(i))},
			{Hop: latency.HopServer, Name: string(latency.TimingFirstDecode), NS: ns(8)},
			{Hop: latency.HopServer, Name: string(latency.TimingServerDecode), NS: r.EndNS - r.FirstTokenNS - ns(s.tail)},
		}
		c.Add(r)
	}
	return c.Report()
}

func TestRulesPD(t *testing.T) {
	flat := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	tail := func(lo, hi float64) func(int) float64 { // hi for one request in ten
		return func(i int) float64 {
			if i%10 == 0 {
				return hi
			}
			return lo
		}
	}
	for _, tt := range []struct {
		name          string
		rep           *Report
		want, notWant []string
		title         string
	}{
		{"transfer-bound", pdRun(200, flat(1), flat(60), flat(2)),
			[]string{RulePDTransfer}, []string{RulePDPrefillQueue, RulePDDecodeQueue, RuleAppStage}, ""},
		{"prefill pool queues, decode side idle", pdRun(200, tail(2, 300), flat(1), flat(1)),
			[]string{RulePDPrefillQueue}, []string{RulePDTransfer, RulePDDecodeQueue, RuleAppStage}, "the P:D ratio starves the prefill side"},
		{"decode pool waits", pdRun(200, flat(5), flat(1), tail(2, 200)),
			[]string{RulePDDecodeQueue}, []string{RulePDTransfer, RulePDPrefillQueue}, "the P:D ratio starves the decode side"},
		{"healthy", pdRun(200, flat(2), flat(2), flat(2)),
			nil, []string{RulePDTransfer, RulePDPrefillQueue, RulePDDecodeQueue, RuleAppStage}, ""},
		{"aggregated run", collect(Options{}, baseline(200, 10, 3)),
			nil, []string{RulePDTransfer, RulePDPrefillQueue, RulePDDecodeQueue}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rules []string
			for _, f := range tt.rep.Findings {
				rules = append(rules, f.Rule)
			}
			for _, w := range tt.want {
				if !slices.Contains(rules, w) {
					t.Errorf("no %s among %v", w, rules)
				}
			}
			for _, w := range tt.notWant {
				if slices.Contains(rules, w) {
					t.Errorf("%s among %v", w, rules)
				}
			}
			if tt.title != "" {
				i := findingIndex(tt.rep, tt.want[0])
				if i < 0 || !strings.Contains(tt.rep.Findings[i].Title, tt.title) {
					t.Errorf("finding %v; want a title with %q", tt.rep.Findings, tt.title)
				}
			}
		})
	}
}
