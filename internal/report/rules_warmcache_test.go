package report

import (
	"strings"
	"testing"
)

// A second run of the same prompts: 90 % of its prompt tokens come from
// the server's cache, though they share none with each other. A run whose
// cache hits its own sharing explains is not flagged.
func TestRuleWarmCache(t *testing.T) {
	warm := baseline(200, 10, 1)
	own := baseline(200, 10, 2)
	for i := range warm {
		warm[i].cached = warm[i].input * 9 / 10
		own[i].cached, own[i].shared = own[i].input*6/10, own[i].input*6/10
	}
	rep := collectRun(Options{}, nil, warm)
	f := findRule(rep.Findings, RuleWarmCache)
	if f == nil || f.Severity != SeverityWarning || !strings.Contains(f.Evidence, "share only 0.0%") ||
		f.Numbers["cached_share"] < 0.89 || f.Numbers["cached_share"] > 0.9 {
		t.Fatalf("warm run: finding %+v, want a warning with a cached share of 0.9", f)
	}
	if f := findRule(collectRun(Options{}, nil, own).Findings, RuleWarmCache); f != nil {
		t.Errorf("a run whose own sharing explains its cache hits was flagged: %+v", f)
	}
	if f := findRule(collectRun(Options{}, nil, baseline(200, 10, 3)).Findings, RuleWarmCache); f != nil {
		t.Errorf("a run with no cache hits was flagged: %+v", f)
	}
}
