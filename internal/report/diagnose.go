package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// diagnose runs every rule over the run and returns their findings:
// critical first, then warnings, then information; within a severity, the
// findings that account for a failed SLO before the others, each group in
// the rules' order.
func diagnose(a *analysis, rep *Report) []Finding {
	var out []Finding
	for _, r := range Rules {
		if f, ok := r.check(a, rep); ok {
			f.Rule = r.Name
			out = append(out, f)
		}
	}
	rep.Quieted = quieted(a, rep, out)
	out = append(out, breachFindings(rep, out)...)
	sev := map[Severity]int{SeverityCritical: 0, SeverityWarning: 1, SeverityInfo: 2}
	rank := func(f Finding) int {
		r := 2 * sev[f.Severity]
		if !accountsForFailure(rep, f) {
			r++
		}
		return r
	}
	slices.SortStableFunc(out, func(x, y Finding) int { return rank(x) - rank(y) })
	mergeRemedies(out)
	return out
}

// Quieted is what SLOs that held kept the rules from raising: a rule
// judges a metric whose SLO passed as needing no explaining, so a pattern
// it would name without the SLO is left out, and said to be.
type Quieted struct {
	// SLOs are the SLOs that held.
	SLOs []string `json:"slos"`
	// Findings are the titles (and rules) of the findings the rules raise
	// when the run is judged without them.
	Findings []string `json:"findings"`
}

// Line is the quieted findings in one sentence.
func (q *Quieted) Line() string {
	return fmt.Sprintf("%s held, so the diagnosis leaves out what the rules would otherwise raise: %s; "+
		"report without --slo shows them", strings.Join(q.SLOs, ", "), strings.Join(q.Findings, "; "))
}

// quieted runs the rules that did not fire again with the SLOs that held
// taken away (those that failed kept); the findings they then raise are
// the ones a passing SLO silenced. Nil when none.
func quieted(a *analysis, rep *Report, fired []Finding) *Quieted {
	var q Quieted
	without := *rep
	without.SLOs = nil
	for _, v := range rep.SLOs {
		if v.Status == StatusPass {
			q.SLOs = append(q.SLOs, v.SLO)
		} else {
			without.SLOs = append(without.SLOs, v)
		}
	}
	if len(q.SLOs) == 0 {
		return nil
	}
	for _, r := range Rules {
		if slices.ContainsFunc(fired, func(f Finding) bool { return f.Rule == r.Name }) {
			continue
		}
		if f, ok := r.check(a, &without); ok {
			q.Findings = append(q.Findings, fmt.Sprintf("%s (%s)", f.Title, r.Name))
		}
	}
	if len(q.Findings) == 0 {
		return nil
	}
	return &q
}

// mergeRemedies says a remedy once: a finding whose remedy an earlier one
// gives word for word points to that finding instead of repeating it.
func mergeRemedies(fs []Finding) {
	first := map[string]string{} // remedy → title of the finding that gives it
	for i := range fs {
		var kept, same []string
		for _, r := range fs[i].Remedies {
			if t, ok := first[r]; ok {
				if !slices.Contains(same, t) {
					same = append(same, t)
				}
				continue
			}
			first[r] = fs[i].Title
			kept = append(kept, r)
		}
		if len(same) == 0 {
			continue
		}
		for _, t := range same {
			kept = append(kept, fmt.Sprintf("as for %q above", t))
		}
		fs[i].Remedies = kept
	}
}

// accountsForFailure says whether a finding explains a failed SLO.
func accountsForFailure(rep *Report, f Finding) bool {
	for _, v := range rep.SLOs {
		if v.Status == StatusFail && (f.Rule == RuleSLOBreach || slices.Contains(Explains(f.Rule), v.Metric)) {
			return true
		}
	}
	return false
}

// Rule is one diagnosis, one value: its name (Finding.Rule), the check
// that reads the run and returns a finding when the pattern it looks for is
// there, the metrics whose failed SLO its finding accounts for, and the
// metric its finding is about when no SLO names one. Every check is a
// small function, with its thresholds written out in docs/report.md and
// its own test on a synthetic run built to trigger it and one built not to.
type Rule struct {
	Name string
	// Explains lists the metrics whose SLO breach a finding accounts for; a
	// failed SLO that no finding accounts for gets a finding of its own
	// (RuleSLOBreach), so a failing run never reads "no problem found".
	Explains []latency.Metric
	// About is the metric a finding is about when no SLO names one ("" for
	// a rule about none in particular).
	About latency.Metric
	check func(a *analysis, rep *Report) (Finding, bool)
}

