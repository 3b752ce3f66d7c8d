package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// linearTimer prices a step as base + perToken × tokens computed; it is the
// fake step-time function of the scheduler tests.
type linearTimer struct{ base, perToken time.Duration }

func (l linearTimer) StepTime(b *perfmodel.Batch) time.Duration {
	n := 0
	for _, s := range b.Seqs {
		n += s.NewTokens
	}
	return l.base + time.Duration(n)*l.perToken
}

// testConfig is a small engine: 64 blocks of 16 tokens, 100-token budget.
func testConfig() Config {
	return Config{
		StepTimer:           linearTimer{base: time.Millisecond, perToken: 10 * time.Microsecond},
		NumBlocks:           64,
		BlockSize:           16,
		MaxModelLen:         512,
		MaxNumBatchedTokens: 100,
		MaxNumSeqs:          8,
	}
}

func newTestScheduler(t *testing.T, cfg Config) *scheduler {
	t.Helper()
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return newScheduler(cfg)
}

// submit adds a request with a fixed output length.
func submit(s *scheduler, id string, prompt, out int, now int64) *request {
	r := s.newRequest(&Request{ID: id, PromptLen: prompt, MaxTokens: out, IgnoreEOS: true}, now)
	s.add(r)
	return r
}

// planOf renders the current plan as "id:n" (d for decode).
func planOf(s *scheduler) []string {
	var out []string
	for _, p := range s.plan {
		kind := "p"
		if p.decode {
			kind = "d"
		}
		out = append(out, fmt.Sprintf("%s:%s%d", p.r.id, kind, p.n))
	}
	return out
}

// step schedules and completes one step at now, checking the invariants;
// it returns the plan and the step's end.
func step(t *testing.T, s *scheduler, now int64) ([]string, int64) {
	t.Helper()
	dur, ok := s.schedule(now)
	if err := s.check(); err != nil {
		t.Fatalf("after schedule at %d: %v", now, err)
	}
	if !ok {
		return nil, now
	}
	plan := planOf(s)
	end := now + int64(dur)
	s.complete(end)
	if err := s.check(); err != nil {
		t.Fatalf("after complete at %d: %v", end, err)
	}
	return plan, end
}

// stepsUntilFirstToken steps s from now until r has its first token and
// returns each step's plan.
func stepsUntilFirstToken(t *testing.T, s *scheduler, r *request, now int64) [][]string {
	t.Helper()
	var got [][]string
	for r.firstTok < 0 {
		var plan []string
		plan, now = step(t, s, now)
		got = append(got, plan)
	}
	return got
}

// check verifies the scheduler's invariants: block accounting, capacity,
// the free list, the prefix-cache index, the batch limits.
func (s *scheduler) check() error {
	kv := s.kv
	held := make([]int32, kv.numBlocks)
	for _, r := range s.running {
		if r.state != stRunning {
			return fmt.Errorf("%s in running list with state %d", r.id, r.state)
		}
		if need := kv.blocksFor(r.computed); len(r.blocks) < need {
			return fmt.Errorf("%s has %d tokens computed but %d blocks", r.id, r.computed, len(r.blocks))
		}
		for _, b := range r.blocks {
			held[b]++
		}
	}
	nWait := 0
	s.waiting.each(func(r *request) {
		nWait++
		if len(r.blocks) != 0 {
			held[0] = -1 << 30 // flagged below
		}
	})
	if nWait != s.waiting.len() {
		return fmt.Errorf("waiting count %d, live entries %d", s.waiting.len(), nWait)
	}
	used := 0
	for b := range kv.numBlocks {
		if held[b] != kv.ref[b] {
			return fmt.Errorf("block %d: ref %d, held by %d requests", b, kv.ref[b], held[b])
		}
		if held[b] > 0 {
			used++
		}
	}
	if used != kv.used() || used > kv.numBlocks {
		return fmt.Errorf("used blocks %d, cache says %d of %d", used, kv.used(), kv.numBlocks)
	}
	n, sent := 0, int32(kv.numBlocks)
	for b := kv.next[sent]; b != sent; b = kv.next[b] {
		if kv.ref[b] != 0 {
			return fmt.Errorf("block %d on the free list with ref %d", b, kv.ref[b])
		}
		n++
		if n > kv.numBlocks {
			return fmt.Errorf("free list cycles")
		}
	}
	if n != kv.numFree {
		return fmt.Errorf("free list has %d blocks, numFree %d", n, kv.numFree)
	}
	for h, b := range kv.cached {
		if kv.hash[b] != h {
			return fmt.Errorf("cache index: hash %x → block %d whose hash is %x", h, b, kv.hash[b])
		}
	}
	if len(s.running) > s.cfg.MaxNumSeqs {
		return fmt.Errorf("%d running > max_num_seqs %d", len(s.running), s.cfg.MaxNumSeqs)
	}
	tok := 0
	for _, p := range s.plan {
		tok += p.n
	}
	if tok > s.cfg.MaxNumBatchedTokens {
		return fmt.Errorf("plan has %d tokens > budget %d", tok, s.cfg.MaxNumBatchedTokens)
	}
	return nil
}

