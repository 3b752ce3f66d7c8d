package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
)

// LlamaShape is a llama-architecture model's size.
type LlamaShape struct {
	Layers, Hidden, Heads, KVHeads, FFN int
	// Context is llama.context_length, the positions the model takes.
	Context int
}

func (s LlamaShape) String() string {
	return fmt.Sprintf("L%d-H%d-NH%d-NKV%d-FF%d-C%d", s.Layers, s.Hidden, s.Heads, s.KVHeads, s.FFN, s.Context)
}

func (s LlamaShape) check() error {
	if s.Layers <= 0 || s.Hidden <= 1 || s.Heads <= 0 || s.KVHeads <= 0 || s.FFN <= 0 || s.Context <= 0 ||
		s.Hidden%s.Heads != 0 || s.Heads%s.KVHeads != 0 || (s.Hidden/s.Heads)%2 != 0 {
		return fmt.Errorf("gguf: llama shape %s: want positive sizes, hidden a multiple of heads with an even head size, heads of KV heads", s)
	}
	return nil
}

// ZephyrTemplate is a Jinja chat template in Zephyr's format: each message
// as <|role|>, a newline, its content and the end-of-sequence token; the
// answer after <|assistant|>. Ollama recognizes the format on import and
// renders chats with its own template of it.
const ZephyrTemplate = "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n" +
	"{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n" +
	"{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n' + message['content'] + eos_token }}\n{% endif %}\n" +
	"{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"

// Llama is a random-weight llama model with a SentencePiece vocabulary of
// its own (docs/engines.md, "A model of our own").
type Llama struct {
	Shape LlamaShape
	// Words are tokens of their own, each with a word-start mark (▁) and
	// reached through its prefixes, so that each word after a space or at
	// the start is one token.
	Words []string
	// ChatTemplate is tokenizer.chat_template ("" for none).
	ChatTemplate string
	// Seed makes the weights: the same seed, the same file.
	Seed uint64
}

// Token ids every Llama vocabulary starts with: <unk>, <s>, </s>, then the
// 256 byte tokens <0x00> … <0xFF>.
const (
	UnknownToken = 0
	BOSToken     = 1
	EOSToken     = 2
	FirstByte    = 3
	// FirstText is the first token of text: the word-start mark, the
	// printable ASCII characters, then the words and their prefixes.
	FirstText = FirstByte + 256
)

// Token types, as llama.cpp numbers them.
const (
	tokenNormal  int32 = 1
	tokenUnknown int32 = 2
	tokenControl int32 = 3
	tokenByte    int32 = 6
)

// wordStart is SentencePiece's mark for a space before a word.
const wordStart = "\u2581"

// Vocab is the model's tokens with their types.
func (m Llama) Vocab() ([]string, []int32) {
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{tokenUnknown, tokenControl, tokenControl}
	for b := range 256 {
		tokens, types = append(tokens, fmt.Sprintf("<0x%02X>", b)), append(types, tokenByte)
	}
	seen := map[string]bool{}
	add := func(t string) {
		if !seen[t] {
			seen[t] = true
			tokens, types = append(tokens, t), append(types, tokenNormal)
		}
	}
	add(wordStart)
	for c := byte('!'); c <= '~'; c++ {
		add(string(c))
	}
	for _, w := range m.Words {
		for k := 1; k <= len(w); k++ {
			add(wordStart + w[:k])
		}
	}
	return tokens, types
}

