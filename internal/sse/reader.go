package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Event is one dispatched server-sent event. Its byte slices alias the
// Reader's buffers and are valid only until the next call to Next.
type Event struct {
	// Name is the event's "event:" field; empty for the default "message".
	Name []byte
	// ID is the event's "id:" field, if any.
	ID []byte
	// Data is the event's data: its "data:" lines joined with "\n".
	Data []byte
	// HasData reports whether the event had a data line. Outside block
	// mode every event has one; a block without (comments, other fields
	// only) has neither HasData nor Data.
	HasData bool
	// Raw is the event's bytes as they arrived, in block mode (Blocks): from
	// its first line through the blank line that ends it, comments and
	// line ends as sent. A CRLF split between two reads dispatches the
	// block at its CR (a line end of its own), so the LF is in neither
	// block. Nil outside block mode.
	Raw []byte
	// At is the arrival instant of the event's last byte: the clock's value
	// read immediately after the Read call that delivered it returned,
	// before any parsing. Events delivered by one Read share an instant.
	// Zero when the Reader has no clock.
	At int64
}

// ErrLineTooLong is returned when a line exceeds the Reader's maximum size
// (in block mode, when a block does).
var ErrLineTooLong = errors.New("sse: line too long")

// DefaultMaxLine bounds one line (and one event's data) when NewReader is
// given no other limit.
const DefaultMaxLine = 4 << 20

// Reader parses Server-Sent Events from a byte stream and stamps each event
// with the instant its bytes arrived. It accepts every line ending the SSE
// specification (WHATWG HTML, "Server-sent events") allows: LF, CRLF and a
// lone CR, also when a CRLF is split between two reads; comments (lines
// starting with ':'); multi-line data; and a field colon followed by an
// optional space. An event is dispatched at the blank line that ends it;
// at end of input a pending event with data is dispatched too (some
// servers end the stream without the final blank line). Comments and
// "retry:" lines are skipped.
//
// In block mode (Blocks) it serves a relay instead: Next returns every
// block a blank line ends, those without data (keep-alive comments)
// included, each with its raw bytes, and an unterminated block at the end
// of input is an error (io.ErrUnexpectedEOF), as the specification
// discards it.
type Reader struct {
	r   io.Reader
	now func() int64

	buf        []byte // raw input; buf[off:len(buf)] is unread
	off        int
	readAt     int64 // instant the bytes in buf arrived (the latest Read)
	skipLF     bool  // the previous line ended with '\r'; a leading '\n' belongs to it
	eof        bool
	err        error
	maxLine    int
	data, name []byte
	id         []byte
	hasData    bool
	blocks     bool // block mode
	lines      bool // lines mode (NDJSON)
	start      int  // block mode: where the open block starts in buf; -1 when none is open
	// Comments counts the comment lines seen so far.
	Comments int
	// KeepComment, when set, keeps a comment: Kept holds the text after
	// this prefix of the last comment line that starts with it (a
	// tokentrace hop's final ": server-timing VALUE"). Reset keeps the
	// prefix and empties Kept.
	KeepComment string
	Kept        []byte
}

// NewReader returns a Reader of r that reads the arrival instant of each
// Read from now (a monotonic clock, e.g. nanoseconds since a start
// instant; nil stamps nothing). The initial buffer is 2 KiB and grows as
// long lines need, up to maxLine bytes (DefaultMaxLine when maxLine ≤ 0).
func NewReader(r io.Reader, now func() int64, maxLine int) *Reader {
	rd := new(Reader)
	rd.Init(r, now, maxLine)
	return rd
}

// Init sets up a zero Reader as NewReader sets up its own (a Reader held
// in a larger struct, without an allocation of its own).
func (rd *Reader) Init(r io.Reader, now func() int64, maxLine int) {
	rd.InitBuffer(r, now, maxLine, nil)
}

// InitBuffer is Init with buf's storage as the initial buffer (a 2 KiB one
// is made when buf has no capacity): a buffer held in the same larger
// struct as the Reader. It grows past cap(buf) as long lines need.
func (rd *Reader) InitBuffer(r io.Reader, now func() int64, maxLine int, buf []byte) {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	if cap(buf) == 0 {
		buf = make([]byte, 0, 2048)
	}
	*rd = Reader{r: r, now: now, buf: buf[:0], maxLine: maxLine, start: -1}
}

// Blocks turns on block mode (see Reader): Next returns every block with
// its raw bytes, and maxLine bounds a whole block. Call it before the
// first Next; Reset keeps it.
func (rd *Reader) Blocks() { rd.blocks = true }

