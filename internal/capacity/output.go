package capacity

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/tokentrace/tokentrace/internal/engine"
)

// Title says what the plan asked.
func (pl *Plan) Title() string {
	slos := make([]string, len(pl.Objective.SLOs))
	for i, s := range pl.Objective.SLOs {
		slos[i] = s.String()
	}
	all := strings.Join(slos, ", ")
	of := ""
	if pl.Model != "" {
		of = " of " + pl.Model
	}
	if t := pl.Objective.TargetRate; t > 0 {
		return fmt.Sprintf("the cheapest deployment%s that meets %s at %.3g req/s", of, all, t)
	}
	s := "the deployment" + of + " of highest goodput under " + all
	if b := pl.Objective.Budget; b > 0 {
		s += fmt.Sprintf(" within $%.2f per hour", b)
	}
	return s
}

// QualityNote is what a candidate that quantizes the model below 16 bits
// (weights or KV cache) leaves unchecked: the simulation prices its speed,
// not its answers. "" for a bf16/fp16 deployment.
func (pl *Plan) QualityNote(c *Candidate) string {
	var q []string
	if d := c.Engine.DType; d != "" && d != "auto" && d != "bf16" && d != "fp16" {
		q = append(q, d+" weights")
	}
	if d := c.Engine.KVCacheDType; d != "" && d != "auto" && d != "bf16" && d != "fp16" {
		q = append(q, d+" KV cache")
	}
	if len(q) == 0 {
		return ""
	}
	model := "the model"
	if pl.Model != "" {
		model = pl.Model
	}
	return fmt.Sprintf("quality: %s are priced for speed only; the simulation does not judge answers — check %s "+
		"quantized this way on your own prompts (accuracy, format) before deploying it", strings.Join(q, " and "), model)
}

// latencyName names the plan's latency: the first SLO's statistic, where
// it is read.
func (pl *Plan) latencyName() string {
	s := pl.Objective.SLOs[0]
	name := fmt.Sprintf("%s p%g", s.Metric, s.Percentile)
	if s.Percentile >= 100 {
		name = string(s.Metric) + " max"
	}
	if t := pl.Objective.TargetRate; t > 0 {
		return fmt.Sprintf("%s at %.3g req/s", name, t)
	}
	return name + " at goodput"
}

// Summary counts what happened to the candidates, in one line.
func (pl *Plan) Summary() string {
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(pl.Count(NoFit), "do not fit")
	add(pl.Count(Duplicate), "simulate as another")
	add(pl.Count(PrunedRate), "pruned by the roofline's rate bound")
	add(pl.Count(PrunedLatency), "pruned by its latency bound")
	add(pl.Count(OverBudget), "over budget")
	add(pl.Count(Misses), "miss the SLOs at the target")
	add(pl.Count(Meets), "meet them (goodput searched)")
	add(pl.Count(Searched), "goodput searched")
	add(pl.Count(NoGoodput), "meet them at no rate")
	add(pl.Count(Dominated), "meet them but are outserved by a cheaper one (not searched)")
	return fmt.Sprintf("%d candidates: %s; %d simulations", len(pl.Candidates), strings.Join(parts, ", "), pl.Simulations)
}

