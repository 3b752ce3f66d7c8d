package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// remoteConfig is testConfig with 1,000 bytes of KV per token pulled over
// a 1 MB/s link with 1 ms of latency: a token's KV takes 1 ms.
func remoteConfig() Config {
	c := testConfig()
	c.KVBytesPerToken = 1000
	c.KVLink = perfmodel.Link{Name: "test", BytesPerSecond: 1e6, Latency: time.Millisecond}
	return c
}

// stepVirtual runs v from now until it has nothing left, waking at KV
// transfers' ends, and returns the finished timelines by id.
func stepVirtual(t *testing.T, v *Virtual, now time.Duration) map[int]Timeline {
	t.Helper()
	out := map[int]Timeline{}
	for v.Live() > 0 {
		end, ok := v.Start(now)
		if !ok {
			at, ok := v.NextReady()
			if !ok {
				t.Fatalf("engine idle at %v with %d live requests and no transfer", now, v.Live())
			}
			now = max(now, at)
			continue
		}
		for _, o := range v.Finish() {
			if o.Finish != "" {
				out[o.ID()] = o.Timeline()
			}
		}
		now = end
	}
	return out
}

func TestRemotePrefillTimelineHandComputed(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name                 string
		prompt               int
		wantPulled           int
		wantFirstStepTokens  int
		wantTransfer, wantTF time.Duration
	}{
		// 40 tokens: two full blocks (32 tokens) pulled in 1 + 32 ms, then
		// the partial block's 8 tokens in a 1.08 ms step.
		{"partial block", 40, 32, 8, 33 * ms, 33*ms + 1080*time.Microsecond},
		// 32 tokens: both blocks pulled, the last token recomputed.
		{"whole blocks", 32, 32, 1, 33 * ms, 33*ms + 1010*time.Microsecond},
		// 10 tokens: no full block, nothing pulled, all computed locally.
		{"under a block", 10, 0, 10, 0, 1100 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewVirtual(remoteConfig())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Submit(0, 0, &Request{PromptLen: tt.prompt, MaxTokens: 3, IgnoreEOS: true, RemotePrefill: true}); err != nil {
				t.Fatal(err)
			}
			tl := stepVirtual(t, v, 0)[0]
			if tl.KVTransferTokens != tt.wantPulled || tl.KVTransfer() != tt.wantTransfer {
				t.Errorf("pulled %d tokens in %v, want %d in %v", tl.KVTransferTokens, tl.KVTransfer(), tt.wantPulled, tt.wantTransfer)
			}
			if tl.Queue() != 0 {
				t.Errorf("queued %v, want 0", tl.Queue())
			}
			if got := Offset(tl.FirstToken); got != tt.wantTF {
				t.Errorf("first token at %v, want %v", got, tt.wantTF)
			}
			if tl.OutputTokens != 3 || tl.PrefillChunks != 1 {
				t.Errorf("%d tokens in %d prefill chunks, want 3 in 1", tl.OutputTokens, tl.PrefillChunks)
			}
		})
	}
}

