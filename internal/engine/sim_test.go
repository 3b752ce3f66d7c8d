package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/workload"
)

func TestSpeculativeDecoding(t *testing.T) {
	for _, tc := range []struct {
		alpha     float64
		wantSteps int // decode steps for 40 tokens after the first
	}{
		{1, 10}, // every draft accepted: k+1 = 4 tokens per step
		{0, 40}, // none: 1 token per step
	} {
		t.Run(fmt.Sprint(tc.alpha), func(t *testing.T) {
			cfg := testConfig()
			cfg.Speculative = Speculative{K: 3, Alpha: tc.alpha}
			var sawDraft bool
			cfg.StepTimer = StepTimerFunc(func(b *perfmodel.Batch) time.Duration {
				if b.DraftK == 3 {
					sawDraft = true
					if b.Seqs[0].NewTokens != 4 {
						t.Errorf("verify step computes %d tokens, want 4", b.Seqs[0].NewTokens)
					}
				}
				return time.Millisecond
			})
			res, err := Simulate(cfg, []Arrival{{Request: Request{ID: "a", PromptLen: 20, MaxTokens: 41, IgnoreEOS: true}}}, SimOptions{Steps: true, Emissions: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(res.Steps) - 1; got != tc.wantSteps {
				t.Fatalf("%d decode steps, want %d", got, tc.wantSteps)
			}
			if !sawDraft {
				t.Fatal("no step carried DraftK")
			}
			total := 0
			for _, e := range res.Emissions[0] {
				total += e.Tokens
				if e.Tokens > 4 {
					t.Fatalf("emission of %d tokens > k+1", e.Tokens)
				}
			}
			if total != 41 || res.Timelines[0].OutputTokens != 41 {
				t.Fatalf("emitted %d tokens, timeline %d; want 41", total, res.Timelines[0].OutputTokens)
			}
		})
	}
}

func TestSpeculativeAcceptanceIsGeometric(t *testing.T) {
	// Mean tokens per verify step is (1 − α^(k+1)) / (1 − α).
	cfg := testConfig()
	cfg.MaxModelLen = 4096
	cfg.NumBlocks = 512
	cfg.Speculative = Speculative{K: 4, Alpha: 0.6}
	res, err := Simulate(cfg, []Arrival{{Request: Request{ID: "a", PromptLen: 8, MaxTokens: 4000, IgnoreEOS: true}}}, SimOptions{Emissions: true})
	if err != nil {
		t.Fatal(err)
	}
	em := res.Emissions[0][1 : len(res.Emissions[0])-1] // skip the prefill and the capped last one
	sum := 0
	for _, e := range em {
		sum += e.Tokens
	}
	got := float64(sum) / float64(len(em))
	want := (1 - pow(0.6, 5)) / (1 - 0.6)
	if d := got - want; d > 0.1 || d < -0.1 {
		t.Fatalf("mean tokens per step %.3f, want %.3f ± 0.1 (%d steps)", got, want, len(em))
	}
}

func pow(x float64, n int) float64 {
	r := 1.0
	for range n {
		r *= x
	}
	return r
}

func TestOutputLength(t *testing.T) {
	cfg := testConfig()
	cfg.OutputLength = workload.Fixed(10)
	arr := []Arrival{
		{Request: Request{ID: "ignore", PromptLen: 5, MaxTokens: 30, IgnoreEOS: true}},
		{Request: Request{ID: "natural", PromptLen: 5, MaxTokens: 30}},
		{Request: Request{ID: "capped", PromptLen: 5, MaxTokens: 4}},
		{Request: Request{ID: "min", PromptLen: 5, MaxTokens: 30, MinTokens: 20}},
		{Request: Request{ID: "minmax", PromptLen: 5, MaxTokens: 25, MinTokens: 25}},
	}
	res, err := Simulate(cfg, arr, SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type out struct {
		N   int
		Why FinishReason
	}
	var got []out
	for _, tl := range res.Timelines {
		got = append(got, out{tl.OutputTokens, tl.Finish})
	}
	want := []out{{30, FinishLength}, {10, FinishStop}, {4, FinishLength}, {20, FinishStop}, {25, FinishLength}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestOutputLengthDistributions(t *testing.T) {
	for _, o := range []workload.Dist{
		workload.LogNormal{MeanLen: 100, Sigma: 1},
		workload.Exponential{MeanLen: 100},
		workload.Uniform{Lo: 50, Hi: 150},
	} {
		t.Run(o.String(), func(t *testing.T) {
			cfg := testConfig()
			cfg.OutputLength = o
			s := newTestScheduler(t, cfg)
			sum, n := 0, 20000
			for range n {
				k, why := s.drawOutput(&Request{PromptLen: 1, MaxTokens: 100000})
				if k < 1 || why != FinishStop {
					t.Fatalf("draw %d %s", k, why)
				}
				if _, ok := o.(workload.Uniform); ok && (k < 50 || k > 150) {
					t.Fatalf("uniform draw %d outside [50, 150]", k)
				}
				sum += k
			}
			if mean := float64(sum) / float64(n); mean < 95 || mean > 105 {
				t.Fatalf("mean %.1f, want 100 ± 5", mean)
			}
		})
	}
}

func TestSimulateAbortFreesBlocks(t *testing.T) {
	cfg := testConfig()
	arr := []Arrival{
		{Request: Request{ID: "gone", PromptLen: 200, MaxTokens: 300, IgnoreEOS: true}, AbortAt: 20 * time.Millisecond},
		{Request: Request{ID: "stays", PromptLen: 50, MaxTokens: 30, IgnoreEOS: true}},
	}
	res, err := Simulate(cfg, arr, SimOptions{Steps: true})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Timelines[0]
	if g.Finish != FinishAbort || g.OutputTokens >= 300 || g.OutputTokens == 0 {
		t.Fatalf("aborted request: %+v", g)
	}
	if Offset(g.Finished) < 20*time.Millisecond {
		t.Fatalf("aborted at %v, before its abort time", Offset(g.Finished))
	}
	// The first step that starts after the abort holds only the other
	// request's blocks (4 of them for ≤ 80 tokens).
	for _, st := range res.Steps {
		if st.Start >= Offset(g.Finished) && st.UsedBlocks > 5 {
			t.Fatalf("step at %v holds %d blocks after the abort", st.Start, st.UsedBlocks)
		}
	}
	if res.Timelines[1].Finish != FinishLength || res.Timelines[1].OutputTokens != 30 {
		t.Fatalf("other request: %+v", res.Timelines[1])
	}
}

func TestSimulateRejectsBadArrivals(t *testing.T) {
	cfg := testConfig()
	for _, tc := range []struct {
		a    Arrival
		want error
	}{
		{Arrival{Request: Request{ID: "x", PromptLen: 500, MaxTokens: 100}}, ErrPromptTooLong},
		{Arrival{Request: Request{ID: "x", PromptLen: 5, MaxTokens: 0}}, ErrInvalid},
		{Arrival{Request: Request{ID: "x"}}, ErrInvalid},
		{Arrival{Request: Request{ID: "x", PromptLen: 5, MaxTokens: 5, MinTokens: 6}}, ErrInvalid},
	} {
		if _, err := Simulate(cfg, []Arrival{tc.a}, SimOptions{}); !errors.Is(err, tc.want) {
			t.Errorf("%+v: error %v, want %v", tc.a.Request, err, tc.want)
		}
	}
}

// randomArrivals builds n requests with random lengths, priorities, shared
// prefixes and some aborts, arriving as a Poisson process of the given rate.
func randomArrivals(seed uint64, n int, rate float64, maxLen int) []Arrival {
	rng := rand.New(rand.NewPCG(seed, 1))
	var at time.Duration
	out := make([]Arrival, n)
	for i := range out {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		p := 1 + rng.IntN(maxLen/2)
		m := 1 + rng.IntN(maxLen-p)
		prompt := make([]int32, p)
		shared := rng.IntN(3) * 40
		for j := range prompt {
			if j < shared {
				prompt[j] = int32(j)
			} else {
				prompt[j] = int32(rng.IntN(1000))
			}
		}
		out[i] = Arrival{At: at, Request: Request{ID: fmt.Sprint(i), Prompt: prompt, MaxTokens: m, MinTokens: rng.IntN(m + 1), IgnoreEOS: rng.IntN(2) == 0, Priority: rng.IntN(3)}}
		if rng.IntN(10) == 0 {
			out[i].AbortAt = at + time.Duration(rng.IntN(200))*time.Millisecond
		}
	}
	return out
}

// TestRandomizedInvariants drives the scheduler step by step on random
// workloads under every feature combination, checking the invariants after
// every schedule and completion; every request must finish or be aborted,
// and under FCFS none may wait longer than the whole run takes to drain.
func TestRandomizedInvariants(t *testing.T) {
	for seed := range uint64(12) {
		cfg := testConfig()
		cfg.NumBlocks = 40 + int(seed)*3 // tight: preemptions happen
		cfg.MaxModelLen = 256
		cfg.MaxNumBatchedTokens = 64 + int(seed%3)*100
		cfg.MaxNumSeqs = 4 + int(seed%4)*4
		cfg.EnablePrefixCaching = seed%2 == 0
		cfg.DisableChunkedPrefill = seed%3 == 1
		if cfg.DisableChunkedPrefill {
			cfg.MaxNumBatchedTokens = 256
		}
		if seed%4 == 3 {
			cfg.Speculative = Speculative{K: 3, Alpha: 0.7}
		}
		if seed%5 == 4 {
			cfg.Policy = PolicyPriority
		}
		cfg.Seed = seed
		cfg.OutputLength = workload.Exponential{MeanLen: 40}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runChecked(t, cfg, randomArrivals(seed, 300, 200, cfg.MaxModelLen))
		})
	}
}

// runChecked drives the scheduler step by step over arr, checking the
// invariants after every abort pass, schedule and completion, then that
// every request finished (its full output) or was aborted, and that nothing
// is left in the cache or the queues.
func runChecked(t *testing.T, cfg Config, arr []Arrival) {
	t.Helper()
	s := newTestScheduler(t, cfg)
	reqs := make([]*request, len(arr))
	var now int64
	next := 0
	for steps := 0; ; steps++ {
		if steps > 1_000_000 {
			t.Fatal("no progress")
		}
		for next < len(arr) && int64(arr[next].At) <= now {
			reqs[next] = s.newRequest(&arr[next].Request, int64(arr[next].At))
			s.add(reqs[next])
			next++
		}
		aborted := false
		for i, a := range arr[:next] {
			if a.AbortAt > 0 && int64(a.AbortAt) <= now && s.abort(reqs[i], now) {
				aborted = true
			}
		}
		if aborted {
			s.compactRunning()
		}
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
		dur, ok := s.schedule(now)
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
		if !ok {
			if next == len(arr) {
				break
			}
			now = int64(arr[next].At)
			continue
		}
		now += int64(dur)
		s.complete(now)
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
	}
	if s.kv.used() != 0 || len(s.running) != 0 || s.waiting.len() != 0 {
		t.Fatalf("left: %d blocks, %d running, %d waiting", s.kv.used(), len(s.running), s.waiting.len())
	}
	for i, r := range reqs {
		if r.state != stDone {
			t.Fatalf("request %d never finished", i)
		}
		if r.reason != FinishAbort && r.output != r.target {
			t.Fatalf("request %d: %d of %d tokens, %s", i, r.output, r.target, r.reason)
		}
		if r.reason == FinishAbort && arr[i].AbortAt == 0 {
			t.Fatalf("request %d aborted without an abort", i)
		}
	}
}

// FuzzScheduler derives an engine configuration and a small workload from
// the input and runs it with every invariant checked.
func FuzzScheduler(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte("prefix caching with preemption and priorities"))
	f.Add([]byte{255, 255, 255, 255, 1, 1, 1, 1, 200, 3, 90, 17})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 6 {
			return
		}
		cfg := testConfig()
		cfg.BlockSize = []int{1, 4, 16}[int(data[0])%3]
		cfg.MaxModelLen = 64
		cfg.NumBlocks = (cfg.MaxModelLen+8)/cfg.BlockSize + 1 + int(data[1]%32)
		cfg.MaxNumSeqs = 1 + int(data[2]%8)
		cfg.MaxNumBatchedTokens = max(cfg.BlockSize, 9) + int(data[3]%64)
		cfg.EnablePrefixCaching = data[4]&1 != 0
		cfg.DisableChunkedPrefill = data[4]&2 != 0
		if cfg.DisableChunkedPrefill {
			cfg.MaxNumBatchedTokens = max(cfg.MaxNumBatchedTokens, cfg.MaxModelLen)
		}
		if data[4]&4 != 0 {
			cfg.Policy = PolicyPriority
		}
		if data[4]&8 != 0 {
			cfg.Speculative = Speculative{K: 1 + int(data[5]%8), Alpha: float64(data[5]) / 255}
		}
		cfg.Seed = uint64(data[5])
		cfg.OutputLength = workload.Uniform{Lo: 1, Hi: 30}
		var arr []Arrival
		var at time.Duration
		for i := 6; i+2 < len(data) && len(arr) < 64; i += 3 {
			at += time.Duration(data[i]%8) * time.Millisecond
			p := 1 + int(data[i+1])%40
			m := 1 + int(data[i+2])%(cfg.MaxModelLen-p)
			prompt := make([]int32, p)
			for j := range prompt {
				prompt[j] = int32(j % (1 + int(data[i]%4)) * int(data[i+1]%3))
			}
			a := Arrival{At: at, Request: Request{Prompt: prompt, MaxTokens: m, IgnoreEOS: data[i+2]&1 != 0, Priority: int(data[i] % 3)}}
			if data[i+1]%7 == 0 {
				a.AbortAt = at + time.Duration(data[i+2]%16)*time.Millisecond
			}
			arr = append(arr, a)
		}
		runChecked(t, cfg, arr)
	})
}

