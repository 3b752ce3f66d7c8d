// Package whatif predicts what each remedy of a report's diagnosis would do
// to the run: the run's own workload (arrivals, lengths, shared prefixes,
// sessions) re-simulated by the twin — the engine, scheduler and router of
// internal/simulate, through capacity.Evaluate and capacity.FindGoodput —
// first with the run's own configuration (the baseline), then once per
// lever with that one setting changed, the same seed. The result is a
// prediction.Predictions (Report.WhatIf), which the report renders. TwinOf
// rebuilds that baseline from a results folder (the run's recorded flags,
// which the caller parses, or its records' arrivals and lengths).
//
// It never imports serve, gateway, bench, app or agent: every prediction
// is simulated on the virtual clock, never measured; only internal/cli
// imports it, and report renders its result without importing it.
package whatif
