package workload

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

func agentDefaults(t *testing.T) AgentDefaults {
	t.Helper()
	lat, err := ParseDelay("100ms")
	if err != nil {
		t.Fatal(err)
	}
	return AgentDefaults{Input: Fixed(50), Output: Fixed(10), ToolResult: Fixed(20), ToolLatency: lat}
}

// The prompt of step k+1 is step k's prompt, its answer and its tools'
// results: it grows by exactly those tokens.
func TestAgentSessionPromptGrowsByToolResults(t *testing.T) {
	lat, _ := ParseDelay("uniform:10ms-30ms")
	plan, err := AgentSpec{Input: Fixed(40), Output: Fixed(8), Steps: 3, Tools: 2, ToolLatency: lat,
		ToolResult: Fixed(15), Parallel: true, Think: 5 * time.Millisecond}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{Chat: true, Plans: []AgentPlan{plan}, Seed: 7}
	s := a.Session(3).(ToolSession)
	r1, ok := s.Next(0)
	if !ok || r1.InputTokens != 40 || r1.Turn != 1 || r1.Steps != 3 || len(r1.Tools) != 2 || !r1.Parallel || r1.Think != 0 {
		t.Fatalf("step 1: %+v", r1)
	}
	for _, tc := range r1.Tools {
		if tc.Latency < 10*time.Millisecond || tc.Latency > 30*time.Millisecond || tc.ResultTokens != 15 {
			t.Fatalf("tool call %+v outside its distributions", tc)
		}
	}
	res := []string{tokenizer.Filler(15, 1), tokenizer.Filler(15, 2)}
	s.ToolResults(res)
	r2, _ := s.Next(8)
	// + the answer (role + 8) + two results (role + "toolN result:" + 15).
	want := 40 + 1 + 8
	for i, r := range res {
		want += 1 + tokenizer.Count(resultText(plan[0], i, r))
	}
	if r2.InputTokens != want || r2.Think != 5*time.Millisecond || r2.Turn != 2 || len(r2.Tools) != 2 {
		t.Fatalf("step 2: input %d want %d, %+v", r2.InputTokens, want, r2)
	}
	if r2.SharedPrefixTokens != 40+1+8 {
		t.Errorf("step 2 shares %d tokens, want %d", r2.SharedPrefixTokens, 49)
	}
	r3, _ := s.Next(8)
	if len(r3.Tools) != 0 || r3.Turn != 3 {
		t.Fatalf("the last step answers without tools: %+v", r3)
	}
	if _, ok := s.Next(8); ok {
		t.Fatal("a fourth step")
	}
	// The same session again draws the same plan.
	again, _ := a.Session(3).Next(0)
	if diff := cmp.Diff(r1.Tools, again.Tools); diff != "" {
		t.Errorf("session 3 is not reproducible (-first +again):\n%s", diff)
	}
}

func TestReadAgentSessions(t *testing.T) {
	def := agentDefaults(t)
	in := `{"steps": [{"input_tokens": 400, "output_tokens": "uniform:10-20", "parallel": true,
  "tools": [{"name": "search", "latency": "120ms", "result_tokens": 300}, {"name": "calc"}]},
 {"think": "1s", "input_tokens": 5}]}

{"steps": [{}]}
`
	in = strings.ReplaceAll(in, "\n  ", " ")
	in = strings.ReplaceAll(in, "\n {", " {")
	plans, err := ReadAgentSessions(strings.NewReader(in), def)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 2 || len(plans[0]) != 2 || len(plans[1]) != 1 {
		t.Fatalf("plans %+v", plans)
	}
	s0 := plans[0][0]
	if s0.InputTokens.String() != "400" || s0.Output.String() != "uniform:10-20" || !s0.Parallel || len(s0.Tools) != 2 {
		t.Errorf("step 0: %+v", s0)
	}
	if s0.Tools[0].Name != "search" || s0.Tools[0].Latency.String() != "120ms" || s0.Tools[0].Result.String() != "300" {
		t.Errorf("tool 0: %+v", s0.Tools[0])
	}
	if s0.Tools[1].Latency.String() != "100ms" || s0.Tools[1].Result.String() != "20" {
		t.Errorf("tool 1 takes the defaults: %+v", s0.Tools[1])
	}
	if s1 := plans[0][1]; s1.Think != time.Second || s1.InputTokens.String() != "5" || s1.Output.String() != "10" {
		t.Errorf("step 1: %+v", s1)
	}
	if plans[1][0].InputTokens.String() != "50" {
		t.Errorf("a first step without input_tokens takes the default: %+v", plans[1][0])
	}
}

