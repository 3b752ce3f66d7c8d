package perfmodel

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tokentrace/tokentrace/internal/gguf"
)

// A GGUF file is read as the model it describes: its shape from the
// metadata, its name from the file.
func TestLoadGGUF(t *testing.T) {
	m := gguf.Llama{Shape: gguf.LlamaShape{Layers: 10, Hidden: 640, Heads: 10, KVHeads: 2, FFN: 1280, Context: 4096}, Words: []string{"the"}, Seed: 1}
	path := filepath.Join(t.TempDir(), "model-10x640.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	spec, err := ResolveModel(path)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := m.Vocab()
	want := ModelSpec{Name: "model-10x640", Layers: 10, Hidden: 640, Heads: 10, KVHeads: 2, HeadDim: 64, Intermediate: 1280,
		MaxContext: 4096, Vocab: len(tokens), Attention: AttnGQA}
	if spec.Name != want.Name || spec.Layers != want.Layers || spec.Hidden != want.Hidden || spec.Heads != want.Heads ||
		spec.KVHeads != want.KVHeads || spec.HeadDim != want.HeadDim || spec.Intermediate != want.Intermediate ||
		spec.MaxContext != want.MaxContext || spec.Vocab != want.Vocab || spec.Attention != want.Attention {
		t.Errorf("spec %+v\nwant %+v", spec, want)
	}
	if err := os.WriteFile(path, []byte("GGUF\x03\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveModel(path); err == nil {
		t.Error("a truncated GGUF file was read as a model")
	}
}