// WriteText prints the plan: what was asked, the answer (or the closest
// miss), the cheaper candidates that miss, and the Pareto front.
func (pl *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("plan: %s", pl.Title())
	p("workload: %s", pl.Workload.Describe)
	prices := "built-in table of " + pl.PricesDate
	if len(pl.PricesFiles) > 0 {
		prices += ", with " + strings.Join(pl.PricesFiles, ", ")
	}
	p("prices: %s (on-demand $ per GPU-hour)", prices)
	p("%s", pl.Summary())
	p("")
	target := pl.Objective.TargetRate > 0
	if c := pl.Best; c != nil {
		p("answer   #%d %s", c.ID, c.Name)
		p("         %s", pl.figures(c))
		if q := pl.QualityNote(c); q != "" {
			p("         %s", q)
		}
		for _, f := range c.Outside {
			p("         outside the twin's envelope: %s", f)
		}
		if c.Unfitted != "" {
			p("         outside the twin's envelope: %s", c.Unfitted)
		}
		if iv := c.Interval80; iv.TTFT > 0 {
			p("         interval 80 %%: %s", iv)
		}
		if target {
			pl.writeCheaper(&b)
		}
	} else {
		p("no configuration meets the SLOs.")
		if c := pl.Closest; c != nil {
			p("closest  #%d %s ($%.2f/h)", c.ID, c.Name, c.USDPerHour)
			p("         %s", pl.closestLine(c))
		}
	}
	pl.writePD(&b)
	if len(pl.Front) > 0 {
		p("")
		p("Pareto front of cost, %s and goodput (%d candidates):", pl.latencyName(), len(pl.Front))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if len(pl.Front) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\t$/hour\tlatency\tgoodput req/s\t$/1M out\t  deployment")
	for _, c := range pl.Front {
		mark := ""
		if c == pl.Best {
			mark = "*"
		}
		if len(c.Outside) > 0 {
			mark += "!"
		}
		fmt.Fprintf(tw, "%s%d\t%.2f\t%s\t%.3g\t%s\t  %s\n", mark, c.ID, c.USDPerHour, fmtDur(c.Latency(target)),
			c.GoodputRate(), usd(c.USDPer1MOut), c.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "latency: %s; $/1M out: $/hour over the output tokens served at goodput (docs/metrics.md, \"Cost\"); * the answer\n", pl.latencyName()); err != nil {
		return err
	}
	for _, c := range pl.Front {
		for _, f := range c.Outside {
			if _, err := fmt.Fprintf(w, "! #%d outside the twin's envelope: %s\n", c.ID, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// figures is a candidate's numbers in one line.
func (pl *Plan) figures(c *Candidate) string {
	s := fmt.Sprintf("$%.2f per hour (%d × %s)", c.USDPerHour, c.GPUs, c.GPU)
	if l := c.Latency(pl.Objective.TargetRate > 0); l != Unbounded {
		s += fmt.Sprintf(" · %s %s", pl.latencyName(), fmtDur(l))
	}
	if g := c.GoodputRate(); g > 0 {
		s += fmt.Sprintf(" · goodput %.3g req/s · %s per 1M output tokens", g, usd(c.USDPer1MOut))
	}
	return s
}

// writeCheaper lists the simulated candidates cheaper than the answer and
// why each misses (a target plan's proof that nothing cheaper would do).
func (pl *Plan) writeCheaper(b *strings.Builder) {
	var cheaper []*Candidate
	pruned := 0
	for _, c := range pl.Candidates {
		if c.USDPerHour >= pl.Best.USDPerHour || c.Status == Duplicate || c.Status == NoFit {
			continue
		}
		if c.Status == Misses {
			cheaper = append(cheaper, c)
		} else {
			pruned++
		}
	}
	slices.SortStableFunc(cheaper, func(a, b *Candidate) int { return cmp.Compare(b.USDPerHour, a.USDPerHour) })
	for i, c := range cheaper {
		if i == 3 {
			fmt.Fprintf(b, "         … and %d more cheaper candidates miss\n", len(cheaper)-3)
			break
		}
		fmt.Fprintf(b, "cheaper  #%d %s ($%.2f/h): %s\n", c.ID, c.Name, c.USDPerHour, c.Reason)
	}
	fmt.Fprintf(b, "         no cheaper candidate meets the SLOs (simulated and missed: %d; ruled out by the roofline bounds: %d)\n", len(cheaper), pruned)
}

// closestLine says how far the closest candidate misses.
func (pl *Plan) closestLine(c *Candidate) string {
	var s string
	switch {
	case c.Check != nil:
		s = pl.missReason(*c.Check)
	case c.Goodput != nil && c.Goodput.Above != nil:
		s = pl.missReason(*c.Goodput.Above)
	default:
		s = c.Reason
	}
	if g := c.GoodputRate(); g > 0 {
		s += fmt.Sprintf("; it meets them up to %.3g req/s", g)
		if t := pl.Objective.TargetRate; t > 0 {
			s += fmt.Sprintf(" (%.0f%% of the target)", 100*g/t)
		}
	}
	return s
}

// usd formats dollars: cents from $0.10, else 2 significant figures.
func usd(v float64) string {
	switch {
	case math.IsInf(v, 0) || math.IsNaN(v):
		return "-"
	case v >= 0.1:
		return fmt.Sprintf("$%.2f", v)
	case v <= 0:
		return "$0"
	}
	return fmt.Sprintf("$%.*f", min(9, 1-int(math.Floor(math.Log10(v)))), v)
}

// JSON shapes: durations in milliseconds, rates in requests per second.
type jsonPlan struct {
	Title       string          `json:"title"`
	Model       string          `json:"model,omitempty"`
	QualityNote string          `json:"quality_note,omitempty"`
	Workload    string          `json:"workload"`
	SLOs        []string        `json:"slos"`
	TargetRate  float64         `json:"target_rate,omitempty"`
	Budget      float64         `json:"budget_usd_per_hour,omitempty"`
	PricesDate  string          `json:"prices_date"`
	PricesFiles []string        `json:"prices_files,omitempty"`
	Simulations int             `json:"simulations"`
	Best        *int            `json:"best,omitempty"`
	Closest     *int            `json:"closest,omitempty"`
	Front       []int           `json:"front"`
	PD          *jsonPD         `json:"pd,omitempty"`
	Candidates  []jsonCandidate `json:"candidates"`
}

// jsonPD is the P/D answer: the best candidate of each kind (IDs), each
// split's best with its latency interval.
type jsonPD struct {
	Verdict       string        `json:"verdict"`
	Close         bool          `json:"close"`
	Aggregated    *int          `json:"aggregated,omitempty"`
	Disaggregated *int          `json:"disaggregated,omitempty"`
	Ratios        []jsonPDRatio `json:"ratios"`
}

type jsonPDRatio struct {
	Ratio     string  `json:"ratio"`
	ID        int     `json:"id"`
	Meets     bool    `json:"meets"`
	LatencyMS float64 `json:"latency_ms,omitempty"`
	LowMS     float64 `json:"low_ms,omitempty"`
	HighMS    float64 `json:"high_ms,omitempty"`
	Error     float64 `json:"stated_error"`
}

type jsonCandidate struct {
	ID            int        `json:"id"`
	Name          string     `json:"name"`
	GPU           string     `json:"gpu"`
	TP            int        `json:"tensor_parallel_size"`
	Replicas      int        `json:"replicas"`
	Prefill       int        `json:"prefill_replicas,omitempty"`
	KVLink        string     `json:"kv_link,omitempty"`
	PrefillGPU    string     `json:"prefill_gpu,omitempty"`
	PrefillTP     int        `json:"prefill_tensor_parallel_size,omitempty"`
	GPUs          int        `json:"gpus"`
	Balancer      string     `json:"balancer"`
	DType         string     `json:"dtype"`
	KVCacheDType  string     `json:"kv_cache_dtype"`
	MaxNumSeqs    int        `json:"max_num_seqs,omitempty"`
	MaxBatched    int        `json:"max_num_batched_tokens,omitempty"`
	Chunked       bool       `json:"enable_chunked_prefill"`
	PrefixCaching bool       `json:"enable_prefix_caching"`
	SpeculativeK  int        `json:"speculative_k,omitempty"`
	MaxMaxTokens  int        `json:"max_max_tokens,omitempty"`
	USDPerHour    float64    `json:"usd_per_hour"`
	Status        Status     `json:"status"`
	Reason        string     `json:"reason,omitempty"`
	Of            int        `json:"same_as,omitempty"`
	BoundRate     float64    `json:"roofline_max_rate"`
	BoundMS       []float64  `json:"roofline_min_ms"`
	Check         *jsonPoint `json:"at_target,omitempty"`
	GoodputRate   float64    `json:"goodput"`
	GoodputPoint  *jsonPoint `json:"at_goodput,omitempty"`
	USDPer1MOut   *float64   `json:"usd_per_1m_output,omitempty"`
	Simulations   int        `json:"goodput_simulations,omitempty"`
	Outside       []string   `json:"outside_envelope,omitempty"`
	// Interval80 is the twin's 80 % interval where the candidate's
	// envelope was checked.
	Interval80 *engine.Interval `json:"interval80,omitempty"`
}

type jsonPoint struct {
	Rate     float64   `json:"rate"`
	Meets    bool      `json:"meets"`
	ValuesMS []float64 `json:"values_ms,omitempty"`
	Miss     float64   `json:"miss,omitempty"`
	Growth   float64   `json:"growth"`
	Measured int       `json:"measured"`
	Failed   int       `json:"failed"`
}

func toJSONPoint(p *Point) *jsonPoint {
	if p == nil {
		return nil
	}
	jp := &jsonPoint{Rate: p.Rate, Meets: p.Meets, Growth: p.Growth, Measured: p.Measured, Failed: p.Failed}
	if !math.IsInf(p.Miss, 0) {
		jp.Miss = p.Miss
	}
	for _, v := range p.Values {
		ms := -1.0 // a percentile that falls on a failed request
		if v != Unbounded {
			ms = float64(v) / 1e6
		}
		jp.ValuesMS = append(jp.ValuesMS, ms)
	}
	return jp
}

// WriteJSON prints the plan as one indented JSON object.
func (pl *Plan) WriteJSON(w io.Writer) error {
	out := jsonPlan{Title: pl.Title(), Model: pl.Model, Workload: pl.Workload.Describe, TargetRate: pl.Objective.TargetRate,
		Budget: pl.Objective.Budget, PricesDate: pl.PricesDate, PricesFiles: pl.PricesFiles,
		Simulations: pl.Simulations, Front: []int{}}
	for _, s := range pl.Objective.SLOs {
		out.SLOs = append(out.SLOs, s.String())
	}
	if pl.Best != nil {
		out.Best = &pl.Best.ID
		out.QualityNote = pl.QualityNote(pl.Best)
	}
	if pl.Closest != nil {
		out.Closest = &pl.Closest.ID
	}
	for _, c := range pl.Front {
		out.Front = append(out.Front, c.ID)
	}
	out.PD = pl.jsonPD()
	for _, c := range pl.Candidates {
		e := c.Engine
		jc := jsonCandidate{ID: c.ID, Name: c.Name, GPU: c.GPU, TP: c.TP, Replicas: c.Replicas, Prefill: c.PrefillReplicas, GPUs: c.GPUs,
			Balancer: c.Balancer, DType: e.DType, KVCacheDType: e.KVCacheDType, Chunked: e.EnableChunkedPrefill,
			PrefixCaching: e.EnablePrefixCaching, SpeculativeK: e.SpeculativeK, MaxMaxTokens: c.MaxMaxTokens,
			USDPerHour: c.USDPerHour, Status: c.Status, Reason: c.Reason, Check: toJSONPoint(c.Check),
			GoodputRate: c.GoodputRate(), Outside: c.Outside}
		if c.Interval80.TTFT > 0 {
			iv := c.Interval80
			jc.Interval80 = &iv
		}
		if c.Disaggregated() {
			l, _ := c.link()
			jc.KVLink = l.Name
		}
		if c.r != nil {
			jc.PrefillGPU, jc.PrefillTP = c.r.prefillGPU(), c.r.prefillTP()
			ec := c.r.ec.WithDefaults()
			jc.MaxNumSeqs, jc.MaxBatched = ec.MaxNumSeqs, ec.MaxNumBatchedTokens
		}
		if c.Of != nil {
			jc.Of = c.Of.ID
		}
		if !math.IsInf(c.Bound.MaxRate, 0) {
			jc.BoundRate = c.Bound.MaxRate
		}
		for _, v := range c.Bound.MinValues {
			jc.BoundMS = append(jc.BoundMS, float64(v)/1e6)
		}
		if g := c.Goodput; g != nil {
			jc.GoodputPoint, jc.Simulations = toJSONPoint(g.At), g.Simulations
		}
		if !math.IsInf(c.USDPer1MOut, 0) {
			v := c.USDPer1MOut
			jc.USDPer1MOut = &v
		}
		out.Candidates = append(out.Candidates, jc)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
