// Package prediction is what-if's result: what the twin predicts each
// remedy would do (Predictions, Remedy, WhatIfPoint) and which remedies
// help (Split). internal/whatif computes it, the report carries it
// (Report.WhatIf) and renders it, cli words its best remedy. It imports
// nothing of this module, so whatif (which reads reports) and report both
// use it without a cycle.
package prediction

import (
	"fmt"
	"strings"
)

// Predictions is what the twin — the simulated engine, on the run's own
// workload — predicts each remedy would do: the run re-simulated with its
// own configuration (the baseline, beside the measured values, so the
// twin's own error shows), then once per lever with that lever changed,
// the same seed. internal/whatif computes it; the report renders it.
type Predictions struct {
	// Basis says what the twin was built from: "simulated run", "embedded
	// engine" or "profile FILE" (a calibrated profile on a measured run).
	Basis string `json:"basis"`
	// Run is the results folder the twin was rebuilt from.
	Run string `json:"run,omitempty"`
	// Deployment is the run's deployment as the twin runs it; Workload
	// the workload replayed.
	Deployment string `json:"deployment"`
	Workload   string `json:"workload"`
	Seed       uint64 `json:"seed"`
	// Objectives are what every prediction is judged on, failing SLOs
	// first: the run's SLOs, or without any the P99 of the metrics the
	// findings are about (then Judged is false: there is no threshold, so
	// no goodput).
	Objectives []string `json:"objectives"`
	Judged     bool     `json:"judged"`
	// MeasuredMS are the run's own values of the objectives.
	MeasuredMS []float64 `json:"measured_ms"`
	// Baseline is the twin's prediction for the run as it was.
	Baseline WhatIfPoint `json:"baseline"`
	// Remedies are ranked by their predicted effect on the first
	// objective (the breached SLO), best first.
	Remedies []Remedy `json:"remedies"`
	// Assumptions hold for every prediction.
	Assumptions []string `json:"assumptions,omitempty"`
	// Fidelity is, per objective, the twin baseline's relative miss of the
	// measured value (|twin − measured| / measured; null when either is
	// unknown), and StatedError the twin's own stated error there: its
	// profile's calibration residual, or the two-clock differential's
	// limit (5 % at P50/P90, 10 % at P99) for the run's own engine.
	Fidelity    []*float64 `json:"fidelity,omitempty"`
	StatedError []float64  `json:"stated_error,omitempty"`
	// Unreliable, when set, says why the remedies cannot be trusted: the
	// twin's baseline misses the run by more than its stated error, so it
	// does not reproduce what made the run slow. Its remedies are listed
	// but not ranked or recommended.
	Unreliable string `json:"unreliable,omitempty"`
	// Interval80 is the twin's 80 % interval for the baseline's case, per
	// metric a relative half-width (engine.Envelope.Interval80: the
	// constants' own inside their envelope, across sources outside it).
	Interval80 *Interval `json:"interval80,omitempty"`
	// Simulations counts the simulations run; ElapsedS their wall time.
	Simulations int     `json:"simulations"`
	ElapsedS    float64 `json:"elapsed_s"`
}

// WhatIfPoint is one simulation of the run's workload at its own rate, and
// the goodput search of the same deployment.
type WhatIfPoint struct {
	// ValuesMS holds each objective's percentile; null where it falls on
	// a failed (refused) request, which counts as infinitely late.
	ValuesMS []*float64 `json:"values_ms"`
	// Meets says every SLO held (and the deployment kept up).
	Meets bool `json:"meets"`
	// KeepsUp is false when the deployment fell behind its arrivals.
	KeepsUp bool `json:"keeps_up"`
	// FailedShare is the share of the judged requests that failed (an
	// admission bound sheds them).
	FailedShare float64 `json:"failed_share"`
	// GoodputRPS is the highest rate at which every SLO holds (0: none
	// found, or no SLO to judge).
	GoodputRPS float64 `json:"goodput_rps"`
	// PeakBatch is the most requests one replica ran at once (sampled).
	PeakBatch int `json:"peak_batch"`
}

// Remedy is one lever changed, and what the twin predicts.
type Remedy struct {
	// Lever names it (docs/report.md, "What-if remedies"); Setting says
	// what changed in the engine's or deployment's own names.
	Lever   string `json:"lever"`
	Title   string `json:"title"`
	Setting string `json:"setting"`
	// For lists the findings (rules) it answers; empty when asked for.
	For []string `json:"for,omitempty"`
	// After is the prediction with the lever changed.
	After WhatIfPoint `json:"after"`
	// Effect is After ÷ Baseline of the first objective (< 1 is better);
	// null when either falls on a failed request or was not simulated.
	Effect *float64 `json:"effect"`
	// Assumes says what the prediction takes for granted; Extrapolates
	// where the twin leaves what it was calibrated or built on.
	Assumes      []string `json:"assumes,omitempty"`
	Extrapolates []string `json:"extrapolates,omitempty"`
	// Interval80 is the 80 % interval of the remedy's prediction, as the
	// baseline's (Predictions.Interval80).
	Interval80 *Interval `json:"interval80,omitempty"`
	// Error says why the lever could not be simulated (it does not fit).
	Error string `json:"error,omitempty"`
	// Applied is the change as `tokentrace verify --applied` reads it
	// (max_num_seqs=8): VerifyCommand checks the remedy once applied.
	Applied string `json:"applied,omitempty"`
	// GatewayApply is the remedy as `tokentrace gateway apply` writes it
	// (concurrency=8 max-queue=4), for a lever a gateway can apply in
	// front of the server: GatewayCommand.
	GatewayApply string `json:"gateway_apply,omitempty"`
}

