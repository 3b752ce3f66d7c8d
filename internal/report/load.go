package report

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tokentrace/tokentrace/internal/results"
)

// ErrNoRecords is returned (wrapped) when the inputs hold no record at all
// (results.ErrNoRecords).
var ErrNoRecords = results.ErrNoRecords

// Load reads bench results — folders holding requests.jsonl (and run.json),
// folders of such folders (a sweep), or requests.jsonl files — and reports
// on all of them together. A truncated last line (a killed run) or a
// malformed line is skipped and said in the report's notes; a record from a
// newer schema, or inputs with no record at all, is an error.
func Load(ctx context.Context, paths []string, opts Options) (*Report, error) {
	c, err := Collect(ctx, paths, opts)
	if err != nil {
		return nil, err
	}
	return c.Report(), nil
}

// Collect reads the inputs into a collector (Load without the report).
// The shards of one sharded run (bench --shard) are read as one run, their
// instants set on one clock (planShards).
func Collect(ctx context.Context, paths []string, opts Options) (*Collector, error) {
	if len(paths) == 0 {
		return nil, errors.New("no input: give a results folder or a requests.jsonl file")
	}
	c := NewCollector(opts)
	ins, err := inputs(c, paths)
	if err != nil {
		return nil, err
	}
	plan, err := planShards(ins)
	if err != nil {
		return nil, err
	}
	if plan == nil {
		if err := checkRelated(ins); err != nil {
			return nil, err
		}
	}
	if plan != nil {
		c.source(plan.name)
		c.Note(plan.note)
		ins = plan.parts
	}
	total := 0
	var unread unreadable
	for _, in := range ins {
		n, u, err := c.readInput(ctx, in, plan == nil, len(ins) > 1)
		if err != nil {
			return nil, err
		}
		total += n
		unread.add(u)
	}
	c.unreadable += unread.lines
	c.shift = 0
	files := make([]string, len(ins))
	for i, in := range ins {
		files[i] = in.file
	}
	switch {
	case total == 0 && unread.lines > 0:
		return nil, fmt.Errorf("%s: %w: %v; is it a requests.jsonl written by tokentrace bench?",
			strings.Join(files, ", "), ErrNoRecords, unread)
	case total == 0:
		return nil, fmt.Errorf("%s: %w (the file is empty: was the run killed before any request finished?)",
			strings.Join(files, ", "), ErrNoRecords)
	}
	return c, nil
}

// inputs resolves the paths to records files and reads the run.json beside
// each; one that does not parse is noted and ignored.
func inputs(c *Collector, paths []string) ([]input, error) {
	var ins []input
	for _, p := range paths {
		fs, err := results.FindRecords(p)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			in := input{file: f}
			info, ok, err := results.ReadRunInfo(filepath.Dir(f))
			if err != nil {
				c.Note(fmt.Sprintf("run metadata ignored: %v", err))
			}
			in.info, in.has = info, ok
			ins = append(ins, in)
		}
	}
	return ins, nil
}

// unreadable counts the lines of the inputs that are not records:
// malformed lines and an incomplete last line.
type unreadable struct {
	lines int
	first string // where the first is: "line 3" (of the only input), "FILE line 3"
	why   string // why it could not be read
}

func (u *unreadable) add(v unreadable) {
	if u.lines == 0 {
		u.first, u.why = v.first, v.why
	}
	u.lines += v.lines
}

// String says how many lines could not be read, and why the first could not.
func (u unreadable) String() string {
	if u.lines == 1 {
		return fmt.Sprintf("1 line could not be read as a record (%s: %s)", u.first, u.why)
	}
	return fmt.Sprintf("%d lines could not be read as records (%s: %s)", u.lines, u.first, u.why)
}

// readFile adds every record of one requests.jsonl to c and returns how
// many, and the lines it could not read.
func readFile(ctx context.Context, c *Collector, path string) (int, unreadable, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, unreadable{}, fmt.Errorf("input: %w", err)
	}
	defer func() { _ = f.Close() }() // opened for reading: a failed Close loses nothing
	var size int64
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	return readRecords(ctx, c, f, path, size)
}