func TestBudgetSplitting(t *testing.T) {
	s := newTestScheduler(t, testConfig())
	submit(s, "a", 30, 10, 0)
	submit(s, "b", 30, 10, 0)
	submit(s, "c", 30, 10, 0)
	plan, now := step(t, s, 0)
	// 90 of the 100 tokens: three whole prompts.
	if diff := cmp.Diff([]string{"a:p30", "b:p30", "c:p30"}, plan); diff != "" {
		t.Fatalf("step 1 (-want +got):\n%s", diff)
	}
	submit(s, "x", 200, 10, now)
	submit(s, "y", 50, 10, now)
	plan, now = step(t, s, now)
	// Running decodes first (3 tokens), then x's first chunk takes the
	// remaining 97; y waits.
	if diff := cmp.Diff([]string{"a:d1", "b:d1", "c:d1", "x:p97"}, plan); diff != "" {
		t.Fatalf("step 2 (-want +got):\n%s", diff)
	}
	plan, now = step(t, s, now)
	// x is running now: its next chunk (97 of the remaining 103) comes
	// right after the decodes; y still does not fit.
	if diff := cmp.Diff([]string{"a:d1", "b:d1", "c:d1", "x:p97"}, plan); diff != "" {
		t.Fatalf("step 3 (-want +got):\n%s", diff)
	}
	plan, _ = step(t, s, now)
	if diff := cmp.Diff([]string{"a:d1", "b:d1", "c:d1", "x:p6", "y:p50"}, plan); diff != "" {
		t.Fatalf("step 4 (-want +got):\n%s", diff)
	}
}

