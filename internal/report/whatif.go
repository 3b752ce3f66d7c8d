package report

import (
	"errors"
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/chart"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Predictions is what the twin — the simulated engine, on the run's own
// workload — predicts each remedy would do: the run re-simulated with its
// own configuration (the baseline, beside the measured values, so the
// twin's own error shows), then once per lever with that lever changed,
// the same seed. internal/whatif computes it; the report only renders it.
type Predictions struct {
	// Basis says what the twin was built from: "simulated run", "embedded
	// engine" or "profile FILE" (a calibrated profile on a measured run).
	Basis string `json:"basis"`
	// Run is the results folder the twin was rebuilt from.
	Run string `json:"run,omitempty"`
	// Deployment is the run's deployment as the twin runs it; Workload
	// the workload replayed.
	Deployment string `json:"deployment"`
	Workload   string `json:"workload"`
	Seed       uint64 `json:"seed"`
	// Objectives are what every prediction is judged on, failing SLOs
	// first: the run's SLOs, or without any the P99 of the metrics the
	// findings are about (then Judged is false: there is no threshold, so
	// no goodput).
	Objectives []string `json:"objectives"`
	Judged     bool     `json:"judged"`
	// MeasuredMS are the run's own values of the objectives.
	MeasuredMS []float64 `json:"measured_ms"`
	// Baseline is the twin's prediction for the run as it was.
	Baseline WhatIfPoint `json:"baseline"`
	// Remedies are ranked by their predicted effect on the first
	// objective (the breached SLO), best first.
	Remedies []Remedy `json:"remedies"`
	// Assumptions hold for every prediction.
	Assumptions []string `json:"assumptions,omitempty"`
	// Fidelity is, per objective, the twin baseline's relative miss of the
	// measured value (|twin − measured| / measured; null when either is
	// unknown), and StatedError the twin's own stated error there: its
	// profile's calibration residual, or the two-clock differential's
	// limit (5 % at P50/P90, 10 % at P99) for the run's own engine.
	Fidelity    []*float64 `json:"fidelity,omitempty"`
	StatedError []float64  `json:"stated_error,omitempty"`
	// Unreliable, when set, says why the remedies cannot be trusted: the
	// twin's baseline misses the run by more than its stated error, so it
	// does not reproduce what made the run slow. Its remedies are listed
	// but not ranked or recommended.
	Unreliable string `json:"unreliable,omitempty"`
	// Simulations counts the simulations run; ElapsedS their wall time.
	Simulations int     `json:"simulations"`
	ElapsedS    float64 `json:"elapsed_s"`
}

// WhatIfPoint is one simulation of the run's workload at its own rate, and
// the goodput search of the same deployment.
type WhatIfPoint struct {
	// ValuesMS holds each objective's percentile; null where it falls on
	// a failed (refused) request, which counts as infinitely late.
	ValuesMS []*float64 `json:"values_ms"`
	// Meets says every SLO held (and the deployment kept up).
	Meets bool `json:"meets"`
	// KeepsUp is false when the deployment fell behind its arrivals.
	KeepsUp bool `json:"keeps_up"`
	// FailedShare is the share of the judged requests that failed (an
	// admission bound sheds them).
	FailedShare float64 `json:"failed_share"`
	// GoodputRPS is the highest rate at which every SLO holds (0: none
	// found, or no SLO to judge).
	GoodputRPS float64 `json:"goodput_rps"`
	// PeakBatch is the most requests one replica ran at once (sampled).
	PeakBatch int `json:"peak_batch"`
}

// Remedy is one lever changed, and what the twin predicts.
type Remedy struct {
	// Lever names it (docs/report.md, "What-if remedies"); Setting says
	// what changed in the engine's or deployment's own names.
	Lever   string `json:"lever"`
	Title   string `json:"title"`
	Setting string `json:"setting"`
	// For lists the findings (rules) it answers; empty when asked for.
	For []string `json:"for,omitempty"`
	// After is the prediction with the lever changed.
	After WhatIfPoint `json:"after"`
	// Effect is After ÷ Baseline of the first objective (< 1 is better);
	// null when either falls on a failed request or was not simulated.
	Effect *float64 `json:"effect"`
	// Assumes says what the prediction takes for granted; Extrapolates
	// where the twin leaves what it was calibrated or built on.
	Assumes      []string `json:"assumes,omitempty"`
	Extrapolates []string `json:"extrapolates,omitempty"`
	// Error says why the lever could not be simulated (it does not fit).
	Error string `json:"error,omitempty"`
	// Applied is the change as `tokentrace verify --applied` reads it
	// (max_num_seqs=8): VerifyCommand checks the remedy once applied.
	Applied string `json:"applied,omitempty"`
	// GatewayApply is the remedy as `tokentrace gateway apply` writes it
	// (concurrency=8 max-queue=4), for a lever a gateway can apply in
	// front of the server: GatewayCommand.
	GatewayApply string `json:"gateway_apply,omitempty"`
}

// noGain is the relative change of the first objective within which a
// remedy is taken to change nothing.
const noGain = 0.02

// Split parts the remedies into those the twin predicts to help (the first
// objective better by more than noGain, or more goodput) and those that
// change nothing or make it worse, each in its order; a remedy that could
// not be simulated stays with the first (its error is news).
func (w *Predictions) Split() (helpful, none []Remedy) {
	for _, r := range w.Remedies {
		better := r.Effect == nil || *r.Effect < 1-noGain || r.After.GoodputRPS > (1+noGain)*w.Baseline.GoodputRPS
		if r.Error != "" || better {
			helpful = append(helpful, r)
		} else {
			none = append(none, r)
		}
	}
	return helpful, none
}

// NoGainLine folds the remedies that change nothing or make it worse into
// one line; "" when there are none.
func (w *Predictions) NoGainLine(none []Remedy) string {
	if len(none) == 0 {
		return ""
	}
	names := make([]string, len(none))
	for i, r := range none {
		names[i] = r.Title
		if r.Setting != "" {
			names[i] += " (" + r.Setting + ")"
		}
	}
	return fmt.Sprintf("no gain (within %.0f%%) or worse: %s; the JSON form has their figures", 100*noGain, strings.Join(names, ", "))
}

// VerifyCommand is the command that checks a remedy once it is applied
// and the load run again into AFTER (docs/report.md, "Verify").
func (w *Predictions) VerifyCommand(r Remedy) string {
	if r.Applied == "" || r.Error != "" {
		return ""
	}
	run := w.Run
	if run == "" {
		run = "BEFORE"
	}
	return fmt.Sprintf("tokentrace verify %s AFTER --applied %s", run, r.Applied)
}

// GatewayCommand applies a remedy through a tokentrace gateway's
// configuration (reloaded live) and checks it: after it, verify finds the
// change in the gateway's evidence without --applied; "" for a lever the
// gateway does not own.
func (w *Predictions) GatewayCommand(r Remedy) string {
	if r.GatewayApply == "" || r.Error != "" {
		return ""
	}
	run := w.Run
	if run == "" {
		run = "BEFORE"
	}
	return fmt.Sprintf("tokentrace gateway apply --config GATEWAY.yaml %s; then tokentrace verify %s AFTER", r.GatewayApply, run)
}

// value formats an objective's value: "∞" for a failed request.
func whatIfValue(v *float64) string {
	if v == nil {
		return "∞"
	}
	return fmtMS(*v)
}

// objectiveName is an objective's metric and percentile for a line:
// "ttft:p99<=1s" → "TTFT P99".
func objectiveName(o string) string {
	m, p, _ := strings.Cut(o, ":")
	p, _, _ = strings.Cut(p, "<=")
	return strings.ToUpper(m) + " " + strings.ToUpper(p)
}

// Line is the remedy in one line: "prefix caching on: TTFT P99 1.84s →
// 410ms, goodput 7.20 → 11.8 req/s (simulated, profile h100.yaml)".
func (w *Predictions) Line(r Remedy) string {
	if r.Error != "" {
		return fmt.Sprintf("%s: cannot be simulated: %s", r.Title, r.Error)
	}
	var b strings.Builder
	b.WriteString(r.Title + ": ")
	for i, o := range w.Objectives {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s → %s", objectiveName(o), whatIfValue(at(w.Baseline.ValuesMS, i)), whatIfValue(at(r.After.ValuesMS, i)))
	}
	if w.Judged {
		fmt.Fprintf(&b, ", goodput %s → %s req/s", num(w.Baseline.GoodputRPS), num(r.After.GoodputRPS))
	}
	if r.After.FailedShare > 0 {
		fmt.Fprintf(&b, ", %.1f%% refused", 100*r.After.FailedShare)
	}
	if !r.After.KeepsUp {
		b.WriteString(", falls behind")
	}
	fmt.Fprintf(&b, " (simulated, %s)", w.Basis)
	if w.Unreliable != "" {
		b.WriteString(" — unreliable: the twin does not reproduce the run")
	}
	return b.String()
}

func at(v []*float64, i int) *float64 {
	if i < len(v) {
		return v[i]
	}
	return nil
}

// BaselineLine compares the measured run with the twin's baseline.
func (w *Predictions) BaselineLine() string {
	var parts []string
	for i, o := range w.Objectives {
		m := math.NaN()
		if i < len(w.MeasuredMS) {
			m = w.MeasuredMS[i]
		}
		parts = append(parts, fmt.Sprintf("%s measured %s, twin %s", objectiveName(o), fmtMS(m), whatIfValue(at(w.Baseline.ValuesMS, i))))
	}
	s := strings.Join(parts, "; ")
	if w.Judged {
		s += fmt.Sprintf("; twin goodput %s req/s", num(w.Baseline.GoodputRPS))
	}
	return s
}

func (t textWriter) whatIf(w *Predictions) {
	if w == nil {
		return
	}
	t.p("\nWHAT-IF (the twin: %s)\n", w.Basis)
	t.wrapped("run as simulated: "+w.Deployment, 94, "  ", "    ")
	t.wrapped("baseline: "+w.BaselineLine(), 94, "  ", "    ")
	if w.Unreliable != "" {
		t.wrapped("UNRELIABLE: "+w.Unreliable, 94, "  ", "    ")
	}
	helpful, none := w.Split()
	for i, r := range helpful {
		t.wrapped(fmt.Sprintf("%d. %s", i+1, w.Line(r)), 94, "  ", "     ")
		for _, a := range r.Assumes {
			t.wrapped("assumes: "+a, 90, "     ", "       ")
		}
		for _, x := range r.Extrapolates {
			t.wrapped("extrapolates: "+x, 90, "     ", "       ")
		}
		if c := w.VerifyCommand(r); c != "" {
			t.p("     verify once applied: %s\n", c)
		}
		if c := w.GatewayCommand(r); c != "" {
			t.p("     or through the gateway: %s\n", c)
		}
	}
	if line := w.NoGainLine(none); line != "" {
		t.wrapped(line, 94, "  ", "    ")
	}
	for _, a := range w.Assumptions {
		t.wrapped("note: "+a, 94, "  ", "    ")
	}
	t.p("  %d simulations in %.1fs\n", w.Simulations, w.ElapsedS)
}

func (m mdWriter) whatIf(w *Predictions) {
	if w == nil {
		return
	}
	m.p("\n### What-if remedies (simulated, %s)\n\n", w.Basis)
	m.p("Run as simulated: %s. Baseline: %s.\n\n", mdEscape(w.Deployment), mdEscape(w.BaselineLine()))
	if w.Unreliable != "" {
		m.p("**Unreliable:** %s\n\n", mdEscape(w.Unreliable))
	}
	m.p("| # | remedy | setting |")
	for _, o := range w.Objectives {
		m.p(" %s |", mdEscape(objectiveName(o)))
	}
	if w.Judged {
		m.p(" goodput req/s |")
	}
	m.p(" assumes / extrapolates |\n|---|---|---|")
	for range w.Objectives {
		m.p("---:|")
	}
	if w.Judged {
		m.p("---:|")
	}
	m.p("---|\n")
	for i, r := range w.Remedies {
		m.p("| %d | %s | `%s` |", i+1, mdEscape(r.Title), r.Setting)
		for j := range w.Objectives {
			m.p(" %s → %s |", whatIfValue(at(w.Baseline.ValuesMS, j)), whatIfValue(at(r.After.ValuesMS, j)))
		}
		if w.Judged {
			m.p(" %s → %s |", num(w.Baseline.GoodputRPS), num(r.After.GoodputRPS))
		}
		notes := append(append([]string{}, r.Assumes...), r.Extrapolates...)
		if r.Error != "" {
			notes = append([]string{"cannot be simulated: " + r.Error}, notes...)
		}
		if c := w.VerifyCommand(r); c != "" {
			notes = append(notes, "verify once applied: `"+c+"`")
		}
		if c := w.GatewayCommand(r); c != "" {
			notes = append(notes, "or through the gateway: `"+c+"`")
		}
		m.p(" %s |\n", mdEscape(strings.Join(notes, "; ")))
	}
	for _, a := range w.Assumptions {
		m.p("\n- %s", mdEscape(a))
	}
	m.p("\n\n")
}

// mdEscape keeps a table cell's pipes from splitting it.
func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// whatIfView is a remedy as the HTML page shows it: its line and its
// before/after chart.
type whatIfView struct {
	Remedy
	Line   string
	Chart  template.HTML
	Verify string
	// Gateway is GatewayCommand's line.
	Gateway string
}

// whatIfViews draws one small chart per remedy: the first objective as
// measured, as the twin's baseline and with the lever changed, and the
// goodput before and after when there is an SLO to judge it.
func (w *Predictions) whatIfViews() ([]whatIfView, error) {
	if w == nil {
		return nil, nil
	}
	helpful, _ := w.Split()
	out := make([]whatIfView, 0, len(helpful))
	var errs []error
	for _, r := range helpful {
		v := whatIfView{Remedy: r, Line: w.Line(r), Verify: w.VerifyCommand(r), Gateway: w.GatewayCommand(r)}
		if r.Error == "" && len(w.Objectives) > 0 {
			svg, err := w.remedyChart(r)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", r.Title, err))
			}
			v.Chart = template.HTML(svg) // drawn by gonum/plot from our numbers
		}
		out = append(out, v)
	}
	return out, errors.Join(errs...)
}

