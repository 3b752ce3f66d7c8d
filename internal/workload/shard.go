package workload

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tokentrace/tokentrace/internal/field"
)

// Shard is one of Count load generators that split one workload: shard
// Index of Count. Every shard draws the whole workload from the same seeds
// and keeps its share, so that the union of the shards' requests is the
// workload one generator would send, request for request:
//
//   - open loop and trace replay: every shard walks the whole arrival
//     process and keeps the arrivals whose index k has k mod Count = Index;
//     arrival k carries session k, as it does in one generator;
//   - closed loop: the workers are split (Share of the concurrency) and so
//     are the sessions: the shard's j-th session is session j·Count + Index.
//
// Request and warm-up budgets are split with Share. The zero Shard (and
// any with Count ≤ 1) is the whole workload.
type Shard struct {
	Index, Count int
}

// ParseShard reads "I/N" (0 ≤ I < N); "" is the whole workload.
func ParseShard(s string) (Shard, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Shard{}, nil
	}
	i, n, ok := strings.Cut(s, "/")
	idx, err1 := strconv.Atoi(strings.TrimSpace(i))
	cnt, err2 := strconv.Atoi(strings.TrimSpace(n))
	if !ok || err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("%q: want INDEX/COUNT, e.g. 0/4", s)
	}
	sh := Shard{Index: idx, Count: cnt}
	return sh, sh.Validate()
}

// Validate checks 0 ≤ Index < Count.
func (s Shard) Validate() error {
	if s.Count < 0 || s.Index < 0 || (s.Count > 0 && s.Index >= s.Count) || (s.Count == 0 && s.Index != 0) {
		return fmt.Errorf("%d/%d: want 0 ≤ index < count", s.Index, s.Count)
	}
	return nil
}

// Sharded reports whether s is a proper share (Count > 1).
func (s Shard) Sharded() bool { return s.Count > 1 }

// String is "I/N", or "" for the whole workload.
func (s Shard) String() string {
	if !s.Sharded() {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Owns reports whether arrival (or session) k is this shard's.
func (s Shard) Owns(k int64) bool {
	return !s.Sharded() || k%int64(s.Count) == int64(s.Index)
}

// Share is this shard's part of n things dealt round-robin: the count of
// k in [0, n) that it owns, ⌊n/Count⌋ plus one for the first n mod Count
// shards. The shares of all shards add up to n.
func (s Shard) Share(n int) int {
	if !s.Sharded() || n <= 0 {
		return n
	}
	q := n / s.Count
	if s.Index < n%s.Count {
		q++
	}
	return q
}

// Session is the workload's session index of this shard's j-th session of
// a closed loop.
func (s Shard) Session(j int64) int64 {
	if !s.Sharded() {
		return j
	}
	return j*int64(s.Count) + int64(s.Index)
}

// Split returns this shard's part of l: its share of the concurrency
// (workers, or the cap in flight), of the warm-up requests and of the
// requests. The workload's first W requests are its warm-up and the next R
// are measured, so the shard's first Share(W) are its warm-up and the
// next Share(W+R) − Share(W) are measured: with the k-th request of the
// shard standing for the workload's request (k−1)·Count + Index, these
// are exactly the workload's. Rate, arrival process, durations and seed
// are the workload's: the shard thins the arrivals itself (Owns). A share
// that would be empty is an error: more shards than workers or requests.
func (s Shard) Split(l Load) (Load, error) {
	if !s.Sharded() {
		return l, nil
	}
	if l.Concurrency > 0 && l.Concurrency < s.Count {
		return l, field.Errorf("shard", "%d shards cannot split a {concurrency} of %d: give at least one per shard", s.Count, l.Concurrency)
	}
	if l.Requests > 0 && l.Requests < s.Count {
		return l, field.Errorf("shard", "%d shards cannot split {requests} %d: give at least one per shard", s.Count, l.Requests)
	}
	l.Concurrency = s.Share(l.Concurrency)
	if l.Requests > 0 {
		l.Requests = s.Share(l.WarmupRequests+l.Requests) - s.Share(l.WarmupRequests)
	}
	l.WarmupRequests = s.Share(l.WarmupRequests)
	l.Shard = s
	return l, nil
}
