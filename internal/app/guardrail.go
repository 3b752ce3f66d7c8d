package app

import (
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Guardrail modes.
const (
	// GuardrailOff passes the answer through unchecked.
	GuardrailOff = "off"
	// GuardrailBlocking buffers the whole answer, checks it, then
	// releases it: the user's first token waits for the whole decode.
	GuardrailBlocking = "blocking"
	// GuardrailStreaming checks the answer as it arrives and releases
	// each complete word once it has passed, holding back only the word
	// still being written.
	GuardrailStreaming = "streaming"
)

// Masked replaces a word the output filter blocks.
const Masked = "[filtered]"

// maxHold bounds the text a streaming filter holds back while waiting for
// a word to end; a longer run without white space is checked as it is.
const maxHold = 256

// filter is the output guardrail's rule: a word (a run of non-space
// characters, surrounding punctuation aside) is blocked when it is on the
// blocklist (case-insensitive) or has the shape of a secret or of personal
// data: an API key ("sk-" and at least 16 more characters) or an e-mail
// address.
type filter struct {
	blocked map[string]bool
}

func newFilter(words []string) *filter {
	f := &filter{blocked: map[string]bool{}}
	for _, w := range words {
		if w = strings.ToLower(strings.TrimSpace(w)); w != "" {
			f.blocked[w] = true
		}
	}
	return f
}

// blocks reports whether the word is blocked.
func (f *filter) blocks(w []byte) bool {
	core := bytes.TrimFunc(w, func(r rune) bool { return unicode.IsPunct(r) && r != '@' && r != '-' && r != '_' })
	if len(core) == 0 {
		return false
	}
	if len(f.blocked) > 0 && f.blocked[strings.ToLower(string(core))] {
		return true
	}
	if bytes.HasPrefix(core, []byte("sk-")) && len(core) >= 19 {
		return true
	}
	if at := bytes.IndexByte(core, '@'); at > 0 && bytes.IndexByte(core[at:], '.') > 1 {
		return true
	}
	return false
}

// apply appends text to dst with every blocked word masked; white space is
// kept as it is.
func (f *filter) apply(dst, text []byte) []byte {
	for len(text) > 0 {
		i := bytes.IndexFunc(text, unicode.IsSpace)
		if i == 0 {
			_, n := firstRune(text)
			dst = append(dst, text[:n]...)
			text = text[n:]
			continue
		}
		if i < 0 {
			i = len(text)
		}
		if f.blocks(text[:i]) {
			dst = append(dst, Masked...)
		} else {
			dst = append(dst, text[:i]...)
		}
		text = text[i:]
	}
	return dst
}

func firstRune(b []byte) (rune, int) { return utf8.DecodeRune(b) }

// streamFilter checks an answer piece by piece: what push releases,
// followed by what flush releases, is exactly what apply gives for the
// whole answer (while no word is longer than maxHold).
type streamFilter struct {
	f       *filter
	pending []byte
}

// push adds text and appends to dst what can be released: everything up
// to the last white space, checked.
func (s *streamFilter) push(dst, text []byte) []byte {
	s.pending = append(s.pending, text...)
	cut := bytes.LastIndexFunc(s.pending, unicode.IsSpace)
	if cut < 0 {
		if len(s.pending) <= maxHold {
			return dst
		}
		cut = len(s.pending) - 1
	}
	_, n := firstRune(s.pending[cut:])
	dst = s.f.apply(dst, s.pending[:cut+n])
	s.pending = append(s.pending[:0], s.pending[cut+n:]...)
	return dst
}

// flush appends the rest, checked.
func (s *streamFilter) flush(dst []byte) []byte {
	dst = s.f.apply(dst, s.pending)
	s.pending = s.pending[:0]
	return dst
}
