package bench

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// sentRequest is what a request of a run was: which session, meant for
// when, warm-up or not, and what it asked.
type sentRequest struct {
	Session   int64
	Intended  int64
	Warmup    bool
	Input     int
	MaxTokens int
	Content   string
}

// sendAll runs load (a shard's, when sh is set) through a runner on a fake
// clock whose answers are instant, and returns what it sent, by session.
func sendAll(t *testing.T, src workload.Source, load workload.Load, sh workload.Shard) []sentRequest {
	t.Helper()
	if sh.Sharded() {
		var err error
		if load, err = sh.Split(load); err != nil {
			t.Fatal(err)
		}
	}
	clock := &fakeClock{}
	var mu sync.Mutex
	var out []sentRequest
	doer := DoerFunc(func(_ context.Context, req *workload.Request, rec *latency.Record) {
		rec.SentNS = int64(clock.Now())
		rec.FirstTokenNS, rec.EndNS = rec.SentNS+1e6, rec.SentNS+2e6
		rec.ChunkNS, rec.OutputTokens = []int64{rec.FirstTokenNS, rec.EndNS}, 2
		var content strings.Builder
		for _, m := range req.Messages {
			content.WriteString(m.Role + ": " + m.Content + "\n")
		}
		mu.Lock()
		out = append(out, sentRequest{rec.Session, rec.IntendedNS, rec.Warmup, req.InputTokens, req.MaxTokens, content.String() + req.Prompt})
		mu.Unlock()
	})
	r := &Runner{Doer: doer, Source: src, Clock: clock, RunID: "s", Epoch: true, Emit: func(*latency.Record) {}}
	if _, err := r.Run(context.Background(), "", load); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(out, func(a, b sentRequest) int { return cmp.Compare(a.Session, b.Session) })
	return out
}

// TestShardsUnionIsTheWorkload: four shards of a workload send, together,
// exactly the requests one generator sends: the same sessions with the same
// contents and lengths, meant for the same instants (open loop and trace
// replay, bit for bit), with the same warm-up marks.
func TestShardsUnionIsTheWorkload(t *testing.T) {
	synth := &workload.Synthetic{Chat: true, Input: workload.Uniform{Lo: 20, Hi: 200}, Output: workload.Uniform{Lo: 1, Hi: 50},
		PrefixTokens: 10, PrefixGroups: 3, Turns: 1, Seed: 9}
	var rows []workload.TraceRow
	for i := range 41 {
		rows = append(rows, workload.TraceRow{At: time.Duration(i*i) * 7 * time.Millisecond, Input: 10 + i, Output: 1 + i%5})
	}
	replay, err := workload.NewReplay(rows, workload.ReplayConfig{Scale: 0.5, Chat: true, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		src  workload.Source
		load workload.Load
		// closed: instants depend on the answers, so only the requests are
		// compared.
		closed bool
	}{
		{"poisson requests", synth, workload.Load{Rate: 50, Arrival: workload.Poisson, Requests: 37, WarmupRequests: 3, Seed: 4}, false},
		{"gamma duration", synth, workload.Load{Rate: 80, Arrival: workload.Gamma, Burstiness: 0.3, Duration: 2 * time.Second,
			WarmupDuration: 500 * time.Millisecond, Seed: 5}, false},
		{"constant with a cap", synth, workload.Load{Rate: 30, Arrival: workload.Constant, Concurrency: 8, Requests: 25, Seed: 6}, false},
		{"trace replay", replay, workload.Load{Arrivals: replay.Arrivals, Requests: replay.Len()}, false},
		{"closed loop", synth, workload.Load{Concurrency: 6, Requests: 23, WarmupRequests: 2}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whole := sendAll(t, tt.src, tt.load, workload.Shard{})
			var union []sentRequest
			for i := range 4 {
				part := sendAll(t, tt.src, tt.load, workload.Shard{Index: i, Count: 4})
				if len(part) == 0 {
					t.Errorf("shard %d sent nothing", i)
				}
				union = append(union, part...)
			}
			slices.SortFunc(union, func(a, b sentRequest) int { return cmp.Compare(a.Session, b.Session) })
			if tt.closed {
				for i := range whole {
					whole[i].Intended = 0
				}
				for i := range union {
					union[i].Intended = 0
				}
			}
			if len(whole) < 20 {
				t.Fatalf("the whole workload sent %d requests", len(whole))
			}
			if diff := gocmp.Diff(whole, union); diff != "" {
				t.Errorf("union of the shards (-whole +union):\n%s", diff)
			}
		})
	}
}
