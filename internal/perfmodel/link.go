package perfmodel

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Link is the connection a disaggregated deployment moves KV cache over,
// from a prefill instance to a decode instance: a bandwidth per direction
// and a fixed latency per transfer (docs/perfmodel.md, "KV transfer").
type Link struct {
	Name string `json:"name"`
	// BytesPerSecond is the usable bandwidth of one transfer, one way.
	BytesPerSecond float64 `json:"bytes_per_second"`
	// Latency is the fixed cost of one transfer: the read's round trip
	// and the connector's bookkeeping.
	Latency time.Duration `json:"latency"`
}

// Transfer is the time to move bytes over the link: Latency +
// bytes ÷ BytesPerSecond; 0 for no bytes.
func (l Link) Transfer(bytes int64) time.Duration { return l.TransferSharded(bytes, 1) }

// TransferSharded is the time to move bytes split into shards moved at
// once, each over its own link (one per GPU rank): Latency + bytes ÷
// (shards × BytesPerSecond); shards below 1 count as 1.
func (l Link) TransferSharded(bytes int64, shards int) time.Duration {
	if bytes <= 0 {
		return 0
	}
	return l.Latency + time.Duration(math.Round(float64(bytes)/(float64(max(shards, 1))*l.BytesPerSecond)*1e9))
}

// Validate says why the link cannot time a transfer.
func (l Link) Validate() error {
	switch {
	case !(l.BytesPerSecond > 0) || math.IsInf(l.BytesPerSecond, 0):
		return fmt.Errorf("link %q: bandwidth must be a positive number of bytes per second, got %v", l.Name, l.BytesPerSecond)
	case l.Latency < 0:
		return fmt.Errorf("link %q: latency must not be negative, got %v", l.Name, l.Latency)
	}
	return nil
}

// String is "name (X GB/s, Y µs)".
func (l Link) String() string {
	return fmt.Sprintf("%s (%.4g GB/s, %v)", l.Name, l.BytesPerSecond/1e9, l.Latency)
}

// The link presets. Each figure is a usable rate one way, not a line rate:
//   - nvlink: NVLink 4 between two H100s of one node, 450 GB/s one way
//     (900 GB/s both ways), 5 µs per transfer;
//   - rdma-400g: one 400 Gb/s InfiniBand or RoCE NIC per GPU, GPUDirect
//     RDMA, 50 GB/s, 20 µs per transfer;
//   - tcp: a 25 Gb/s TCP stream between hosts (no RDMA), 3.125 GB/s,
//     100 µs per transfer.
var links = map[string]Link{
	"nvlink":    {Name: "nvlink", BytesPerSecond: 450e9, Latency: 5 * time.Microsecond},
	"rdma-400g": {Name: "rdma-400g", BytesPerSecond: 50e9, Latency: 20 * time.Microsecond},
	"tcp":       {Name: "tcp", BytesPerSecond: 3.125e9, Latency: 100 * time.Microsecond},
}

// DefaultLink is the preset a decode instance pulls KV cache over when
// none is named.
const DefaultLink = "rdma-400g"

// LinkNames lists the presets, sorted.
func LinkNames() []string {
	names := make([]string, 0, len(links))
	for n := range links {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupLink returns a preset by name (case-insensitive).
func LookupLink(name string) (Link, error) {
	if l, ok := links[strings.ToLower(strings.TrimSpace(name))]; ok {
		return l, nil
	}
	return Link{}, fmt.Errorf("unknown KV link %q (known: %s)", name, strings.Join(LinkNames(), ", "))
}