// noGain is the relative change of the first objective within which a
// remedy is taken to change nothing.
const noGain = 0.02

// Split parts the remedies into those the twin predicts to help (the first
// objective better by more than noGain, or more goodput) and those that
// change nothing or make it worse, each in its order; a remedy that could
// not be simulated stays with the first (its error is news).
func (w *Predictions) Split() (helpful, none []Remedy) {
	for _, r := range w.Remedies {
		better := r.Effect == nil || *r.Effect < 1-noGain || r.After.GoodputRPS > (1+noGain)*w.Baseline.GoodputRPS
		if r.Error != "" || better {
			helpful = append(helpful, r)
		} else {
			none = append(none, r)
		}
	}
	return helpful, none
}

// Ranked says whether r takes a rank among w's remedies: the twin
// reproduces the run (Unreliable empty) and r's prediction leaves nothing
// the run's own does not — no extrapolation (Extrapolates empty: outside
// the twin's envelope or a profile's range) and no interval outside the
// envelope where the baseline's is inside. An unranked remedy is shown,
// marked, and follows the ranked ones; it is never the best.
func (w *Predictions) Ranked(r Remedy) bool {
	if w.Unreliable != "" || len(r.Extrapolates) > 0 {
		return false
	}
	return r.Interval80 == nil || !r.Interval80.Outside || w.Interval80 != nil && w.Interval80.Outside
}

// Best is the first helpful remedy that is ranked (Split, Ranked); false
// when there is none.
func (w *Predictions) Best() (Remedy, bool) {
	helpful, _ := w.Split()
	for _, r := range helpful {
		if r.Error == "" && w.Ranked(r) {
			return r, true
		}
	}
	return Remedy{}, false
}

// NoGainLine folds the remedies that change nothing or make it worse into
// one line; "" when there are none.
func (w *Predictions) NoGainLine(none []Remedy) string {
	if len(none) == 0 {
		return ""
	}
	names := make([]string, len(none))
	for i, r := range none {
		names[i] = r.Title
		if r.Setting != "" {
			names[i] += " (" + r.Setting + ")"
		}
	}
	return fmt.Sprintf("no gain (within %.0f%%) or worse: %s; the JSON form has their figures", 100*noGain, strings.Join(names, ", "))
}

// VerifyCommand is the command that checks a remedy once it is applied
// and the load run again into AFTER (docs/report.md, "Verify").
func (w *Predictions) VerifyCommand(r Remedy) string {
	if r.Applied == "" || r.Error != "" {
		return ""
	}
	run := w.Run
	if run == "" {
		run = "BEFORE"
	}
	return fmt.Sprintf("tokentrace verify %s AFTER --applied %s", run, r.Applied)
}

// GatewayCommand applies a remedy through a tokentrace gateway's
// configuration (reloaded live) and checks it: after it, verify finds the
// change in the gateway's evidence without --applied; "" for a lever the
// gateway does not own.
func (w *Predictions) GatewayCommand(r Remedy) string {
	if r.GatewayApply == "" || r.Error != "" {
		return ""
	}
	run := w.Run
	if run == "" {
		run = "BEFORE"
	}
	return fmt.Sprintf("tokentrace gateway apply --config GATEWAY.yaml %s; then tokentrace verify %s AFTER", r.GatewayApply, run)
}

// NoGain is NoGainLine of the remedies Split finds no gain in, for the
// HTML page.
func (w *Predictions) NoGain() string {
	_, none := w.Split()
	return w.NoGainLine(none)
}

// Interval is an 80 % interval as relative half-widths per metric (0.12:
// ±12 %; docs/metrics.md, "The twin's 80 % interval"), what gave it, and
// whether the case lies outside the twin's envelope.
type Interval struct {
	TTFT    float64 `json:"ttft"`
	TPOT    float64 `json:"tpot"`
	E2E     float64 `json:"e2e"`
	From    string  `json:"from"`
	Outside bool    `json:"outside_envelope"`
}

// String is the interval as the outputs print it.
func (iv Interval) String() string {
	return fmt.Sprintf("TTFT ±%.0f%%, TPOT ±%.0f%%, E2E ±%.0f%% (%s)", 100*iv.TTFT, 100*iv.TPOT, 100*iv.E2E, iv.From)
}
