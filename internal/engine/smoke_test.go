package engine

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// linearTimer prices a step as base + perToken × tokens computed.
type linearTimer struct{ base, perToken time.Duration }

func (l linearTimer) StepTime(b *perfmodel.Batch) time.Duration {
	n := 0
	for _, s := range b.Seqs {
		n += s.NewTokens
	}
	return l.base + time.Duration(n)*l.perToken
}

func testConfig() Config {
	return Config{
		StepTimer:   linearTimer{base: time.Millisecond, perToken: 10 * time.Microsecond},
		NumBlocks:   64,
		BlockSize:   16,
		MaxModelLen: 512,
	}
}

func TestWallSmoke(t *testing.T) {
	e, err := New(testConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	st, err := e.Submit(ctx, Request{ID: "a", PromptLen: 100, MaxTokens: 5, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for {
		ev, err := st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		total += ev.Tokens
	}
	tl := st.Timeline()
	if total != 5 || tl.OutputTokens != 5 || tl.Finish != FinishLength {
		t.Fatalf("got %d tokens, timeline %+v", total, tl)
	}
	cancel()
	<-done
}
