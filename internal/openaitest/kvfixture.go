package openaitest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// KVFixture reads one of the KV-transfer protocol's fixtures
// (internal/openai/testdata/kvtransfer, whose README cites vLLM's files)
// as a JSON object, from a test of a package beside internal/openai.
func KVFixture(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "openai", "testdata", "kvtransfer", name))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
