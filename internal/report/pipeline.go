package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
)

// readBlock is the size of the blocks the reader hands to the workers.
var readBlock = 4 << 20

// readRecords reads JSON lines of latency.Record from rd into c. Blocks of
// whole lines are decoded and reduced in parallel (one worker per CPU) and
// merged into c in file order. size is rd's length in bytes where known (0:
// unknown): the collector makes room at once for the rows it will hold. It
// returns the records read and the lines that were not records.
func readRecords(ctx context.Context, c *Collector, rd io.Reader, name string, size int64) (int, unreadable, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := max(1, runtime.GOMAXPROCS(0))
	p := &pipeline{
		jobs:   make(chan job, workers),
		order:  make(chan job, 2*workers),
		free:   make(chan *digest, 3*workers),
		blocks: make(chan []byte, 4*workers),
		block:  readBlock,
		shift:  c.shift,
	}
	p.width.Store(int64(c.series.Width()))
	var wg sync.WaitGroup
	wg.Go(func() { p.read(ctx, rd) })
	for range workers {
		wg.Go(func() { p.reduce(c.opts.IncludeWarmup) })
	}
	m := merger{c: c, name: name, size: size}
	err := m.merge(ctx, p)
	cancel()
	for range p.order { // let the reader finish after an early stop
	}
	wg.Wait()
	if err != nil {
		return m.n, m.unread, err
	}
	if p.readErr != nil {
		return m.n, m.unread, fmt.Errorf("%s: %w", name, p.readErr)
	}
	m.notes()
	return m.n, m.unread, nil
}

// job is one block of whole lines on its way through the pipeline.
type job struct {
	data  []byte
	final bool // the input's last block: its last line may lack a newline
	// overlong counts the lines over maxRecordLine skipped before data.
	overlong int
	out      chan *digest
}

// pipeline moves blocks from the reader to the workers (jobs) and, in
// file order, to the merger (order); digests and block buffers are reused
// once merged (free, blocks).
type pipeline struct {
	jobs, order chan job
	free        chan *digest
	blocks      chan []byte
	block       int
	readErr     error        // set by read before it closes order
	exactDone   atomic.Bool  // the collector's gap samples are histograms: skip exact lists
	compatDone  atomic.Bool  // the same for the compatibility views' gaps
	shift       int64        // the collector's shift when the input began (digest.shift)
	width       atomic.Int64 // the collector's window width now (digest.useWidth)
}

// read cuts rd into blocks of whole lines and hands them on, in order. A
// line longer than a block grows the buffer geometrically; one longer
// than maxRecordLine is skipped to its end and counted unreadable (the
// next block's overlong). It stops when ctx ends, within a block.
func (p *pipeline) read(ctx context.Context, rd io.Reader) {
	defer close(p.jobs)
	defer close(p.order)
	var carry []byte
	overlong := 0 // lines skipped since the last block handed on
	for ctx.Err() == nil {
		var buf []byte
		select {
		case buf = <-p.blocks:
		default:
		}
		if need := len(carry) + p.block; cap(buf) < need {
			buf = make([]byte, 0, max(need, min(2*len(carry), maxRecordLine+p.block)))
		}
		buf = append(buf[:0], carry...)
		n, err := io.ReadFull(rd, buf[len(carry):cap(buf)])
		buf = buf[:len(carry)+n]
		final := err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !final {
			p.readErr = err
			return
		}
		cut := len(buf)
		if !final {
			cut = bytes.LastIndexByte(buf, '\n') + 1
			if cut == 0 && len(buf) <= maxRecordLine { // one line longer than a block: read on
				carry = buf
				continue
			}
		}
		if !final && cut == 0 {
			// A line over the bound: skipped to its end, never held.
			overlong++
			var rest []byte
			if rest, final, err = skipLine(ctx, rd, buf[:cap(buf)]); err != nil {
				p.readErr = err
				return
			}
			buf, cut = buf[:0], 0
			if !final {
				carry = rest
				continue
			}
		}
		carry = append([]byte(nil), buf[cut:]...)
		j := job{data: buf[:cut], final: final, overlong: overlong, out: make(chan *digest, 1)}
		overlong = 0
		for _, ch := range []chan job{p.order, p.jobs} {
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
}

// maxRecordLine is the longest line report reads (results.MaxLine; tests
// lower it).
var maxRecordLine = results.MaxLine

// skipLine reads rd, into scratch, past the end of the line being read:
// rest is what follows its newline (a copy); eof is true when the input
// ended first. It stops with ctx's error when ctx ends.
func skipLine(ctx context.Context, rd io.Reader, scratch []byte) (rest []byte, eof bool, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, true, err
		}
		n, err := io.ReadFull(rd, scratch)
		if i := bytes.IndexByte(scratch[:n], '\n'); i >= 0 {
			return append([]byte(nil), scratch[i+1:n]...), false, nil
		}
		switch {
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
			return nil, true, nil
		case err != nil:
			return nil, true, err
		}
	}
}