// The pull moves one shard per rank at once, as many as the side with
// fewer ranks holds: 32 tokens × 1,000 bytes = 32 kB at 1 MB/s per link
// is 32 ms on one link, 16 on two, 8 on four, plus 1 ms of latency.
func TestRemotePrefillShardsByTP(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name         string
		tp, remoteTP int
		want         time.Duration
	}{
		{"TP1 from TP1", 1, 0, 33 * ms},
		{"TP2 from the same TP", 2, 0, 17 * ms},
		{"TP2 from TP1: the prefill side's one link", 2, 1, 33 * ms},
		{"TP1 from TP4: the decode side's one link", 1, 4, 33 * ms},
		{"TP4 from TP4", 4, 4, 9 * ms},
		{"TP4 from TP2", 4, 2, 17 * ms},
		{"TP unset is one rank", 0, 2, 33 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := remoteConfig()
			cfg.TP = tt.tp
			v, err := NewVirtual(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Submit(0, 0, &Request{PromptLen: 40, MaxTokens: 2, IgnoreEOS: true, RemotePrefill: true, RemoteTP: tt.remoteTP}); err != nil {
				t.Fatal(err)
			}
			if tl := stepVirtual(t, v, 0)[0]; tl.KVTransferTokens != 32 || tl.KVTransfer() != tt.want {
				t.Errorf("pulled %d tokens in %v, want 32 in %v", tl.KVTransferTokens, tl.KVTransfer(), tt.want)
			}
		})
	}
	v, err := NewVirtual(remoteConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Submit(0, 0, &Request{PromptLen: 40, MaxTokens: 2, RemotePrefill: true, RemoteTP: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative remote TP: %v, want ErrInvalid", err)
	}
}

func TestRemotePrefillPullsOnlyUncachedBlocks(t *testing.T) {
	cfg := remoteConfig()
	cfg.EnablePrefixCaching = true
	v, err := NewVirtual(cfg)
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i + 1)
	}
	// A local request computes the prompt's two full blocks; a remote one
	// with a third full block then pulls only that block.
	if _, err := v.Submit(0, 0, &Request{Prompt: prompt[:33], MaxTokens: 1, IgnoreEOS: true}); err != nil {
		t.Fatal(err)
	}
	now := time.Duration(0)
	for v.Live() > 0 {
		end, _ := v.Start(now)
		v.Finish()
		now = end
	}
	longer := append(append([]int32(nil), prompt...), 41, 42, 43, 44, 45, 46, 47, 48, 49)
	if _, err := v.Submit(now, 1, &Request{Prompt: longer, MaxTokens: 2, IgnoreEOS: true, RemotePrefill: true}); err != nil {
		t.Fatal(err)
	}
	tl := stepVirtual(t, v, now)[1]
	if tl.CachedTokens != 32 || tl.KVTransferTokens != 16 || tl.KVTransfer() != 17*time.Millisecond {
		t.Errorf("cached %d, pulled %d in %v; want 32 cached, 16 pulled in 17ms", tl.CachedTokens, tl.KVTransferTokens, tl.KVTransfer())
	}
}

func TestRemotePrefillWaitsForItsOwnKVCapacity(t *testing.T) {
	cfg := remoteConfig()
	cfg.NumBlocks = 8 // 128 tokens
	cfg.MaxModelLen = 128
	v, err := NewVirtual(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Two 96-token remote prefills: the second cannot take its 6 blocks
	// until the first finishes and frees its 7.
	for i := range 2 {
		if _, err := v.Submit(0, i, &Request{PromptLen: 96, MaxTokens: 4, IgnoreEOS: true, RemotePrefill: true}); err != nil {
			t.Fatal(err)
		}
	}
	if st := v.Stats(); st.Waiting != 2 {
		t.Fatalf("waiting %d before the first step, want 2", st.Waiting)
	}
	got := stepVirtual(t, v, 0)
	a, b := got[0], got[1]
	if !b.KVTransferStart.Equal(a.Finished) {
		t.Errorf("the second transfer started at %v, want the first's finish %v", Offset(b.KVTransferStart), Offset(a.Finished))
	}
	if b.Queue() != Offset(a.Finished) {
		t.Errorf("the second queued %v, want %v", b.Queue(), Offset(a.Finished))
	}
}

func TestRemotePrefillNeedsALink(t *testing.T) {
	v, err := NewVirtual(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Submit(0, 0, &Request{PromptLen: 40, MaxTokens: 1, RemotePrefill: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid", err)
	}
}

// TestRemotePrefillWallClock: the wall-clock loop, idle during a
// transfer, wakes when it ends (a fake clock's After fires on time).
func TestRemotePrefillWallClock(t *testing.T) {
	e, err := New(remoteConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = e.Run(ctx) }()
	st, err := e.Submit(ctx, Request{PromptLen: 40, MaxTokens: 2, IgnoreEOS: true, RemotePrefill: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(ctx); err != nil {
			break
		}
	}
	tl := st.Timeline()
	if tl.KVTransferTokens != 32 || tl.KVTransfer() != 33*time.Millisecond || tl.OutputTokens != 2 {
		t.Errorf("pulled %d tokens in %v, %d output; want 32 in 33ms, 2", tl.KVTransferTokens, tl.KVTransfer(), tl.OutputTokens)
	}
	if tl.FirstToken.Before(tl.KVTransferEnd) {
		t.Errorf("first token %v before the transfer's end %v", tl.FirstToken, tl.KVTransferEnd)
	}
}
