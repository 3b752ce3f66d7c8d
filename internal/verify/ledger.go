package verify

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Entry is one verify in the ledger (one JSON line): the lever, each
// prediction with its interval, the measurement and the error.
type Entry struct {
	At      time.Time `json:"at"`
	Before  string    `json:"before"`
	After   string    `json:"after"`
	Lever   string    `json:"lever"`
	Changes []string  `json:"changes"`
	Basis   string    `json:"basis"`
	// Applied are the --applied changes as verify reads them again
	// (LEVER=VALUE, LEVER=FROM:TO), so the verify can be re-run.
	Applied []string `json:"applied,omitempty"`
	Rows    []Row    `json:"rows"`
	// MachineMoved is the verify's Result.MachineMoved: its errors judge
	// the machine's load as much as the lever, and LedgerError leaves
	// them out.
	MachineMoved bool `json:"machine_moved,omitempty"`
}

// maxLedgerLine bounds one ledger line.
const maxLedgerLine = 4 << 20

// AppendLedger appends r to the ledger at path (created if absent).
func AppendLedger(path string, r *Result, at time.Time) error {
	e := Entry{At: at.UTC(), Before: r.Before, After: r.After, Lever: r.Lever, Basis: r.Basis, MachineMoved: r.MachineMoved}
	for _, c := range r.Changes {
		e.Changes = append(e.Changes, c.String())
		switch {
		case c.Source != "applied":
		case c.BeforeApplied:
			e.Applied = append(e.Applied, c.Setting+"="+c.Before+":"+c.After)
		default:
			e.Applied = append(e.Applied, c.Setting+"="+c.After)
		}
	}
	for _, x := range r.Rows {
		if x.Verdict != NoData {
			x.Draws = nil
			e.Rows = append(e.Rows, x)
		}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close() // the write's error is the one to report
		return fmt.Errorf("ledger %s: %w", path, err)
	}
	return f.Close()
}

// ReadLedger reads a ledger's entries; a line that is not an entry is an
// error naming it.
func ReadLedger(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLedgerLine)
	var out []Entry
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var e Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("ledger line %d: %w", n, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("ledger: a line over %d bytes", maxLedgerLine)
		}
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return out, nil
}

// Record is the twin's track record on one lever.
type Record struct {
	Lever    string `json:"lever"`
	Verifies int    `json:"verifies"`
	// Rows counts the measurements judged, Held those within the 80 %
	// interval, by verdict.
	Rows     int             `json:"rows"`
	Held     int             `json:"held"`
	Verdicts map[Verdict]int `json:"verdicts"`
	// MeanAbsError and WorstError are over the latency rows at P50 and
	// P95 and the rates (|measured − predicted| ÷ predicted).
	MeanAbsError float64 `json:"mean_abs_error"`
	WorstError   float64 `json:"worst_error"`
	WorstRow     string  `json:"worst_row"`
}

// Coverage is the share of the measurements within their interval.
func (t Record) Coverage() float64 {
	if t.Rows == 0 {
		return math.NaN()
	}
	return float64(t.Held) / float64(t.Rows)
}

// TrackRecord summarises entries per lever, levers in name order.
func TrackRecord(entries []Entry) []Record {
	by := map[string]*Record{}
	var sum = map[string]float64{}
	var n = map[string]int{}
	for _, e := range entries {
		lever := e.Lever
		if lever == "" {
			lever = "(none)"
		}
		t := by[lever]
		if t == nil {
			t = &Record{Lever: lever, Verdicts: map[Verdict]int{}}
			by[lever] = t
		}
		t.Verifies++
		for _, x := range e.Rows {
			t.Rows++
			t.Verdicts[x.Verdict]++
			if x.Verdict == AsPredicted {
				t.Held++
			}
			if x.Stat == "p99" {
				continue
			}
			a := math.Abs(x.Error)
			sum[lever] += a
			n[lever]++
			if a > t.WorstError {
				t.WorstError, t.WorstRow = a, x.Metric+" "+x.Stat
			}
		}
	}
	out := make([]Record, 0, len(by))
	for k, t := range by {
		if n[k] > 0 {
			t.MeanAbsError = sum[k] / float64(n[k])
		}
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Lever, b.Lever) })
	return out
}

