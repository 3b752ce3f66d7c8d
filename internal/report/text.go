package report

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteText writes the terminal summary (at most 100 columns): the run at a
// glance, the diagnosis, latency percentiles, SLO verdicts and where the
// time goes.
func (r *Report) WriteText(w io.Writer) error {
	var buf bytes.Buffer
	if err := r.writeText(&buf); err != nil {
		return err
	}
	return writeTrimmed(w, buf.Bytes())
}

// writeTrimmed writes text with trailing spaces removed from every line.
func writeTrimmed(w io.Writer, text []byte) error {
	lines := bytes.Split(text, []byte("\n"))
	for i := range lines {
		lines[i] = bytes.TrimRight(lines[i], " ")
	}
	_, err := w.Write(bytes.Join(lines, []byte("\n")))
	return err
}

func (r *Report) writeText(w io.Writer) error {
	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	s := r.Summary
	title := "tokentrace report"
	if len(r.Sources) > 0 {
		title += ": " + strings.Join(r.Sources, ", ")
	}
	p("%s\n", clip(title, 100))
	p("requests %d  succeeded %d  failed %d%s  duration %.1fs\n",
		s.Requests, s.Succeeded, s.Failed, errorList(s.Errors), s.DurationS)
	p("throughput %s req/s (steady %s)  output %s tok/s  total %s tok/s  offered %s req/s\n",
		num(s.ThroughputRPS), num(s.CompletionRPS), num(s.OutputTPS), num(s.TotalTPS), num(s.OfferedRPS))
	if s.Warmup > 0 || s.Truncated > 0 {
		p("warm-up excluded %d  answers that hit max_tokens %d\n", s.Warmup, s.Truncated)
	}
	for _, run := range r.Runs {
		for _, wmsg := range run.Warnings {
			for i, line := range wrap("bench warning: "+wmsg, 98) {
				if i > 0 {
					line = "  " + line
				}
				p("%s\n", line)
			}
		}
	}

	p("\nDIAGNOSIS\n")
	if len(r.Findings) == 0 {
		p("  no problem found by the rules (docs/report.md lists them)\n")
	}
	for _, f := range r.Findings {
		p("  [%s] %s\n", f.Severity, clip(f.Title, 85))
		for _, line := range wrap(f.Evidence, 94) {
			p("    %s\n", line)
		}
		if len(f.Remedies) > 0 {
			for i, line := range wrap("do: "+strings.Join(f.Remedies, "; "), 94) {
				if i > 0 {
					line = "  " + line
				}
				p("    %s\n", line)
			}
		}
	}

	if len(r.Metrics) > 0 {
		p("\nLATENCY         count     mean      p50      p90      p95      p99    p99.9      max  p99 95%% CI\n")
		for _, d := range r.Metrics {
			ci := fmt.Sprintf("%s–%s", fmtMS(d.P99CI[0]), fmtMS(d.P99CI[1]))
			if !d.P99Trusted {
				ci += "*"
			}
			name := d.Metric
			if d.Approx {
				name += "≈"
			}
			p("%-13s %7s %8s %8s %8s %8s %8s %8s %8s  %s\n", clip(name, 13), count(d.Count),
				fmtMS(d.Mean), fmtMS(d.P50), fmtMS(d.P90), fmtMS(d.P95), fmtMS(d.P99),
				fmtMS(d.P999), fmtMS(d.Max), ci)
		}
		if slices.ContainsFunc(r.Metrics, func(d Dist) bool { return !d.P99Trusted }) {
			p("* fewer than 1,000 values: under 10 lie above the P99, too few to trust it\n")
		}
		if slices.ContainsFunc(r.Metrics, func(d Dist) bool { return d.Approx }) {
			p("≈ from a histogram of 0.05%% resolution (too many values to keep one by one)\n")
		}
	}

	if len(r.SLOs) > 0 {
		p("\nSLOs                          value  95%% CI              status  attainment  goodput\n")
		for _, v := range append(slices.Clone(r.SLOs), *r.AllSLOs) {
			val, ci := "", ""
			if v.SLO != "all" && v.Status != "no data" {
				val = fmtMS(v.ValueMS)
				ci = fmtMS(v.CI[0]) + "–" + fmtMS(v.CI[1])
			}
			st := strings.ToUpper(v.Status)
			if v.Uncertain {
				st += "?"
			}
			p("%-26s %8s  %-18s %-7s %9.1f%%  %s req/s\n", clip(v.SLO, 26), val, ci, st,
				100*v.Attainment, num(v.GoodputRPS))
		}
		if slices.ContainsFunc(r.SLOs, func(v Verdict) bool { return v.Uncertain }) {
			p("? the threshold lies inside the 95%% interval: a longer run could change the verdict\n")
		}
	}

	for _, d := range []*Decomposition{r.Decomposition, r.TTFTSplit} {
		if d == nil {
			continue
		}
		what := "WHERE THE TIME GOES (E2E from the intended send"
		if d.Of == "ttft_intended" {
			what = "TTFT SPLIT (TTFT from the intended send"
		}
		p("\n%s; mean per group)\n", what)
		p("%-14s", "stage")
		for _, g := range d.Groups {
			p(" %18s", fmt.Sprintf("%s (n=%d)", g.Name, g.Requests))
		}
		p("\n")
		for i := range d.Groups[0].Stages {
			p("%-14s", d.Groups[0].Stages[i].Stage)
			for _, g := range d.Groups {
				st := g.Stages[i]
				p(" %11s %5.1f%%", fmtMS(st.MeanMS), 100*st.Share)
			}
			p("\n")
		}
		p("%-14s", "total")
		for _, g := range d.Groups {
			p(" %11s %6s", fmtMS(g.TotalMS), "")
		}
		p("\n%-14s", "largest")
		for _, g := range d.Groups {
			p(" %18s", g.Largest)
		}
		p("\n")
	}

	if len(r.Phases) > 0 {
		p("\nSWEEP        offered  through  goodput  attain  ttft p50  ttft p99  tpot p99   e2e p99  SLOs\n")
		for _, ph := range r.Phases {
			met := "fail"
			if ph.SLOsMet {
				met = "met"
			}
			p("%-12s %7s %8s %8s %6.1f%% %9s %9s %9s %9s  %s\n", clip(ph.Name, 12),
				num(ph.OfferedRPS), num(ph.ThroughputRPS), num(ph.GoodputRPS), 100*ph.Attainment,
				fmtMS(ph.TTFTP50), fmtMS(ph.TTFTP99), fmtMS(ph.TPOTP99), fmtMS(ph.E2EP99), met)
		}
		if r.Capacity != nil {
			for _, line := range wrap(fmt.Sprintf("capacity: %s req/s (%s)", num(r.Capacity.RPS), r.Capacity.Basis), 98) {
				p("%s\n", line)
			}
		}
	}

	if len(r.Notes) > 0 {
		p("\nNOTES\n")
		for _, n := range r.Notes {
			for i, line := range wrap(n, 96) {
				if i == 0 {
					p("- %s\n", line)
				} else {
					p("  %s\n", line)
				}
			}
		}
	}
	return b.Flush()
}

// count formats a sample size in at most 7 columns: 1234567 or 151.5M.
func count(n int64) string {
	switch {
	case n < 10_000_000:
		return fmt.Sprint(n)
	case n < 1_000_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	default:
		return fmt.Sprintf("%.2fG", float64(n)/1e9)
	}
}

func errorList(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// num formats a rate: 3 significant figures, thousands as 12.3k.
func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// wrap breaks s into lines of at most n runes at spaces.
func wrap(s string, n int) []string {
	var lines []string
	var cur []rune
	for _, word := range strings.Fields(s) {
		w := []rune(word)
		if len(cur) > 0 && len(cur)+1+len(w) > n {
			lines = append(lines, string(cur))
			cur = nil
		}
		if len(cur) > 0 {
			cur = append(cur, ' ')
		}
		cur = append(cur, w...)
		for len(cur) > n {
			lines = append(lines, string(cur[:n]))
			cur = cur[n:]
		}
	}
	if len(cur) > 0 {
		lines = append(lines, string(cur))
	}
	return lines
}
