package tokenizer

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCount(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"   \n\t", 0},
		{"hello", 1},
		{"hello world", 2},
		{"Hello, world!", 4}, // Hello , world !
		{"tokenization", 2},  // tokeni zation
		{"abcdefghijklm", 3}, // abcdef ghijkl m
		{"x=1+2", 5},         // x = 1 + 2
		{"naïve café", 2},    // naïve is 6 bytes: one token; café one more
		{"日本語のテキスト", 4},      // 8 letters of 3 bytes: 2 per token
		{"a\u00a0b", 2},      // no-break space separates
		{"emoji 🙂 ok", 3},    // the emoji is one symbol token
		{"line1\r\nline2", 2},
	}
	for _, tt := range tests {
		if got := Count(tt.in); got != tt.want {
			t.Errorf("Count(%q) = %d, want %d", tt.in, got, tt.want)
		}
		if got := len(Encode(nil, tt.in)); got != tt.want {
			t.Errorf("len(Encode(%q)) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestFillerExactLength(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 100, 4096} {
		for seed := uint64(0); seed < 3; seed++ {
			if got := Count(Filler(n, seed)); got != n {
				t.Errorf("Count(Filler(%d, %d)) = %d", n, seed, got)
			}
		}
	}
	if a, b := Filler(50, 1), Filler(50, 1); a != b {
		t.Error("Filler is not deterministic")
	}
	if Filler(50, 1) == Filler(50, 2) {
		t.Error("different seeds gave the same filler")
	}
}

func TestChat(t *testing.T) {
	msgs := []Message{{"system", "You are terse."}, {"user", "Hi!"}}
	// system: 1 + (You are terse .) = 5; user: 1 + (Hi !) = 3
	if got := CountChat(msgs); got != 8 {
		t.Errorf("CountChat = %d, want 8", got)
	}
	ids := EncodeChat(nil, msgs)
	if len(ids) != 8 {
		t.Fatalf("EncodeChat gave %d ids", len(ids))
	}
	again := EncodeChat(nil, []Message{{"system", "You are terse."}, {"user", "Bye!"}})
	if diff := cmp.Diff(ids[:5], again[:5]); diff != "" {
		t.Errorf("shared system prompt should give a shared prefix (-a +b):\n%s", diff)
	}
}

func TestCountDoesNotAllocate(t *testing.T) {
	s := Filler(1000, 3)
	if a := testing.AllocsPerRun(10, func() { Count(s) }); a != 0 {
		t.Errorf("Count allocates %v times", a)
	}
}

func FuzzCount(f *testing.F) {
	for _, s := range []string{"hello world", "naïve", "日本語", "a\xffb", "x=1+2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Count(s)
		if n != len(Encode(nil, s)) {
			t.Fatalf("Count and Encode disagree on %q", s)
		}
		if n > len(s) {
			t.Fatalf("%d tokens from %d bytes", n, len(s))
		}
	})
}

func BenchmarkCount(b *testing.B) {
	s := Filler(2048, 1)
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		Count(s)
	}
}

// TestFillerChancePrefix checks the bound docs/tokenizer.md gives: distinct
// seeds share at most a chance prefix of a word or two, so among seeds
// 0..199 no two texts agree on their first four words.
func TestFillerChancePrefix(t *testing.T) {
	seen := map[string]uint64{}
	for seed := uint64(0); seed < 200; seed++ {
		w := strings.Fields(Filler(4, seed))
		key := strings.Join(w, " ")
		if other, ok := seen[key]; ok {
			t.Errorf("seeds %d and %d share the 4-word prefix %q", other, seed, key)
		}
		seen[key] = seed
	}
}
