package engine

import (
	"fmt"
	"strings"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// FittedRange is the span of public measurements a family's constants were
// fitted on (families.yaml's envelope), and the interval their held-out
// residuals give.
type FittedRange struct {
	// ParamsB are the smallest and largest models, in billions of
	// parameters; MoE whether mixture-of-experts models were among them.
	ParamsB [2]float64 `yaml:"params_b"`
	MoE     bool       `yaml:"moe"`
	// Input, Output and Concurrency are the prompt and output lengths and
	// closed-loop clients measured.
	Input       [2]int `yaml:"input"`
	Output      [2]int `yaml:"output"`
	Concurrency [2]int `yaml:"concurrency"`
	// Interval80 is the relative half-width of the 80 % interval of each
	// metric (docs/engines.md, "The envelope").
	Interval80 Interval `yaml:"interval80"`
}

// Interval is the relative half-width of a prediction interval per metric
// (0.12: ±12 %); 0 where none is known.
type Interval struct {
	TTFT float64 `yaml:"ttft" json:"ttft"`
	TPOT float64 `yaml:"tpot" json:"tpot"`
	E2E  float64 `yaml:"e2e" json:"e2e"`
	// From says which residuals gave it.
	From string `yaml:"from" json:"from"`
	// Outside is set when the case lies outside the constants' envelope
	// and the interval is the cross-source one (Envelope.Interval80).
	Outside bool `yaml:"-" json:"outside_envelope"`
}

// CrossSource80 is the 80 % interval of a prediction outside what its
// constants were fitted on: per metric, the 80th percentile of |error| of
// leave-one-source-out predictions of the fit data, each source weighing
// the same (calibrate.SourceQuantile; docs/metrics.md, "The twin's 80 %
// interval"). TestCrossSourceIntervals recomputes it. A half-width of 1
// or more bounds the measurement below only.
var CrossSource80 = Interval{TTFT: 5.494, TPOT: 0.152, E2E: 0.156,
	From: "P80 of |error| across sources, each fit source predicted without its own data"}

// Interval80 is the 80 % interval of a prediction of case c: the
// constants' own (in-source) interval when c lies inside their envelope
// (fitted, no Check flag) and they carry one; else CrossSource80, each
// metric at least the in-source width, marked Outside when c lies outside
// (a fitted profile without residuals has no in-source interval: inside,
// it takes the cross-source one unmarked).
func (e Envelope) Interval80(c EnvelopeCase) Interval {
	in := e.Range.Interval80
	inside := e.Fitted && len(e.Check(c)) == 0
	if inside && in.TTFT > 0 {
		return in
	}
	out := CrossSource80
	out.TTFT, out.TPOT, out.E2E, out.Outside = max(out.TTFT, in.TTFT), max(out.TPOT, in.TPOT), max(out.E2E, in.E2E), !inside
	if inside {
		out.From = "no in-source interval: " + out.From
	} else {
		out.From = "outside the envelope: " + out.From
	}
	return out
}

// String is the interval as the commands print it.
func (iv Interval) String() string {
	return fmt.Sprintf("TTFT ±%.0f%%, TPOT ±%.0f%%, E2E ±%.0f%% (%s)", 100*iv.TTFT, 100*iv.TPOT, 100*iv.E2E, iv.From)
}

// Envelope is what the constants that time an engine's steps were fitted
// on; a prediction outside it is shown but flagged (Check), and a what-if
// or plan does not rank it as a remedy.
type Envelope struct {
	// Source names the constants: a family's fit, a profile, or the GPU
	// family's defaults.
	Source string
	// Fitted is false for the GPU family's defaults: nothing fitted on
	// closed-loop measurements of this engine on this GPU.
	Fitted bool
	// Notes are the static flags: the case's model, precision or engine
	// release outside what was fitted.
	Notes []string
	Range FittedRange
}

// EnvelopeCase is what a prediction covered: its prompt and output
// lengths (smallest, largest), the most requests one replica ran at once,
// and what its engine did.
type EnvelopeCase struct {
	Input, Output [2]int
	Concurrency   int
	Preemptions   int64
	// QueueGrowing: the waiting queue grew through the run without bound
	// (arrivals past what the deployment serves).
	QueueGrowing bool
}

// Unfitted is the flag of constants not fitted under load (the GPU
// family's defaults); empty for fitted ones.
func (e Envelope) Unfitted() string {
	if e.Fitted {
		return ""
	}
	return e.Source + ": not fitted on closed-loop measurements of this engine on this GPU (calibrate a profile: docs/calibrate.md)"
}

// Flags are Unfitted, where it says something, and Check's.
func (e Envelope) Flags(c EnvelopeCase) []string {
	if u := e.Unfitted(); u != "" {
		return append([]string{u}, e.Check(c)...)
	}
	return e.Check(c)
}

// Check lists the ways c lies outside what e's constants were fitted on
// (the constants' own source aside: Unfitted); none: inside.
func (e Envelope) Check(c EnvelopeCase) []string {
	out := append([]string{}, e.Notes...)
	r := e.Range
	span := func(what string, v [2]int, fit [2]int) {
		if fit[1] == 0 || v[1] == 0 {
			return
		}
		if v[0] < fit[0] || v[1] > fit[1] {
			out = append(out, fmt.Sprintf("%s %s tokens: fitted on %d–%d", what, spanText(v), fit[0], fit[1]))
		}
	}
	if e.Fitted {
		span("prompts of", c.Input, r.Input)
		span("outputs of", c.Output, r.Output)
		if r.Concurrency[1] > 0 && c.Concurrency > r.Concurrency[1] {
			out = append(out, fmt.Sprintf("%d requests running at once: fitted up to %d", c.Concurrency, r.Concurrency[1]))
		}
	}
	if c.Preemptions > 0 {
		out = append(out, fmt.Sprintf("%d KV-cache preemptions: recomputation past the cache's capacity is modelled, not fitted", c.Preemptions))
	}
	if c.QueueGrowing {
		out = append(out, "the waiting queue grows without bound: past saturation the latencies measure the run's length, not the engine")
	}
	return out
}

func spanText(v [2]int) string {
	if v[0] == v[1] {
		return fmt.Sprint(v[0])
	}
	return fmt.Sprintf("%d–%d", v[0], v[1])
}

// Envelope is the envelope of the constants o's steps are timed with: its
// profile's range, its engine family's fit for the GPU and precision, or
// the GPU family's defaults (not fitted).
func (o Options) Envelope() (Envelope, error) {
	pc, err := o.perfConfig()
	if err != nil {
		return Envelope{}, err
	}
	if o.Profile != "" {
		prof, err := perfmodel.LoadProfile(o.Profile)
		if err != nil {
			return Envelope{}, err
		}
		return profileEnvelope(o.Profile, prof), nil
	}
	if o.Engine == "" {
		return Envelope{Source: "the GPU family's default constants"}, nil
	}
	fam, err := LookupFamily(o.Engine)
	if err != nil {
		return Envelope{}, err
	}
	c, ok := fam.constantFor(pc.GPU.Name, pc.WeightDType)
	if !ok {
		return Envelope{Source: fmt.Sprintf("the GPU family's default constants (%s ships none for %s)", fam.Name, pc.GPU.Name)}, nil
	}
	e := Envelope{Source: fmt.Sprintf("%s constants for %s (%s)", fam.Name, c.GPU, c.FittedOn), Fitted: true, Range: c.Envelope}
	e.Notes = modelNotes(pc, c)
	if !SameMajor(fam.Version, c.EngineVersion) {
		e.Notes = append(e.Notes, fmt.Sprintf("%s %s: the constants were fitted on release %s", fam.Title, fam.Version, c.EngineVersion))
	}
	return e, nil
}

// modelNotes are the ways pc's model and precision leave what c was
// fitted on.
func modelNotes(pc perfmodel.Config, c FamilyConstant) []string {
	var out []string
	b := float64(pc.Model.TotalParams()) / 1e9
	if r := c.Envelope.ParamsB; r[1] > 0 && (b < r[0]*0.8 || b > r[1]*1.25) {
		out = append(out, fmt.Sprintf("%s (%.0fB parameters): fitted on %g–%gB", pc.Model.Name, b, r[0], r[1]))
	}
	if pc.Model.Experts > 0 && !c.Envelope.MoE {
		out = append(out, fmt.Sprintf("%s is a mixture of experts: fitted on dense models", pc.Model.Name))
	}
	if c.DType == "" && pc.WeightDType.Bytes() < 2 {
		out = append(out, fmt.Sprintf("%s weights: fitted on 16-bit weights", pc.WeightDType))
	}
	return out
}

// profileEnvelope is a calibrated profile's range; its interval is the
// fit's 90th-percentile residuals, where it has them.
func profileEnvelope(path string, p *perfmodel.Profile) Envelope {
	r := p.Range
	e := Envelope{Source: "profile " + path, Fitted: true, Range: FittedRange{
		Input: [2]int{r.InputMin, r.InputMax}, Output: [2]int{r.OutputMin, r.OutputMax}, Concurrency: [2]int{r.BatchMin, r.BatchMax},
	}}
	get := func(k string) float64 { return p.Residuals[k].P90 }
	if len(p.Residuals) > 0 {
		e.Range.Interval80 = Interval{TTFT: get("ttft"), TPOT: get("tpot"), E2E: get("e2e"), From: "the profile's fit residuals (P90)"}
	}
	return e
}

// constantFor is the family constant ConstantsFor takes.
func (f Family) constantFor(gpu string, wd perfmodel.DType) (FamilyConstant, bool) {
	var any *FamilyConstant
	for i, c := range f.Constants {
		if !strings.EqualFold(c.GPU, gpu) {
			continue
		}
		if c.DType != "" && strings.EqualFold(c.DType, string(wd)) {
			return c, true
		}
		if c.DType == "" && any == nil {
			any = &f.Constants[i]
		}
	}
	if any == nil {
		return FamilyConstant{}, false
	}
	return *any, true
}
