package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// Files of a results folder.
const (
	RequestsFile = "requests.jsonl"
	SummaryFile  = "summary.json"
	CommandFile  = "command.txt"
	ConfigFile   = "config.json"
)

// DefaultOutDir is the results folder used when none is given:
// ./results/<UTC timestamp>/.
func DefaultOutDir(now time.Time) string {
	return filepath.Join("results", now.UTC().Format("20060102-150405"))
}

// checkOut refuses a folder that already holds a run.
func checkOut(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, RequestsFile)); err == nil {
		return fmt.Errorf("results folder %s already holds a run (%s); choose another --out", dir, RequestsFile)
	}
	return nil
}

// prepareOut creates dir, refusing a folder that already holds a run.
func prepareOut(dir string) error {
	if err := checkOut(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results folder: %w", err)
	}
	return nil
}

// recordWriter appends records to requests.jsonl, one line per record and
// one write per line, so a killed run keeps every record it finished.
type recordWriter struct {
	mu  sync.Mutex
	f   *os.File
	buf []byte
	err error
}

func newRecordWriter(path string) (*recordWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("requests file: %w", err)
	}
	return &recordWriter{f: f}, nil
}

// encode serializes rec without writing it (the self-test's path).
func (w *recordWriter) encode(rec *latency.Record) {
	b, err := json.Marshal(rec)
	if err == nil {
		w.buf = append(append(w.buf[:0], b...), '\n')
	}
}

// Write appends rec; the first error is kept and returned by Close.
func (w *recordWriter) Write(rec *latency.Record) {
	b, err := json.Marshal(rec)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	if err != nil {
		w.err = fmt.Errorf("record %s: %w", rec.ID, err)
		return
	}
	w.buf = append(append(w.buf[:0], b...), '\n')
	if _, err := w.f.Write(w.buf); err != nil {
		w.err = fmt.Errorf("requests file: %w", err)
		return
	}
}

func (w *recordWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}
