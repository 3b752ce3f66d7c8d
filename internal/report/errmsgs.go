package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrorMessage is one distinct reason requests failed, as the records
// give it (Record.Error), with how many failed with it. Messages that
// differ only in their digits (a request ID, a token count) count as one;
// Message is the first seen.
type ErrorMessage struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Count   int    `json:"count"`
}

const (
	// maxErrMsgs bounds the distinct messages kept; the rest are counted
	// under otherMessages.
	maxErrMsgs = 100
	// maxErrMsgLen clips each message kept (bytes).
	maxErrMsgLen = 240
	// topErrors is how many Summary.TopErrors lists.
	topErrors     = 5
	otherMessages = "(other messages)"
)

// errTally counts failed requests by their distinct message.
type errTally struct {
	index map[string]int // errKey → position in msgs
	msgs  []ErrorMessage
}

// errKey is what makes two failures alike: their kind and their message
// with every run of digits as one '#'.
func errKey(kind, msg string) string {
	var b strings.Builder
	b.WriteString(kind)
	b.WriteByte(0)
	digits := false
	for _, r := range msg {
		if unicode.IsDigit(r) {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}

// add counts n failures of kind with message msg.
func (t *errTally) add(kind, msg string, n int) {
	msg = clipBytes(strings.TrimSpace(msg), maxErrMsgLen)
	if msg == "" {
		msg = "(no message)"
	}
	k := errKey(kind, msg)
	if t.index == nil {
		t.index = map[string]int{}
	}
	i, ok := t.index[k]
	if !ok {
		if len(t.msgs) >= maxErrMsgs && msg != otherMessages {
			t.add(kind, otherMessages, n)
			return
		}
		i = len(t.msgs)
		t.index[k] = i
		t.msgs = append(t.msgs, ErrorMessage{Kind: kind, Message: msg})
	}
	t.msgs[i].Count += n
}

// merge adds o's counts to t's, o's first-seen messages after t's.
func (t *errTally) merge(o *errTally) {
	for _, m := range o.msgs {
		t.add(m.Kind, m.Message, m.Count)
	}
}

func (t *errTally) reset() {
	clear(t.index)
	t.msgs = t.msgs[:0]
}

// top returns the n most frequent messages, most frequent first (ties in
// the order first seen).
func (t *errTally) top(n int) []ErrorMessage {
	if len(t.msgs) == 0 {
		return nil
	}
	out := slices.Clone(t.msgs)
	slices.SortStableFunc(out, func(a, b ErrorMessage) int { return cmp.Compare(b.Count, a.Count) })
	return out[:min(n, len(out))]
}

// clipBytes cuts s to at most n bytes on a rune boundary, marking the cut.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// errorLines words the top error messages, one a line: "5× http_4xx: …".
func errorLines(ms []ErrorMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = fmt.Sprintf("%d× %s: %s", m.Count, m.Kind, m.Message)
	}
	return out
}
