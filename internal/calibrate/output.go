package calibrate

import (
	"fmt"
	"io"
	"strings"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// WriteText prints the fit: each constant with its interval, the residuals
// before and after at P50/P90/P99, and the range fitted on.
func (r *Result) WriteText(w io.Writer) error {
	p := r.Profile
	var b strings.Builder
	fmt.Fprintf(&b, "calibrated %s on %d × %s (weights %s, KV cache %s) from %d requests (%s); %d model evaluations\n",
		p.Model, p.TP, p.GPU, p.DType, p.KVDType, p.Requests, p.Source, r.Evaluations)
	c := p.Constants
	b.WriteString("constants (90% bootstrap interval; held = not fitted):\n")
	row := func(name string, k interface {
		fmtValue() string
	}) {
		fmt.Fprintf(&b, "  %-22s %s\n", name, k.fmtValue())
	}
	row("compute efficiency", frac(c.Compute))
	row("memory efficiency", frac(c.Memory))
	row("step overhead", us(c.StepOverheadUS))
	row("layer overhead", us(c.LayerOverheadUS))
	row("sequence overhead", us(c.SeqOverheadUS))
	row("interconnect", frac(c.Interconnect))
	row("all-reduce latency", us(c.AllReduceLatencyUS))
	if c.RingStepUS.Value > 0 {
		row("ring step", us(c.RingStepUS))
	}
	b.WriteString("residuals |simulated − measured| / measured, P50 / P90 / P99:\n")
	for _, m := range []string{"ttft", "tpot", "e2e"} {
		a, ok := p.Residuals[m]
		if !ok {
			continue
		}
		s := r.Before[m]
		fmt.Fprintf(&b, "  %-5s fitted %5.1f%% / %5.1f%% / %5.1f%%   (starting constants %5.1f%% / %5.1f%% / %5.1f%%)\n",
			strings.ToUpper(m), 100*a.P50, 100*a.P90, 100*a.P99, 100*s.P50, 100*s.P90, 100*s.P99)
	}
	g := p.Range
	fmt.Fprintf(&b, "fitted on: batch %d–%d sequences per step, input %d–%d tokens, output %d–%d tokens; predictions outside this range are extrapolations\n",
		g.BatchMin, g.BatchMax, g.InputMin, g.InputMax, g.OutputMin, g.OutputMax)
	for _, x := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", x)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

type frac perfmodel.Constant
type us perfmodel.Constant

func (k frac) fmtValue() string {
	if !k.Fitted {
		return fmt.Sprintf("%.3f (held)", k.Value)
	}
	return fmt.Sprintf("%.3f  [%.3f, %.3f]", k.Value, k.Low, k.High)
}

func (k us) fmtValue() string {
	if !k.Fitted {
		return fmt.Sprintf("%.1f µs (held)", k.Value)
	}
	return fmt.Sprintf("%.1f µs  [%.1f, %.1f]", k.Value, k.Low, k.High)
}
