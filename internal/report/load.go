package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
	var unread unreadable
	for _, f := range files {
		c.source(sourceName(f))
		if info, ok, err := ReadRunInfo(filepath.Dir(f)); err != nil {
			c.Note(fmt.Sprintf("run metadata ignored: %v", err))
		} else if ok {
			c.SetRun(info)
		}
		n, u, err := readFile(ctx, c, f)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			c.Note(fmt.Sprintf("%s holds no records", f))
		}
		total += n
		if len(files) > 1 {
			u.first = f + " " + u.first
		}
		unread.add(u)
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

// readFile adds every record of one requests.jsonl to c and returns how
// many, and the lines it could not read.
func readFile(ctx context.Context, c *Collector, path string) (int, unreadable, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, unreadable{}, fmt.Errorf("input: %w", err)
	}
	defer f.Close()
	return readRecords(ctx, c, f, path)
}

// readBlock is the size of the blocks the reader hands to the workers.
var readBlock = 4 << 20

// readRecords reads JSON lines of latency.Record from rd into c. Blocks of
// whole lines are decoded and reduced in parallel (one worker per CPU) and
// merged into c in file order. It returns the records read and the lines
// that were not records.
func readRecords(ctx context.Context, c *Collector, rd io.Reader, name string) (int, unreadable, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := max(1, runtime.GOMAXPROCS(0))
	type job struct {
		data  []byte
		final bool // the input's last block: its last line may lack a newline
		out   chan *digest
	}
	jobs := make(chan job, workers)
	order := make(chan job, 2*workers)
	free := make(chan *digest, 3*workers)
	block := readBlock
	blocks := make(chan []byte, 4*workers) // block buffers, reused once merged
	var readErr error
	var exactDone atomic.Bool // the collector's gap samples are histograms: skip exact lists
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // reader: blocks of whole lines, in order
		defer wg.Done()
		defer close(jobs)
		defer close(order)
		var carry []byte
		for {
			var buf []byte
			select {
			case buf = <-blocks:
			default:
			}
			if cap(buf) < len(carry)+block {
				buf = make([]byte, 0, len(carry)+block)
			}
			buf = append(buf[:0], carry...)
			n, err := io.ReadFull(rd, buf[len(carry):cap(buf)])
			buf = buf[:len(carry)+n]
			final := err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF)
			if err != nil && !final {
				readErr = err
				return
			}
			cut := len(buf)
			if !final {
				cut = bytes.LastIndexByte(buf, '\n') + 1
				if cut == 0 { // one line longer than a block: read on
					carry = buf
					continue
				}
			}
			carry = append([]byte(nil), buf[cut:]...)
			j := job{data: buf[:cut], final: final, out: make(chan *digest, 1)}
			for _, ch := range []chan job{order, jobs} {
				select {
				case ch <- j:
				case <-ctx.Done():
					return
				}
			}
			if final {
				return
			}
		}
	}()
	for range workers {
		wg.Add(1)
		go func() { // workers: decode and reduce
			defer wg.Done()
			var rec latency.Record
			var sc strCache
			for j := range jobs {
				var d *digest
				select {
				case d = <-free:
				default:
					d = &digest{}
				}
				d.reset()
				d.hists = true
				d.noExact = exactDone.Load()
				reduceBlock(j.data, j.final, d, &rec, &sc, c.opts.IncludeWarmup)
				j.out <- d
			}
		}()
	}
	var (
		n, lineOff int
		bad        []int
		unread     unreadable
		oldSchema  int
		err        error
	)
	for j := range order {
		var d *digest
		select {
		case d = <-j.out:
		case <-ctx.Done():
		}
		if d == nil {
			err = ctx.Err()
			break
		}
		if d.newer > 0 {
			err = fmt.Errorf("%s line %d: record schema v%d is newer than this tokentrace reads "+
				"(v%d): upgrade tokentrace to report on it", name, lineOff+d.newer, d.newerV, latency.RecordSchema)
			break
		}
		c.absorb(d)
		exactDone.Store(c.itl.Hist() != nil && c.icl.Hist() != nil)
		n += len(d.rows) + d.warmup
		for _, b := range d.bad {
			bad = append(bad, lineOff+b)
		}
		if len(d.bad) > 0 {
			unread.add(unreadable{lines: len(d.bad), first: fmt.Sprintf("line %d", lineOff+d.bad[0]), why: d.badWhy})
		}
		oldSchema += d.oldSchema
		if d.truncated > 0 {
			unread.add(unreadable{lines: 1, first: fmt.Sprintf("line %d", lineOff+d.lines), why: "incomplete last line"})
			c.Note(fmt.Sprintf("%s: dropped the incomplete last line %d (%d bytes): the run was "+
				"probably killed while writing it; the %d complete records before it are kept",
				name, lineOff+d.lines, d.truncated, n))
		}
		lineOff += d.lines
		select {
		case free <- d:
		default:
		}
		select {
		case blocks <- j.data[:0]:
		default:
		}
		if err = ctx.Err(); err != nil {
			break
		}
	}
	if err == nil {
		err = ctx.Err() // the caller's context ended while the reader was stopping
	}
	cancel()
	for range order { // let the reader finish after an early stop
	}
	wg.Wait()
	if err != nil {
		return n, unread, err
	}
	if readErr != nil {
		return n, unread, fmt.Errorf("%s: %w", name, readErr)
	}
	if len(bad) > 0 {
		show := bad[:min(len(bad), 5)]
		more := ""
		if len(bad) > len(show) {
			more = ", …"
		}
		c.Note(fmt.Sprintf("%s: skipped %d malformed line(s) (lines %s%s)", name, len(bad), joinInts(show), more))
	}
	if oldSchema > 0 {
		c.Note(fmt.Sprintf("%s: %d record(s) carry no schema version; read as v1", name, oldSchema))
	}
	return n, unread, nil
}

// reduceBlock decodes the lines of one block into d. In the input's final
// block, a last line without a newline that does not parse is the
// remainder of a killed run: it is counted in d.truncated, not as malformed.
func reduceBlock(data []byte, final bool, d *digest, rec *latency.Record, sc *strCache, includeWarmup bool) {
	for len(data) > 0 {
		line := data
		rest := []byte(nil)
		complete := false
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, rest, complete = data[:i], data[i+1:], true
		}
		data = rest
		d.lines++
		text := bytes.TrimSpace(line)
		if len(text) == 0 {
			continue
		}
		if err := sc.decode(text, rec); err != nil {
			if final && !complete {
				d.truncated = len(text)
				return
			}
			if len(d.bad) == 0 {
				d.badWhy = err.Error()
			}
			d.bad = append(d.bad, d.lines)
			continue
		}
		if rec.Schema > latency.RecordSchema {
			d.newer, d.newerV = d.lines, rec.Schema
			return
		}
		if rec.Schema < 1 {
			d.oldSchema++
		}
		d.add(rec, includeWarmup)
	}
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
