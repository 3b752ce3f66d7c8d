package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServeStartsAndPrintsBanner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	cfg := filepath.Join(t.TempDir(), "serve.yaml")
	if err := os.WriteFile(cfg, []byte("max_num_seqs: 32\nenable-prefix-caching: true\nport: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root.SetArgs([]string{"serve", "--config", cfg, "--port", "0", "--model", "Llama-3.1-8B", "--gpu", "H100-SXM"})
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"KV cache:", "max_num_seqs=32", "prefix_caching=on", "http://127.0.0.1:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, out.String())
		}
	}
}

func TestServeRejectsConfigThatCannotRun(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--block-size", "0"}, "block-size"},
		{[]string{"--model", "Llama-3.1-405B", "--gpu", "L4"}, "does not fit"},
		{[]string{"--max-num-batched-tokens", "8"}, "below one block"},
		{[]string{"--model", "no-such-model"}, "model"},
		{[]string{"--max-model-len", "100000000"}, "KV cache holds"},
		{[]string{"--grace", "-1s"}, "--grace"},
	}
	for _, tt := range tests {
		root := NewRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"serve", "--port", "0"}, tt.args...))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error about %q", tt.args, err, tt.want)
		}
	}
}

func TestServeConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"unknown.yaml": "max-num-sequences: 3\n",
		"nested.yaml":  "faults:\n  seed: 1\n",
		"badval.yaml":  "tp: two\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		root := NewRoot()
		root.SetOut(&bytes.Buffer{})
		root.SetArgs([]string{"serve", "--config", p})
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "config file") {
			t.Errorf("%s: %v, want a config file error", name, err)
		}
	}
}
