// Package workloadtest makes trace files for tests, so that no test
// downloads one: a Mooncake trace whose shared blocks are known.
//
// It imports nothing of this module (standard library only).
package workloadtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Mooncake describes a generated Mooncake trace: Requests rows GapMS
// milliseconds apart, each of Blocks blocks of BlockSize tokens (its
// input_length) and Output tokens. Every other row (the even ones) begins
// with the same Shared blocks; every other block of every row is its own.
type Mooncake struct {
	Requests, Blocks, Shared, BlockSize, Output int
	GapMS                                       int
}

// Write writes the trace into dir and returns its path.
func (m Mooncake) Write(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "mooncake.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	enc := json.NewEncoder(f)
	next := int64(1_000_000)
	for i := range m.Requests {
		ids := make([]int64, m.Blocks)
		for j := range ids {
			if i%2 == 0 && j < m.Shared {
				ids[j] = int64(j + 1)
				continue
			}
			ids[j] = next
			next++
		}
		row := map[string]any{"timestamp": i * m.GapMS, "input_length": m.Blocks * m.BlockSize,
			"output_length": m.Output, "hash_ids": ids}
		if err := enc.Encode(row); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// ImpliedShare is the share of all input tokens that an earlier row sent
// too, as the hash_ids say: every even row after the first repeats Shared
// blocks (and, for chat, the role token before them).
func (m Mooncake) ImpliedShare(chat bool) float64 {
	role := 0
	if chat {
		role = 1
	}
	sharers := (m.Requests + 1) / 2
	shared := float64((sharers - 1) * (role + m.Shared*m.BlockSize))
	return shared / float64(m.Requests*m.Blocks*m.BlockSize)
}
