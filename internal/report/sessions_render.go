package report

import (
	"fmt"
	"strings"
)

// Headline is the sessions' count line.
func (s *Sessions) Headline() string {
	h := fmt.Sprintf("%d complete sessions, %.1f steps each", s.Sessions, s.Steps)
	if s.Failed > 0 {
		h += fmt.Sprintf("; %d failed", s.Failed)
	}
	if s.Incomplete > 0 {
		h += fmt.Sprintf("; %d cut short by the run's end (left out)", s.Incomplete)
	}
	return h
}

// Line is the critical path on one line: "1:llm_ttft 12ms → 1:tools search 80ms → …".
func (cp CriticalPath) Line() string {
	parts := make([]string, 0, len(cp.Segments))
	for _, sg := range cp.Segments {
		p := fmt.Sprintf("%d:%s %s", sg.Step, sg.Part, fmtMS(sg.MS))
		if sg.Name != "" {
			p = fmt.Sprintf("%d:%s %s %s", sg.Step, sg.Part, sg.Name, fmtMS(sg.MS))
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " → ")
}

// Line says what the lever (named by what) saves, with its basis and note.
func (w *WhatIf) Line(what string) string {
	if w.Basis == "none" || w.Basis == "" {
		return fmt.Sprintf("%s: %s", what, w.Note)
	}
	return fmt.Sprintf("%s (%s): saves %s per session at the median (P95 %s); sessions P50 %s → %s (−%.1f%%), P99 %s → %s. %s",
		what, w.Basis, fmtMS(w.Saving.P50), fmtMS(w.Saving.P95), fmtMS(w.Before.P50), fmtMS(w.After.P50),
		100*w.SavingP50, fmtMS(w.Before.P99), fmtMS(w.After.P99), w.Note)
}

func (t textWriter) sessions(s *Sessions) {
	if s == nil {
		return
	}
	t.p("\nSESSIONS  %s\n", s.Headline())
	for _, f := range s.Failures {
		t.wrapped(fmt.Sprintf("session %d failed at step %d: %s: %s", f.Session, f.Step, f.ErrorKind, f.Error), 96, "  ", "    ")
	}
	if s.Sessions == 0 {
		return
	}
	t.p("%-14s %10s %10s %10s %10s %7s\n", "part", "mean", "p50", "p95", "p99", "share")
	t.p("%-14s %10s %10s %10s %10s\n", "session", fmtMS(s.Latency.Mean), fmtMS(s.Latency.P50), fmtMS(s.Latency.P95), fmtMS(s.Latency.P99))
	for _, c := range s.Components {
		t.p("%-14s %10s %10s %10s %10s %6.1f%%\n", c.Name, fmtMS(c.Mean), fmtMS(c.P50), fmtMS(c.P95), fmtMS(c.P99), 100*c.Share)
	}
	for _, cp := range s.CriticalPaths {
		t.wrapped(fmt.Sprintf("critical path, %s session (%d, %s): %s", cp.Which, cp.Session, fmtMS(cp.TotalMS), cp.Line()), 96, "", "  ")
	}
	for _, w := range []struct {
		name string
		w    *WhatIf
	}{{"parallel tool calls", s.ParallelTools}, {"a faster model for the tool-calling steps", s.FasterModel}} {
		if w.w != nil {
			t.wrapped(w.w.Line(w.name), 96, "", "  ")
		}
	}
}

func (m mdWriter) sessions(s *Sessions) {
	if s == nil {
		return
	}
	m.p("### Sessions\n\n%s.\n\n", s.Headline())
	for _, f := range s.Failures {
		m.p("- session %d failed at step %d: `%s`: %s\n", f.Session, f.Step, f.ErrorKind, f.Error)
	}
	if len(s.Failures) > 0 {
		m.p("\n")
	}
	if s.Sessions == 0 {
		return
	}
	m.p("| part | mean | P50 | P95 | P99 | share |\n|---|---:|---:|---:|---:|---:|\n")
	m.p("| **session** | %s | %s | %s | %s | |\n", fmtMS(s.Latency.Mean), fmtMS(s.Latency.P50), fmtMS(s.Latency.P95), fmtMS(s.Latency.P99))
	for _, c := range s.Components {
		m.p("| %s | %s | %s | %s | %s | %.1f%% |\n", c.Name, fmtMS(c.Mean), fmtMS(c.P50), fmtMS(c.P95), fmtMS(c.P99), 100*c.Share)
	}
	m.p("\n")
	for _, cp := range s.CriticalPaths {
		m.p("- critical path, %s session (%d, %s): %s\n", cp.Which, cp.Session, fmtMS(cp.TotalMS), cp.Line())
	}
	if s.ParallelTools != nil {
		m.p("- %s\n", s.ParallelTools.Line("parallel tool calls"))
	}
	if s.FasterModel != nil {
		m.p("- %s\n", s.FasterModel.Line("a faster model for the tool-calling steps"))
	}
	m.p("\n")
}
