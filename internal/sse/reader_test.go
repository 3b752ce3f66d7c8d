package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// chunkReader returns its chunks one per Read and advances a fake clock by
// 10 on every Read, so each event's At tells which Read delivered it.
type chunkReader struct {
	chunks []string
	clock  *int64
	err    error // returned after the last chunk instead of io.EOF
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	*c.clock += 10
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if c.chunks[0] == "" {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

type got struct {
	Name, Data string
	At         int64
}

func readAll(t testing.TB, r io.Reader, clock *int64) ([]got, error) {
	t.Helper()
	return drain(NewReader(r, func() int64 { return *clock }, 0), func(ev Event) got {
		return got{string(ev.Name), string(ev.Data), ev.At}
	})
}

// drain reads rd to its end, keeping what keep takes of each event; a
// clean end (io.EOF) is no error.
func drain[T any](rd *Reader, keep func(Event) T) ([]T, error) {
	var out []T
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, keep(ev))
	}
}

func TestReaderFraming(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   []got
	}{
		{"one per read", []string{"data: a\n\n", "data: b\n\n", "data: [DONE]\n\n"},
			[]got{{"", "a", 10}, {"", "b", 20}, {"", "[DONE]", 30}}},
		{"coalesced", []string{"data: a\n\ndata: b\n\n"},
			[]got{{"", "a", 10}, {"", "b", 10}}},
		{"split mid-line", []string{"da", "ta: {\"x\"", ":1}\n", "\n"},
			[]got{{"", `{"x":1}`, 40}}},
		{"crlf", []string{"data: a\r\n\r\ndata: b\r\n\r\n"},
			[]got{{"", "a", 10}, {"", "b", 10}}},
		{"crlf split between cr and lf", []string{"data: a\r", "\n\r", "\ndata: b\r\n\r\n"},
			[]got{{"", "a", 20}, {"", "b", 30}}},
		{"lone cr", []string{"data: a\r\rdata: b\r\r"},
			[]got{{"", "a", 10}, {"", "b", 10}}},
		{"comments skipped", []string{": keep-alive\n\n: x\ndata: a\n\n"},
			[]got{{"", "a", 10}}},
		{"multi-line data", []string{"data: a\ndata:b\ndata:  c\n\n"},
			[]got{{"", "a\nb\n c", 10}}},
		{"event name and id", []string{"event: error\nid: 7\ndata: {}\n\n"},
			[]got{{"error", "{}", 10}}},
		{"no data is no event", []string{"event: ping\n\ndata: a\n\n"},
			[]got{{"", "a", 10}}},
		{"field without colon", []string{"data\n\n"},
			[]got{{"", "", 10}}},
		{"unterminated last event", []string{"data: a\n\ndata: [DONE]"},
			[]got{{"", "a", 10}, {"", "[DONE]", 10}}},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var clock int64
			out, err := readAll(t, &chunkReader{chunks: append([]string(nil), tt.chunks...), clock: &clock}, &clock)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, out); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// The arrival instant is the Read that delivered the event's terminator,
// even when parsing happens much later.
func TestReaderStampsAtArrival(t *testing.T) {
	var clock int64
	rd := NewReader(&chunkReader{chunks: []string{"data: a\n\ndata: b\n\n", "data: c\n\n"}, clock: &clock},
		func() int64 { return clock }, 0)
	ev, _ := rd.Next()
	clock += 1000 // the consumer is slow; the next event was already buffered
	ev2, _ := rd.Next()
	if ev.At != 10 || ev2.At != 10 {
		t.Errorf("buffered events stamped %d, %d; want 10, 10", ev.At, ev2.At)
	}
	ev3, _ := rd.Next()
	if ev3.At != 1020 {
		t.Errorf("third event stamped %d, want 1020", ev3.At)
	}
}

func TestReaderErrorAfterEvents(t *testing.T) {
	var clock int64
	reset := errors.New("connection reset by peer")
	out, err := readAll(t, &chunkReader{chunks: []string{"data: a\n\ndata: b"}, clock: &clock, err: reset}, &clock)
	if !errors.Is(err, reset) {
		t.Fatalf("err = %v, want the reset", err)
	}
	if diff := cmp.Diff([]got{{"", "a", 10}}, out); diff != "" {
		t.Errorf("events before the error (-want +got):\n%s", diff)
	}
}