// The rules' names, as findings carry them.
const (
	RuleClientBottleneck    = "client-bottleneck"
	RuleModelLoad           = "model-load"
	RuleServerQueueing      = "server-queueing"
	RulePrefillBound        = "prefill-bound"
	RulePrefixCacheUnused   = "prefix-cache-unused"
	RuleDecodeBandwidth     = "decode-bandwidth"
	RulePrefillInterference = "prefill-interference"
	RuleKVCache             = "kv-cache"
	RuleOutputLength        = "output-length"
	RuleReasoningPhase      = "reasoning-phase"
	RuleOutsideModel        = "outside-model"
	RuleAppStage            = "app-stage"
	RuleErrors              = "errors"
	RuleStalls              = "stalls"
	RuleClosedLoopWaves     = "closed-loop-waves"
	RuleWarmCache           = "warm-cache"
	RulePDTransfer          = "pd-transfer"
	RulePDPrefillQueue      = "pd-prefill-queue"
	RulePDDecodeQueue       = "pd-decode-queue"
	RuleTailPhase           = "tail-phase"
	// RuleSLOBreach names a failed SLO that no other finding accounts for
	// (breachFindings): the largest stage in that metric's tail.
	RuleSLOBreach = "slo-breach"
)

var (
	ttftish = []latency.Metric{latency.TTFT, latency.TTFTIntended}
	e2eish  = []latency.Metric{latency.E2E, latency.E2EIntended}
	decoded = []latency.Metric{latency.TPOT, latency.ITL, latency.ICL}
)

// Rules are the diagnosis rules, in the order their findings are listed
// within a severity.
var Rules = []Rule{
	{Name: RuleClientBottleneck, Explains: latency.Metrics, check: ruleClientBottleneck},
	{Name: RuleModelLoad, Explains: concat([]latency.Metric{latency.TTFT, latency.TTFTAnswer, latency.TTFTIntended}, e2eish), About: latency.TTFT, check: ruleModelLoad},
	{Name: RuleServerQueueing, Explains: concat([]latency.Metric{latency.TTFT, latency.TTFTAnswer, latency.TTFTIntended}, e2eish, []latency.Metric{latency.ClientQueue}), About: latency.TTFT, check: ruleServerQueueing},
	{Name: RulePrefillBound, Explains: []latency.Metric{latency.TTFT, latency.TTFTAnswer, latency.TTFTIntended}, About: latency.TTFT, check: rulePrefillBound},
	{Name: RulePrefixCacheUnused, Explains: []latency.Metric{latency.TTFT, latency.TTFTIntended}, About: latency.TTFT, check: rulePrefixCacheUnused},
	{Name: RuleDecodeBandwidth, Explains: decoded, About: latency.TPOT, check: ruleDecodeBandwidth},
	{Name: RulePrefillInterference, Explains: decoded, About: latency.ITL, check: rulePrefillInterference},
	{Name: RuleKVCache, Explains: concat(decoded, e2eish, ttftish), About: latency.TPOT, check: ruleKVCache},
	{Name: RuleOutputLength, Explains: e2eish, About: latency.E2E, check: ruleOutputLength},
	{Name: RuleReasoningPhase, Explains: []latency.Metric{latency.TTFTAnswer}, check: ruleReasoningPhase},
	{Name: RuleOutsideModel, Explains: concat(ttftish, e2eish), check: ruleOutsideModel},
	{Name: RuleAppStage, Explains: concat(ttftish, e2eish), check: ruleAppStage},
	{Name: RuleErrors, check: ruleErrors},
	{Name: RuleStalls, Explains: []latency.Metric{latency.ITL, latency.ICL, latency.TPOT}, About: latency.ITL, check: ruleStalls},
	{Name: RuleClosedLoopWaves, check: ruleWaves},
	{Name: RuleWarmCache, About: latency.TTFT, check: ruleWarmCache},
	{Name: RulePDTransfer, Explains: ttftish, About: latency.TTFT, check: rulePDTransfer},
	{Name: RulePDPrefillQueue, Explains: ttftish, About: latency.TTFT, check: rulePDPrefillQueue},
	{Name: RulePDDecodeQueue, Explains: ttftish, About: latency.TTFT, check: rulePDDecodeQueue},
	{Name: RuleTailPhase, Explains: concat(ttftish, e2eish, decoded), About: latency.TTFT, check: ruleTailPhase},
}

func concat(ms ...[]latency.Metric) []latency.Metric { return slices.Concat(ms...) }

// RuleNamed returns the rule of a finding's name (false for RuleSLOBreach
// and unknown names).
func RuleNamed(name string) (Rule, bool) {
	i := slices.IndexFunc(Rules, func(r Rule) bool { return r.Name == name })
	if i < 0 {
		return Rule{}, false
	}
	return Rules[i], true
}

