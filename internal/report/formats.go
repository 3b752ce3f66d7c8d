package report

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// WriteJSON writes the report in its JSON form (schema in docs/report.md).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteMarkdown writes the report as GitHub-flavoured markdown, for a pull
// request or an issue.
func (r *Report) WriteMarkdown(w io.Writer) error {
	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	s := r.Summary
	p("## tokentrace report\n\n")
	if len(r.Sources) > 0 {
		p("Runs: %s\n\n", "`"+strings.Join(r.Sources, "`, `")+"`")
	}
	p("| requests | succeeded | failed | duration | throughput | output tok/s | total tok/s | offered |\n")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	p("| %d | %d | %d%s | %.1f s | %s req/s | %s | %s | %s req/s |\n\n", s.Requests, s.Succeeded, s.Failed,
		errorList(s.Errors), s.DurationS, num(s.ThroughputRPS), num(s.OutputTPS), num(s.TotalTPS), num(s.OfferedRPS))
	p("### Diagnosis\n\n")
	if len(r.Findings) == 0 {
		p("No problem found by the rules.\n\n")
	}
	for _, f := range r.Findings {
		p("- **%s** (%s, `%s`): %s\n", f.Title, f.Severity, f.Rule, f.Evidence)
		for _, rem := range f.Remedies {
			p("  - %s\n", rem)
		}
	}
	if len(r.Findings) > 0 {
		p("\n")
	}
	if len(r.SLOs) > 0 {
		p("### SLOs\n\n| SLO | value | 95%% CI | status | attainment | goodput |\n|---|---:|---:|---|---:|---:|\n")
		for _, v := range append(slices.Clone(r.SLOs), *r.AllSLOs) {
			val, ci := "", ""
			if v.SLO != "all" && v.Status != "no data" {
				val, ci = fmtMS(v.ValueMS), fmtMS(v.CI[0])+" – "+fmtMS(v.CI[1])
			}
			st := v.Status
			if v.Uncertain {
				st += " (within CI)"
			}
			p("| `%s` | %s | %s | %s | %.1f%% | %s req/s |\n", v.SLO, val, ci, st, 100*v.Attainment, num(v.GoodputRPS))
		}
		p("\n")
	}
	if len(r.Metrics) > 0 {
		p("### Latency\n\n| metric | count | mean | p50 | p90 | p95 | p99 | p99.9 | max | p99 95%% CI |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, d := range r.Metrics {
			ci := fmtMS(d.P99CI[0]) + " – " + fmtMS(d.P99CI[1])
			if !d.P99Trusted {
				ci += " ⚠"
			}
			p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", d.Metric, d.Count, fmtMS(d.Mean),
				fmtMS(d.P50), fmtMS(d.P90), fmtMS(d.P95), fmtMS(d.P99), fmtMS(d.P999), fmtMS(d.Max), ci)
		}
		if slices.ContainsFunc(r.Metrics, func(d Dist) bool { return !d.P99Trusted }) {
			p("\n⚠ fewer than 1,000 values: under 10 lie above the P99, too few to trust it.\n")
		}
		p("\n")
	}
	for _, d := range []*Decomposition{r.Decomposition, r.TTFTSplit} {
		if d == nil {
			continue
		}
		if d.Of == "ttft_intended" {
			p("### TTFT split (from the intended send)\n\n")
		} else {
			p("### Where the time goes (E2E from the intended send)\n\n")
		}
		p("| stage |")
		for _, g := range d.Groups {
			p(" %s (n=%d) |", g.Name, g.Requests)
		}
		p("\n|---|%s\n", strings.Repeat("---:|", len(d.Groups)))
		for i := range d.Groups[0].Stages {
			p("| %s |", d.Groups[0].Stages[i].Stage)
			for _, g := range d.Groups {
				st := g.Stages[i]
				cell := fmt.Sprintf("%s (%.1f%%)", fmtMS(st.MeanMS), 100*st.Share)
				if st.Stage == g.Largest {
					cell = "**" + cell + "**"
				}
				p(" %s |", cell)
			}
			p("\n")
		}
		p("| total |")
		for _, g := range d.Groups {
			p(" %s |", fmtMS(g.TotalMS))
		}
		p("\n\n")
	}
	if len(r.Phases) > 0 {
		p("### Sweep\n\n| point | offered | throughput | goodput | attainment | TTFT p50 | TTFT p99 | TPOT p99 | E2E p99 | SLOs |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, ph := range r.Phases {
			p("| %s | %s | %s | %s | %.1f%% | %s | %s | %s | %s | %v |\n", ph.Name, num(ph.OfferedRPS),
				num(ph.ThroughputRPS), num(ph.GoodputRPS), 100*ph.Attainment, fmtMS(ph.TTFTP50),
				fmtMS(ph.TTFTP99), fmtMS(ph.TPOTP99), fmtMS(ph.E2EP99), map[bool]string{true: "met", false: "fail"}[ph.SLOsMet])
		}
		if r.Capacity != nil {
			p("\nCapacity: **%s req/s** (%s).\n", num(r.Capacity.RPS), r.Capacity.Basis)
		}
		p("\n")
	}
	if len(r.Notes) > 0 {
		p("### Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
	}
	return b.Flush()
}

// csvHeader lists the per-request CSV columns (docs/report.md).
var csvHeader = []string{
	"source", "phase", "id", "ok", "error_kind", "intended_ms", "sent_ms",
	"ttft_ms", "tpot_ms", "e2e_ms", "ttft_intended_ms", "e2e_intended_ms", "max_itl_ms", "max_stall_ms",
	"input_tokens", "output_tokens", "cached_tokens", "server_split",
	"client_queue_ms", "connect_ms", "send_ms", "gateway_ms", "network_ms", "server_queue_ms",
	"prefill_ms", "decode_ms", "stream_tail_ms", "unattributed_ms", "meets_all_slos",
}

// WriteCSV writes one line per request: its metrics and stages in
// milliseconds. A value a request does not have is left empty.
func (r *Report) WriteCSV(w io.Writer) error {
	a := r.a
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	opt := func(v int64, ok bool) string {
		if !ok {
			return ""
		}
		return f(ms(v))
	}
	rec := make([]string, len(csvHeader))
	for i := range a.rows {
		row := &a.rows[i]
		ok := row.ok()
		rec = rec[:0]
		errKind := a.errKinds[row.errKind]
		rec = append(rec, a.sources[row.src], a.phases[row.phase], row.id, strconv.FormatBool(ok), errKind,
			f(ms(row.intended)), f(ms(row.sent)))
		for _, m := range []string{"ttft", "tpot", "e2e", "ttft_intended", "e2e_intended", "itl", "icl"} {
			v, has := metricValue(row, m)
			rec = append(rec, opt(v, ok && has))
		}
		rec = append(rec, strconv.Itoa(int(row.input)), strconv.Itoa(int(row.output)),
			strconv.Itoa(int(row.cached)), strconv.FormatBool(row.hasServer()))
		st := row.stages()
		for k := range nStages {
			// The client queue is known for every request; the rest only for successes.
			rec = append(rec, opt(st[k], k == stCQ || (ok && stageApplies(row, k))))
		}
		rec = append(rec, strconv.FormatBool(meetsAll(row, a.opts.SLOs)))
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
