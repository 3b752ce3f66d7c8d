package serve

import (
	"strings"

	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// outputWords is the vocabulary of generated text: words that are one
// token each under internal/tokenizer, taken from its Filler.
var outputWords = strings.Fields(tokenizer.Filler(256, 0x5eed))

// textWriter produces a request's generated text: token i of the output is
// one word, preceded by a space from the second token on, so the whole
// output is exactly as many tokens as were generated.
type textWriter struct {
	next int // index of the next token
	base uint64
}

func newTextWriter(seed uint64) textWriter {
	return textWriter{base: seed * 0x9E3779B97F4A7C15}
}

// append appends the text of the next n tokens to dst.
func (t *textWriter) append(dst []byte, n int) []byte {
	for range n {
		if t.next > 0 {
			dst = append(dst, ' ')
		}
		x := t.base + uint64(t.next)*0xBF58476D1CE4E5B9
		x ^= x >> 31
		dst = append(dst, outputWords[x%uint64(len(outputWords))]...)
		t.next++
	}
	return dst
}
