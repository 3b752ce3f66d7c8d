package capacity

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// writeRun simulates a run into a results folder, as bench would write it.
func writeRun(t *testing.T, load workload.Load) string {
	t.Helper()
	ec, _, err := engine.DefaultOptions().Config()
	if err != nil {
		t.Fatal(err)
	}
	in, _ := workload.ParseDist("uniform:200-800", "input")
	out, _ := workload.ParseDist("uniform:10-60", "output")
	dir := filepath.Join(t.TempDir(), "run")
	_, err = simulate.WriteRun(simulate.Config{Engine: ec, Workload: &workload.Synthetic{Chat: true, Input: in, Output: out, Turns: 1, PrefixGroups: 1, Seed: 2},
		Load: load, IgnoreEOS: true, Model: "m"}, simulate.Output{Dir: dir}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFromResultsReplaysArrivalsAndLengths: a results folder's requests
// come back at their arrival times, at the run's rate, with their lengths;
// At rescales them.
func TestFromResultsReplaysArrivalsAndLengths(t *testing.T) {
	dir := writeRun(t, workload.Load{Rate: 8, Arrival: workload.Poisson, Requests: 300, Seed: 5})
	w, err := FromResults(dir, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if w.Load.Requests != 300 || math.Abs(w.Rate-8)/8 > 0.15 {
		t.Errorf("%d requests at %.2f req/s, want 300 at about 8", w.Load.Requests, w.Rate)
	}
	l := w.sampleLengths(300)
	for i := range l.in {
		if l.in[i] < 200 || l.in[i] > 801 || l.out[i] < 10 || l.out[i] > 60 {
			t.Fatalf("request %d: %d in, %d out", i, l.in[i], l.out[i])
		}
	}
	_, load := w.At(2 * w.Rate)
	a, b := w.Load.Arrivals(), load.Arrivals()
	for range 300 {
		x, _ := a.Next()
		y, _ := b.Next()
		if d := y - x/2; d < -1 || d > 1 {
			t.Fatalf("at twice the rate, %v became %v", x, y)
		}
	}
}

// TestFromResultsWithoutArrivals: a closed-loop run, and records all sent
// at one instant, are ErrNoArrivals; a folder without records is
// results.ErrBadInput.
func TestFromResultsWithoutArrivals(t *testing.T) {
	closed := writeRun(t, workload.Load{Concurrency: 4, Requests: 50, Seed: 5})
	if _, err := FromResults(closed, true, 1); !errors.Is(err, ErrNoArrivals) {
		t.Errorf("closed loop: %v", err)
	}
	dir := t.TempDir()
	var b []byte
	for i := range 20 {
		r := latency.Record{Schema: 1, ID: fmt.Sprint(i), FirstTokenNS: 1e8, EndNS: 2e8, InputTokens: 100, OutputTokens: 10}
		line, _ := jsonLine(r)
		b = append(b, line...)
	}
	if err := os.WriteFile(filepath.Join(dir, "requests.jsonl"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FromResults(dir, true, 1); !errors.Is(err, ErrNoArrivals) {
		t.Errorf("one instant: %v", err)
	}
	if _, err := FromResults(t.TempDir(), true, 1); !errors.Is(err, results.ErrBadInput) {
		t.Errorf("empty folder: %v", err)
	}
}

func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}
