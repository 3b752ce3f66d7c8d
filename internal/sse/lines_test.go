package sse

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestLinesMode reads newline-delimited JSON (Ollama's native stream):
// every non-empty line an event with its raw bytes, LF and CRLF line
// ends, one byte at a time as well as whole, a last line without a line
// end.
func TestLinesMode(t *testing.T) {
	in := "{\"a\":1}\n\n{\"b\":2}\r\n{\"c\":3}"
	for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
		rd := NewReader(r, nil, 0)
		rd.Lines()
		var data, raw []string
		for {
			ev, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, raw = append(data, string(ev.Data)), append(raw, string(ev.Raw))
		}
		if got := strings.Join(data, "|"); got != `{"a":1}|{"b":2}|{"c":3}` {
			t.Errorf("data %s", got)
		}
		if got := strings.Join(raw, ""); !strings.HasPrefix(got, "{\"a\":1}\n{\"b\":2}\r") || !strings.HasSuffix(got, "{\"c\":3}") {
			t.Errorf("raw %q", got)
		}
	}
}

// TestNamedEventsAndLines writes a named event and an NDJSON line.
func TestNamedEventsAndLines(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	if err := w.EndData(append(w.BeginEvent("message_stop"), `{"type":"message_stop"}`...)); err != nil {
		t.Fatal(err)
	}
	if err := w.EndLine(append(w.BeginLine(), `{"done":true}`...)); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n{\"done\":true}\n" {
		t.Errorf("wrote %q", got)
	}
}
