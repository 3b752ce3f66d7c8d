package bench

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStreamLineEnds: the same stream with each line end SSE allows (LF,
// CRLF, a lone CR) gives the same record: every content chunk timed,
// tokens and finish reason as sent. The CRLF case splits one CR from its
// LF across two writes, and the lone-CR case ends the body without a
// final line end after [DONE]'s blank line.
func TestStreamLineEnds(t *testing.T) {
	lf := []string{
		`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"lo"}}]}` + "\n",
		"\n" + `data: {"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]}` + "\n\n",
		`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}` + "\n\n",
		"data: [DONE]\n\n",
	}
	type got struct {
		Chunks, Other, Output, Input int
		Finish                       string
	}
	want := got{Chunks: 3, Other: 1, Output: 3, Input: 5, Finish: "stop"}
	for _, c := range []struct{ name, end string }{{"LF", "\n"}, {"CRLF", "\r\n"}, {"CR", "\r"}} {
		t.Run(c.name, func(t *testing.T) {
			parts := make([]string, len(lf))
			for i, p := range lf {
				parts[i] = strings.ReplaceAll(p, "\n", c.end)
			}
			if c.name == "CRLF" { // a CR in one read, its LF in the next
				parts[2] = strings.TrimSuffix(parts[2], "\n")
				parts[3] = "\n" + parts[3]
			}
			rec := do(t, newTestClient(t, sseServer(t, parts, "").URL, nil))
			if !rec.OK() {
				t.Fatalf("failed: %s %s", rec.ErrorKind, rec.Error)
			}
			g := got{len(rec.ChunkNS), len(rec.OtherNS), rec.OutputTokens, rec.InputTokens, rec.FinishReason}
			if diff := cmp.Diff(want, g); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
		})
	}
}
