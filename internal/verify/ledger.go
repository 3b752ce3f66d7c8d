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
}

// maxLedgerLine bounds one ledger line.
const maxLedgerLine = 4 << 20

// AppendLedger appends r to the ledger at path (created if absent).
func AppendLedger(path string, r *Result, at time.Time) error {
	e := Entry{At: at.UTC(), Before: r.Before, After: r.After, Lever: r.Lever, Basis: r.Basis}
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