func TestMaxNumSeqs(t *testing.T) {
	cfg := testConfig()
	cfg.MaxNumSeqs = 2
	s := newTestScheduler(t, cfg)
	for _, id := range []string{"a", "b", "c"} {
		submit(s, id, 10, 3, 0)
	}
	plan, _ := step(t, s, 0)
	if diff := cmp.Diff([]string{"a:p10", "b:p10"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestChunkedVersusWholePrompts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chunked bool
		want    [][]string
	}{
		// Chunked: the long prompt fills the leftover budget at once.
		{"chunked", true, [][]string{{"a:p40"}, {"a:d1", "long:p99"}, {"a:d1", "long:p99"}, {"a:d1", "long:p2"}}},
		// Whole prompts only: the long prompt waits until the budget
		// holds it whole, so the decode step it joins carries 200 tokens.
		{"unchunked", false, [][]string{{"a:p40"}, {"a:d1", "long:p200"}, {"a:d1", "long:d1"}, {"a:d1", "long:d1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxModelLen = 256
			cfg.DisableChunkedPrefill = !tc.chunked
			if !tc.chunked {
				cfg.MaxNumBatchedTokens = 0 // default: at least max_model_len
			}
			s := newTestScheduler(t, cfg)
			if !tc.chunked && s.cfg.MaxNumBatchedTokens < 256 {
				t.Fatalf("budget %d below max_model_len", s.cfg.MaxNumBatchedTokens)
			}
			submit(s, "a", 40, 10, 0)
			var got [][]string
			var now int64
			for i := range 4 {
				if i == 1 {
					submit(s, "long", 200, 10, now)
				}
				var plan []string
				plan, now = step(t, s, now)
				got = append(got, plan)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnchunkedBudgetTooSmallIsRejected(t *testing.T) {
	cfg := testConfig()
	cfg.DisableChunkedPrefill = true
	cfg.MaxNumBatchedTokens = 100 // below max_model_len 512
	if err := cfg.WithDefaults().Validate(); err == nil {
		t.Fatal("want an error for a budget below max_model_len with chunked prefill off")
	}
}

func TestAdmissionWaitsForBlocks(t *testing.T) {
	cfg := testConfig()
	cfg.NumBlocks = 10 // 160 tokens
	cfg.MaxModelLen = 160
	cfg.MaxNumBatchedTokens = 200
	s := newTestScheduler(t, cfg)
	a := submit(s, "a", 100, 2, 0) // 7 blocks
	b := submit(s, "b", 60, 2, 0)  // 4 blocks: does not fit beside a
	plan, now := step(t, s, 0)
	if diff := cmp.Diff([]string{"a:p100"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if b.state != stWaiting {
		t.Fatalf("b admitted without blocks")
	}
	plan, now = step(t, s, now) // a's last token: a finishes, frees blocks
	if diff := cmp.Diff([]string{"a:d1"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if a.state != stDone || s.kv.used() != 0 {
		t.Fatalf("a not finished (state %d) or blocks held (%d)", a.state, s.kv.used())
	}
	plan, _ = step(t, s, now)
	if diff := cmp.Diff([]string{"b:p60"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestPreemptionNewestFirst(t *testing.T) {
	cfg := testConfig()
	cfg.NumBlocks = 4 // 64 tokens
	cfg.MaxModelLen = 64
	s := newTestScheduler(t, cfg)
	// Four one-block prompts fill the cache; each first decode needs a
	// second block.
	a := submit(s, "a", 16, 3, 0)
	b := submit(s, "b", 16, 3, 0)
	c := submit(s, "c", 16, 5, 0)
	d := submit(s, "d", 16, 5, 0)
	plan, now := step(t, s, 0)
	if diff := cmp.Diff([]string{"a:p16", "b:p16", "c:p16", "d:p16"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	plan, now = step(t, s, now)
	// a needs a block: d (newest) is preempted; b needs one: c is.
	if diff := cmp.Diff([]string{"a:d1", "b:d1"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if a.preemptions != 0 || b.preemptions != 0 || c.preemptions != 1 || d.preemptions != 1 || s.preemptions != 2 {
		t.Fatalf("preemptions a=%d b=%d c=%d d=%d total=%d", a.preemptions, b.preemptions, c.preemptions, d.preemptions, s.preemptions)
	}
	// Front of the waiting queue: c (preempted last, older) before d.
	if got := s.waiting.peek(); got != c {
		t.Fatalf("waiting head %s, want c", got.id)
	}
	if c.computed != 0 || len(c.blocks) != 0 {
		t.Fatalf("preempted c keeps %d computed tokens, %d blocks", c.computed, len(c.blocks))
	}
	plan, now = step(t, s, now) // a and b finish
	if diff := cmp.Diff([]string{"a:d1", "b:d1"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// c and d are recomputed from their prompts plus the token each had
	// produced, in their original order.
	plan, _ = step(t, s, now)
	if diff := cmp.Diff([]string{"c:p17", "d:p17"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if c.output != 2 || c.chunks != 2 {
		t.Fatalf("c output %d, chunks %d after recompute, want 2 and 2", c.output, c.chunks)
	}
}

func TestPriorityOrderAndVictim(t *testing.T) {
	cfg := testConfig()
	cfg.Policy = PolicyPriority
	cfg.NumBlocks = 6
	cfg.MaxModelLen = 96
	s := newTestScheduler(t, cfg)
	add := func(id string, prio int) *request {
		r := s.newRequest(&Request{ID: id, PromptLen: 32, MaxTokens: 20, IgnoreEOS: true, Priority: prio}, 0)
		s.add(r)
		return r
	}
	lo := add("lo", 5)
	hi := add("hi", 0)
	mid := add("mid", 1)
	plan, now := step(t, s, 0)
	// Admitted in priority order, not arrival order.
	if diff := cmp.Diff([]string{"hi:p32", "mid:p32", "lo:p32"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	plan, _ = step(t, s, now)
	// hi needs a block: the victim is lo (worst priority), though under
	// FCFS it would be the newest admitted, lo; its blocks serve mid too.
	if diff := cmp.Diff([]string{"hi:d1", "mid:d1"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if lo.preemptions != 1 || mid.preemptions != 0 || hi.preemptions != 0 {
		t.Fatalf("preemptions lo=%d mid=%d hi=%d", lo.preemptions, mid.preemptions, hi.preemptions)
	}
	if got := s.waiting.peek(); got != lo {
		t.Fatalf("waiting head %s, want lo", got.id)
	}
}

func TestPriorityVictimAlreadyPlanned(t *testing.T) {
	// A low-priority request admitted first is planned before a
	// high-priority one that then needs its blocks: the planned victim is
	// unscheduled and its budget returned.
	cfg := testConfig()
	cfg.Policy = PolicyPriority
	cfg.NumBlocks = 5
	cfg.MaxModelLen = 80
	s := newTestScheduler(t, cfg)
	lo := s.newRequest(&Request{ID: "lo", PromptLen: 32, MaxTokens: 20, IgnoreEOS: true, Priority: 9}, 0)
	s.add(lo)
	_, now := step(t, s, 0)
	hi := s.newRequest(&Request{ID: "hi", PromptLen: 30, MaxTokens: 20, IgnoreEOS: true, Priority: 0}, now)
	s.add(hi)
	_, now = step(t, s, now) // lo decodes (3rd block), hi admitted (2 blocks): all 5 used
	if hi.state != stRunning || s.kv.numFree != 0 {
		t.Fatalf("setup: hi state %d, free %d", hi.state, s.kv.numFree)
	}
	for range 2 { // hi reaches 32 tokens (2 full blocks), lo 35: no new block
		var plan []string
		plan, now = step(t, s, now)
		if diff := cmp.Diff([]string{"lo:d1", "hi:d1"}, plan); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	}
	// hi's next decode needs a third block: lo, planned first in this
	// step, is the victim, unscheduled and its tokens returned.
	plan, _ := step(t, s, now)
	if diff := cmp.Diff([]string{"hi:d1"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if lo.preemptions != 1 || hi.preemptions != 0 {
		t.Fatalf("preemptions lo=%d hi=%d", lo.preemptions, hi.preemptions)
	}
}

// TestSteadyStepAllocatesNothing guards the scheduler's hot path: once
// requests are admitted, a step (plan, price, complete) reuses the plan,
// batch and emission buffers and the block tables sized at admission, so
// it allocates nothing, with speculative decoding and prefix caching on.
func TestSteadyStepAllocatesNothing(t *testing.T) {
	cfg := testConfig()
	cfg.EnablePrefixCaching = true
	cfg.Speculative = Speculative{K: 2, Alpha: 0.5}
	s := newTestScheduler(t, cfg)
	for i := range 4 {
		submitPrompt(s, fmt.Sprint(i), tokens(32, 40, int32(100*i)), 400, 0)
	}
	var now int64
	for range 5 { // admit and prefill all four
		_, now = step(t, s, now)
	}
	if len(s.running) != 4 || s.numWaiting() != 0 {
		t.Fatalf("%d running, %d waiting; want 4, 0", len(s.running), s.numWaiting())
	}
	allocs := testing.AllocsPerRun(20, func() {
		dur, ok := s.schedule(now)
		if !ok {
			t.Fatal("nothing scheduled")
		}
		now += int64(dur)
		s.complete(now)
	})
	if allocs != 0 {
		t.Errorf("a steady step allocates %v times", allocs)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

// Admissions per step (Ollama's runner): with a 1 ms + 10 µs a token step
// and mixed steps, a, b and c (30-token prompts, 2 tokens out) all waiting
// at 0. Without a limit one step at 0 takes the three prompts (1.9 ms: c's
// first token at 1.90 ms). With one admission a step, a's prompt alone
// (1.30 ms), then a's decode and b's prompt (1.31 ms, to 2.61), then b's
// decode and c's prompt (1.31 ms): c's first token at 3.92 ms.
// With two a step, a and b (1.60 ms), then both decodes and c (1.32 ms):
// 2.92 ms.
func TestAdmitPerStep(t *testing.T) {
	for _, c := range []struct {
		admit  int
		want   [][]string
		cFirst int64
	}{
		{0, [][]string{{"a:p30", "b:p30", "c:p30"}}, 1_900_000},
		{1, [][]string{{"a:p30"}, {"a:d1", "b:p30"}, {"b:d1", "c:p30"}}, 3_920_000},
		{2, [][]string{{"a:p30", "b:p30"}, {"a:d1", "b:d1", "c:p30"}}, 2_920_000},
	} {
		cfg := testConfig()
		cfg.AdmitPerStep = c.admit
		s := newTestScheduler(t, cfg)
		submit(s, "a", 30, 2, 0)
		submit(s, "b", 30, 2, 0)
		r := submit(s, "c", 30, 2, 0)
		got := stepsUntilFirstToken(t, s, r, 0)
		if diff := cmp.Diff(c.want, got); diff != "" || r.firstTok != c.cFirst {
			t.Errorf("admit %d: c's first token at %d, want %d (-want +got):\n%s", c.admit, r.firstTok, c.cFirst, diff)
		}
	}
	cfg := testConfig()
	cfg.AdmitPerStep = -1
	if err := cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "admit_per_step") {
		t.Errorf("negative admissions per step: %v", err)
	}
	cfg.AdmitPerStep = 1
	if !strings.Contains(cfg.WithDefaults().Describe(), "admit_per_step=1") {
		t.Error("Describe does not name the admissions per step")
	}
}
