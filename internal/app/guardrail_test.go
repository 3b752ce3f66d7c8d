package app

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestFilterMasksBlockedWords(t *testing.T) {
	f := newFilter([]string{"Password", " secret "})
	in := "my password: is SECRET, mail bob@example.com or key sk-abcdefghijklmnop1234 — fine sk-short a@b x."
	want := "my [filtered] is [filtered] mail [filtered] or key [filtered] — fine sk-short a@b x."
	if got := string(f.apply(nil, []byte(in))); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// Checking piece by piece releases exactly what checking the whole answer
// gives, however the answer is cut.
func TestStreamFilterEqualsBlocking(t *testing.T) {
	f := newFilter([]string{"password"})
	text := "the password is sk-0123456789abcdefXYZ and\nthe mail is ann@corp.io, fine.  Words  with\tspaces password"
	want := string(f.apply(nil, []byte(text)))
	r := rand.New(rand.NewPCG(1, 1))
	for trial := range 200 {
		s := streamFilter{f: f}
		var got []byte
		rest := text
		for len(rest) > 0 {
			n := min(len(rest), 1+r.IntN(7))
			got = s.push(got, []byte(rest[:n]))
			rest = rest[n:]
		}
		got = s.flush(got)
		if string(got) != want {
			t.Fatalf("trial %d: got %q, want %q", trial, got, want)
		}
	}
	// Nothing of a word is released before the word ends.
	s := streamFilter{f: f}
	if out := s.push(nil, []byte("pass")); len(out) != 0 {
		t.Errorf("released %q of an unfinished word", out)
	}
	if out := s.push(nil, []byte("word ok")); string(out) != "[filtered] " {
		t.Errorf("released %q", out)
	}
	long := strings.Repeat("x", maxHold+1)
	if out := s.push(nil, []byte(long)); len(out) == 0 {
		t.Error("a run longer than maxHold is held for ever")
	}
}
