// Package calibrate fits the performance model's interpretable constants
// (compute and memory-bandwidth efficiency, per-step overhead) to a real
// server's per-request records: it replays the measured arrivals and lengths
// through the engine on the virtual clock, minimises the robust error between
// simulated and measured TTFT, TPOT and E2E with Nelder–Mead, bootstraps the
// requests for confidence intervals and writes a perfmodel.Profile. It also
// holds the closed-loop driver and the public-measurement reader used to
// check the twin against published closed-loop results (docs/calibrate.md).
//
// It never imports serve, gateway, bench or app: it reads results folders
// (through internal/results) and replays them on the engine's virtual
// clock.
package calibrate
