package whatif

import (
	"testing"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/report"
)

// Every rule a lever answers is one of report's rules, and each rule that
// a lever answers is about a metric (what-if judges it at that metric's
// P99 when no SLO names one).
func TestLeversNameReportRules(t *testing.T) {
	for _, l := range levers {
		for _, name := range l.rules {
			r, ok := report.RuleNamed(name)
			if !ok {
				t.Errorf("lever %s answers %q, which is no rule of report's", l.name, name)
				continue
			}
			if r.About == "" {
				t.Errorf("lever %s answers rule %s, which is about no metric", l.name, name)
			}
		}
	}
}

func TestRuleNamesAreDistinct(t *testing.T) {
	seen := map[string]bool{report.RuleSLOBreach: true}
	for _, r := range report.Rules {
		if seen[r.Name] {
			t.Errorf("rule name %q used twice", r.Name)
		}
		seen[r.Name] = true
	}
}

// Tensor parallelism is no lever for a CPU thread nor a device without a
// link; it is for a GPU.
func TestTensorParallelNeedsALink(t *testing.T) {
	cpu, err := perfmodel.BuiltinGPUs().Lookup("cpu-zen5-1t")
	if err != nil {
		t.Fatal(err)
	}
	h100, err := perfmodel.BuiltinGPUs().Lookup("H100-SXM")
	if err != nil {
		t.Fatal(err)
	}
	if splits(cpu) || !splits(h100) || splits(perfmodel.GPU{Name: "x", Interconnect: "none"}) {
		t.Errorf("splits: cpu %v, H100 %v; want false, true", splits(cpu), splits(h100))
	}
}
