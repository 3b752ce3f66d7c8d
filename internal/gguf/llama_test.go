package gguf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"testing"
)

var testShape = LlamaShape{Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, FFN: 128, Context: 512}

func writeLlama(t *testing.T, m Llama) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := m.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestLlamaIsDeterministic(t *testing.T) {
	m := Llama{Shape: testShape, Words: []string{"the", "then", "data"}, ChatTemplate: ZephyrTemplate, Seed: 7}
	a, b := sha256.Sum256(writeLlama(t, m)), sha256.Sum256(writeLlama(t, m))
	m.Seed = 8
	c := sha256.Sum256(writeLlama(t, m))
	if a != b || a == c {
		t.Errorf("seed 7 twice: equal %v; seeds 7 and 8: equal %v", a == b, a == c)
	}
}

func TestLlamaMetadata(t *testing.T) {
	m := Llama{Shape: testShape, Words: []string{"the", "then", "data"}, ChatTemplate: ZephyrTemplate, Seed: 1}
	raw := writeLlama(t, m)
	f, err := ReadMetadata(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := m.Vocab()
	for key, want := range map[string]uint64{"block_count": 2, "embedding_length": 64, "attention.head_count": 4,
		"attention.head_count_kv": 2, "feed_forward_length": 128, "context_length": 512, "vocab_size": uint64(len(tokens)),
		"rope.dimension_count": 16} {
		if got, ok := f.ArchUint(key); !ok || got != want {
			t.Errorf("llama.%s = %d (%v), want %d", key, got, ok, want)
		}
	}
	if tmpl, _ := f.String("tokenizer.chat_template"); tmpl != ZephyrTemplate {
		t.Errorf("chat template %q", tmpl)
	}
	// 3 special tokens, 256 bytes, ▁, 94 printable characters, then the
	// words' prefixes once each: ▁t ▁th ▁the ▁then ▁d ▁da ▁dat ▁data.
	if len(tokens) != FirstText+1+94+8 || tokens[FirstByte] != "<0x00>" || tokens[FirstText-1] != "<0xFF>" ||
		tokens[FirstText] != "\u2581" || !slices.Contains(tokens, "\u2581then") {
		t.Errorf("vocabulary of %d: %q … %q", len(tokens), tokens[:4], tokens[FirstText-1:])
	}
	// Parameters: embeddings and output (2·V·H), norms, and per layer
	// q, o (H²), k, v (H·H/2 with half the heads), the FFN (3·H·F).
	v, h := uint64(len(tokens)), uint64(64)
	if want := 2*v*h + h + 2*(2*h+2*h*h+2*h*h/2+3*h*128); f.Params() != want {
		t.Errorf("params %d, want %d", f.Params(), want)
	}
	if last := f.Tensors[len(f.Tensors)-1]; f.DataOffset+last.Offset+last.Elements()*2 > uint64(len(raw)) {
		t.Errorf("the last tensor ends beyond the file")
	}
}

// The banned tokens' output rows hold only the carrier's weight, text
// tokens' none of it: what keeps answers free of them.
func TestLlamaOutputBansControlAndByteTokens(t *testing.T) {
	m := Llama{Shape: testShape, Words: []string{"the"}, Seed: 3}
	raw := writeLlama(t, m)
	f, err := ReadMetadata(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var out TensorInfo
	for _, ti := range f.Tensors {
		if ti.Name == "output.weight" {
			out = ti
		}
	}
	h := int(out.Dims[0])
	row := func(tok int) []uint16 {
		r := make([]uint16, h)
		base := f.DataOffset + out.Offset + uint64(2*tok*h)
		for i := range r {
			r[i] = binary.LittleEndian.Uint16(raw[base+uint64(2*i):])
		}
		return r
	}
	for _, tok := range []int{UnknownToken, BOSToken, EOSToken, FirstByte, FirstText - 1} {
		r := row(tok)
		if r[0] != Float16(-banWeight) || slices.ContainsFunc(r[1:], func(x uint16) bool { return x != 0 }) {
			t.Errorf("token %d's output row is not banned: %v", tok, r[:4])
		}
	}
	r := row(FirstText + 1)
	if r[0] != 0 || !slices.ContainsFunc(r[1:], func(x uint16) bool { return x != 0 }) {
		t.Errorf("a text token's output row: %v", r[:4])
	}
}

func TestLlamaShapeRefused(t *testing.T) {
	s := testShape
	s.Heads = 3
	if err := (Llama{Shape: s}).Write(&bytes.Buffer{}); err == nil {
		t.Errorf("64 wide in 3 heads written")
	}
}
