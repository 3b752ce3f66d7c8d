package workload

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// ToolCall is one tool call an agent step asks for once its answer ends.
// The load generator decides the calls (it knows the session's plan); the
// model does not have to write tool-call JSON.
type ToolCall struct {
	Name string
	// Latency is how long the built-in tool simulator takes to answer it,
	// drawn from the workload's tool latency distribution.
	Latency time.Duration
	// ResultTokens is the length of the result the simulator answers.
	ResultTokens int
}

// ToolSession is a session whose next request carries the results of the
// previous request's tool calls: an agent session. The load generator
// gives it the results (in the order of the calls) before asking for the
// next step.
type ToolSession interface {
	Session
	ToolResults(results []string)
}

// AgentStep is one step of an agent session as planned: a model call and
// the tool calls its answer requests.
type AgentStep struct {
	// InputTokens are the step's new prompt tokens (the first step's whole
	// prompt; later steps add them after the tool results, 0 for none).
	InputTokens Dist
	Output      Dist // max_tokens
	Think       time.Duration
	Tools       []ToolPlan
	Parallel    bool // make the step's tool calls at once
}

// ToolPlan is a tool call of a planned step, its latency and result
// length as distributions (drawn per session).
type ToolPlan struct {
	Name    string
	Latency DelayDist
	Result  Dist
}

// Bounds of one tool call, those the tool simulator (internal/agent)
// enforces: a call over them is refused there, so a workload stating more
// is refused before it runs (CheckToolLatency, CheckToolResult), and a
// draw of a distribution's tail is clamped to them.
const (
	// MaxToolLatency is the longest latency of one tool call.
	MaxToolLatency = time.Hour
	// MaxToolResultTokens is the longest result of one tool call.
	MaxToolResultTokens = 1 << 20
)

// CheckToolLatency refuses a tool latency distribution whose stated
// latency (fixed, a uniform range's top, a mean) is over MaxToolLatency.
func CheckToolLatency(d DelayDist) error {
	if d.d == nil {
		return nil
	}
	if top := time.Duration(statedTop(d.d)) * time.Microsecond; top > MaxToolLatency {
		return fmt.Errorf("%s: over the %v one tool call may take", d, MaxToolLatency)
	}
	return nil
}

// CheckToolResult refuses a tool result length distribution whose stated
// length (fixed, a uniform range's top, a mean) is over
// MaxToolResultTokens.
func CheckToolResult(d Dist) error {
	if top := statedTop(d); top > MaxToolResultTokens {
		return fmt.Errorf("%s: over the %d tokens one tool result may hold", d, MaxToolResultTokens)
	}
	return nil
}

// AgentPlan is an agent session's steps.
type AgentPlan []AgentStep

// Agent is an agent workload: session i follows plan i mod len(Plans),
// drawing lengths and tool latencies from its own seeded stream. Each
// step's prompt is the whole history: the earlier prompts, each answer (as
// many tokens as it had) and each tool result.
type Agent struct {
	Chat  bool
	Plans []AgentPlan
	Seed  uint64
}

// AgentSpec describes generated agent sessions: Steps steps, every one but
// the last asking for Tools tool calls (the last answers).
type AgentSpec struct {
	Input       Dist // the first step's prompt
	Output      Dist // max_tokens per step
	Steps       int
	Tools       int
	ToolLatency DelayDist
	ToolResult  Dist
	Parallel    bool
	Think       time.Duration
}

// Plan checks the spec and builds its plan.
func (s AgentSpec) Plan() (AgentPlan, error) {
	switch {
	case s.Steps < 1:
		return nil, field.Invalid("agent_steps", s.Steps, "must be at least 1")
	case s.Tools < 0:
		return nil, field.Invalid("agent_tools", s.Tools, "must not be negative")
	case s.Think < 0:
		return nil, field.Invalid("think_time", s.Think, "must not be negative")
	case s.Input == nil || s.Output == nil || s.ToolResult == nil:
		return nil, field.Errorf("agent_steps", "needs input, output and tool result lengths")
	}
	if err := CheckToolLatency(s.ToolLatency); err != nil {
		return nil, field.Wrap("tool_latency", err)
	}
	if err := CheckToolResult(s.ToolResult); err != nil {
		return nil, field.Wrap("tool_result_tokens", err)
	}
	plan := make(AgentPlan, s.Steps)
	for i := range plan {
		st := AgentStep{InputTokens: s.Input, Output: s.Output, Parallel: s.Parallel}
		if i > 0 {
			st.InputTokens, st.Think = nil, s.Think
		}
		if i < s.Steps-1 {
			for k := range s.Tools {
				st.Tools = append(st.Tools, ToolPlan{Name: fmt.Sprintf("tool%d", k+1), Latency: s.ToolLatency, Result: s.ToolResult})
			}
		}
		plan[i] = st
	}
	return plan, nil
}

// Session returns session i.
func (a *Agent) Session(i int64) Session {
	return &agentSession{a: a, plan: a.Plans[int(i%int64(len(a.Plans)))], id: i,
		r: rand.New(rand.NewPCG(a.Seed^0xA6E17, uint64(i)))}
}

type agentSession struct {
	a       *Agent
	plan    AgentPlan
	id      int64
	r       *rand.Rand
	step    int
	history []tokenizer.Message
	results []string
}

func (s *agentSession) ToolResults(results []string) { s.results = results }

func (s *agentSession) Next(prevOutput int) (Request, bool) {
	if s.step >= len(s.plan) {
		return Request{}, false
	}
	st := s.plan[s.step]
	s.step++
	chat := s.a.Chat
	req := Request{Session: s.id, Turn: s.step, Steps: len(s.plan), MaxTokens: st.Output.Sample(s.r),
		Parallel: st.Parallel}
	if s.step > 1 {
		req.Think = st.Think
		s.history = append(s.history, tokenizer.Message{Role: "assistant",
			Content: tokenizer.Filler(max(prevOutput, 1), turnSeed(s.a.Seed, s.id, s.step-1, 2))})
		req.SharedPrefixTokens = promptTokens(s.history, chat)
		for i, r := range s.results {
			// Results go as user messages: no tool-call JSON, so any chat
			// server takes them.
			s.history = append(s.history, tokenizer.Message{Role: "user", Content: resultText(s.plan[s.step-2], i, r)})
		}
		s.results = nil
	}
	if st.InputTokens != nil {
		role := 0
		if chat {
			role = 1
		}
		n := max(st.InputTokens.Sample(s.r), role+1)
		s.history = append(s.history, tokenizer.Message{Role: "user",
			Content: tokenizer.Filler(n-role, turnSeed(s.a.Seed, s.id, s.step, 1))})
	}
	if len(s.history) == 0 { // a first step needs a prompt
		s.history = append(s.history, tokenizer.Message{Role: "user", Content: tokenizer.Filler(1, turnSeed(s.a.Seed, s.id, 1, 1))})
	}
	for _, t := range st.Tools {
		req.Tools = append(req.Tools, ToolCall{Name: t.Name, Latency: min(t.Latency.Sample(s.r), MaxToolLatency),
			ResultTokens: min(t.Result.Sample(s.r), MaxToolResultTokens)})
	}
	setContent(&req, s.history, chat)
	return req, true
}

// resultText is a tool result as the next prompt carries it.
func resultText(prev AgentStep, i int, result string) string {
	name := "tool"
	if i < len(prev.Tools) {
		name = prev.Tools[i].Name
	}
	return strings.TrimSpace(name + " result: " + result)
}