func TestReaderLineTooLong(t *testing.T) {
	rd := NewReader(strings.NewReader("data: "+strings.Repeat("x", 10000)+"\n\n"), func() int64 { return 0 }, 5000)
	if _, err := rd.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err = %v, want ErrLineTooLong", err)
	}
	rd = NewReader(strings.NewReader("data: "+strings.Repeat("x", 3000)+"\n\n"), func() int64 { return 0 }, 5000)
	if ev, err := rd.Next(); err != nil || len(ev.Data) != 3000 {
		t.Fatalf("long line under the limit: %d bytes, %v", len(ev.Data), err)
	}
}

// reference is a deliberately simple parser of the same rules: normalize
// line endings, split on blank lines.
func reference(in string) []string {
	in = strings.ReplaceAll(in, "\r\n", "\n")
	in = strings.ReplaceAll(in, "\r", "\n")
	var out []string
	var data []string
	has := false
	for _, line := range strings.Split(in, "\n") {
		if line == "" {
			if has {
				out = append(out, strings.Join(data, "\n"))
			}
			data, has = nil, false
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		if name == "data" {
			data = append(data, value)
			has = true
		}
	}
	if has {
		out = append(out, strings.Join(data, "\n"))
	}
	return out
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\r\n\r\n: c\ndata: d\rdata: e\r\r"), uint8(3))
	f.Add([]byte("event: x\nid: 1\ndata\ndata:\n\n"), uint8(1))
	f.Add([]byte("data: [DONE]"), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		s := int(step%16) + 1
		var chunks []string
		for i := 0; i < len(in); i += s {
			chunks = append(chunks, string(in[i:min(i+s, len(in))]))
		}
		var clock int64
		out, err := readAll(t, &chunkReader{chunks: chunks, clock: &clock}, &clock)
		if err != nil {
			t.Fatal(err)
		}
		var data []string
		last := int64(0)
		for _, e := range out {
			data = append(data, e.Data)
			if e.At < last || e.At > clock {
				t.Fatalf("instant %d out of order (last %d, clock %d)", e.At, last, clock)
			}
			last = e.At
		}
		if diff := cmp.Diff(reference(string(in)), data); diff != "" {
			t.Fatalf("split by %d (-reference +reader):\n%s", s, diff)
		}
		// Reading it whole gives the same events.
		whole, _ := readAll(t, bytes.NewReader(in), &clock)
		if len(whole) != len(out) {
			t.Fatalf("whole: %d events, split: %d", len(whole), len(out))
		}
	})
}

func BenchmarkReader(b *testing.B) {
	benchmarkRead(b, NewReader(nil, func() int64 { return 0 }, 0))
}

// benchmarkRead reads 64 chat chunk events with rd, over and over.
func benchmarkRead(b *testing.B, rd *Reader) {
	ev := `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}` + "\n\n"
	payload := []byte(strings.Repeat(ev, 64))
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		rd.Reset(bytes.NewReader(payload), nil)
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
		}
	}
}

// A comment starting with KeepComment is kept (the last one), whatever
// the line ending; others are only counted.
func TestReaderKeepsComment(t *testing.T) {
	var clock int64
	in := ": ping\n\ndata: a\n\n: server-timing decode;dur=1\r\n:server-timing total;dur=2\ndata: [DONE]\n\n"
	rd := NewReader(&chunkReader{chunks: []string{in}, clock: &clock}, func() int64 { return clock }, 0)
	rd.KeepComment = "server-timing "
	for {
		if _, err := rd.Next(); err != nil {
			break
		}
	}
	if string(rd.Kept) != "total;dur=2" || rd.Comments != 3 {
		t.Errorf("kept %q, %d comments", rd.Kept, rd.Comments)
	}
	rd.Reset(strings.NewReader("data: x\n\n"), nil)
	if len(rd.Kept) != 0 || rd.KeepComment == "" {
		t.Errorf("after Reset: kept %q, prefix %q", rd.Kept, rd.KeepComment)
	}
}

type block struct {
	Raw, Data string
	HasData   bool
}

func readBlocks(r io.Reader) ([]block, error) {
	rd := NewReader(r, nil, 0)
	rd.Blocks()
	return drain(rd, func(ev Event) block { return block{string(ev.Raw), string(ev.Data), ev.HasData} })
}

