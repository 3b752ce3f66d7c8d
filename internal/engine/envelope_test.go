package engine

import (
	"strings"
	"testing"
)

// Options.Envelope says what the constants in force were fitted on, and
// Check flags each way a case leaves it.
func TestEnvelope(t *testing.T) {
	inside := EnvelopeCase{Input: [2]int{1000, 2000}, Output: [2]int{200, 1000}, Concurrency: 64}
	cases := []struct {
		name   string
		edit   func(o *Options)
		c      EnvelopeCase
		want   []string // substrings of the flags, in order
		fitted bool
	}{
		{name: "trtllm 0.x inside", edit: func(o *Options) { o.Engine = "trtllm@0.12" }, c: inside, fitted: true},
		{name: "trtllm 1.x: another release", edit: func(o *Options) { o.Engine = "trtllm" }, c: inside, fitted: true,
			want: []string{"TensorRT-LLM 1.0: the constants were fitted on release 0.x"}},
		{name: "reasoning lengths and a crowd", edit: func(o *Options) { o.Engine = "trtllm@0.x" }, fitted: true,
			c:    EnvelopeCase{Input: [2]int{1024, 1024}, Output: [2]int{8192, 8192}, Concurrency: 300, Preemptions: 3, QueueGrowing: true},
			want: []string{"outputs of 8192 tokens: fitted on 200–2000", "300 requests running at once: fitted up to 250", "3 KV-cache preemptions", "grows without bound"}},
		{name: "fp8 on a 16-bit fit", edit: func(o *Options) { o.Engine, o.GPU, o.DType = "trtllm@0.x", "A100-80GB-SXM", "fp8" }, c: inside, fitted: true,
			want: []string{"fp8 weights: fitted on 16-bit weights"}},
		{name: "a model outside the sizes", edit: func(o *Options) { o.Engine, o.Model = "trtllm@0.x", "Llama-3.1-405B"; o.TensorParallelSize = 8 }, c: inside, fitted: true,
			want: []string{"Llama-3.1-405B (406B parameters): fitted on 8–70B"}},
		{name: "no engine", edit: func(o *Options) {}, c: inside, want: []string{"the GPU family's default constants: not fitted"}},
		{name: "a family without constants for the GPU", edit: func(o *Options) { o.Engine = "vllm" }, c: inside, want: []string{"vllm ships none for H100-SXM"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultOptions()
			c.edit(&o)
			o, err := o.WithEngine(nil)
			if err != nil {
				t.Fatal(err)
			}
			e, err := o.Envelope()
			if err != nil {
				t.Fatal(err)
			}
			if e.Fitted != c.fitted {
				t.Errorf("fitted %v, want %v (%s)", e.Fitted, c.fitted, e.Source)
			}
			got := e.Flags(c.c)
			if len(got) != len(c.want) {
				t.Fatalf("flags %q, want %d like %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("flag %d %q, want it to say %q", i, got[i], w)
				}
			}
			iv := e.Interval80(c.c)
			if iv.Outside != (len(got) > 0) {
				t.Errorf("flags %q but the interval's outside is %v", got, iv.Outside)
			}
			want := e.Range.Interval80
			if iv.Outside {
				want = Interval{TTFT: max(CrossSource80.TTFT, want.TTFT), TPOT: max(CrossSource80.TPOT, want.TPOT), E2E: max(CrossSource80.E2E, want.E2E),
					From: "outside the envelope: " + CrossSource80.From, Outside: true}
			}
			if iv != want {
				t.Errorf("interval %+v, want %+v", iv, want)
			}
			if e.Fitted && e.Range.Interval80.TTFT <= 0 {
				t.Errorf("a fitted family constant without an interval: %+v", e.Range)
			}
		})
	}
}

// Inside a fitted envelope without an in-source interval (a profile fitted
// without residuals), the interval is the cross-source one, unmarked.
func TestIntervalWithoutInSource(t *testing.T) {
	e := Envelope{Source: "profile p.yaml", Fitted: true, Range: FittedRange{Input: [2]int{100, 1000}, Output: [2]int{10, 100}, Concurrency: [2]int{1, 8}}}
	in := EnvelopeCase{Input: [2]int{500, 500}, Output: [2]int{50, 50}, Concurrency: 4}
	iv := e.Interval80(in)
	if iv.Outside || iv.TTFT != CrossSource80.TTFT || !strings.HasPrefix(iv.From, "no in-source interval: ") {
		t.Errorf("inside without residuals: %+v", iv)
	}
	out := in
	out.Concurrency = 16
	if iv := e.Interval80(out); !iv.Outside || !strings.HasPrefix(iv.From, "outside the envelope: ") {
		t.Errorf("outside: %+v", iv)
	}
}