// Write writes the model as GGUF: F16 matrices, F32 norms.
//
// The weights are random but for one dimension of the hidden state: every
// token's embedding holds a constant there and no layer writes to it, so
// the last norm's output is positive in it, and the output rows of the
// tokens no answer should hold (unknown, start, end, bytes) are a large
// negative weight there and zero elsewhere. Their logits are far below
// every text token's, so sampling at any temperature never picks one:
// answers run to their length limit, as valid UTF-8.
func (m Llama) Write(w io.Writer) error {
	s := m.Shape
	if err := s.check(); err != nil {
		return err
	}
	tokens, types := m.Vocab()
	scores := make([]float32, len(tokens))
	for i := range scores {
		scores[i] = -float32(i) // earlier merges first; only prefix chains merge
	}
	rng := rand.New(rand.NewPCG(m.Seed, m.Seed^0x9E3779B97F4A7C15))
	hd, kvd, v := s.Hidden/s.Heads, s.Hidden/s.Heads*s.KVHeads, len(tokens)
	kvs := []KV{
		{"general.architecture", "llama"},
		{"general.name", "tokentrace-random-llama-" + s.String()},
		{"general.file_type", uint32(1)}, // mostly F16
		{"llama.context_length", uint32(s.Context)},
		{"llama.embedding_length", uint32(s.Hidden)},
		{"llama.block_count", uint32(s.Layers)},
		{"llama.feed_forward_length", uint32(s.FFN)},
		{"llama.attention.head_count", uint32(s.Heads)},
		{"llama.attention.head_count_kv", uint32(s.KVHeads)},
		{"llama.rope.dimension_count", uint32(hd)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.vocab_size", uint32(v)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.unknown_token_id", uint32(UnknownToken)},
		{"tokenizer.ggml.bos_token_id", uint32(BOSToken)},
		{"tokenizer.ggml.eos_token_id", uint32(EOSToken)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
	}
	if m.ChatTemplate != "" {
		kvs = append(kvs, KV{"tokenizer.chat_template", m.ChatTemplate})
	}
	g := weights{rng: rng}
	tensors := []Tensor{
		g.embedding("token_embd.weight", s.Hidden, v),
		g.ones("output_norm.weight", s.Hidden),
		g.output("output.weight", s.Hidden, types),
	}
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		tensors = append(tensors,
			g.ones(p+"attn_norm.weight", s.Hidden),
			g.matrix(p+"attn_q.weight", s.Hidden, s.Hidden, 1, false),
			g.matrix(p+"attn_k.weight", s.Hidden, kvd, 1, false),
			g.matrix(p+"attn_v.weight", s.Hidden, kvd, 1, false),
			g.matrix(p+"attn_output.weight", s.Hidden, s.Hidden, 0.5, true),
			g.ones(p+"ffn_norm.weight", s.Hidden),
			g.matrix(p+"ffn_gate.weight", s.Hidden, s.FFN, 1, false),
			g.matrix(p+"ffn_up.weight", s.Hidden, s.FFN, 1, false),
			g.matrix(p+"ffn_down.weight", s.FFN, s.Hidden, 0.5, true),
		)
	}
	return Write(w, kvs, tensors)
}

// The constant dimension (0) of the hidden state and the output weight
// that keeps the banned tokens' logits down: the logit of a banned token
// is about -banWeight × carrier ÷ the state's RMS, against text tokens'
// logits of standard deviation logitSD.
const (
	carrier   = 4
	banWeight = 40
	logitSD   = 3
)

// weights draws a model's tensors from one generator, in the order asked.
type weights struct{ rng *rand.Rand }

// matrix is an F16 matrix taking in inputs to out outputs (GGML's dims
// [in, out]) of N(0, (scale²/in)); with keepCarrier its output 0 is zero.
func (g weights) matrix(name string, in, out int, scale float64, keepCarrier bool) Tensor {
	x := make([]float32, in*out)
	sd := scale / math.Sqrt(float64(in))
	for i := range x {
		x[i] = float32(g.rng.NormFloat64() * sd)
	}
	if keepCarrier {
		clear(x[:in]) // row 0: output dimension 0
	}
	return f16Tensor(name, []uint64{uint64(in), uint64(out)}, x)
}

// embedding is the token embeddings: N(0, 1) but for dimension 0, the
// carrier.
func (g weights) embedding(name string, hidden, vocab int) Tensor {
	x := make([]float32, hidden*vocab)
	for t := range vocab {
		row := x[t*hidden : (t+1)*hidden]
		row[0] = carrier
		for i := 1; i < hidden; i++ {
			row[i] = float32(g.rng.NormFloat64())
		}
	}
	return f16Tensor(name, []uint64{uint64(hidden), uint64(vocab)}, x)
}

// output is the output matrix: text tokens' rows random (zero in the
// carrier's dimension), banned tokens' rows -banWeight there, zero
// elsewhere.
func (g weights) output(name string, hidden int, types []int32) Tensor {
	x := make([]float32, hidden*len(types))
	sd := logitSD / math.Sqrt(float64(hidden-1))
	for t, typ := range types {
		row := x[t*hidden : (t+1)*hidden]
		if typ != tokenNormal {
			row[0] = -banWeight
			continue
		}
		for i := 1; i < hidden; i++ {
			row[i] = float32(g.rng.NormFloat64() * sd)
		}
	}
	return f16Tensor(name, []uint64{uint64(hidden), uint64(len(types))}, x)
}

// ones is an F32 norm weight of ones.
func (weights) ones(name string, n int) Tensor {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(1))
	}
	return Tensor{TensorInfo: TensorInfo{Name: name, Dims: []uint64{uint64(n)}, Type: F32}, Data: b}
}

func f16Tensor(name string, dims []uint64, x []float32) Tensor {
	b := make([]byte, 2*len(x))
	for i, f := range x {
		binary.LittleEndian.PutUint16(b[2*i:], Float16(f))
	}
	return Tensor{TensorInfo: TensorInfo{Name: name, Dims: dims, Type: F16}, Data: b}
}

// Float16 is f as an IEEE 754 half-precision number, rounded to nearest
// even; beyond its range, infinity.
func Float16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN: quiet, sign kept
		return sign | 0x7e00
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0: // a half subnormal, or zero
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		h := mant >> shift
		rem, half := mant&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent rounds up correctly, to infinity at most
	}
	return sign | uint16(h)
}
