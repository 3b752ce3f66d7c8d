package report

import (
	"fmt"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// stepRow is one request of a session (a turn of a conversation, a step
// of an agent session): what the session analysis needs of it.
type stepRow struct {
	src                                 uint16
	session                             int64
	step, steps                         int32
	intended, sent, firstTok, end, tEnd int64
	overhead                            int64 // app and gateway stages (Path)
	tools                               []toolRow
	parallel                            bool
	errKind                             latency.ErrorKind
	err                                 string
}

type toolRow struct {
	name       string
	start, end int64
}

// newStepRow reduces a session's request.
func newStepRow(r *latency.Record) stepRow {
	s := stepRow{session: r.Session, step: int32(r.Turn), steps: int32(r.Steps), intended: r.IntendedNS,
		sent: r.SentNS, firstTok: r.FirstTokenNS, end: r.EndNS, tEnd: r.ToolsEnd(), parallel: r.ToolsParallel,
		errKind: r.ErrorKind, err: r.Error}
	if s.firstTok == 0 {
		s.firstTok = s.end
	}
	for _, t := range r.Tools {
		s.tools = append(s.tools, toolRow{name: t.Name, start: t.StartNS, end: t.EndNS})
	}
	if p, ok := r.Path(); ok {
		for _, part := range p.Parts {
			if part.Hop != latency.HopClient && part.Hop != latency.HopServer && part.Hop != "" && !isLink(part.Hop) {
				s.overhead += part.NS
			}
		}
	}
	return s
}

func isLink(h latency.Hop) bool {
	for _, r := range h {
		if r == '→' {
			return true
		}
	}
	return false
}

// Sessions is the run's sessions as their user lives them (docs/metrics.md,
// "Sessions"): each session's cumulative latency, from its first request's
// intended send to the end of its last step (its tool calls included),
// split into the model's TTFT, its decode, tool time, application and
// gateway overhead, and waits (think time and the client's queue); the
// critical path of the median and the slowest session; and what parallel
// tool calls or a faster model for some steps would save.
type Sessions struct {
	// Sessions counts complete sessions (every step succeeded); Failed
	// those with a failed step, Incomplete those the run ended before
	// their last step.
	Sessions   int `json:"sessions"`
	Failed     int `json:"failed"`
	Incomplete int `json:"incomplete,omitempty"`
	// Failures lists the first failed sessions: which step and why.
	Failures []SessionFailure `json:"failures,omitempty"`
	// Steps is the mean number of steps of a complete session.
	Steps float64 `json:"steps"`
	// Latency is the complete sessions' cumulative latency (nearest rank).
	Latency SessionDist `json:"latency"`
	// Components split it: the same percentiles of each part, and its
	// mean share of the mean session.
	Components []SessionComponent `json:"components"`
	// CriticalPaths are the median and the slowest session's critical
	// paths: the segments, step by step, that the session's end waited on.
	CriticalPaths []CriticalPath `json:"critical_paths,omitempty"`
	// ParallelTools is what making each step's tool calls at once would
	// save; FasterModel what a faster model for the steps that call tools
	// could save at most.
	ParallelTools *WhatIf `json:"parallel_tools,omitempty"`
	FasterModel   *WhatIf `json:"faster_model,omitempty"`
}

// SessionFailure is a session that failed at a step.
type SessionFailure struct {
	Session   int64             `json:"session"`
	Step      int               `json:"step"`
	ErrorKind latency.ErrorKind `json:"error_kind"`
	Error     string            `json:"error,omitempty"`
}

// SessionDist is a distribution over sessions, in milliseconds.
type SessionDist struct {
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// SessionComponent is one part of the sessions' latency.
type SessionComponent struct {
	Name string `json:"name"`
	SessionDist
	Share float64 `json:"share"` // mean part / mean session, 0..1
}

// The parts of a session's latency.
const (
	PartTTFT     = "llm_ttft"
	PartDecode   = "llm_decode"
	PartTools    = "tools"
	PartOverhead = "app_gateway"
	PartWait     = "wait"
)

var sessionParts = []string{PartTTFT, PartDecode, PartTools, PartOverhead, PartWait}

// sessionPartNames are the parts as compare rows name them.
func sessionPartNames() []string {
	out := make([]string, len(sessionParts))
	for i, p := range sessionParts {
		out[i] = "session." + p
	}
	return out
}

// CriticalPath is one session's chain of segments, in order.
type CriticalPath struct {
	Which    string    `json:"which"` // "median" or "slowest"
	Session  int64     `json:"session"`
	TotalMS  float64   `json:"total_ms"`
	Segments []Segment `json:"segments"`
}

// Segment is a stretch of a critical path: a part of a step, and for a
// tool call its name (with how many calls ran beside it).
type Segment struct {
	Step int     `json:"step"`
	Part string  `json:"part"`
	Name string  `json:"name,omitempty"`
	MS   float64 `json:"ms"`
}

// WhatIf is a lever's saving on the sessions' latency.
type WhatIf struct {
	// Basis is "simulated" (from this run's own spans), "bound" (the most
	// it could save) or "none" (nothing to save, or not computable here;
	// Note says why and how to measure it).
	Basis     string      `json:"basis"`
	Saving    SessionDist `json:"saving"`     // per session
	Before    SessionDist `json:"before"`     // the sessions' latency as measured
	After     SessionDist `json:"after"`      // the sessions' latency with it
	SavingP50 float64     `json:"saving_p50"` // (P50 before − after) / before
	Note      string      `json:"note"`
}

// session is one session's steps, in order.
type session struct {
	id    int64
	steps []*stepRow
}

// sessionParts is a complete session's latency and its split, ns.
type sessionSplit struct {
	s     *session
	total int64
	parts [5]int64 // in sessionParts order
	// parallelSaving is what parallel tool calls would save; toolModel the
	// model time of the steps that call tools.
	parallelSaving, toolModel int64
}

// sessions analyses the run's sessions; nil when the run has none (no
// request with a turn).
func (a *analysis) sessions() *Sessions {
	out, splits := a.sessionSplits()
	if out == nil || len(splits) == 0 {
		return out
	}
	totals := make([]int64, len(splits))
	var nsteps int
	for i, sp := range splits {
		totals[i] = sp.total
		nsteps += len(sp.s.steps)
	}
	out.Steps = float64(nsteps) / float64(len(splits))
	out.Latency = sessionDist(totals)
	for j, name := range sessionParts {
		c := SessionComponent{Name: name, SessionDist: sessionDist(partSample(splits, j))}
		if out.Latency.Mean > 0 {
			c.Share = c.Mean / out.Latency.Mean
		}
		out.Components = append(out.Components, c)
	}
	med := splits[stats.Rank(50, int64(len(splits)))-1]
	out.CriticalPaths = []CriticalPath{criticalPath("median", med), criticalPath("slowest", splits[len(splits)-1])}
	out.ParallelTools = parallelWhatIf(splits, totals)
	out.FasterModel = fasterModelWhatIf(splits, totals)
	return out
}

// partSample is part j of every session, sorted.
func partSample(splits []sessionSplit, j int) []int64 {
	v := make([]int64, len(splits))
	for i, sp := range splits {
		v[i] = sp.parts[j]
	}
	slices.Sort(v)
	return v
}

// sessionSplits groups the steps into sessions, counts the failed and
// the incomplete ones, and splits the complete ones, sorted by latency;
// nil when the run has no sessions.
func (a *analysis) sessionSplits() (*Sessions, []sessionSplit) {
	if len(a.steps) == 0 {
		return nil, nil
	}
	byKey := map[[2]int64]*session{}
	var order []*session
	for i := range a.steps {
		st := &a.steps[i]
		k := [2]int64{int64(st.src), st.session}
		s := byKey[k]
		if s == nil {
			s = &session{id: st.session}
			byKey[k] = s
			order = append(order, s)
		}
		s.steps = append(s.steps, st)
	}
	out := &Sessions{}
	var splits []sessionSplit
	for _, s := range order {
		slices.SortFunc(s.steps, func(x, y *stepRow) int { return int(x.step - y.step) })
		if f := failedStep(s); f != nil {
			out.Failed++
			if len(out.Failures) < 10 {
				out.Failures = append(out.Failures, SessionFailure{Session: s.id, Step: int(f.step), ErrorKind: f.errKind, Error: f.err})
			}
			continue
		}
		if !complete(s) {
			out.Incomplete++
			continue
		}
		splits = append(splits, splitSession(s))
	}
	out.Sessions = len(splits)
	slices.SortFunc(splits, func(x, y sessionSplit) int { return cmpInt64(x.total, y.total) })
	return out, splits
}

// sessionSamples are the complete sessions' latencies and parts, each
// sorted, by name ("session", then sessionParts); nil without sessions.
func (a *analysis) sessionSamples() map[string][]int64 {
	_, splits := a.sessionSplits()
	if len(splits) == 0 {
		return nil
	}
	m := map[string][]int64{}
	totals := make([]int64, len(splits))
	for i, sp := range splits {
		totals[i] = sp.total
	}
	m["session"] = totals
	for j, name := range sessionParts {
		m["session."+name] = partSample(splits, j)
	}
	return m
}

// failedStep is the session's first failed step, or nil.
func failedStep(s *session) *stepRow {
	for _, st := range s.steps {
		if st.errKind != "" || st.end == 0 {
			return st
		}
	}
	return nil
}

// complete reports whether every step of the session was measured: steps
// 1..n in order, n its agent session's step count (a conversation's last
// turn is not known: it counts as complete).
func complete(s *session) bool {
	for i, st := range s.steps {
		if int(st.step) != i+1 {
			return false
		}
	}
	last := s.steps[len(s.steps)-1]
	return last.steps == 0 || int(last.steps) == len(s.steps)
}

// splitSession splits a complete session's latency into its parts; they
// sum to it exactly (docs/metrics.md, "Sessions").
func splitSession(s *session) sessionSplit {
	sp := sessionSplit{s: s}
	first, last := s.steps[0], s.steps[len(s.steps)-1]
	sp.total = last.tEnd - first.intended
	prevEnd := first.intended
	for _, st := range s.steps {
		ttft := st.firstTok - st.sent
		over := min(max(st.overhead, 0), max(ttft, 0))
		sp.parts[0] += ttft - over
		sp.parts[1] += st.end - st.firstTok
		sp.parts[2] += st.tEnd - st.end
		sp.parts[3] += over
		sp.parts[4] += st.sent - prevEnd
		prevEnd = st.tEnd
		if len(st.tools) > 0 {
			sp.toolModel += st.end - st.sent
		}
		if !st.parallel && len(st.tools) > 1 {
			var longest int64
			for _, t := range st.tools {
				longest = max(longest, t.end-t.start)
			}
			sp.parallelSaving += max(st.tEnd-st.end-longest, 0)
		}
	}
	return sp
}

func sessionDist(sorted []int64) SessionDist {
	if len(sorted) == 0 {
		return SessionDist{}
	}
	ms := func(v int64) float64 { return float64(v) / 1e6 }
	return SessionDist{Mean: stats.Mean(sorted) / 1e6, P50: ms(stats.Percentile(sorted, 50)),
		P95: ms(stats.Percentile(sorted, 95)), P99: ms(stats.Percentile(sorted, 99)), Max: ms(sorted[len(sorted)-1])}
}

// criticalPath lists what the session's end waited on, step by step: the
// wait before the step, the model's TTFT (with the app's and gateway's
// part apart), its decode, and the tool calls it waited for: every call of
// a sequential step, the one that ended last of a parallel one.
func criticalPath(which string, sp sessionSplit) CriticalPath {
	cp := CriticalPath{Which: which, Session: sp.s.id, TotalMS: float64(sp.total) / 1e6}
	add := func(step int32, part, name string, ns int64) {
		if ns > 0 {
			cp.Segments = append(cp.Segments, Segment{Step: int(step), Part: part, Name: name, MS: float64(ns) / 1e6})
		}
	}
	prevEnd := sp.s.steps[0].intended
	for _, st := range sp.s.steps {
		add(st.step, PartWait, "", st.sent-prevEnd)
		ttft := st.firstTok - st.sent
		over := min(max(st.overhead, 0), max(ttft, 0))
		add(st.step, PartOverhead, "", over)
		add(st.step, PartTTFT, "", ttft-over)
		add(st.step, PartDecode, "", st.end-st.firstTok)
		prevEnd = st.tEnd
		if len(st.tools) == 0 {
			continue
		}
		if st.parallel {
			last := 0
			for i, t := range st.tools {
				if t.end > st.tools[last].end {
					last = i
				}
			}
			name := st.tools[last].name
			if len(st.tools) > 1 {
				name = fmt.Sprintf("%s (longest of %d in parallel)", name, len(st.tools))
			}
			add(st.step, PartTools, name, st.tEnd-st.end)
			continue
		}
		at := st.end
		for _, t := range st.tools {
			add(st.step, PartTools, t.name, t.end-at)
			at = t.end
		}
	}
	return cp
}

// parallelWhatIf is the saving of parallel tool calls, simulated from the
// run's spans: a sequential step's tool time would be its longest call.
func parallelWhatIf(splits []sessionSplit, totals []int64) *WhatIf {
	saving := make([]int64, len(splits))
	after := make([]int64, len(splits))
	any := false
	for i, sp := range splits {
		saving[i], after[i] = sp.parallelSaving, sp.total-sp.parallelSaving
		any = any || sp.parallelSaving > 0
	}
	if !any {
		return &WhatIf{Basis: "none", Note: "no step made two or more tool calls one after another: nothing to save " +
			"(a run's measured saving is report --compare of a sequential and a parallel run)"}
	}
	slices.Sort(saving)
	slices.Sort(after)
	w := &WhatIf{Basis: "simulated", Saving: sessionDist(saving), Before: sessionDist(totals), After: sessionDist(after),
		Note: "simulated from this run's tool spans: each sequential step's tool time becomes its longest call; " +
			"measure it with a parallel run (--tool-mode parallel) and report --compare"}
	if p50 := stats.Percentile(totals, 50); p50 > 0 {
		w.SavingP50 = float64(p50-stats.Percentile(after, 50)) / float64(p50)
	}
	return w
}

// fasterModelWhatIf bounds what a smaller, faster model would save on the
// steps that call tools (the routing steps such a model is meant for):
// their whole model time. It is a bound, not a simulation: the model's
// own speed on those steps is not known here.
func fasterModelWhatIf(splits []sessionSplit, totals []int64) *WhatIf {
	saving := make([]int64, len(splits))
	after := make([]int64, len(splits))
	for i, sp := range splits {
		saving[i], after[i] = sp.toolModel, sp.total-sp.toolModel
	}
	slices.Sort(saving)
	slices.Sort(after)
	if saving[len(saving)-1] == 0 {
		return &WhatIf{Basis: "none", Note: "no step called tools: no routing steps for a smaller model"}
	}
	w := &WhatIf{Basis: "bound", Saving: sessionDist(saving), Before: sessionDist(totals), After: sessionDist(after),
		Note: "at most: the model time (send to last token) of the steps that call tools, were a model for them " +
			"free; a real one saves that minus its own time — measure it with a run against the smaller model " +
			"and report --compare (the simulated twin does not run agent sessions)"}
	if p50 := stats.Percentile(totals, 50); p50 > 0 {
		w.SavingP50 = float64(p50-stats.Percentile(after, 50)) / float64(p50)
	}
	return w
}