// remedyChart is one remedy's before/after bars.
func (w *Predictions) remedyChart(r Remedy) (string, error) {
	name := objectiveName(w.Objectives[0])
	p := chart.New(r.Title, "", name+" (ms)")
	measured := math.NaN()
	if len(w.MeasuredMS) > 0 {
		measured = w.MeasuredMS[0]
	}
	before, after := at(w.Baseline.ValuesMS, 0), at(r.After.ValuesMS, 0)
	vals := plotter.Values{finiteOr0(measured), ptrOr0(before), ptrOr0(after)}
	labels := []string{"measured", "twin before", "twin after"}
	bc, err := plotter.NewBarChart(vals, vg.Points(28))
	if err != nil {
		return "", err
	}
	bc.Color = chart.Color(0)
	bc.LineStyle.Width = 0
	p.Add(bc)
	if w.Judged && len(w.Objectives) > 0 {
		if thr := thresholdMS(w.Objectives[0]); thr > 0 {
			if err := hline(p, "SLO", thr, -0.5, 2.5, 1); err != nil {
				return "", err
			}
		}
	}
	p.NominalX(labels...)
	p.Y.Min = 0
	return chart.SVG(p, 3*vg.Inch, 2.2*vg.Inch)
}

func finiteOr0(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func ptrOr0(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}

// thresholdMS reads an objective's threshold ("ttft:p99<=1s" → 1000).
func thresholdMS(o string) float64 {
	_, t, ok := strings.Cut(o, "<=")
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0
	}
	return float64(d) / 1e6
}

// NoGain is NoGainLine of the remedies Split finds no gain in, for the
// HTML page.
func (w *Predictions) NoGain() string {
	_, none := w.Split()
	return w.NoGainLine(none)
}
