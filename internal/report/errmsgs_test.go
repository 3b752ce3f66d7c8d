package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// Failed requests' messages are counted by what they say, digits aside,
// and shown most frequent first in every form of the report.
func TestTopErrorsCountedAndShown(t *testing.T) {
	c := NewCollector(Options{})
	add := func(kind, msg string, n int) {
		for i := range n {
			c.Add(&latency.Record{ID: fmt.Sprint(kind, i), IntendedNS: 1, SentNS: 2, ErrorKind: latency.ErrorKind(kind), Error: msg})
		}
	}
	add(string(latency.FailHTTP4xx), "400 Bad Request: prompt has 5012 tokens, max 4096", 1)
	add(string(latency.FailHTTP4xx), "400 Bad Request: prompt has 7001 tokens, max 4096", 2) // the same message, other numbers
	add(string(latency.FailServer), "error in stream: engine died", 4)
	add(string(latency.FailTimeout), "", 1)
	c.Add(&latency.Record{ID: "ok", IntendedNS: 1e6, SentNS: 1e6, WroteNS: 2e6, FirstTokenNS: 50e6, EndNS: 100e6, InputTokens: 20, OutputTokens: 10})
	rep := c.Report()
	want := []ErrorMessage{
		{string(latency.FailServer), "error in stream: engine died", 4},
		{string(latency.FailHTTP4xx), "400 Bad Request: prompt has 5012 tokens, max 4096", 3},
		{string(latency.FailTimeout), "(no message)", 1},
	}
	if got := rep.Summary.TopErrors; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("TopErrors %v, want %v", got, want)
	}
	var text, html, md bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": text.String(), "html": html.String(), "markdown": md.String()} {
		if !strings.Contains(out, "engine died") || !strings.Contains(out, "prompt has 5012 tokens") {
			t.Errorf("%s form does not quote the reasons:\n%s", name, out)
		}
	}
	if !strings.Contains(text.String(), "4× "+string(latency.FailServer)+": error in stream: engine died\n  3× "+string(latency.FailHTTP4xx)+":") {
		t.Errorf("text form not most frequent first:\n%s", text.String())
	}
	if f := findRule(rep.Findings, "errors"); f == nil || !strings.Contains(f.Evidence, `Most frequent: "error in stream: engine died" (4 of them)`) {
		t.Errorf("the finding does not quote the most frequent reason: %+v", f)
	}
}

// The distinct messages kept are bounded; the rest are counted together.
func TestTopErrorsBounded(t *testing.T) {
	var tally errTally
	for i := range maxErrMsgs + 50 {
		tally.add(string(latency.FailServer), strings.Repeat("x", i+1), 1)
	}
	if len(tally.msgs) != maxErrMsgs+1 {
		t.Fatalf("%d messages kept, want %d", len(tally.msgs), maxErrMsgs+1)
	}
	if top := tally.top(1); top[0].Message != otherMessages || top[0].Count != 50 {
		t.Errorf("top %v, want the 50 past the bound counted as %q", top, otherMessages)
	}
	long := strings.Repeat("é", 400)
	tally.reset()
	tally.add(string(latency.FailServer), long, 1)
	if m := tally.msgs[0].Message; len(m) > maxErrMsgLen || !strings.HasSuffix(m, "…") {
		t.Errorf("a long message kept as %d bytes", len(m))
	}
}

func findRule(fs []Finding, rule string) *Finding {
	for i := range fs {
		if fs[i].Rule == rule {
			return &fs[i]
		}
	}
	return nil
}
