package perfmodel

import (
	"testing"
	"time"
)

func TestLinkTransferHandComputed(t *testing.T) {
	tests := []struct {
		link  string
		bytes int64
		want  time.Duration
	}{
		// Llama-3.1-8B holds 131,072 bytes of KV per token (bf16): 4,096
		// tokens are 536,870,912 bytes.
		{"nvlink", 536870912, 5*time.Microsecond + 1193046*time.Nanosecond}, // 536870912 / 450e9 s = 1.193046 ms
		{"rdma-400g", 536870912, 20*time.Microsecond + 10737418*time.Nanosecond},
		{"tcp", 536870912, 100*time.Microsecond + 171798692*time.Nanosecond},
		{"tcp", 0, 0},
	}
	for _, tt := range tests {
		l, err := LookupLink(tt.link)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Transfer(tt.bytes); got != tt.want {
			t.Errorf("%s.Transfer(%d) = %v, want %v", tt.link, tt.bytes, got, tt.want)
		}
	}
}

func TestLookupLink(t *testing.T) {
	if _, err := LookupLink("RDMA-400G"); err != nil {
		t.Error(err)
	}
	if _, err := LookupLink("carrier-pigeon"); err == nil {
		t.Error("an unknown link was accepted")
	}
	for _, n := range LinkNames() {
		l, _ := LookupLink(n)
		if err := l.Validate(); err != nil {
			t.Error(err)
		}
	}
	if (Link{Name: "x"}).Validate() == nil {
		t.Error("a link without bandwidth validated")
	}
}
