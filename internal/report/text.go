package report

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// WriteText writes the terminal summary (at most 100 columns): the run at a
// glance, the diagnosis, latency percentiles, SLO verdicts and where the
// time goes.
func (r *Report) WriteText(w io.Writer) error {
	var buf bytes.Buffer
	t := textWriter{bufio.NewWriter(&buf)}
	t.summary(r)
	t.findings(r.Findings, r.Quieted)
	t.whatIf(r.WhatIf)
	t.metrics(r.Metrics)
	t.slos(r)
	for _, d := range []*Decomposition{r.Decomposition, r.TTFTSplit} {
		if d != nil {
			t.decomposition(d)
		}
	}
	t.phases(r)
	t.sessions(r.Sessions)
	t.notes(r.Notes)
	if err := t.b.Flush(); err != nil {
		return err
	}
	return writeTrimmed(w, buf.Bytes())
}

// textWriter writes the terminal summary to a buffered writer.
type textWriter struct{ b *bufio.Writer }

func (t textWriter) p(format string, args ...any) { fmt.Fprintf(t.b, format, args...) }

// wrapped writes s wrapped at n runes, each line after the first indented
// by cont, every line prefixed by lead.
func (t textWriter) wrapped(s string, n int, lead, cont string) {
	for i, line := range wrap(s, n) {
		if i > 0 {
			line = cont + line
		}
		t.p("%s%s\n", lead, line)
	}
}

func (t textWriter) summary(r *Report) {
	s := r.Summary
	title := "tokentrace report"
	if len(r.Sources) > 0 {
		title += ": " + strings.Join(r.Sources, ", ")
	}
	t.p("%s\n", clip(title, 100))
	if tested := r.Tested(); tested != "" {
		t.wrapped("tested: "+tested, 98, "", "  ")
	}
	t.wrapped("verdict: "+r.Verdict(), 98, "", "  ")
	t.p("requests %d  succeeded %d  failed %d%s  duration %.1fs\n",
		s.Requests, s.Succeeded, s.Failed, errorList(s.Errors), s.DurationS)
	if len(s.TopErrors) > 0 {
		t.p("why they failed (most frequent first; every message in requests.jsonl):\n")
		for _, line := range errorLines(s.TopErrors) {
			t.wrapped(line, 96, "  ", "    ")
		}
	}
	t.p("throughput %s req/s  completions %s req/s (first to last end)  offered %s req/s\n",
		num(s.ThroughputRPS), num(s.CompletionRPS), num(s.OfferedRPS))
	t.p("output %s tok/s  total %s tok/s\n", num(s.OutputTPS), num(s.TotalTPS))
	if s.Warmup > 0 || s.Truncated > 0 {
		t.p("warm-up excluded %d  answers cut short by max_tokens: %d\n", s.Warmup, s.Truncated)
	}
	if s.Unreadable > 0 {
		t.p("unreadable lines %d (not records: neither succeeded nor failed requests; see the notes)\n", s.Unreadable)
	}
	if s.Resent > 0 {
		t.p("resent %d (the server had closed their pooled connection before any answer; not failures)\n", s.Resent)
	}
	if line := s.PrefixLine(); line != "" {
		t.p("%s\n", line)
	}
	for _, wmsg := range r.HeadWarnings() {
		t.wrapped("twin: "+wmsg, 98, "", "  ")
	}
}

func (t textWriter) findings(fs []Finding, q *Quieted) {
	t.p("\nDIAGNOSIS\n")
	if len(fs) == 0 {
		t.p("  no problem found by the rules (docs/report.md lists them)\n")
	}
	for _, f := range fs {
		t.p("  [%s] %s\n", f.Severity, clip(f.Title, 85))
		t.wrapped(f.Evidence, 94, "    ", "")
		if len(f.Remedies) > 0 {
			t.wrapped("do: "+strings.Join(f.Remedies, "; "), 94, "    ", "  ")
		}
	}
	if q != nil {
		t.wrapped("note: "+q.Line(), 94, "  ", "    ")
	}
}

func (t textWriter) metrics(ds []Dist) {
	if len(ds) == 0 {
		return
	}
	t.p("\nLATENCY         count     mean      p50      p90      p95      p99    p99.9      max  p99 95%% CI\n")
	for _, d := range ds {
		ci := fmt.Sprintf("%s–%s", fmtMS(d.P99CI[0]), fmtMS(d.P99CI[1]))
		if !d.P99Trusted {
			ci += "*"
		}
		name := d.Metric
		if d.Approx {
			name += "≈"
		}
		t.p("%-13s %7s %8s %8s %8s %8s %8s %8s %8s  %s\n", clip(name, 13), count(d.Count),
			fmtMS(d.Mean), fmtMS(d.P50), fmtMS(d.P90), fmtMS(d.P95), fmtMS(d.P99),
			fmtMS(d.P999), fmtMS(d.Max), ci)
	}
	if slices.ContainsFunc(ds, func(d Dist) bool { return !d.P99Trusted }) {
		t.p("* fewer than 1,000 values: under 10 lie above the P99, too few to trust it\n")
	}
	if slices.ContainsFunc(ds, func(d Dist) bool { return d.Approx }) {
		t.p("≈ from a histogram of 0.05%% resolution (too many values to keep one by one)\n")
	}
}

