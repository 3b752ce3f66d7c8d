package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

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
	in, out, err := lengthSpan(filepath.Join(dir, results.RequestsFile))
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
// successful records in a requests.jsonl.
func lengthSpan(path string) (in, out [2]int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return in, out, err
	}
	defer func() { _ = f.Close() }() // opened for reading: a failed Close loses nothing
	in, out = [2]int{math.MaxInt, 0}, [2]int{math.MaxInt, 0}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var r struct {
			In    int    `json:"input_tokens"`
			Out   int    `json:"output_tokens"`
			Error string `json:"error_kind"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Error != "" || r.In <= 0 {
			continue
		}
		in = [2]int{min(in[0], r.In), max(in[1], r.In)}
		out = [2]int{min(out[0], r.Out), max(out[1], r.Out)}
	}
	if in[0] == math.MaxInt {
		in, out = [2]int{}, [2]int{}
	}
	return in, out, sc.Err()
}