func TestNoStarvationFCFS(t *testing.T) {
	// Under FCFS with a steady overload, requests are first scheduled in
	// arrival order, so none is overtaken and left behind.
	cfg := testConfig()
	cfg.NumBlocks = 60
	cfg.MaxModelLen = 256
	arr := randomArrivals(7, 400, 400, 256)
	for i := range arr {
		arr[i].AbortAt = 0
	}
	res, err := Simulate(cfg, arr, SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(arr); i++ {
		a, b := res.Timelines[i-1], res.Timelines[i]
		if b.Scheduled.Before(a.Scheduled) {
			t.Fatalf("request %d scheduled at %v before earlier request %d at %v", i, Offset(b.Scheduled), i-1, Offset(a.Scheduled))
		}
		if b.Finish == FinishAbort || b.Finished.IsZero() {
			t.Fatalf("request %d did not finish", i)
		}
	}
}

func TestSimulateDeterministic(t *testing.T) {
	cfg := testConfig()
	cfg.NumBlocks = 50
	cfg.MaxModelLen = 256
	cfg.EnablePrefixCaching = true
	cfg.Speculative = Speculative{K: 2, Alpha: 0.5}
	cfg.Seed = 42
	arr := randomArrivals(3, 300, 300, 256)
	run := func(c Config) *SimResult {
		res, err := Simulate(c, arr, SimOptions{Steps: true, Emissions: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := run(cfg), run(cfg)
	if len(a.Steps) < 100 || a.Stats.PrefixHits == 0 || a.Stats.Preemptions == 0 {
		t.Fatalf("workload too easy to show anything: %+v", a.Stats)
	}
	if !reflect.DeepEqual(a, b) { // cmp.Diff is slow on large results: only on failure
		t.Fatalf("two runs differ (-first +second):\n%s", cmp.Diff(a, b))
	}
	cfg.Seed = 43
	if c := run(cfg); reflect.DeepEqual(a.Emissions, c.Emissions) {
		t.Fatal("a different seed gave identical emissions")
	}
}

func TestSimulateArrivalOrderIndependent(t *testing.T) {
	// Arrivals given out of order are simulated in time order, and results
	// come back in the order given.
	cfg := testConfig()
	cfg.OutputLength = workload.Fixed(5)
	arr := []Arrival{
		{At: 30 * time.Millisecond, Request: Request{ID: "late", PromptLen: 10, MaxTokens: 5}},
		{At: 0, Request: Request{ID: "early", PromptLen: 10, MaxTokens: 5}},
	}
	res, err := Simulate(cfg, arr, SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if Offset(res.Timelines[0].Arrival) != 30*time.Millisecond || Offset(res.Timelines[1].Arrival) != 0 {
		t.Fatalf("timelines out of order: %v %v", Offset(res.Timelines[0].Arrival), Offset(res.Timelines[1].Arrival))
	}
	// early: one 10-token prefill step (1.1 ms) then 4 decode steps (1.01 ms).
	want := 1100*time.Microsecond + 4*1010*time.Microsecond
	if got := Offset(res.Timelines[1].Finished); got != want {
		t.Fatalf("early finished at %v, want %v", got, want)
	}
	tl := res.Timelines[1]
	if tl.PrefillChunks != 1 || tl.OutputTokens != 5 || tl.Finish != FinishLength { // the draw reached max_tokens
		t.Fatalf("timeline %+v", tl)
	}
	if tl.Queue() != 0 || tl.Prefill() != 1100*time.Microsecond || tl.Decode() != 4*1010*time.Microsecond {
		t.Fatalf("queue %v prefill %v decode %v", tl.Queue(), tl.Prefill(), tl.Decode())
	}
}

func TestSimulateChunks(t *testing.T) {
	cfg := testConfig() // 100-token budget
	res, err := Simulate(cfg, []Arrival{{Request: Request{ID: "a", PromptLen: 250, MaxTokens: 2, IgnoreEOS: true}}}, SimOptions{Chunks: true, Emissions: true})
	if err != nil {
		t.Fatal(err)
	}
	// 100 + 100 + 50 tokens; each step 1 ms + 10 µs per token.
	want := []Chunk{
		{0, 2 * time.Millisecond, 100},
		{2 * time.Millisecond, 4 * time.Millisecond, 100},
		{4 * time.Millisecond, 5500 * time.Microsecond, 50},
	}
	if diff := cmp.Diff(want, res.Chunks[0]); diff != "" {
		t.Fatalf("chunks (-want +got):\n%s", diff)
	}
	if tl := res.Timelines[0]; tl.PrefillChunks != 3 || Offset(tl.FirstToken) != 5500*time.Microsecond {
		t.Fatalf("timeline %+v", tl)
	}
	if diff := cmp.Diff([]Emission{{5500 * time.Microsecond, 1}, {6510 * time.Microsecond, 1}}, res.Emissions[0]); diff != "" {
		t.Fatalf("emissions (-want +got):\n%s", diff)
	}
}

// The timeline's first answer token is the end of the step that emitted
// the token after the reasoning ones: 20 reasoning tokens at 1 ms a step
// take 20 decode steps one token at a time, and 5 steps at 4 tokens a step
// (tokens 1, 5, 9, 13, 17, 21: the 21st is the first answer token); a
// request without reasoning, or whose answer is all reasoning, has none.
func TestTimelineFirstAnswer(t *testing.T) {
	for _, tc := range []struct {
		name          string
		alpha         float64
		think, output int
		want          time.Duration // Reasoning()
	}{
		{"one token a step", 0, 20, 30, 20 * time.Millisecond},
		{"four tokens a step", 1, 20, 30, 5 * time.Millisecond},
		{"no reasoning", 0, 0, 30, 0},
		{"all reasoning", 0, 30, 30, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Speculative = Speculative{K: 3, Alpha: tc.alpha}
			cfg.StepTimer = StepTimerFunc(func(*perfmodel.Batch) time.Duration { return time.Millisecond })
			if tc.think > 0 {
				cfg.Reasoning = workload.Fixed(tc.think)
			}
			res, err := Simulate(cfg, []Arrival{{Request: Request{ID: "a", PromptLen: 20, MaxTokens: tc.output, IgnoreEOS: true}}}, SimOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tl := res.Timelines[0]
			if got := tl.Reasoning(); got != tc.want {
				t.Errorf("reasoning decode %v, want %v (first token %v, first answer %v)", got, tc.want,
					Offset(tl.FirstToken), Offset(tl.FirstAnswer))
			}
			if tc.want == 0 && !tl.FirstAnswer.IsZero() {
				t.Errorf("first answer at %v, want none", Offset(tl.FirstAnswer))
			}
		})
	}
}