func (t textWriter) slos(r *Report) {
	if len(r.SLOs) == 0 {
		return
	}
	t.p("\nSLOs                          value  95%% CI              status  attainment  goodput\n")
	for _, v := range append(slices.Clone(r.SLOs), *r.AllSLOs) {
		val, ci := "", ""
		if v.SLO != "all" && v.Status != StatusNoData {
			val = fmtMS(v.ValueMS)
			ci = fmtMS(v.CI[0]) + "–" + fmtMS(v.CI[1])
		}
		st := strings.ToUpper(string(v.Status))
		if v.Uncertain {
			st += "?"
		}
		t.p("%-26s %8s  %-18s %-7s %9.1f%%  %s req/s\n", clip(v.SLO, 26), val, ci, st,
			100*v.Attainment, num(v.GoodputRPS))
	}
	if slices.ContainsFunc(r.SLOs, func(v Verdict) bool { return v.Uncertain }) {
		t.p("? the threshold lies inside the 95%% interval: a longer run could change the verdict\n")
	}
}

func (t textWriter) decomposition(d *Decomposition) {
	what := "WHERE THE TIME GOES (E2E from the intended send"
	if d.Of == latency.TTFTIntended {
		what = "TTFT SPLIT (TTFT from the intended send"
	}
	t.p("\n%s; mean per group)\n", what)
	t.p("%-15s %-16s", "hop", "stage")
	for _, g := range d.Groups {
		t.p(" %18s", fmt.Sprintf("%s (n=%d)", g.Name, g.Requests))
	}
	t.p("\n")
	for i, s := range d.Groups[0].Stages {
		t.p("%-15s %-16s", clip(hopCell(d.Groups[0].Stages, i), 15), clip(s.Stage, 16))
		for _, g := range d.Groups {
			st := g.Stages[i]
			t.p(" %11s %5.1f%%", fmtMS(st.MeanMS), 100*st.Share)
		}
		t.p("\n")
	}
	t.p("%-32s", "total")
	for _, g := range d.Groups {
		t.p(" %11s %6s", fmtMS(g.TotalMS), "")
	}
	t.p("\n%-32s", "largest")
	for _, g := range d.Groups {
		t.p(" %18s", clip(g.Largest, 18))
	}
	t.p("\n")
}

// hopCell is the hop column of part i: its hop where it differs from the
// part above's, so that a hop's stages read as one block; "-" for time no
// hop accounts for.
func hopCell(ss []StageShare, i int) string {
	switch {
	case ss[i].Hop == "":
		return "-"
	case i > 0 && ss[i-1].Hop == ss[i].Hop:
		return ""
	}
	return ss[i].Hop
}

func (t textWriter) phases(r *Report) {
	if len(r.Phases) == 0 {
		return
	}
	t.p("\nSWEEP        offered  through  goodput  attain  ttft p50  ttft p99  tpot p99   e2e p99  SLOs\n")
	for _, ph := range r.Phases {
		met := "fail"
		if ph.SLOsMet {
			met = "met"
		}
		t.p("%-12s %7s %8s %8s %6.1f%% %9s %9s %9s %9s  %s\n", clip(ph.Name, 12),
			num(ph.OfferedRPS), num(ph.ThroughputRPS), num(ph.GoodputRPS), 100*ph.Attainment,
			fmtMS(ph.TTFTP50), fmtMS(ph.TTFTP99), fmtMS(ph.TPOTP99), fmtMS(ph.E2EP99), met)
	}
	for _, ph := range r.Phases {
		if ph.BeforeCell != "" {
			t.wrapped(fmt.Sprintf("before %s: %s", ph.Name, ph.BeforeCell), 98, "", "  ")
		}
		if ph.BeforeCellWarning != "" {
			t.wrapped(fmt.Sprintf("warning: before %s: %s", ph.Name, ph.BeforeCellWarning), 98, "", "  ")
		}
	}
	if r.Capacity != nil {
		t.wrapped(fmt.Sprintf("capacity: %s req/s (%s)", num(r.Capacity.RPS), r.Capacity.Basis), 98, "", "")
	}
	if r.Pareto != nil {
		for _, l := range r.Pareto.Lines() {
			t.wrapped(l, 98, "", "  ")
		}
	}
}

func (t textWriter) notes(notes []string) {
	if len(notes) == 0 {
		return
	}
	t.p("\nNOTES\n")
	for _, n := range notes {
		for i, line := range wrap(n, 96) {
			if i == 0 {
				t.p("- %s\n", line)
			} else {
				t.p("  %s\n", line)
			}
		}
	}
}