// Block mode returns every block a blank line ends, with its bytes as
// sent, for a relay.
func TestReaderBlocks(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   []block
		err    error
	}{
		{"lf", []string{"data: a\n\ndata: [DONE]\n\n"},
			[]block{{"data: a\n\n", "a", true}, {"data: [DONE]\n\n", "[DONE]", true}}, nil},
		{"keep-alive comments are blocks", []string{": ping\n\ndata: a\n: x\n\n"},
			[]block{{": ping\n\n", "", false}, {"data: a\n: x\n\n", "a", true}}, nil},
		{"stray blank lines are no block", []string{"\n\r\n\rdata: a\n\n\n"},
			[]block{{"data: a\n\n", "a", true}}, nil},
		{"crlf", []string{"data: a\r\ndata: b\r\n\r\n"},
			[]block{{"data: a\r\ndata: b\r\n\r\n", "a\nb", true}}, nil},
		{"lone cr", []string{"data: a\r\rdata: b\r\r"},
			[]block{{"data: a\r\r", "a", true}, {"data: b\r\r", "b", true}}, nil},
		{"crlf split inside a block", []string{"data: a\r", "\ndata: b\r\n\r\n"},
			[]block{{"data: a\r\ndata: b\r\n\r\n", "a\nb", true}}, nil},
		// The block is dispatched at the CR of its blank line; the LF
		// after it, read later, is in no block.
		{"crlf split at the block's end", []string{"data: a\r\n\r", "\ndata: b\n\n"},
			[]block{{"data: a\r\n\r", "a", true}, {"data: b\n\n", "b", true}}, nil},
		{"block over many reads", []string{"da", "ta: {\"x\"", ":1}\n", ": c\n", "\n"},
			[]block{{"data: {\"x\":1}\n: c\n\n", `{"x":1}`, true}}, nil},
		{"empty data", []string{"data:\n\n"}, []block{{"data:\n\n", "", true}}, nil},
		{"other fields only", []string{"event: ping\nid: 3\n\n"}, []block{{"event: ping\nid: 3\n\n", "", false}}, nil},
		{"unterminated last block", []string{"data: a\n\ndata: [DONE]\n"},
			[]block{{"data: a\n\n", "a", true}}, io.ErrUnexpectedEOF},
		{"unterminated last line", []string{"data: a\n\ndata"}, []block{{"data: a\n\n", "a", true}}, io.ErrUnexpectedEOF},
		{"empty", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var clock int64
			out, err := readBlocks(&chunkReader{chunks: append([]string(nil), tt.chunks...), clock: &clock})
			if !errors.Is(err, tt.err) || (err != nil) != (tt.err != nil) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if diff := cmp.Diff(tt.want, out); diff != "" {
				t.Errorf("blocks (-want +got):\n%s", diff)
			}
		})
	}
	rd := NewReader(strings.NewReader(": "+strings.Repeat("x", 3000)+"\ndata: "+strings.Repeat("y", 3000)+"\n\n"), nil, 5000)
	rd.Blocks()
	if _, err := rd.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("a block over the limit of lines under it: %v, want ErrLineTooLong", err)
	}
}

func TestReaderReady(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []bool // after each Next
	}{
		{"data: a\n\ndata: b\n\n", []bool{true, false}},
		{"data: a\n\ndata: b\n", []bool{false}},
		{"data: a\r\rdata: b\r\r", []bool{true, false}},
		{"data: a\r\n\r\ndata: b\r\n\r\n", []bool{true, false}},
		{"data: a\n\n\n\n", []bool{false}},
		{"data: a\n\n: ping\n\n", []bool{true, false}},
	} {
		rd := NewReader(strings.NewReader(tt.in), nil, 0)
		rd.Blocks()
		var got []bool
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
			got = append(got, rd.Ready())
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tt.in, diff)
		}
	}
	// A CRLF split at the block's end: the LF of the previous line is no
	// blank line.
	rd := NewReader(&chunkReader{chunks: []string{"data: a\r\n\r", "\ndata: b\r\n\r\n"}, clock: new(int64)}, nil, 0)
	rd.Blocks()
	if _, err := rd.Next(); err != nil || rd.Ready() {
		t.Errorf("after the first block: %v, ready %v (nothing more is buffered)", err, rd.Ready())
	}
}

