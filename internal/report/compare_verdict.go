package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/results"
)

// SettingDiff is one setting in which the two compared runs differ.
type SettingDiff struct {
	Setting string `json:"setting"`
	A       string `json:"a"`
	B       string `json:"b"`
}

// rateMoves is the relative change of a rate row (no interval) taken as
// more than noise.
const rateMoves = 5.0

// judge marks each row better or worse for B, where its change is beyond
// noise (outside the interval, or a rate moved by rateMoves % or more):
// lower latency and errors are better, higher throughput is better.
func (c *Comparison) judge() {
	for i := range c.Rows {
		r := &c.Rows[i]
		moved := r.Significant || !r.HasCI && r.Only == "" && !math.IsNaN(r.DeltaPct) && math.Abs(r.DeltaPct) >= rateMoves
		if !moved || r.Delta == 0 || r.Unit == "tok" {
			continue
		}
		higherBetter := r.Unit == "req/s" || r.Unit == "tok/s"
		if (r.Delta > 0) == higherBetter {
			r.Better = 1
		} else {
			r.Better = -1
		}
	}
}

// headline is the rows the verdict speaks of, in its order.
var headline = []struct{ metric, stat string }{
	{"ttft", "p99"}, {"tpot", "p99"}, {"e2e", "p99"}, {"throughput", "rate"}, {"errors", "rate"},
}

// verdict words the comparison in one line: the headline figures that
// moved beyond noise, better and worse for B.
func (c *Comparison) verdict() string {
	var better, worse []string
	for _, h := range headline {
		for _, r := range c.Rows {
			if r.Metric != h.metric || r.Stat != h.stat || r.Better == 0 {
				continue
			}
			s := fmt.Sprintf("%s %s %s (%s → %s)", r.Metric, r.Stat, fmtPct(r.DeltaPct), fmtVal(r.A, r.Unit), fmtVal(r.B, r.Unit))
			if r.Stat == "rate" {
				s = fmt.Sprintf("%s %s (%s → %s)", r.Metric, fmtPct(r.DeltaPct), fmtVal(r.A, r.Unit), fmtVal(r.B, r.Unit))
			}
			if r.Better > 0 {
				better = append(better, s)
			} else {
				worse = append(worse, s)
			}
		}
	}
	switch {
	case len(better) == 0 && len(worse) == 0:
		return "no difference beyond noise in TTFT, TPOT or E2E P99, throughput or errors"
	case len(worse) == 0:
		return "B is better: " + strings.Join(better, ", ")
	case len(better) == 0:
		return "B is worse: " + strings.Join(worse, ", ")
	}
	return "B is better in " + strings.Join(better, ", ") + "; worse in " + strings.Join(worse, ", ")
}

// settingDiffs lists what differs between the two runs' settings (their
// run.json: target, model, load; the server's engine and exposed
// configuration) and their prompts' sharing and prefix-cache share, which
// change latency without being a setting of the server.
func settingDiffs(a, b *Report) []SettingDiff {
	ia, ib := firstRun(a), firstRun(b)
	var out []SettingDiff
	add := func(name, va, vb string) {
		if va != vb {
			out = append(out, SettingDiff{Setting: name, A: orDash(va), B: orDash(vb)})
		}
	}
	add("target", ia.Target, ib.Target)
	add("model", ia.Model, ib.Model)
	add("load", loadShape(ia), loadShape(ib))
	add("engine", serverEngine(ia), serverEngine(ib))
	ca, cb := serverConfig(ia), serverConfig(ib)
	for _, k := range slices.Sorted(maps.Keys(unionMaps(ca, cb))) {
		add("server "+k, ca[k], cb[k])
	}
	sa, sb := shareOf(a.Summary.SharedPrefixTokens, a.Summary.InputTokens), shareOf(b.Summary.SharedPrefixTokens, b.Summary.InputTokens)
	if math.Abs(sa-sb) >= 0.1 {
		add("prompt tokens shared with earlier requests", fmt.Sprintf("%.1f%%", 100*sa), fmt.Sprintf("%.1f%%", 100*sb))
	}
	qa, qb := shareOf(a.Summary.CachedTokens, a.Summary.InputTokens), shareOf(b.Summary.CachedTokens, b.Summary.InputTokens)
	if math.Abs(qa-qb) >= 0.1 {
		add("prompt tokens served from the prefix cache", fmt.Sprintf("%.1f%%", 100*qa), fmt.Sprintf("%.1f%%", 100*qb))
	}
	return out
}

func firstRun(r *Report) results.RunInfo {
	if len(r.Runs) == 0 {
		return results.RunInfo{}
	}
	return r.Runs[0]
}

// loadShape words a run's load: "open 2 req/s", "closed 4 concurrent".
func loadShape(i results.RunInfo) string {
	var parts []string
	if i.Mode != "" {
		parts = append(parts, i.Mode)
	}
	if i.OfferedRate > 0 {
		parts = append(parts, fmt.Sprintf("%g req/s", i.OfferedRate))
	}
	if i.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d concurrent", i.Concurrency))
	}
	if i.Duration > 0 {
		parts = append(parts, "for "+i.Duration.String())
	}
	return strings.Join(parts, " ")
}

func serverEngine(i results.RunInfo) string {
	if i.Server == nil {
		return ""
	}
	return i.Server.Engine
}

func serverConfig(i results.RunInfo) map[string]string {
	if i.Server == nil {
		return nil
	}
	return i.Server.Config
}

func unionMaps(a, b map[string]string) map[string]string {
	m := maps.Clone(a)
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, b)
	return m
}

func shareOf(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
