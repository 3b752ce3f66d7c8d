// Package verify closes the loop measure → diagnose → act → verify: it
// finds what changed between two runs (a results folder before a remedy
// and one after) — the server's configuration evidence, bench's own load,
// or a lever the user names — re-simulates the first run's twin with
// exactly that change (capacity.Evaluate, the what-if's path), and sets
// the prediction, with its interval, beside what the second run measured,
// metric by metric (`tokentrace verify`). It keeps the twin's track record
// in a ledger the user owns (JSONL).
//
// It never imports serve, gateway, bench, app or whatif: the twin it is
// given is rebuilt by internal/cli (through whatif.TwinOf), and every
// prediction runs on the virtual clock.
package verify