// reduce decodes and reduces blocks into digests (one worker).
func (p *pipeline) reduce(includeWarmup bool) {
	var rec latency.Record
	var sc results.Decoder
	for j := range p.jobs {
		var d *digest
		select {
		case d = <-p.free:
		default:
			d = &digest{}
		}
		d.reset()
		d.shift = p.shift
		d.useWidth(time.Duration(p.width.Load()))
		d.hists = true
		d.noExact = p.exactDone.Load()
		d.compat.countInHists(p.compatDone.Load())
		for range j.overlong { // lines before the block's
			d.lines++
			if len(d.bad) == 0 {
				d.badWhy = fmt.Sprintf("a line longer than %d MiB", maxRecordLine>>20)
			}
			d.bad = append(d.bad, d.lines)
		}
		reduceBlock(j.data, j.final, d, &rec, &sc, includeWarmup)
		d.mergeBoth()
		j.out <- d
	}
}

// merger absorbs the digests into the collector in file order and keeps
// count of what could not be read.
type merger struct {
	c    *Collector
	name string
	// size is the input's length in bytes (0: unknown); read and rows are
	// the bytes and rows absorbed so far, from which the rest is foreseen.
	size, read int64
	rows       int
	n          int
	lineOff    int
	bad        []int
	unread     unreadable
	oldSchema  int
}

func (m *merger) merge(ctx context.Context, p *pipeline) error {
	for j := range p.order {
		var d *digest
		select {
		case d = <-j.out:
		case <-ctx.Done():
		}
		if d == nil {
			return ctx.Err()
		}
		if d.newer > 0 {
			return fmt.Errorf("%s line %d: record schema v%d is newer than this tokentrace reads "+
				"(v%d): upgrade tokentrace to report on it", m.name, m.lineOff+d.newer, d.newerV, latency.RecordSchema)
		}
		m.absorb(d, len(j.data))
		p.exactDone.Store(m.c.itl.Hist() != nil && m.c.icl.Hist() != nil)
		p.compatDone.Store(m.c.compat.gapsCounted())
		p.width.Store(int64(m.c.series.Width()))
		select {
		case p.free <- d:
		default:
		}
		select {
		case p.blocks <- j.data[:0]:
		default:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return ctx.Err() // the caller's context ended while the reader was stopping
}

// absorb merges one digest, read from n bytes of the input, and notes its
// unreadable lines.
func (m *merger) absorb(d *digest, n int) {
	m.read += int64(n)
	m.rows += len(d.rows)
	m.c.reserve(d, m.foreseen())
	m.c.absorb(d)
	m.n += len(d.rows) + d.warmup
	for _, b := range d.bad {
		m.bad = append(m.bad, m.lineOff+b)
	}
	if len(d.bad) > 0 {
		m.unread.add(unreadable{lines: len(d.bad), first: fmt.Sprintf("line %d", m.lineOff+d.bad[0]), why: d.badWhy})
	}
	m.oldSchema += d.oldSchema
	if d.truncated > 0 {
		m.unread.add(unreadable{lines: 1, first: fmt.Sprintf("line %d", m.lineOff+d.lines), why: "incomplete last line"})
		m.c.Note(fmt.Sprintf("%s: dropped the incomplete last line %d (%d bytes): the run was "+
			"probably killed while writing it; the %d complete records before it are kept",
			m.name, m.lineOff+d.lines, d.truncated, m.n))
	}
	m.lineOff += d.lines
}

// foreseen is how many more rows the rest of the input is expected to
// hold, from the rows per byte so far, with 5 % to spare (0 when the
// input's size is unknown).
func (m *merger) foreseen() int {
	if m.size <= m.read || m.read == 0 {
		return 0
	}
	return int(float64(m.rows) * float64(m.size-m.read) / float64(m.read) * 1.05)
}

// notes says what was skipped.
func (m *merger) notes() {
	if len(m.bad) > 0 {
		show := m.bad[:min(len(m.bad), 5)]
		more := ""
		if len(m.bad) > len(show) {
			more = ", …"
		}
		m.c.Note(fmt.Sprintf("%s: skipped %d malformed line(s) (lines %s%s)", m.name, len(m.bad), joinInts(show), more))
	}
	if m.oldSchema > 0 {
		m.c.Note(fmt.Sprintf("%s: %d record(s) carry no schema version; read as v1", m.name, m.oldSchema))
	}
}

// reduceBlock decodes the lines of one block into d. In the input's final
// block, a last line without a newline that does not parse is the
// remainder of a killed run: it is counted in d.truncated, not as malformed.
func reduceBlock(data []byte, final bool, d *digest, rec *latency.Record, sc *results.Decoder, includeWarmup bool) {
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
		if err := sc.Decode(text, rec); err != nil {
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

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}
