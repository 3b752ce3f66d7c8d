package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// Files of a results folder.
const (
	RequestsFile = "requests.jsonl"
	SummaryFile  = "summary.json"
	RunInfoFile  = "run.json"
	CommandFile  = "command.txt"
	ConfigFile   = "config.json"
	StepsFile    = "steps.jsonl"
)

// DefaultDir is the results folder used when none is given:
// ./results/<UTC timestamp>/.
func DefaultDir(now time.Time) string {
	return filepath.Join("results", now.UTC().Format("20060102-150405"))
}

// Check refuses a folder that already holds a run, or any of the files a
// run writes (a file, or a symbolic link that writing would follow): a
// *field.Error about output_dir.
func Check(dir string) error {
	for _, name := range runFiles {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return field.Errorf("output_dir", "results folder %s already holds a run (%s); choose another {output_dir}", dir, name)
		}
	}
	return nil
}

// runFiles are the files a run writes in its results folder.
var runFiles = []string{RequestsFile, SummaryFile, RunInfoFile, CommandFile, ConfigFile, StepsFile}

// Prepare creates dir, refusing a folder that already holds a run.
func Prepare(dir string) error {
	if err := Check(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results folder: %w", err)
	}
	return nil
}

// RecordWriter appends records to requests.jsonl, one line per record and
// one write per line, so a killed run keeps every record it finished. It
// is safe for concurrent use.
type RecordWriter struct {
	mu  sync.Mutex
	f   *os.File // nil: encode only (Discard)
	buf bytes.Buffer
	enc *json.Encoder // writes into buf
	err error
}

// NewRecordWriter creates the records file at path; an existing file is
// an error.
func NewRecordWriter(path string) (*RecordWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("requests file: %w", err)
	}
	w := &RecordWriter{f: f}
	w.enc = json.NewEncoder(&w.buf)
	return w, nil
}

// Discard returns a writer that serializes every record as Write would and
// keeps none: the cost of writing without the disk (bench's self-test).
func Discard() *RecordWriter {
	w := &RecordWriter{}
	w.enc = json.NewEncoder(&w.buf)
	return w
}

// Write appends rec; the first error is kept and returned by Close.
func (w *RecordWriter) Write(rec *latency.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	w.buf.Reset()
	if err := w.enc.Encode(rec); err != nil { // the line and its newline, as json.Marshal's bytes
		w.err = fmt.Errorf("record %s: %w", rec.ID, err)
		return
	}
	if w.f == nil {
		return
	}
	if _, err := w.f.Write(w.buf.Bytes()); err != nil {
		w.err = fmt.Errorf("requests file: %w", err)
	}
}

// Close closes the file and returns the first error of any write.
func (w *RecordWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		if err := w.f.Close(); err != nil && w.err == nil {
			w.err = err
		}
	}
	return w.err
}
