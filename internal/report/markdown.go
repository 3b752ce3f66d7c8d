package report

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// mdWriter writes markdown to a buffered writer.
type mdWriter struct{ b *bufio.Writer }

func (m mdWriter) p(format string, args ...any) { fmt.Fprintf(m.b, format, args...) }

// WriteMarkdown writes the report as GitHub-flavoured markdown, for a pull
// request or an issue.
func (r *Report) WriteMarkdown(w io.Writer) error {
	m := mdWriter{bufio.NewWriter(w)}
	m.summary(r)
	m.findings(r.Findings, r.Quieted)
	m.whatIf(r.WhatIf)
	m.slos(r)
	m.metrics(r.Metrics)
	for _, d := range []*Decomposition{r.Decomposition, r.TTFTSplit} {
		if d != nil {
			m.decomposition(d)
		}
	}
	m.phases(r)
	m.sessions(r.Sessions)
	if len(r.Notes) > 0 {
		m.p("### Notes\n\n")
		for _, n := range r.Notes {
			m.p("- %s\n", n)
		}
	}
	return m.b.Flush()
}

func (m mdWriter) summary(r *Report) {
	s := r.Summary
	m.p("## tokentrace report\n\n")
	if tested := r.Tested(); tested != "" {
		m.p("**Tested**: %s  \n", tested)
	}
	m.p("**Verdict**: %s\n\n", r.Verdict())
	if len(r.Sources) > 0 {
		m.p("Runs: %s\n\n", "`"+strings.Join(r.Sources, "`, `")+"`")
	}
	m.p("| requests | succeeded | failed | duration | throughput | output tok/s | total tok/s | offered |\n")
	m.p("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	m.p("| %d | %d | %d%s | %.1f s | %s req/s | %s | %s | %s req/s |\n\n", s.Requests, s.Succeeded, s.Failed,
		errorList(s.Errors), s.DurationS, num(s.ThroughputRPS), num(s.OutputTPS), num(s.TotalTPS), num(s.OfferedRPS))
	if len(s.TopErrors) > 0 {
		m.p("Why requests failed (most frequent first):\n\n")
		for _, line := range errorLines(s.TopErrors) {
			m.p("- %s\n", line)
		}
		m.p("\n")
	}
	if s.Unreadable > 0 {
		m.p("%d unreadable line(s) in the input: not records, so neither succeeded nor failed requests (see the notes).\n\n", s.Unreadable)
	}
	if line := s.PrefixLine(); line != "" {
		m.p("%s\n\n", line)
	}
}

func (m mdWriter) findings(fs []Finding, q *Quieted) {
	m.p("### Diagnosis\n\n")
	if len(fs) == 0 {
		m.p("No problem found by the rules.\n\n")
	}
	for _, f := range fs {
		m.p("- **%s** (%s, `%s`): %s\n", f.Title, f.Severity, f.Rule, f.Evidence)
		for _, rem := range f.Remedies {
			m.p("  - %s\n", rem)
		}
	}
	if len(fs) > 0 {
		m.p("\n")
	}
	if q != nil {
		m.p("_Note: %s._\n\n", q.Line())
	}
}

func (m mdWriter) slos(r *Report) {
	if len(r.SLOs) == 0 {
		return
	}
	m.p("### SLOs\n\n| SLO | value | 95%% CI | status | attainment | goodput |\n|---|---:|---:|---|---:|---:|\n")
	for _, v := range append(slices.Clone(r.SLOs), *r.AllSLOs) {
		val, ci := "", ""
		if v.SLO != "all" && v.Status != StatusNoData {
			val, ci = fmtMS(v.ValueMS), fmtMS(v.CI[0])+" – "+fmtMS(v.CI[1])
		}
		st := v.Status
		if v.Uncertain {
			st += " (within CI)"
		}
		m.p("| `%s` | %s | %s | %s | %.1f%% | %s req/s |\n", v.SLO, val, ci, st, 100*v.Attainment, num(v.GoodputRPS))
	}
	m.p("\n")
}

func (m mdWriter) metrics(ds []Dist) {
	if len(ds) == 0 {
		return
	}
	m.p("### Latency\n\n| metric | count | mean | p50 | p90 | p95 | p99 | p99.9 | max | p99 95%% CI |\n")
	m.p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range ds {
		ci := fmtMS(d.P99CI[0]) + " – " + fmtMS(d.P99CI[1])
		if !d.P99Trusted {
			ci += " ⚠"
		}
		m.p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", d.Metric, d.Count, fmtMS(d.Mean),
			fmtMS(d.P50), fmtMS(d.P90), fmtMS(d.P95), fmtMS(d.P99), fmtMS(d.P999), fmtMS(d.Max), ci)
	}
	if slices.ContainsFunc(ds, func(d Dist) bool { return !d.P99Trusted }) {
		m.p("\n⚠ fewer than 1,000 values: under 10 lie above the P99, too few to trust it.\n")
	}
	m.p("\n")
}

func (m mdWriter) decomposition(d *Decomposition) {
	if d.Of == latency.TTFTIntended {
		m.p("### TTFT split (from the intended send)\n\n")
	} else {
		m.p("### Where the time goes (E2E from the intended send)\n\n")
	}
	m.p("| hop | stage |")
	for _, g := range d.Groups {
		m.p(" %s (n=%d) |", g.Name, g.Requests)
	}
	m.p("\n|---|---|%s\n", strings.Repeat("---:|", len(d.Groups)))
	for i, s := range d.Groups[0].Stages {
		m.p("| %s | %s |", mdCell(hopCell(d.Groups[0].Stages, i)), mdCell(s.Stage))
		for _, g := range d.Groups {
			st := g.Stages[i]
			cell := fmt.Sprintf("%s (%.1f%%)", fmtMS(st.MeanMS), 100*st.Share)
			if st.Stage == g.Largest && st.Hop == g.LargestHop {
				cell = "**" + cell + "**"
			}
			m.p(" %s |", cell)
		}
		m.p("\n")
	}
	m.p("| total | |")
	for _, g := range d.Groups {
		m.p(" %s |", fmtMS(g.TotalMS))
	}
	m.p("\n\n")
}

// mdCell escapes what would break a table cell (a stage name as a hop
// reported it).
func mdCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func (m mdWriter) phases(r *Report) {
	if len(r.Phases) == 0 {
		return
	}
	m.p("### Sweep\n\n| point | offered | throughput | goodput | attainment | TTFT p50 | TTFT p99 | TPOT p99 | E2E p99 | SLOs |\n")
	m.p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, ph := range r.Phases {
		m.p("| %s | %s | %s | %s | %.1f%% | %s | %s | %s | %s | %v |\n", ph.Name, num(ph.OfferedRPS),
			num(ph.ThroughputRPS), num(ph.GoodputRPS), 100*ph.Attainment, fmtMS(ph.TTFTP50),
			fmtMS(ph.TTFTP99), fmtMS(ph.TPOTP99), fmtMS(ph.E2EP99), map[bool]string{true: "met", false: "fail"}[ph.SLOsMet])
	}
	if lines := r.BeforeCellLines(); len(lines) > 0 {
		m.p("\n")
		for _, l := range lines {
			m.p("- %s\n", mdCell(l))
		}
	}
	if r.Capacity != nil {
		m.p("\nCapacity: **%s req/s** (%s).\n", num(r.Capacity.RPS), r.Capacity.Basis)
	}
	if r.Pareto != nil {
		m.p("\n")
		for _, l := range r.Pareto.Lines() {
			m.p("- %s\n", mdCell(l))
		}
	}
	m.p("\n")
}
