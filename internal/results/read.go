package results

import (
	"bufio"
	"fmt"
	"os"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// MaxLine is the longest records line the readers accept (a record of a
// long answer holds one instant per chunk): the sequential reader's
// bound, and report's block reader's, which counts a longer line
// unreadable and reads on past it.
const MaxLine = 64 << 20

// EachRecord reads a records file in order and calls fn for every line
// that is not blank: with the record, or with the error that kept the
// line from being one (malformed, or of a schema newer than
// latency.RecordSchema). fn returns nil to read on, an error to stop;
// EachRecord returns that error, or the file's. The record is reused
// between calls: fn keeps what it needs, not the pointer.
func EachRecord(path string, fn func(line int, r *latency.Record, err error) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // opened for reading: a failed Close loses nothing
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), MaxLine)
	var d Decoder
	var r latency.Record
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		err := d.Decode(sc.Bytes(), &r)
		if err == nil && r.Schema > latency.RecordSchema {
			err = fmt.Errorf("record schema v%d is newer than this tokentrace reads (v%d): upgrade tokentrace", r.Schema, latency.RecordSchema)
		}
		if err := fn(line, &r, err); err != nil {
			return err
		}
	}
	return sc.Err()
}

// ReadRecords reads a whole records file (EachRecord): every record, in
// order, each with storage of its own; a line that is not a record is an
// error naming it.
func ReadRecords(path string) ([]latency.Record, error) {
	var out []latency.Record
	err := EachRecord(path, func(line int, r *latency.Record, err error) error {
		if err != nil {
			return fmt.Errorf("%s line %d: %w", path, line, err)
		}
		out = append(out, *r)
		*r = latency.Record{} // the next line decodes into new storage, not this record's
		return nil
	})
	return out, err
}
