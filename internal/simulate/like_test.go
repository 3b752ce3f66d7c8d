package simulate

import (
	"errors"
	"io"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
)

// A run replayed with --like is the run: a closed loop of 8 workers with
// spread lengths, written to a folder, then simulated again from that
// folder alone (its concurrency from run.json, its served lengths and
// produced outputs from the records) gives the same TTFT, TPOT and E2E
// percentiles; an open loop replays its arrivals.
func TestLikeReplaysTheRun(t *testing.T) {
	for _, mode := range []string{"closed", "open"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			o := DefaultOptions()
			o.Workload.InputTokens, o.Workload.OutputTokens, o.Workload.Requests = "uniform:200-2000", "uniform:16-96", 120
			given := []string{"input_tokens", "output_tokens", "requests"}
			if mode == "closed" {
				o.Workload.Concurrency, o.Workload.Warmup = 8, "8"
				given = append(given, "concurrency", "warmup")
			} else {
				o.Workload.Rate = 15
				given = append(given, "rate")
			}
			o.OutputDir = filepath.Join(dir, "run")
			run := writeRun(t, o, func(f string) bool { return slices.Contains(given, f) })

			l := DefaultOptions()
			l.Like, l.OutputDir = o.OutputDir, filepath.Join(dir, "like")
			like := writeRun(t, l, func(string) bool { return false })
			for _, m := range []string{"ttft", "tpot", "e2e"} {
				a, b := dist(t, run, m), dist(t, like, m)
				for _, p := range [][2]float64{{a[0], b[0]}, {a[1], b[1]}, {a[2], b[2]}} {
					if math.Abs(p[0]-p[1]) > 0.02*p[0] {
						t.Errorf("%s P50/P90/P99: run %v, replayed %v", m, a, b)
						break
					}
				}
			}
		})
	}
}

func writeRun(t *testing.T, o Options, given func(string) bool) *Summary {
	t.Helper()
	cfg, out, err := o.Config(given, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := WriteRun(cfg, out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func dist(t *testing.T, s *Summary, metric string) [3]float64 {
	t.Helper()
	for _, d := range s.Report.Metrics {
		if d.Metric == metric {
			return [3]float64{d.P50, d.P90, d.P99}
		}
	}
	t.Fatalf("no %s", metric)
	return [3]float64{}
}

// --like takes the run's workload: a workload flag beside it is refused,
// naming both.
func TestLikeRefusesWorkloadFlags(t *testing.T) {
	o := DefaultOptions()
	o.Like = t.TempDir()
	_, _, err := o.Config(func(f string) bool { return f == "rate" }, time.Now())
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Field != "like" {
		t.Fatalf("error %v, want one about like", err)
	}
}
