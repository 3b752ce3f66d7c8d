package live

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// Progress views of the terminal (--progress).
const (
	ProgressTable = "table"
	ProgressPlain = "plain"
	ProgressOff   = "off"
)

// tableEvery is how often the table is redrawn.
const tableEvery = 500 * time.Millisecond

// Show draws the progress view on w (a terminal) until ctx ends, then
// erases it: ProgressPlain today's one line, ProgressTable the table.
func (b *Board) Show(ctx context.Context, w io.Writer, view, label string) {
	t := time.NewTicker(tableEvery)
	defer t.Stop()
	defer b.watch()()
	var buf strings.Builder
	lines := 0
	for {
		select {
		case <-ctx.Done():
			buf.Reset()
			erase(&buf, lines)
			_, _ = io.WriteString(w, buf.String())
			return
		case <-t.C:
		}
		s := b.Latest()
		buf.Reset()
		if view == ProgressPlain {
			fmt.Fprintf(&buf, "\r\033[K%s", PlainLine(s, label))
			_, _ = io.WriteString(w, buf.String())
			lines = 0
			continue
		}
		erase(&buf, lines)
		table := Table(s, label)
		buf.WriteString(table)
		lines = strings.Count(table, "\n")
		_, _ = io.WriteString(w, buf.String())
	}
}

// erase moves the cursor to the start of a view of n lines drawn before,
// clearing what was there.
func erase(buf *strings.Builder, n int) {
	buf.WriteString("\r")
	if n > 0 {
		fmt.Fprintf(buf, "\033[%dA", n)
	}
	buf.WriteString("\033[J")
}

// PlainLine is the one progress line: sent, done, errors, the window's
// completion rate and the running P50/P99 of TTFT over every record
// (stats.Sketch, within 0.39 %; the final numbers are the report's).
func PlainLine(s *Snapshot, label string) string {
	failed := int64(0)
	for _, n := range s.Failures {
		failed += n
	}
	return fmt.Sprintf("%s sent %d  done %d  errors %d  %.1f req/s  TTFT p50 %s p99 %s  [%s]",
		label, s.Sent, s.Done, failed, s.Window.AchievedRPS, msText(s.ttftP50), msText(s.ttftP99),
		time.Duration(s.ElapsedS*1e9).Truncate(time.Second))
}

// Table is the compact live table, each line ended by a newline.
func Table(s *Snapshot, label string) string {
	var b strings.Builder
	failed := int64(0)
	for _, n := range s.Failures {
		failed += n
	}
	head := fmt.Sprintf("%s %s", label, time.Duration(s.ElapsedS*1e9).Truncate(time.Second))
	if s.Phase != "" {
		head += "  phase " + s.Phase
	}
	fmt.Fprintf(&b, "%s  sent %d  done %d  in flight %d  failed %d\n", head, s.Sent, s.Done, s.InFlight, failed)
	since := "since start"
	if !s.Final {
		since += fmt.Sprintf(" (at %.0f s)", s.SinceAtS)
	}
	fmt.Fprintf(&b, "%-6s %-33s %-33s\n", "", fmt.Sprintf("last %.0f s", s.WindowS), since)
	fmt.Fprintf(&b, "%-6s offered %6.1f/s achieved %6.1f/s  offered %6.1f/s achieved %6.1f/s\n", "req",
		s.Window.OfferedRPS, s.Window.AchievedRPS, s.Since.OfferedRPS, s.Since.AchievedRPS)
	fmt.Fprintf(&b, "%-6s %10s %10s %10s  %10s %10s %10s  %s\n", "ms", "p50", "p90", "p99", "p50", "p90", "p99", "SLO")
	since2 := map[string]Metric{}
	for _, m := range s.Since.Metrics {
		since2[m.Name] = m
	}
	for _, w := range s.Window.Metrics {
		m := since2[w.Name]
		fmt.Fprintf(&b, "%-6s %10s %10s %10s  %10s %10s %10s  %s\n", strings.ToUpper(w.Name),
			num(w.P50, w.Count), num(w.P90, w.Count), num(w.P99, w.Count), num(m.P50, m.Count), num(m.P90, m.Count), num(m.P99, m.Count),
			sloText(s.SLOs, w.Name))
	}
	b.WriteString(detailLines(s))
	return b.String()
}

// detailLines are the table's lines after the latency rows: stages,
// gauges, failures, the first finding and warning.
func detailLines(s *Snapshot) string {
	var b strings.Builder
	if len(s.Stages) > 0 {
		parts := make([]string, 0, 4)
		for _, g := range s.Stages[:min(len(s.Stages), 4)] {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", g.Name, 100*g.Share))
		}
		fmt.Fprintf(&b, "%-6s %s\n", "stages", strings.Join(parts, " · "))
	}
	if g := s.Gauges; g != nil {
		fmt.Fprintf(&b, "%-6s waiting %.0f  running %.0f  KV %.0f%%\n", "server", g.Waiting, g.Running, 100*g.KVUsage)
	}
	if len(s.Failures) > 0 {
		parts := []string{}
		for _, k := range kindNums(s.Failures) {
			parts = append(parts, fmt.Sprintf("%s %d", k.Kind, k.N))
		}
		fmt.Fprintf(&b, "%-6s %s\n", "failed", strings.Join(parts, "  "))
	}
	if len(s.Findings) > 0 {
		f := s.Findings[0]
		more := ""
		if n := len(s.Findings) - 1; n > 0 {
			more = fmt.Sprintf(" (+%d more)", n)
		}
		fmt.Fprintf(&b, "%-6s %s: %s%s\n", "find", f.Severity, clip(f.Title, 90), more)
	}
	if len(s.Warnings) > 0 {
		fmt.Fprintf(&b, "%-6s %s\n", "warn", clip(s.Warnings[0], 100))
	}
	return b.String()
}

// num formats milliseconds, "–" without values.
func num(v float64, n int64) string {
	if n == 0 {
		return "–"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// msText formats milliseconds as a duration.
func msText(v float64) string {
	d := time.Duration(v * 1e6)
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// sloText lists a metric's objectives.
func sloText(slos []SLOLine, metric string) string {
	var parts []string
	for _, o := range slos {
		if o.Metric == metric {
			parts = append(parts, strings.TrimPrefix(o.Text, metric+":"))
		}
	}
	return strings.Join(parts, ",")
}

// clip shortens s to n runes.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
