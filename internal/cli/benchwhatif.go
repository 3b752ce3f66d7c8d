package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/bench"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/prediction"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/whatif"
)

// benchWhatIfBudget bounds the what-if bench runs after a run that failed
// an SLO or fired a rule: the simulations still to start when it runs out
// are not started (one already running finishes).
const benchWhatIfBudget = 20 * time.Second

// benchWhatIf writes, after bench's summary, the top what-if remedy of a
// run that failed an SLO or fired a rule the what-if prices, in one line,
// computed as report computes it; or, when the twin cannot be built or
// the budget ran out, why, and the report command that prices them.
// Nothing for a run that passed and fired no such rule, was interrupted,
// or failed every request.
func benchWhatIf(ctx context.Context, w io.Writer, res *bench.Result, slos []latency.SLO) {
	if res == nil || res.Report == nil || res.Interrupted() || !res.SLOsFailed() && !whatif.Called(res.Report) {
		return
	}
	if _, all := res.AllFailed(); all {
		return
	}
	rep, cmd := res.Report, "tokentrace report "+res.OutDir
	notes := len(rep.Notes)
	ctx, cancel := context.WithTimeout(ctx, benchWhatIfBudget)
	defer cancel()
	err := addWhatIf(ctx, rep, report.Config{Paths: []string{res.OutDir}}, slos, whatIfFlags{mode: "auto", specK: 4, specA: 0.7})
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(w, "what-if   not priced within %s; %s prices the remedies\n", benchWhatIfBudget, cmd)
	case err != nil:
		fmt.Fprintf(w, "what-if   skipped: %v; %s prices the remedies\n", err, cmd)
	case rep.WhatIf != nil:
		fmt.Fprintf(w, "what-if   %s\n", topRemedy(rep.WhatIf, cmd))
	case len(rep.Notes) > notes:
		why := strings.TrimSuffix(strings.TrimPrefix(rep.Notes[len(rep.Notes)-1], "what-if: "), "; skipped")
		why = strings.TrimPrefix(why, "skipped: ")
		fmt.Fprintf(w, "what-if   skipped: %s; price the remedies with: %s --profile FILE\n", why, cmd)
	case res.Summary != nil && res.Summary.Sweep != nil:
		fmt.Fprintf(w, "what-if   priced one load at a time: tokentrace report %s/POINT for a sweep point's remedies\n", res.OutDir)
	default:
		fmt.Fprintf(w, "what-if   no lever the twin can change applies to this run's findings\n")
	}
}

// topRemedy words the what-if's best remedy in one line, with the command
// that shows them all.
func topRemedy(p *prediction.Predictions, cmd string) string {
	helpful, _ := p.Split()
	best, ok := p.Best()
	switch {
	case p.Unreliable != "":
		why, _, _ := strings.Cut(p.Unreliable, ":") // its figures, not the explanation
		return fmt.Sprintf("no remedy ranked: %s; %s lists them", why, cmd)
	case len(helpful) == 0:
		return fmt.Sprintf("none of %d remedies simulated helps; %s lists them", len(p.Remedies), cmd)
	case !ok:
		return fmt.Sprintf("no remedy ranked: each that helps lies outside the twin's envelope (or could not be simulated); %s lists them", cmd)
	}
	return fmt.Sprintf("top of %d remedies: %s; all in %s", len(p.Remedies), report.RemedyLine(p, best), cmd)
}
