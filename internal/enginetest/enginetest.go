// Package enginetest holds what the tests against real engines share
// (internal/ollamatest's Ollama, internal/llamacpptest's llama-server):
// the random-weight model they serve, written by internal/gguf, and its
// Hugging Face config.json, which tokentrace's performance model reads
// (calibrate, simulate and estimate --model).
//
// It imports internal/gguf and internal/tokenizer.
package enginetest

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tokentrace/tokentrace/internal/gguf"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// Small is the model the suites use: 2 layers, 256 wide, 4 heads (2 KV
// heads, head size 64), FFN 512, 4,096 positions.
var Small = gguf.LlamaShape{Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, FFN: 512, Context: 4096}

// Model is the random-weight llama of shape s: tokentrace's filler words
// as tokens of their own (bench's prompts have the length it asked for),
// Zephyr's chat template, seed 1.
func Model(s gguf.LlamaShape) gguf.Llama {
	return gguf.Llama{Shape: s, Words: tokenizer.FillerWords(), ChatTemplate: gguf.ZephyrTemplate, Seed: 1}
}

// Vocab is the models' vocabulary size.
func Vocab() int {
	tokens, _ := Model(Small).Vocab()
	return len(tokens)
}

// Params is the parameter count of a model of shape s: embeddings and
// output, the final norm, and per layer two norms, attention and the
// gated FFN.
func Params(s gguf.LlamaShape) int {
	hd := s.Hidden / s.Heads
	return 2*Vocab()*s.Hidden + s.Hidden + s.Layers*(2*s.Hidden+2*s.Hidden*s.Hidden+2*s.Hidden*s.KVHeads*hd+3*s.Hidden*s.FFN)
}

// WriteModel writes the model of shape s into dir as model.gguf and
// returns its path.
func WriteModel(dir string, s gguf.LlamaShape) (string, error) {
	path := filepath.Join(dir, "model.gguf")
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	if err := Model(s).Write(f); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("model: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	return path, nil
}

// ConfigJSON is the model's Hugging Face config.json as tokentrace's
// performance model reads one: a llama architecture in f16 with the
// models' vocabulary, and ctx positions.
func ConfigJSON(s gguf.LlamaShape, ctx int) []byte {
	return fmt.Appendf(nil, `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":%d,`+
		`"num_hidden_layers":%d,"num_attention_heads":%d,"num_key_value_heads":%d,"intermediate_size":%d,`+
		`"vocab_size":%d,"max_position_embeddings":%d,"torch_dtype":"float16"}`,
		s.Hidden, s.Layers, s.Heads, s.KVHeads, s.FFN, Vocab(), ctx)
}
