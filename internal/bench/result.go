package bench

import (
	"time"

	"github.com/tokentrace/tokentrace/internal/report"
)

// Summary is summary.json: the report plus what only the load generator
// knows.
type Summary struct {
	Schema      int                 `json:"schema"`
	Command     string              `json:"command"`
	Target      string              `json:"target"`
	Model       string              `json:"model"`
	Started     time.Time           `json:"started"`
	Calibration *ClientFloor        `json:"calibration,omitempty"`
	Client      ClientHealth        `json:"client"`
	Phases      []PhaseResult       `json:"phases"`
	Sweep       *SweepOutcome       `json:"sweep,omitempty"`
	Compat      *report.CompatViews `json:"compat,omitempty"`
	// Prompts is the requested against the served prompt lengths, and
	// what sized them.
	Prompts *PromptLengths `json:"prompt_lengths,omitempty"`
	// Evidence is what the run asked the server for about each request,
	// and what came back.
	Evidence    *EvidenceAsk   `json:"evidence,omitempty"`
	Report      *report.Report `json:"report"`
	SLOsFailed  bool           `json:"slos_failed"`
	Records     int            `json:"records"`
	Embedded    string         `json:"embedded,omitempty"`
	Interrupted bool           `json:"interrupted,omitempty"`
}

// ClientHealth is the load generator's check on itself over the run.
type ClientHealth struct {
	// CPUUtil is the process's CPU time / (wall time × cores): near 1, the
	// client (and an embedded server, which shares the process) saturated
	// the machine.
	CPUUtil float64 `json:"cpu_util"`
	Cores   int     `json:"cores"`
	// GC pauses over the run.
	GCPauses     int64   `json:"gc_pauses"`
	GCPauseMaxMS float64 `json:"gc_pause_max_ms"`
	GCPauseP99MS float64 `json:"gc_pause_p99_ms"`
	// Worst schedule lag of any phase (actual − intended send of requests
	// only the schedule held).
	SendLagP99MS float64 `json:"send_lag_p99_ms"`
	SendLagMaxMS float64 `json:"send_lag_max_ms"`
	// Timekeeping is the client's watch on its own scheduling: a ticker's
	// lateness over the run and the intervals it could not keep time in.
	Timekeeping Timekeeping `json:"timekeeping"`
	Warnings    []string    `json:"warnings,omitempty"`
}

// Result is what Run returns.
type Result struct {
	Summary *Summary
	Report  *report.Report
	OutDir  string
}

// SLOsFailed reports whether any SLO failed (or had no data).
func (r *Result) SLOsFailed() bool { return r != nil && r.Summary != nil && r.Summary.SLOsFailed }

// Interrupted reports whether the run was stopped (Ctrl-C) before its end.
func (r *Result) Interrupted() bool { return r != nil && r.Summary != nil && r.Summary.Interrupted }

// AllFailed reports whether the run sent requests and every one failed;
// why is the most frequent reason, as the report words it.
func (r *Result) AllFailed() (why string, all bool) {
	if r == nil || r.Report == nil {
		return "", false
	}
	s := r.Report.Summary
	if s.Requests == 0 || s.Succeeded > 0 {
		return "", false
	}
	if len(s.TopErrors) > 0 {
		why = s.TopErrors[0].Kind + ": " + s.TopErrors[0].Message
	}
	return why, true
}
