package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/verify"
)

// readLedger reads a verify ledger (verify --ledger FILE).
func readLedger(path string) ([]verify.Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	entries, err := verify.ReadLedger(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return entries, nil
}

// ledgerRuns adds the ledger's runs (each verify's BEFORE and AFTER) to
// dirs, once each: those still on disk, measured (not simulated), whose
// server evidence agrees with the scheduler calibrate replays with (o).
// It says which it left out and why.
func ledgerRuns(dirs []string, entries []verify.Entry, o engine.Options) ([]string, []string, error) {
	ec, _, err := o.Config()
	if err != nil {
		return nil, nil, err
	}
	c := ec.WithDefaults()
	want := map[string]string{"max_num_seqs": strconv.Itoa(c.MaxNumSeqs), "max_num_batched_tokens": strconv.Itoa(c.MaxNumBatchedTokens),
		"enable_prefix_caching": strconv.FormatBool(c.EnablePrefixCaching), "enable_chunked_prefill": strconv.FormatBool(!c.DisableChunkedPrefill)}
	seen := map[string]bool{}
	for _, d := range dirs {
		seen[filepath.Clean(d)] = true
	}
	var notes []string
	for _, e := range entries {
		for _, d := range []string{e.Before, e.After} {
			if seen[filepath.Clean(d)] {
				continue
			}
			seen[filepath.Clean(d)] = true
			if why := ledgerRunMisfit(d, want); why != "" {
				notes = append(notes, "left out "+d+": "+why)
				continue
			}
			dirs = append(dirs, d)
		}
	}
	return dirs, notes, nil
}

// ledgerRunMisfit says why run dir cannot be fitted with the scheduler
// want ("" when it can).
func ledgerRunMisfit(dir string, want map[string]string) string {
	r, err := verify.ReadRun(dir, nil)
	if err != nil {
		return "not readable (" + err.Error() + ")"
	}
	if r.Info.Simulated {
		return "a simulated run, not a measurement"
	}
	if r.Info.Server == nil {
		return ""
	}
	var diff []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}) {
		if v, ok := r.Info.Server.Config[k]; ok && v != want[k] {
			diff = append(diff, fmt.Sprintf("its server ran %s %s, the fit replays %s", k, v, want[k]))
		}
	}
	return strings.Join(diff, ", ")
}

// reverify re-runs each ledger verify whose twin was a profile's with the
// profile just written, and writes how much the error fell: the mean
// |error| over P50, P95 and the rates, as the ledger has it and now, over
// the rows both have.
func reverify(ctx context.Context, w io.Writer, entries []verify.Entry, profile string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "THE LEDGER'S VERIFIES WITH THIS PROFILE (mean |error| over P50, P95 and the rates)\n")
	var sumOld, sumNew float64
	var n int
	for _, e := range entries {
		name := fmt.Sprintf("  %s → %s (%s)", e.Before, e.After, e.Lever)
		if !strings.HasPrefix(e.Basis, "profile ") {
			fmt.Fprintf(&b, "%s: not re-run, its twin was %s, not a profile\n", name, e.Basis)
			continue
		}
		cfg, err := verifyConfig(e.Before, e.After, verifyFlags{applied: e.Applied, draws: 5}, profile, "", nil)
		if err != nil {
			fmt.Fprintf(&b, "%s: not re-run (%v)\n", name, err)
			continue
		}
		res, err := verify.Verify(ctx, cfg)
		if err != nil {
			fmt.Fprintf(&b, "%s: not re-run (%v)\n", name, err)
			continue
		}
		old := verify.MeanAbsError(e.Rows, hasRow(res.Rows))
		now := verify.MeanAbsError(res.Rows, hasRow(e.Rows))
		if math.IsNaN(old) || math.IsNaN(now) {
			fmt.Fprintf(&b, "%s: no row in common\n", name)
			continue
		}
		sumOld, sumNew, n = sumOld+old, sumNew+now, n+1
		fmt.Fprintf(&b, "%s: %.1f %% → %.1f %%\n", name, 100*old, 100*now)
	}
	if n > 0 {
		o, x := 100*sumOld/float64(n), 100*sumNew/float64(n)
		fmt.Fprintf(&b, "  all %d: %.1f %% → %.1f %% (%+.1f points)\n", n, o, x, x-o)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// hasRow admits the rows of the same metric and statistic as one of rs.
func hasRow(rs []verify.Row) func(verify.Row) bool {
	return func(x verify.Row) bool {
		return slices.ContainsFunc(rs, func(y verify.Row) bool { return y.Metric == x.Metric && y.Stat == x.Stat && y.Verdict != verify.NoData })
	}
}
