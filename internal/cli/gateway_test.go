package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/gateway"
)

func TestGatewayHashKey(t *testing.T) {
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"gateway", "hash-key", "sk-demo"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != gateway.HashKey("sk-demo") || len(got) != 64 {
		t.Errorf("hash-key printed %q", got)
	}
}

func TestGatewayNeedsUpstreams(t *testing.T) {
	root := NewRoot()
	root.SetArgs([]string{"gateway", "--addr", "127.0.0.1:0"})
	root.SetErr(&bytes.Buffer{})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "--upstream") {
		t.Errorf("err = %v, want a message naming --upstream", err)
	}
}
