package enginetest

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/tokentrace/tokentrace/internal/gguf"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// The model file's tensors hold Params parameters, its metadata the shape
// and ConfigJSON says the same.
func TestModelFileAgreesWithParamsAndConfig(t *testing.T) {
	path, err := WriteModel(t.TempDir(), Small)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	file, err := gguf.ReadMetadata(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := file.Params(); got != uint64(Params(Small)) {
		t.Errorf("the file holds %d parameters, Params says %d", got, Params(Small))
	}
	var cfg struct {
		Hidden int `json:"hidden_size"`
		Layers int `json:"num_hidden_layers"`
		Vocab  int `json:"vocab_size"`
	}
	if err := json.Unmarshal(ConfigJSON(Small, 1024), &cfg); err != nil {
		t.Fatal(err)
	}
	v, _ := file.ArchUint("vocab_size")
	if cfg.Hidden != Small.Hidden || cfg.Layers != Small.Layers || cfg.Vocab != int(v) {
		t.Errorf("config.json %+v, the file's vocabulary %d", cfg, v)
	}
}

// The vocabulary holds each filler word as one token.
func TestVocabularyHoldsFillerWords(t *testing.T) {
	tokens, _ := Model(Small).Vocab()
	have := map[string]bool{}
	for _, tok := range tokens {
		have[tok] = true
	}
	for _, w := range tokenizer.FillerWords() {
		if !have["\u2581"+w] {
			t.Errorf("no token for %q", w)
		}
	}
	if len(tokens) != Vocab() || tokens[gguf.EOSToken] != "</s>" {
		t.Errorf("vocabulary of %d tokens, EOS %q", len(tokens), tokens[gguf.EOSToken])
	}
}
