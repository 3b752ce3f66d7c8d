package report

import (
	"fmt"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
)

// Tested words what the run measured, from its run.json: the target, the
// model and the load; "" when the inputs carry no run metadata.
func (r *Report) Tested() string {
	if len(r.Runs) == 0 {
		return ""
	}
	i := r.Runs[0]
	var parts []string
	switch {
	case i.Simulated && strings.HasPrefix(i.Target, "simulated"):
		parts = append(parts, i.Target) // simulate's own "simulated: 4 replicas …"
	case i.Simulated:
		parts = append(parts, "simulated "+orDash(i.Target))
	case i.Target == "embedded":
		parts = append(parts, "the embedded engine")
	case i.Target != "":
		parts = append(parts, i.Target)
	}
	if i.Model != "" {
		parts = append(parts, "model "+i.Model)
	}
	if l := loadShape(i); l != "" {
		parts = append(parts, l)
	}
	if len(r.Runs) > 1 {
		parts = append(parts, fmt.Sprintf("%d runs pooled", len(r.Runs)))
	}
	return strings.Join(parts, " · ")
}

// Verdict words the run's outcome in one line: the P99 of TTFT, TPOT and
// E2E, and whether the SLOs given held (the failed ones named).
func (r *Report) Verdict() string {
	var parts []string
	for _, m := range []latency.Metric{latency.TTFT, latency.TPOT, latency.E2E} {
		if d := r.dist(m); d != nil {
			parts = append(parts, fmt.Sprintf("%s P99 %s", strings.ToUpper(string(m)), fmtMS(d.P99)))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no successful request")
	}
	out := strings.Join(parts, "  ")
	switch {
	case len(r.SLOs) == 0:
		return out + "  ·  no SLO given (--slo)"
	case !r.SLOsFailed():
		return out + fmt.Sprintf("  ·  SLOs met (%d of %d)", len(r.SLOs), len(r.SLOs))
	}
	var failed []string
	for _, v := range r.SLOs {
		if v.Status != StatusPass {
			failed = append(failed, v.SLO)
		}
	}
	return out + fmt.Sprintf("  ·  SLOs FAIL (%d of %d): %s", len(failed), len(r.SLOs), strings.Join(failed, ", "))
}

// Title is the report's title: what was tested where run.json says, else
// the inputs' names.
func (r *Report) Title() string {
	if len(r.Runs) > 0 && r.Runs[0].Model != "" {
		i := r.Runs[0]
		t := "tokentrace report: " + i.Model
		if i.Target != "" && i.Target != "embedded" && !i.Simulated {
			t += " at " + i.Target
		}
		return t
	}
	if len(r.Sources) > 0 {
		return "tokentrace report: " + strings.Join(r.Sources, ", ")
	}
	return "tokentrace report"
}

// HeadWarnings are the run warnings to show above the diagnosis: the
// twin's envelope flags only; the load generator's doubts are in the
// client-bottleneck finding, weighed against the latencies measured.
func (r *Report) HeadWarnings() []string {
	var out []string
	for _, run := range r.Runs {
		for _, w := range run.Warnings {
			if results.IsEnvelopeWarning(w) {
				out = append(out, w)
			}
		}
	}
	return out
}