func TestReadAgentSessionsErrors(t *testing.T) {
	def := agentDefaults(t)
	for _, tc := range []struct{ in, want string }{
		{`{"steps": [{}]}` + "\nnot json", "line 2: not a session object"},
		{"\n\n" + `{"steps": []}`, "line 3: want {\"steps\""},
		{`{"steps": [{"outputs": 3}]}`, `line 1: not a session object: json: unknown field "outputs"`},
		{`{"steps": [{"output_tokens": -3}]}`, "line 1: steps[0].output_tokens:"},
		{`{"steps": [{"output_tokens": 1.5}]}`, "line 1: steps[0].output_tokens: 1.5 is not a whole number"},
		{`{"steps": [{}, {"tools": [{"latency": "fast"}]}]}`, "line 1: steps[1].tools[0].latency: delay \"fast\""},
		{`{"steps": [{"think": "-1s"}]}`, "line 1: steps[0].think:"},
		{`{"steps": [{}]} {"steps": [{}]}`, "line 1: more than one JSON value"},
		// The tool simulator's own bounds (a call over them is refused at
		// run time): refused here, before any session runs.
		{`{"steps": [{}, {"tools": [{"result_tokens": 1073741824}]}]}`, "line 1: steps[1].tools[0].result_tokens: 1073741824: over the 1048576 tokens one tool result may hold"},
		{`{"steps": [{}, {"tools": [{"result_tokens": "uniform:1-2000000"}]}]}`, "steps[1].tools[0].result_tokens: uniform:1-2000000: over the 1048576"},
		{`{"steps": [{}, {"tools": [{"latency": "100000h"}]}]}`, "line 1: steps[1].tools[0].latency: 100000h: over the 1h0m0s one tool call may take"},
		{"", "no sessions"},
	} {
		_, err := ReadAgentSessions(strings.NewReader(tc.in), def)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

func TestAgentOptions(t *testing.T) {
	given := func(string) bool { return false }
	o := DefaultOptions()
	o.AgentSteps, o.AgentTools, o.ToolMode, o.ToolLatency = 3, 2, "sequential", "uniform:50ms-150ms"
	src, _, err := o.Build(true, given)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := src.Session(0).Next(0)
	if r.Parallel || len(r.Tools) != 2 || r.Steps != 3 {
		t.Errorf("first step %+v", r)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(bad, []byte(`{"steps": [{}]}`+"\n"+`{"steps": [{"tools": [{"result_tokens": "x"}]}]}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set   func(*Options)
		field string
	}{
		{func(o *Options) { o.AgentSteps = 2; o.ToolMode = "both" }, "tool_mode"},
		{func(o *Options) { o.AgentTools = 2 }, "agent_steps"},
		{func(o *Options) { o.AgentSteps = 2; o.ToolLatency = "x" }, "tool_latency"},
		{func(o *Options) { o.AgentSteps = 2; o.Turns = 3 }, "turns"},
		{func(o *Options) { o.AgentSessions = bad }, "agent_sessions"},
		{func(o *Options) { o.AgentSessions = bad; o.AgentSteps = 2 }, "agent_sessions"},
	} {
		o := DefaultOptions()
		tc.set(&o)
		_, _, err := o.Build(true, given)
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: error %v, want one on %s", o, err, tc.field)
		}
	}
	o = DefaultOptions()
	o.AgentSessions = bad
	_, _, err = o.Build(true, given)
	if err == nil || !strings.Contains(err.Error(), "line 2: steps[0].tools[0].result_tokens") {
		t.Errorf("the file's error names its line and field: %v", err)
	}
}

func FuzzReadAgentSessions(f *testing.F) {
	f.Add(`{"steps": [{"input_tokens": 400, "output_tokens": 80, "tools": [{"name": "a", "latency": "uniform:1ms-2ms", "result_tokens": "normal:mean=5,sd=1"}]}]}`)
	f.Add(`{"steps": [{}, {"think": "1s", "parallel": false}]}` + "\n\n{\"steps\":[{}]}")
	f.Add(`{"steps": [{"output_tokens": "lognormal:mean=3,sigma=9"}]}`)
	f.Add(`{"steps": null}`)
	def := AgentDefaults{Input: Fixed(5), Output: Fixed(3), ToolResult: Fixed(2)}
	f.Fuzz(func(t *testing.T, in string) {
		plans, err := ReadAgentSessions(strings.NewReader(in), def)
		if err != nil {
			if !strings.Contains(err.Error(), "line ") && !strings.Contains(err.Error(), "no sessions") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		a := &Agent{Chat: true, Plans: plans, Seed: 1}
		s := a.Session(0).(ToolSession)
		for i := 0; i < 3; i++ {
			r, ok := s.Next(2)
			if !ok {
				break
			}
			if r.InputTokens < 1 || r.MaxTokens < 1 {
				t.Fatalf("step %d: %+v", i, r)
			}
			s.ToolResults(make([]string, len(r.Tools)))
		}
	})
}
