package cli

import (
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
)

// warnOutsideProfile says on w where a simulation's workload went outside
// the range its --profile was fitted on: the largest batch per replica (the
// run's sampled running requests over the replicas) and the smallest and
// largest prompt and output lengths of its records. Predictions there are
// extrapolations of the fitted constants.
func warnOutsideProfile(w io.Writer, profile, dir string, replicas int) error {
	prof, err := perfmodel.LoadProfile(profile)
	if err != nil {
		return err
	}
	batch := 0
	if info, ok, err := results.ReadRunInfo(dir); err == nil && ok {
		for _, s := range info.Samples {
			batch = max(batch, int(math.Ceil(s.Running/float64(max(replicas, 1)))))
		}
	}
	in, out, err := lengthSpan(dir)
	if err != nil {
		return err
	}
	var notes []string
	for _, pt := range [][3]int{{max(batch, prof.Range.BatchMin), in[0], out[0]}, {max(batch, 1), in[1], out[1]}} {
		notes = append(notes, prof.OutOfRange(pt[0], pt[1], pt[2])...)
	}
	slices.Sort(notes)
	for _, n := range slices.Compact(notes) {
		fmt.Fprintf(w, "warning: --profile %s: %s: outside the profile's range, the prediction is an extrapolation\n", profile, n)
	}
	return nil
}

// lengthSpan is the smallest and largest prompt and output lengths of the
// successful records of a results folder (lines that are not records are
// left out).
func lengthSpan(dir string) (in, out [2]int, err error) {
	in, out = [2]int{math.MaxInt, 0}, [2]int{math.MaxInt, 0}
	err = results.EachRecord(results.RecordsPath(dir), func(_ int, r *latency.Record, err error) error {
		if err != nil || r.ErrorKind != "" || r.InputTokens <= 0 {
			return nil
		}
		in = [2]int{min(in[0], r.InputTokens), max(in[1], r.InputTokens)}
		out = [2]int{min(out[0], r.OutputTokens), max(out[1], r.OutputTokens)}
		return nil
	})
	if in[0] == math.MaxInt {
		in, out = [2]int{}, [2]int{}
	}
	return in, out, err
}