// FuzzReaderBlocks checks block mode against the event mode on any input
// read in any pieces: the blocks with data are the events (the last one
// only when terminated), each block's bytes appear in the input in order,
// and read alone each gives back its one event.
func FuzzReaderBlocks(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\r\n\r\n: c\n\ndata: d\rdata: e\r\r"), uint8(3))
	f.Add([]byte("event: x\nid: 1\ndata\ndata:\n\n\r\n"), uint8(1))
	f.Add([]byte("data: [DONE]"), uint8(7))
	f.Add([]byte("data: a\r\n\r\ndata: b\r\n\r\n"), uint8(9))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		s := int(step%16) + 1
		var chunks []string
		for i := 0; i < len(in); i += s {
			chunks = append(chunks, string(in[i:min(i+s, len(in))]))
		}
		blocks, err := readBlocks(&chunkReader{chunks: chunks, clock: new(int64)})
		if err != nil && err != io.ErrUnexpectedEOF {
			t.Fatal(err)
		}
		var clock int64
		events, _ := readAll(t, bytes.NewReader(in), &clock)
		var data []string
		pos := 0
		for _, b := range blocks {
			if b.HasData {
				data = append(data, b.Data)
			}
			i := bytes.Index(in[pos:], []byte(b.Raw))
			if i < 0 {
				t.Fatalf("block %q is not in the input after offset %d: %q", b.Raw, pos, in)
			}
			pos += i + len(b.Raw)
			alone, err := readBlocks(strings.NewReader(b.Raw))
			if err != nil || len(alone) != 1 || alone[0] != b {
				t.Fatalf("block %q read alone: %+v, %v", b.Raw, alone, err)
			}
		}
		want := make([]string, 0, len(events))
		for _, e := range events {
			want = append(want, e.Data)
		}
		if err == io.ErrUnexpectedEOF && len(want) == len(data)+1 {
			want = want[:len(data)] // the event mode dispatches an unterminated last event
		}
		if diff := cmp.Diff(want, data, cmpEmpty); diff != "" {
			t.Fatalf("blocks' data vs events (-events +blocks):\n%s\ninput %q", diff, in)
		}
	})
}

var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })

func BenchmarkReaderBlocks(b *testing.B) {
	rd := NewReader(nil, nil, 0)
	rd.Blocks()
	benchmarkRead(b, rd)
}

// TestReaderInitBuffer: a Reader on a buffer of the caller's reads as one
// on its own, growing past the buffer for longer blocks, and starts in
// the buffer's storage.
func TestReaderInitBuffer(t *testing.T) {
	in := "data: a\n\ndata: " + strings.Repeat("y", 40) + "\n\ndata: [DONE]\n\n"
	tests := []struct {
		name string
		buf  []byte
	}{
		{"nil: its own", nil},
		{"smaller than a block", make([]byte, 0, 8)},
		{"larger", make([]byte, 3, 4096)},
	}
	data := func(ev Event) string { return string(ev.Data) }
	want, err := drain(NewReader(strings.NewReader(in), nil, 0), data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rd Reader
			rd.InitBuffer(strings.NewReader(in), nil, 0, tt.buf)
			rd.Blocks()
			got, err := drain(&rd, data)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
	buf := make([]byte, 0, 64)
	var rd Reader
	rd.InitBuffer(strings.NewReader("data: a\n\n"), nil, 0, buf)
	rd.Blocks()
	ev, err := rd.Next()
	if err != nil || &ev.Raw[0] != &buf[:1][0] {
		t.Errorf("the first event is not in the caller's buffer (err %v)", err)
	}
}

// FuzzReady: wherever Ready's line-by-line test answers, it agrees with
// its byte-by-byte one.
func FuzzReady(f *testing.F) {
	f.Add([]byte("data: x\n\n"), false)
	f.Add([]byte("\n\ndata: x\n"), true)
	f.Add([]byte(": c\n\ndata: x\r\n\r\n"), true)
	f.Fuzz(func(t *testing.T, b []byte, blank bool) {
		if lf, ok := readyLF(b, blank); ok && lf != readyScan(b, blank) {
			t.Fatalf("readyLF(%q, %v) = %v, readyScan %v", b, blank, lf, !lf)
		}
	})
}

// BenchmarkReady is Ready's test on a buffered chat chunk (≈ 250 bytes,
// LF endings, the next event behind it): line by line (what Ready runs)
// and byte by byte (what it ran before, and still runs on CR endings).
func BenchmarkReady(b *testing.B) {
	ev := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":512,"completion_tokens":7,"total_tokens":519}}` + "\n\n")
	buf := append(append([]byte{}, ev...), ev...)
	for _, c := range []struct {
		name  string
		ready func([]byte, bool) bool
	}{{"lines", func(b []byte, blank bool) bool { r, _ := readyLF(b, blank); return r }}, {"bytes", readyScan}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev)))
			for b.Loop() {
				if !c.ready(buf, true) {
					b.Fatal("not ready")
				}
			}
		})
	}
}
