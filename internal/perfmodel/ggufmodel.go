package perfmodel

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tokentrace/tokentrace/internal/gguf"
)

// LoadGGUF reads a GGUF model file's metadata (never its weights) as a
// model: the architecture's block_count, embedding_length,
// attention.head_count(_kv), attention.key_length, feed_forward_length,
// context_length and expert counts; the vocabulary's size; tied embeddings
// when the file has no output.weight tensor. The name is the file's, less
// .gguf. The weights' precision is not taken from the file (give --dtype).
func LoadGGUF(path string) (ModelSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return ModelSpec{}, fmt.Errorf("model file: %w", err)
	}
	defer func() { _ = f.Close() }() // opened for reading: a failed Close loses nothing
	md, err := gguf.ReadMetadata(bufio.NewReader(f))
	if err != nil {
		return ModelSpec{}, fmt.Errorf("%s: %w", path, err)
	}
	u := func(key string) int {
		v, _ := md.ArchUint(key)
		return int(v)
	}
	m := ModelSpec{Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)),
		Layers: u("block_count"), Hidden: u("embedding_length"), Heads: u("attention.head_count"),
		KVHeads: u("attention.head_count_kv"), HeadDim: u("attention.key_length"), Intermediate: u("feed_forward_length"),
		MaxContext: u("context_length"), Experts: u("expert_count"), ExpertsPerToken: u("expert_used_count"), Vocab: u("vocab_size")}
	if m.Vocab == 0 {
		if toks, ok := md.Get("tokenizer.ggml.tokens"); ok {
			if l, ok := toks.([]string); ok {
				m.Vocab = len(l)
			}
		}
	}
	m.TiedEmbeddings = true
	for _, t := range md.Tensors {
		if t.Name == "output.weight" {
			m.TiedEmbeddings = false
		}
	}
	if m.Layers == 0 || m.Hidden == 0 || m.Heads == 0 {
		return ModelSpec{}, fmt.Errorf("%s: architecture %q lacks %s.block_count, embedding_length or attention.head_count", path, md.Architecture(), md.Architecture())
	}
	m.normalize()
	if err := m.Validate(); err != nil {
		return ModelSpec{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