// WriteTrackRecord writes the summary as text, or JSON.
func WriteTrackRecord(w io.Writer, recs []Record, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(recs)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "THE TWIN'S TRACK RECORD (per lever)\n  %-28s %8s %6s %14s %10s %10s  %s\n", "lever", "verifies", "rows", "in 80% interval", "mean |err|", "worst |err|", "worst row")
	for _, t := range recs {
		fmt.Fprintf(&b, "  %-28s %8d %6d %8d (%3.0f%%) %9.1f%% %9.1f%%  %s\n", t.Lever, t.Verifies, t.Rows, t.Held, 100*t.Coverage(),
			100*t.MeanAbsError, 100*t.WorstError, t.WorstRow)
	}
	b.WriteString("  (mean and worst |error| over P50, P95 and the rates; the interval's coverage over every row)\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// MeanAbsError is the mean |error| over rows at P50 and P95 and the
// rates (the track record's measure), counting only the rows keep admits;
// NaN when none.
func MeanAbsError(rows []Row, keep func(Row) bool) float64 {
	var sum float64
	var n int
	for _, x := range rows {
		if x.Verdict == NoData || x.Stat == "p99" || keep != nil && !keep(x) {
			continue
		}
		sum += math.Abs(x.Error)
		n++
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// MinLedger is how many past verifies of a lever a ledger must hold at a
// row before their errors enter that row's interval (LedgerError).
const MinLedger = 3

// ledgerQuantile is the share of a lever's past absolute errors the
// ledger's term covers: the interval's own 80 %.
const ledgerQuantile = 0.8

// LedgerError is the change's error as the ledger has seen it before: the
// nearest-rank 80th percentile of |error| over past's rows of lever at
// metric and stat (the ⌈0.8·n⌉-th smallest of n), and n; 0 and n where n
// is below MinLedger (docs/metrics.md, "Verify"). A verify whose runs saw
// different machines (Entry.MachineMoved) does not count.
func LedgerError(past []Entry, lever, metric, stat string) (float64, int) {
	var errs []float64
	for _, e := range past {
		if e.Lever != lever || lever == "" || e.MachineMoved {
			continue
		}
		for _, x := range e.Rows {
			if x.Metric == metric && x.Stat == stat && x.Verdict != NoData && !math.IsNaN(x.Error) {
				errs = append(errs, math.Abs(x.Error))
			}
		}
	}
	if len(errs) < MinLedger {
		return 0, len(errs)
	}
	slices.Sort(errs)
	return errs[int(math.Ceil(ledgerQuantile*float64(len(errs))))-1], len(errs)
}

// withLedger gives each row the ledger's error for lever (LedgerError)
// and, where it exceeds the twin's relative error there, remakes the
// row's interval and verdict with it as e. It returns a note naming the
// rows widened, none when the ledger has too few verifies of lever.
func withLedger(rows []Row, past []Entry, lever string) []string {
	var widened []string
	n := 0
	for i := range rows {
		r := &rows[i]
		if r.Verdict == NoData || r.Predicted == 0 {
			continue
		}
		q, k := LedgerError(past, lever, r.Metric, r.Stat)
		if k < MinLedger {
			continue
		}
		r.LedgerError, r.LedgerCount, n = q, k, max(n, k)
		if q <= RelativeError(r.StatedError, r.BeforeMiss) {
			continue
		}
		anchored := make([]float64, len(r.Draws))
		for j, d := range r.Draws {
			anchored[j] = r.Anchor * d
		}
		r.Predicted, r.Low, r.High = Interval(anchored, q, Noise{Sampling: r.Sampling, Drift: r.Drift, ClockMS: r.ClockMS})
		r.Low = max(r.Low, 0)
		r.Error = (r.Measured - r.Predicted) / r.Predicted
		r.Verdict = Judge(r.Measured, r.Predicted, r.Low, r.High, r.Stat == "rate")
		*r = r.finite()
		widened = append(widened, fmt.Sprintf("%s %s ±%.0f %%", r.Metric, r.Stat, 100*q))
	}
	if n == 0 {
		return nil
	}
	if len(widened) == 0 {
		return []string{fmt.Sprintf("the ledger's %d past errors of %s per row are within the twin's own: no interval widened", n, lever)}
	}
	return []string{fmt.Sprintf("the ledger holds up to %d past errors of %s per row: where their 80th percentile (|error|) exceeds the twin's relative error it is the interval's e (docs/metrics.md, \"Verify\"): %s",
		n, lever, strings.Join(widened, ", "))}
}
