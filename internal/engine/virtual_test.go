package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// run steps v until it is idle, calling done for every finished output.
func runVirtual(t *testing.T, v *Virtual, now time.Duration, done func(o *Output, at time.Duration)) time.Duration {
	t.Helper()
	for {
		end, ok := v.Start(now)
		if !ok {
			return now
		}
		outs := v.Finish()
		for i := range outs {
			if outs[i].Finish != "" {
				done(&outs[i], end)
			}
		}
		now = end
	}
}

func TestVirtualClosedLoopMatchesTimelines(t *testing.T) {
	// One request at a time: each is submitted when the previous finishes,
	// so none queues and each starts at the previous one's finish.
	v, err := NewVirtual(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	var finished []Timeline
	now := time.Duration(0)
	for i := range 5 {
		if _, err := v.Submit(now, i, &Request{PromptLen: 40, MaxTokens: 10, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
		now = runVirtual(t, v, now, func(o *Output, at time.Duration) {
			if o.ID() != i {
				t.Errorf("output of request %d, want %d", o.ID(), i)
			}
			tl := o.Timeline()
			if Offset(tl.Finished) != at {
				t.Errorf("request %d finished at %v, its step ended at %v", i, Offset(tl.Finished), at)
			}
			finished = append(finished, tl)
		})
	}
	if len(finished) != 5 {
		t.Fatalf("%d finished, want 5", len(finished))
	}
	for i := 1; i < 5; i++ {
		if finished[i].Arrival != finished[i-1].Finished || finished[i].Queue() != 0 {
			t.Errorf("request %d arrived %v (previous finished %v), queued %v", i, finished[i].Arrival, finished[i-1].Finished, finished[i].Queue())
		}
		if finished[i].OutputTokens != 10 || finished[i].Finish != FinishLength {
			t.Errorf("request %d: %d tokens, %s", i, finished[i].OutputTokens, finished[i].Finish)
		}
	}
	if v.Live() != 0 {
		t.Errorf("%d live after all finished", v.Live())
	}
}

func TestVirtualSubmitErrors(t *testing.T) {
	cfg := testConfig()
	cfg.MaxWaiting = 2
	v, err := NewVirtual(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ok := Request{PromptLen: 10, MaxTokens: 5}
	for i := range 2 {
		if _, err := v.Submit(0, i, &ok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.Submit(0, 2, &ok); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third waiting request with max waiting 2: err = %v", err)
	}
	if _, err := v.Submit(0, 3, &Request{PromptLen: 500, MaxTokens: 100}); !errors.Is(err, ErrPromptTooLong) {
		t.Errorf("prompt + max_tokens over max_model_len: err = %v", err)
	}
	if _, err := v.Submit(0, 4, &Request{PromptLen: 10}); !errors.Is(err, ErrInvalid) {
		t.Errorf("max_tokens 0: err = %v", err)
	}
	end, started := v.Start(time.Second)
	if !started {
		t.Fatal("no step with two waiting requests")
	}
	if at, busy := v.Busy(); !busy || at != end {
		t.Errorf("Busy = %v, %v; want %v, true", at, busy, end)
	}
	if _, again := v.Start(time.Second); again {
		t.Error("a second step started while one is in progress")
	}
	v.Finish()
	if _, err := v.Submit(time.Second/2, 5, &ok); err == nil {
		t.Error("a request submitted before the engine's current step was accepted")
	}
}

func TestVirtualAbortAndStaleHandle(t *testing.T) {
	v, err := NewVirtual(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, err := v.Submit(0, 0, &Request{PromptLen: 30, MaxTokens: 50, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	end, _ := v.Start(0)
	if _, ok := v.Abort(h, end); ok {
		t.Error("abort during a step succeeded")
	}
	v.Finish()
	tl, ok := v.Abort(h, end)
	if !ok || tl.Finish != FinishAbort || Offset(tl.Finished) != end {
		t.Fatalf("abort: ok %v, timeline %+v", ok, tl)
	}
	if _, ok := v.Abort(h, end); ok {
		t.Error("a second abort of the same request succeeded")
	}
	if st := v.Stats(); st.KVUsage != 0 || st.Running != 0 || v.Live() != 0 {
		t.Errorf("after abort: %+v, live %d", st, v.Live())
	}
	// A finished request's state is recycled; its old handle stays dead.
	h2, _ := v.Submit(end, 1, &Request{PromptLen: 5, MaxTokens: 1})
	runVirtual(t, v, end, func(*Output, time.Duration) {})
	if _, err := v.Submit(end+time.Hour, 2, &Request{PromptLen: 5, MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Abort(h2, end+time.Hour); ok {
		t.Error("a stale handle aborted the request that reuses its state")
	}
}

func TestVirtualStepRecordAndPrefill(t *testing.T) {
	v, err := NewVirtual(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Submit(0, 7, &Request{PromptLen: 150, MaxTokens: 2, IgnoreEOS: true}); err != nil {
		t.Fatal(err)
	}
	end, _ := v.Start(0)
	type pf struct{ ID, N int }
	var got []pf
	v.EachPrefill(func(id, n int) { got = append(got, pf{id, n}) })
	if diff := cmp.Diff([]pf{{7, 100}}, got); diff != "" {
		t.Errorf("prefill of a 150-token prompt under a 100-token budget (-want +got):\n%s", diff)
	}
	rec := v.LastStep()
	want := StepRecord{Start: 0, Duration: end, Seqs: 1, PrefillTokens: 100, Running: 1, UsedBlocks: 7}
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("step record (-want +got):\n%s", diff)
	}
	if outs := v.Finish(); len(outs) != 0 {
		t.Errorf("a partial prefill emitted %d outputs", len(outs))
	}
}