// Lines turns on lines mode, for a stream of newline-delimited JSON
// (Ollama's native API) read by the same reader: Next returns each
// non-empty line as an event whose Data is the line and whose Raw is
// the line with its line end, and maxLine bounds a line. A last line
// without a line end is returned too. Call it before the first Next;
// Reset keeps it.
func (rd *Reader) Lines() { rd.lines = true }

// BufferCap is the capacity of rd's input buffer: what Reset keeps, for
// a pool of Readers to bound.
func (rd *Reader) BufferCap() int { return cap(rd.buf) }

// DataCap is the capacity of rd's event data buffer, which Reset keeps
// too (see BufferCap).
func (rd *Reader) DataCap() int { return cap(rd.data) }

// Reset makes rd read from r with clock now (nil keeps the clock), keeping
// its buffers and its mode, so one Reader can serve many streams.
func (rd *Reader) Reset(r io.Reader, now func() int64) {
	rd.r = r
	if now != nil {
		rd.now = now
	}
	rd.buf = rd.buf[:0]
	rd.off, rd.start = 0, -1
	rd.readAt = 0
	rd.skipLF, rd.eof, rd.err = false, false, nil
	rd.data, rd.name, rd.id = rd.data[:0], rd.name[:0], rd.id[:0]
	rd.hasData = false
	rd.Comments = 0
	rd.Kept = rd.Kept[:0]
}

// Next returns the next event. At the end of the input it returns io.EOF;
// any other error is the underlying reader's (or ErrLineTooLong, or in
// block mode io.ErrUnexpectedEOF for an unterminated last block),
// returned after every complete event before it.
func (rd *Reader) Next() (Event, error) {
	if rd.lines {
		return rd.nextLine()
	}
	for {
		if line, at, ok := rd.line(); ok {
			if len(line) == 0 {
				if rd.blocks && rd.start >= 0 {
					return rd.dispatch(), nil
				}
				if rd.hasData {
					return rd.dispatch(), nil
				}
				rd.name, rd.id = rd.name[:0], rd.id[:0]
				continue
			}
			if rd.blocks && rd.start < 0 {
				rd.start = at
			}
			if err := rd.field(line); err != nil {
				rd.err = err
				return Event{}, err
			}
			continue
		}
		if rd.err != nil {
			// A partial line or event before the error is dropped.
			return Event{}, rd.err
		}
		if rd.eof {
			return rd.end()
		}
		rd.err = rd.fill()
	}
}

// nextLine is Next in lines mode.
func (rd *Reader) nextLine() (Event, error) {
	for {
		if line, at, ok := rd.line(); ok {
			if len(line) == 0 {
				continue
			}
			return Event{Data: line, HasData: true, Raw: rd.buf[at:rd.off], At: rd.readAt}, nil
		}
		if rd.err != nil {
			return Event{}, rd.err
		}
		if rd.eof {
			if rd.off < len(rd.buf) {
				line := rd.buf[rd.off:]
				rd.off = len(rd.buf)
				return Event{Data: line, HasData: true, Raw: line, At: rd.readAt}, nil
			}
			rd.err = io.EOF
			return Event{}, io.EOF
		}
		rd.err = rd.fill()
	}
}

// end handles the end of input: a final line without a terminator is a
// line, and a pending event with data is dispatched; in block mode an
// unterminated block is an error.
func (rd *Reader) end() (Event, error) {
	if rd.blocks {
		if rd.start >= 0 || rd.off < len(rd.buf) {
			rd.err = io.ErrUnexpectedEOF
			return Event{}, rd.err
		}
		rd.err = io.EOF
		return Event{}, io.EOF
	}
	if rd.off < len(rd.buf) {
		line := rd.buf[rd.off:]
		rd.off = len(rd.buf)
		if err := rd.field(line); err != nil {
			rd.err = err
			return Event{}, err
		}
	}
	if rd.hasData {
		return rd.dispatch(), nil
	}
	rd.err = io.EOF
	return Event{}, io.EOF
}

func (rd *Reader) dispatch() Event {
	ev := Event{Name: rd.name, ID: rd.id, At: rd.readAt, HasData: rd.hasData}
	if rd.hasData {
		ev.Data = rd.data
	}
	if rd.blocks {
		ev.Raw = rd.buf[rd.start:rd.off]
		rd.start = -1
	}
	rd.hasData = false
	// The next event reuses the buffers after the caller is done with ev:
	// truncate now, overwrite later.
	rd.data, rd.name, rd.id = rd.data[:0], rd.name[:0], rd.id[:0]
	return ev
}

