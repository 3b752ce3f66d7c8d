package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Under PromptFitsStep the budget need hold a prompt, not the sequence:
// a budget below max_model_len is accepted, a prompt above the budget is
// refused at submit, and one at the budget runs whole.
func TestPromptFitsStep(t *testing.T) {
	cfg := testConfig()
	cfg.DisableChunkedPrefill, cfg.PromptFitsStep = true, true
	cfg.MaxNumBatchedTokens = 100 // below max_model_len 512
	if err := cfg.WithDefaults().Validate(); err != nil {
		t.Fatalf("a budget below max_model_len under PromptFitsStep: %v", err)
	}
	cfg = cfg.WithDefaults()
	err := validate(&Request{PromptLen: 101, MaxTokens: 300}, cfg)
	if !errors.Is(err, ErrPromptTooLong) || !strings.Contains(err.Error(), "max_num_batched_tokens (100)") {
		t.Fatalf("a 101-token prompt over a 100-token budget: %v", err)
	}
	if err := validate(&Request{PromptLen: 100, MaxTokens: 400}, cfg); err != nil {
		t.Fatalf("100 + 400 tokens under max_model_len 512: %v", err)
	}
	s := newTestScheduler(t, cfg)
	submit(s, "a", 100, 400, 0)
	plan, _ := step(t, s, 0)
	if diff := cmp.Diff([]string{"a:p100"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// GuaranteedNoEvict admits a request only with KV for its prompt and
// max_tokens, so a cache that would have preempted never does.
func TestGuaranteedNoEvict(t *testing.T) {
	run := func(noEvict bool) (*scheduler, []*request) {
		cfg := testConfig()
		cfg.NumBlocks = 20 // 320 tokens
		cfg.MaxModelLen = 320
		cfg.GuaranteedNoEvict = noEvict
		s := newTestScheduler(t, cfg)
		a := submit(s, "a", 40, 140, 0) // 180 tokens: 12 blocks reserved
		b := submit(s, "b", 40, 140, 0)
		var now int64
		for i := 0; i < 400 && (a.state != stDone || b.state != stDone); i++ {
			_, now = step(t, s, now)
		}
		return s, []*request{a, b}
	}
	s, _ := run(false)
	if s.preemptions == 0 {
		t.Fatal("without the reservation the two requests should outgrow 320 tokens and preempt")
	}
	s, rs := run(true)
	if s.preemptions != 0 {
		t.Fatalf("GuaranteedNoEvict preempted %d times", s.preemptions)
	}
	for _, r := range rs {
		if r.state != stDone {
			t.Fatalf("%s not finished", r.id)
		}
	}
	if rs[1].scheduled < rs[0].finish {
		t.Fatalf("b admitted at %d before a finished at %d: 24 blocks reserved in a cache of 20", rs[1].scheduled, rs[0].finish)
	}
}

// name@version picks a release's scheduler defaults; a bad version is an
// error naming it.
func TestLookupFamilyVersion(t *testing.T) {
	f, err := LookupFamily("trtllm@0.21.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, seqs := f.BatchLimits(80 << 30); seqs != 256 || f.Version != "0.21.0" {
		t.Errorf("trtllm@0.21.0: max_num_seqs %d, version %q; want 256, 0.21.0", seqs, f.Version)
	}
	f, err = LookupFamily("TensorRT-LLM@1.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, seqs := f.BatchLimits(80 << 30); seqs != 2048 {
		t.Errorf("trtllm@1.1: max_num_seqs %d, want 2048", seqs)
	}
	if _, err := LookupFamily("vllm@latest"); err == nil || !strings.Contains(err.Error(), "vllm@latest") {
		t.Errorf("vllm@latest: %v", err)
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{{"0.11", "0.11.2", true}, {"0.10", "0.11", false}, {"1.0", "1.2rc1", true}, {"0.x", "1.0", false}, {"", "1.0", true}} {
		if got := SameMajor(c.a, c.b); got != c.same {
			t.Errorf("SameMajor(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

// SeparatePrefill (SGLang's scheduler): prompt work runs in steps of its
// own, a running request's next chunk and new prompts first, and decodes
// only when no prompt work is left; vLLM's steps put the decodes first
// and the prompt in the budget left. With a 100-token budget and a step
// of 1 ms + 10 µs a token: a decoding while b's 150-token prompt arrives
// takes 3 mixed steps (a:d1 b:p99 = 2.00 ms, a:d1 b:p51 = 1.52 ms, then
// both decode) or 3 separate ones (b:p100 = 2.00 ms, b:p50 = 1.50 ms, a:d1
// b:d1 = 1.02 ms) — a's next token 2.00 ms later mixed, 4.52 ms apart.
func TestSeparatePrefill(t *testing.T) {
	for _, c := range []struct {
		apart bool
		want  [][]string
		ends  []int64
	}{
		{false, [][]string{{"a:d1", "b:p99"}, {"a:d1", "b:p51"}, {"a:d1", "b:d1"}}, []int64{3_300_000, 4_820_000, 5_840_000}},
		{true, [][]string{{"b:p100"}, {"b:p50"}, {"a:d1", "b:d1"}}, []int64{3_300_000, 4_800_000, 5_820_000}},
	} {
		cfg := testConfig()
		cfg.SeparatePrefill = c.apart
		s := newTestScheduler(t, cfg)
		submit(s, "a", 30, 5, 0)
		if plan, end := step(t, s, 0); len(plan) != 1 || end != 1_300_000 {
			t.Fatalf("apart %v: first step %v ends at %d, want [a:p30] at 1,300,000", c.apart, plan, end)
		}
		submit(s, "b", 150, 5, 1_300_000)
		now := int64(1_300_000)
		for i, want := range c.want {
			var plan []string
			plan, now = step(t, s, now)
			if diff := cmp.Diff(want, plan); diff != "" || now != c.ends[i] {
				t.Errorf("apart %v, step %d ends at %d (want %d) (-want +got):\n%s", c.apart, i+2, now, c.ends[i], diff)
			}
		}
		if got := strings.Contains(cfg.WithDefaults().Describe(), "mixed_steps=off"); got != c.apart {
			t.Errorf("apart %v: Describe says mixed_steps=off: %v", c.apart, got)
		}
	}
}

// RecvInterval (SGLang's --scheduler-recv-interval): arrivals are taken
// after a step with prompt work, after RecvInterval decode steps since
// the last take, or at once when there is nothing to run. With interval
// 3, a 1 ms + 10 µs a token step and separate prefill steps: a's prompt
// (0 → 1.30 ms) lets the scheduler take arrivals at 1.30; b arrives at
// 1.50, during a's first decode (1.30 → 2.31); the decodes ending at 2.31
// and 3.32 count 1 and 2, the one ending at 4.33 makes 3, so b's 20-token
// prompt runs at 4.33 → 5.53 ms (TTFT 4.03 ms), where an interval of 0
// runs it at 2.31 → 3.51 (TTFT 2.01 ms). An idle engine takes c at once.
func TestRecvInterval(t *testing.T) {
	for _, c := range []struct {
		interval int
		want     [][]string
		bFirst   int64
	}{
		{0, [][]string{{"b:p20"}}, 3_510_000},
		{3, [][]string{{"a:d1"}, {"a:d1"}, {"b:p20"}}, 5_530_000},
	} {
		cfg := testConfig()
		cfg.SeparatePrefill, cfg.RecvInterval = true, c.interval
		s := newTestScheduler(t, cfg)
		submit(s, "a", 30, 10, 0)
		step(t, s, 0)
		if plan, now := step(t, s, 1_300_000); len(plan) != 1 || now != 2_310_000 {
			t.Fatalf("interval %d: a's first decode %v ends at %d", c.interval, plan, now)
		}
		b := submit(s, "b", 20, 2, 1_500_000)
		got := stepsUntilFirstToken(t, s, b, 2_310_000)
		if diff := cmp.Diff(c.want, got); diff != "" || b.firstTok != c.bFirst {
			t.Errorf("interval %d: b's first token at %d, want %d (-want +got):\n%s", c.interval, b.firstTok, c.bFirst, diff)
		}
	}
	cfg := testConfig()
	cfg.SeparatePrefill, cfg.RecvInterval = true, 3
	s := newTestScheduler(t, cfg)
	submit(s, "a", 30, 2, 0)
	_, now := step(t, s, 0)
	_, now = step(t, s, now)
	submit(s, "c", 30, 2, 5_000_000)
	if plan, end := step(t, s, 5_000_000); len(plan) != 1 || plan[0] != "c:p30" || end != 6_300_000 {
		t.Errorf("idle engine after a decode (at %d): %v ends at %d, want [c:p30] at 6,300,000", now, plan, end)
	}
	cfg.Policy = PolicyPriority
	if err := cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "scheduler_recv_interval") {
		t.Errorf("recv interval under priority scheduling: %v", err)
	}
	if !strings.Contains(testConfigWith(3).Describe(), "recv_interval=3") {
		t.Error("Describe does not name the recv interval")
	}
}

func testConfigWith(interval int) Config {
	c := testConfig()
	c.RecvInterval = interval
	return c.WithDefaults()
}

// Batch waiting (TensorRT-LLM's batch_wait_timeout_iters and
// batch_wait_max_tokens_ratio): with 2 steps and 60 tokens, a 1 ms +
// 10 µs a token step and mixed steps, a decoding while b's 20-token prompt
// waits: the step's tokens (a's decode and b's prompt, 21) stay below 60,
// so the steps at 1.30 and 2.31 ms decode a alone and the one at 3.32 ms,
// the third, takes b (a:d1 b:p20, 1.21 ms: b's first token at 4.53 ms,
// 2.51 without waiting). With c's 50 tokens waiting too (71 ≥ 60) both
// are taken at once.
func TestBatchWait(t *testing.T) {
	for _, c := range []struct {
		iters  int
		withC  bool
		want   [][]string
		bFirst int64
		banner bool
	}{
		{0, false, [][]string{{"a:d1", "b:p20"}}, 2_510_000, false},
		{2, false, [][]string{{"a:d1"}, {"a:d1"}, {"a:d1", "b:p20"}}, 4_530_000, true},
		{2, true, [][]string{{"a:d1", "b:p20", "c:p50"}}, 3_010_000, true},
	} {
		cfg := testConfig()
		cfg.BatchWaitIters, cfg.BatchWaitTokens = c.iters, 60
		s := newTestScheduler(t, cfg)
		submit(s, "a", 30, 10, 0)
		step(t, s, 0)
		b := submit(s, "b", 20, 2, 1_300_000)
		if c.withC {
			submit(s, "c", 50, 2, 1_300_000)
		}
		got := stepsUntilFirstToken(t, s, b, 1_300_000)
		if diff := cmp.Diff(c.want, got); diff != "" || b.firstTok != c.bFirst {
			t.Errorf("iters %d, c %v: b's first token at %d, want %d (-want +got):\n%s", c.iters, c.withC, b.firstTok, c.bFirst, diff)
		}
		if got := strings.Contains(cfg.WithDefaults().Describe(), "batch_wait=2_steps/60_tokens"); got != c.banner {
			t.Errorf("iters %d: banner names batch waiting: %v", c.iters, got)
		}
	}
	cfg := testConfig()
	cfg.BatchWaitTokens = -1
	if err := cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "batch_wait") {
		t.Errorf("negative batch wait tokens: %v", err)
	}
}
