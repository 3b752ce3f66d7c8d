package report

import (
	"errors"
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/chart"
	"github.com/tokentrace/tokentrace/internal/prediction"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

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

// RemedyLine is a remedy in one line: "prefix caching on: TTFT P99 1.84s →
// 410ms, goodput 7.20 → 11.8 req/s (simulated, profile h100.yaml)".
func RemedyLine(w *prediction.Predictions, r prediction.Remedy) string {
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

// baselineLine compares the measured run with the twin's baseline.
func baselineLine(w *prediction.Predictions) string {
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

func (t textWriter) whatIf(w *prediction.Predictions) {
	if w == nil {
		return
	}
	t.p("\nWHAT-IF (the twin: %s)\n", w.Basis)
	t.wrapped("run as simulated: "+w.Deployment, 94, "  ", "    ")
	t.wrapped("baseline: "+baselineLine(w), 94, "  ", "    ")
	if w.Interval80 != nil {
		t.wrapped("interval 80 %: "+w.Interval80.String(), 94, "  ", "    ")
	}
	if w.Unreliable != "" {
		t.wrapped("UNRELIABLE: "+w.Unreliable, 94, "  ", "    ")
	}
	helpful, none := w.Split()
	rank := 0
	for _, r := range helpful {
		label := "not ranked:"
		if w.Ranked(r) {
			rank++
			label = fmt.Sprintf("%d.", rank)
		}
		t.wrapped(label+" "+RemedyLine(w, r), 94, "  ", "     ")
		for _, a := range r.Assumes {
			t.wrapped("assumes: "+a, 90, "     ", "       ")
		}
		for _, x := range r.Extrapolates {
			t.wrapped("extrapolates: "+x, 90, "     ", "       ")
		}
		if iv := r.Interval80; iv != nil && (w.Interval80 == nil || *iv != *w.Interval80) {
			t.wrapped("interval 80 %: "+iv.String(), 90, "     ", "       ")
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

func (m mdWriter) whatIf(w *prediction.Predictions) {
	if w == nil {
		return
	}
	m.p("\n### What-if remedies (simulated, %s)\n\n", w.Basis)
	m.p("Run as simulated: %s. Baseline: %s.\n\n", mdEscape(w.Deployment), mdEscape(baselineLine(w)))
	if w.Interval80 != nil {
		m.p("Interval 80 %%: %s.\n\n", mdEscape(w.Interval80.String()))
	}
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
	rank := 0
	for _, r := range w.Remedies {
		label := "–"
		if w.Ranked(r) {
			rank++
			label = fmt.Sprint(rank)
		}
		m.p("| %s | %s | `%s` |", label, mdEscape(r.Title), r.Setting)
		for j := range w.Objectives {
			m.p(" %s → %s |", whatIfValue(at(w.Baseline.ValuesMS, j)), whatIfValue(at(r.After.ValuesMS, j)))
		}
		if w.Judged {
			m.p(" %s → %s |", num(w.Baseline.GoodputRPS), num(r.After.GoodputRPS))
		}
		notes := append(append([]string{}, r.Assumes...), r.Extrapolates...)
		if iv := r.Interval80; iv != nil && (w.Interval80 == nil || *iv != *w.Interval80) {
			notes = append(notes, "interval 80 %: "+iv.String())
		}
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
	prediction.Remedy
	// Rank is its place among the ranked remedies (1 the best); 0 when it
	// is not ranked (prediction.Predictions.Ranked).
	Rank   int
	Line   string
	Chart  template.HTML
	Verify string
	// Gateway is GatewayCommand's line.
	Gateway string
}

// whatIfViews draws one small chart per remedy: the first objective as
// measured, as the twin's baseline and with the lever changed, and the
// goodput before and after when there is an SLO to judge it.
func whatIfViews(w *prediction.Predictions) ([]whatIfView, error) {
	if w == nil {
		return nil, nil
	}
	helpful, _ := w.Split()
	out := make([]whatIfView, 0, len(helpful))
	var errs []error
	rank := 0
	for _, r := range helpful {
		v := whatIfView{Remedy: r, Line: RemedyLine(w, r), Verify: w.VerifyCommand(r), Gateway: w.GatewayCommand(r)}
		if w.Ranked(r) {
			rank++
			v.Rank = rank
		}
		if r.Error == "" && len(w.Objectives) > 0 {
			svg, err := remedyChart(w, r)
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
func remedyChart(w *prediction.Predictions, r prediction.Remedy) (string, error) {
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
			if err := chart.HLine(p, "SLO", thr, -0.5, 2.5, 1); err != nil {
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
