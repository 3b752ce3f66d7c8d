package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxRun is the longest run of letters or digits that is one token.
const MaxRun = 6

// VocabSize bounds token ids.
const VocabSize = 1 << 17

// Message is one chat message, for EncodeChat and CountChat.
type Message struct {
	Role    string
	Content string
}

func isWord(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// scan calls emit with the byte range of each token of s in order.
func scan(s string, emit func(start, end int)) {
	i := 0
	for i < len(s) {
		r, n := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRuneInString(s[i:])
		}
		switch {
		case r == ' ' || r == '\n' || r == '\t' || r == '\r' || (r >= utf8.RuneSelf && unicode.IsSpace(r)):
			i += n
		case isWord(r):
			start := i
			i += n
			for i < len(s) && i-start < MaxRun {
				r, n = rune(s[i]), 1
				if r >= utf8.RuneSelf {
					r, n = utf8.DecodeRuneInString(s[i:])
				}
				if !isWord(r) || i+n-start > MaxRun {
					break
				}
				i += n
			}
			emit(start, i)
		default:
			emit(i, i+n)
			i += n
		}
	}
}

// Count returns the number of tokens in s. It does not allocate.
func Count(s string) int {
	n := 0
	scan(s, func(int, int) { n++ })
	return n
}

// Encode appends the token ids of s to dst.
func Encode(dst []int32, s string) []int32 {
	scan(s, func(start, end int) { dst = append(dst, id(s[start:end])) })
	return dst
}

// CountChat returns the prompt length of a chat: per message, one role token
// plus its content's tokens.
func CountChat(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += 1 + Count(m.Content)
	}
	return n
}

// EncodeChat appends the token ids of a chat prompt to dst.
func EncodeChat(dst []int32, msgs []Message) []int32 {
	for _, m := range msgs {
		dst = append(dst, id("<|"+m.Role+"|>"))
		dst = Encode(dst, m.Content)
	}
	return dst
}

func id(tok string) int32 {
	h := uint32(2166136261)
	for i := 0; i < len(tok); i++ {
		h ^= uint32(tok[i])
		h *= 16777619
	}
	return int32(h % VocabSize)
}

// words is the filler vocabulary: short lower-case words, each one token.
var words = strings.Fields(`the of and to in is for on that with as at by from
it an be this are or was not but have all can more one new time data model token
cache batch queue step load rate user fast slow long short first last next each
time word text line code test run node path mode page view list file type size
value state block layer head gate unit core sum set map key`)

// FillerWords returns Filler's vocabulary, a copy: a model whose
// vocabulary holds each as one token (internal/gguf's Llama) counts
// Filler's text as this package does.
func FillerWords() []string {
	out := make([]string, len(words))
	copy(out, words)
	return out
}

// Filler returns text of exactly n tokens (n ≥ 0), one word per token,
// chosen deterministically from seed: the same n and seed give the same
// text, and different seeds give different texts. Two seeds pick the same
// word with a chance of about 1 in 75, so texts of distinct seeds may share
// a chance prefix of a word or two (k words with a chance of about 75^-k;
// 10 of seeds 0..199 share their first two words with another seed).
func Filler(n int, seed uint64) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(n * 5)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i < n; i++ {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[(x*0x2545F4914F6CDD1D)>>32%uint64(len(words))])
	}
	return b.String()
}