// field interprets one non-empty line.
func (rd *Reader) field(line []byte) error {
	if line[0] == ':' {
		rd.Comments++
		if rd.KeepComment != "" {
			text := bytes.TrimPrefix(line[1:], []byte(" "))
			if bytes.HasPrefix(text, []byte(rd.KeepComment)) {
				rd.Kept = append(rd.Kept[:0], text[len(rd.KeepComment):]...)
			}
		}
		return nil
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		if rd.hasData {
			rd.data = append(rd.data, '\n')
		}
		if len(rd.data)+len(value) > rd.maxLine {
			return fmt.Errorf("%w: event data over %d bytes", ErrLineTooLong, rd.maxLine)
		}
		rd.data = append(rd.data, value...)
		rd.hasData = true
	case "event":
		rd.name = append(rd.name[:0], value...)
	case "id":
		rd.id = append(rd.id[:0], value...)
	}
	return nil
}

// line returns the next complete line from the buffer without its
// terminator, and where it starts in buf; ok is false when no complete
// line is buffered.
func (rd *Reader) line() (line []byte, at int, ok bool) {
	if rd.skipLF && rd.off < len(rd.buf) {
		if rd.buf[rd.off] == '\n' {
			rd.off++
		}
		rd.skipLF = false
	}
	at = rd.off
	rest := rd.buf[rd.off:]
	// The first CR or LF: two vectorised scans beat one byte loop.
	i := bytes.IndexByte(rest, '\n')
	j := i
	if j < 0 {
		j = len(rest)
	}
	if k := bytes.IndexByte(rest[:j], '\r'); k >= 0 {
		i = k
	}
	if i < 0 {
		return nil, at, false
	}
	line = rest[:i]
	rd.off += i + 1
	if rest[i] == '\r' {
		if i+1 < len(rest) {
			if rest[i+1] == '\n' {
				rd.off++
			}
		} else {
			rd.skipLF = true
		}
	}
	return line, at, true
}

// Ready reports whether the buffer already holds the end of the next
// block (a blank line after a non-blank one), so that Next will return
// it without reading: exactly in block mode; otherwise the block may be
// one without data, which Next skips. A relay uses it to write events
// that arrived together with one flush.
func (rd *Reader) Ready() bool {
	b := rd.buf[rd.off:]
	if rd.lines {
		return bytes.IndexByte(b, '\n') >= 0
	}
	if rd.skipLF && len(b) > 0 && b[0] == '\n' {
		b = b[1:]
	}
	// blank: every line of the block so far blank.
	blank := rd.start < 0 && !rd.hasData
	if ready, ok := readyLF(b, blank); ok { // LF endings (the usual)
		return ready
	}
	return readyScan(b, blank)
}

// readyLF is Ready's test on b line by line; ok is false when a CR comes
// before the answer (readyScan then gives it).
func readyLF(b []byte, blank bool) (ready, ok bool) {
	for {
		i := bytes.IndexByte(b, '\n')
		line := b
		if i >= 0 {
			line = b[:i]
		}
		if bytes.IndexByte(line, '\r') >= 0 {
			return false, false
		}
		if i < 0 {
			return false, true
		}
		if i == 0 && !blank {
			return true, true
		}
		blank = blank && i == 0
		b = b[i+1:]
	}
}

// readyScan is Ready's test on b byte by byte, any line endings.
func readyScan(b []byte, blank bool) bool {
	lineStart := true // at the start of a line
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '\r', '\n':
			if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
				i++
			}
			if lineStart && !blank {
				return true
			}
			lineStart = true
		default:
			lineStart, blank = false, false
		}
	}
	return false
}

// fill reads more input, first moving unread bytes (in block mode, the
// open block's) to the front, and stamps the arrival instant.
func (rd *Reader) fill() error {
	keep := rd.off
	if rd.blocks && rd.start >= 0 {
		keep = rd.start
	}
	if keep > 0 {
		n := copy(rd.buf[:cap(rd.buf)], rd.buf[keep:])
		rd.buf = rd.buf[:n]
		rd.off -= keep
		if rd.start >= 0 {
			rd.start -= keep
		}
	}
	if len(rd.buf) == cap(rd.buf) {
		if len(rd.buf) >= rd.maxLine {
			if rd.blocks {
				return fmt.Errorf("%w: event over %d bytes", ErrLineTooLong, rd.maxLine)
			}
			return fmt.Errorf("%w: over %d bytes without a line end", ErrLineTooLong, rd.maxLine)
		}
		nb := make([]byte, len(rd.buf), min(2*cap(rd.buf), rd.maxLine+1))
		copy(nb, rd.buf)
		rd.buf = nb
	}
	n, err := rd.r.Read(rd.buf[len(rd.buf):cap(rd.buf)])
	if n > 0 {
		if rd.now != nil {
			rd.readAt = rd.now()
		}
		rd.buf = rd.buf[:len(rd.buf)+n]
	}
	if err == io.EOF {
		rd.eof = true
		return nil
	}
	return err
}