// concern says whether a metric deserves a rule's attention: an SLO on it
// failed (why names it), or no SLO names it (the rule then judges the
// pattern alone). A metric whose SLOs all passed needs no explaining.
func concern(rep *Report, metrics ...latency.Metric) (why string, ok bool) {
	named := false
	for _, v := range rep.SLOs {
		if !slices.Contains(metrics, v.Metric) {
			continue
		}
		named = true
		if v.Status == StatusFail {
			return fmt.Sprintf("SLO %s fails (P%s = %s)", v.SLO, pct(v.Percentile), fmtMS(v.ValueMS)), true
		}
	}
	if named {
		return "", false
	}
	return "", true
}

func prefix(why string) string {
	if why == "" {
		return ""
	}
	return why + ". "
}

// group returns a decomposition's group by name.
func group(d *Decomposition, name string) *StageGroup {
	if d == nil {
		return nil
	}
	for i := range d.Groups {
		if d.Groups[i].Name == name {
			return &d.Groups[i]
		}
	}
	return nil
}

// ttftTail is the TTFT split's tail without the client queue, unless an
// SLO on TTFT from the intended send failed: the client's own lag is no
// term of the TTFT a server is judged on (client-bottleneck judges it).
func (a *analysis) ttftTail(rep *Report) *StageGroup {
	g := a.tail(rep.TTFTSplit)
	for _, v := range rep.SLOs {
		if v.Status == StatusFail && v.Metric == latency.TTFTIntended {
			return g
		}
	}
	if g == nil {
		return nil
	}
	return g.without(latency.StageClientQueue)
}

// without is the group with one stage left out: the total less its mean,
// the other shares of that total, the largest among the rest.
func (g *StageGroup) without(stage latency.Stage) *StageGroup {
	out := *g
	out.Stages = nil
	out.TotalMS = g.TotalMS - g.meanMS(stage)
	best := -math.MaxFloat64
	for _, s := range g.Stages {
		if s.is(stage) {
			continue
		}
		if out.TotalMS != 0 {
			s.Share = s.MeanMS / out.TotalMS
		}
		out.Stages = append(out.Stages, s)
		if s.MeanMS > best {
			best, out.Largest, out.LargestHop = s.MeanMS, s.Stage, s.Hop
		}
	}
	return &out
}

// tailWords names a tail group in evidence text.
func tailWords(g *StageGroup) string {
	if g.Name == "p95+" {
		return "above its P95"
	}
	return fmt.Sprintf("among its %d slowest requests", g.Requests)
}

// is says whether a part is the vocabulary's stage: the client's queue,
// connect and send; the server's queue, prefill and decode; every part of
// the gateway hop for "gateway"; the network between any two hops for
// "network"; any other stage by its name.
func (s StageShare) is(stage latency.Stage) bool {
	switch stage {
	case latency.StageClientQueue, latency.StageConnect, latency.StageSend:
		return s.Hop == string(latency.HopClient) && s.Stage == string(stage)
	case latency.StageServerQueue, latency.StagePrefill, latency.StageDecode:
		return s.Hop == string(latency.HopServer) && s.Stage == string(stage)
	case latency.StageGateway:
		return s.Hop == string(latency.HopGateway)
	}
	return s.Stage == string(stage)
}

// in sums the group's parts that the vocabulary's stage stands for:
// their mean time and their share of the group's total.
func (g *StageGroup) in(stage latency.Stage) StageShare {
	var sum StageShare
	for _, s := range g.Stages {
		if s.is(stage) {
			sum.MeanMS += s.MeanMS
			sum.Share += s.Share
		}
	}
	return sum
}

// share is the share of the group's total in the vocabulary's stage.
func (g *StageGroup) share(stage latency.Stage) float64 { return g.in(stage).Share }

// meanMS is the group's mean time in the vocabulary's stage.
func (g *StageGroup) meanMS(stage latency.Stage) float64 { return g.in(stage).MeanMS }

// largestIs says whether the group's largest part is the stage.
func (g *StageGroup) largestIs(stage latency.Stage) bool {
	return StageShare{Hop: g.LargestHop, Stage: g.Largest}.is(stage)
}

// byTime returns the successful rows ordered by send instant.
func (a *analysis) byTime() []int32 {
	if a.timeOrder == nil {
		idx := slices.Clone(a.ok)
		slices.SortStableFunc(idx, func(x, y int32) int { return cmpInt64(a.rows[x].sent, a.rows[y].sent) })
		a.timeOrder = idx
	}
	return a.timeOrder
}

// quarters returns the mean of v over the first and the last quarter of the
// successful requests in send order.
func (a *analysis) quarters(v func(*row) int64) (first, last float64) {
	idx := a.byTime()
	q := len(idx) / 4
	if q == 0 {
		return 0, 0
	}
	var s0, s1 float64
	for _, i := range idx[:q] {
		s0 += float64(v(&a.rows[i]))
	}
	for _, i := range idx[len(idx)-q:] {
		s1 += float64(v(&a.rows[i]))
	}
	return msf(s0 / float64(q)), msf(s1 / float64(q))
}
