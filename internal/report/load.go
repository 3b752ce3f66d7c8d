package report

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// RecordsFile is the name of the per-request records file in a results folder.
const RecordsFile = "requests.jsonl"

// ErrNoRecords is returned (wrapped) when the inputs hold no record at all.
var ErrNoRecords = errors.New("no request records")

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
func Collect(ctx context.Context, paths []string, opts Options) (*Collector, error) {
	if len(paths) == 0 {
		return nil, errors.New("no input: give a results folder or a requests.jsonl file")
	}
	c := NewCollector(opts)
	var files []string
	for _, p := range paths {
		fs, err := resolve(p)
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	total := 0
	for _, f := range files {
		c.source(sourceName(f))
		if info, ok, err := ReadRunInfo(filepath.Dir(f)); err != nil {
			c.Note(fmt.Sprintf("run metadata ignored: %v", err))
		} else if ok {
			c.SetRun(info)
		}
		n, err := readFile(ctx, c, f)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			c.Note(fmt.Sprintf("%s holds no records", f))
		}
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("%s: %w (the file is empty: was the run killed before any request finished?)",
			strings.Join(files, ", "), ErrNoRecords)
	}
	return c, nil
}

// sourceName names an input by its folder, or by the file when it is not
// called requests.jsonl.
func sourceName(f string) string {
	if filepath.Base(f) == RecordsFile {
		return filepath.Dir(f)
	}
	return f
}

// resolve turns a path into the records files it stands for.
func resolve(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	direct := filepath.Join(p, RecordsFile)
	if _, err := os.Stat(direct); err == nil {
		return []string{direct}, nil
	}
	sub, _ := filepath.Glob(filepath.Join(p, "*", RecordsFile))
	if len(sub) > 0 {
		slices.Sort(sub)
		return sub, nil
	}
	return nil, fmt.Errorf("%s: %w: no %s in it or in its subfolders (is it a bench results folder?)",
		p, ErrNoRecords, RecordsFile)
}

// readFile adds every record of one requests.jsonl to c and returns how many.
func readFile(ctx context.Context, c *Collector, path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("input: %w", err)
	}
	defer f.Close()
	return readRecords(ctx, c, f, path)
}

// readRecords reads JSON lines of latency.Record from rd into c.
func readRecords(ctx context.Context, c *Collector, rd io.Reader, name string) (int, error) {
	br := bufio.NewReaderSize(rd, 1<<20)
	var (
		n, lineNo int
		bad       []int
		long      []byte
		rec       latency.Record
		oldSchema int
	)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) == 0 && err != nil {
			if err == io.EOF {
				break
			}
			return n, fmt.Errorf("%s: %w", name, err)
		}
		lineNo++
		complete := len(line) > 0 && line[len(line)-1] == '\n'
		text := bytes.TrimSpace(line)
		if len(text) > 0 {
			rec = resetRecord(rec)
			if derr := decodeRecord(text, &rec); derr != nil {
				if !complete && err == io.EOF {
					c.Note(fmt.Sprintf("%s: dropped the incomplete last line %d (%d bytes): the run was "+
						"probably killed while writing it; the %d complete records before it are kept",
						name, lineNo, len(text), n))
					break
				}
				bad = append(bad, lineNo)
			} else if rec.Schema > latency.RecordSchema {
				return n, fmt.Errorf("%s line %d: record schema v%d is newer than this tokentrace reads "+
					"(v%d): upgrade tokentrace to report on it", name, lineNo, rec.Schema, latency.RecordSchema)
			} else {
				if rec.Schema < 1 {
					oldSchema++
				}
				c.Add(&rec)
				n++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
		if lineNo%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return n, err
			}
		}
	}
	if len(bad) > 0 {
		show := bad[:min(len(bad), 5)]
		c.Note(fmt.Sprintf("%s: skipped %d malformed line(s) (lines %s%s)", name, len(bad),
			joinInts(show), map[bool]string{true: ", …", false: ""}[len(bad) > len(show)]))
	}
	if oldSchema > 0 {
		c.Note(fmt.Sprintf("%s: %d record(s) carry no schema version; read as v1", name, oldSchema))
	}
	return n, nil
}

// resetRecord clears a record for reuse, keeping its slices' storage.
func resetRecord(r latency.Record) latency.Record {
	return latency.Record{ChunkNS: r.ChunkNS[:0], ChunkTokens: r.ChunkTokens[:0], OtherNS: r.OtherNS[:0]}
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}
