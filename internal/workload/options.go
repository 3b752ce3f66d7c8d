package workload

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
)

// Options describe a workload as a user gives it: what is sent (lengths,
// shared prefixes, sessions, a prompt file or a trace) and when (rate,
// arrival process, concurrency, count, warm-up). Build checks them into a
// Source and a Load, or returns a *field.Error naming the setting that is
// wrong (the snake_case names in the comments).
type Options struct {
	Rate        float64       `json:"rate"`        // rate: open-loop arrivals per second
	Arrival     string        `json:"arrival"`     // arrival: poisson, gamma or constant
	Burstiness  float64       `json:"burstiness"`  // burstiness: the gamma shape (1 is Poisson)
	Concurrency int           `json:"concurrency"` // concurrency: closed-loop workers, or with a rate the cap in flight
	Requests    int           `json:"requests"`    // requests: measured requests
	Duration    time.Duration `json:"duration"`    // duration: measured span
	Warmup      string        `json:"warmup"`      // warmup: a number of requests or a duration
	RampUp      string        `json:"ramp_up"`     // ramp_up: closed loop, a span over which the workers start, or first-token
	Seed        uint64        `json:"seed"`        // seed: arrivals and prompts

	Trace          string  `json:"trace"`            // trace: a trace to replay (Azure CSV, BurstGPT CSV or Mooncake JSONL; ReadTrace)
	TimeScale      float64 `json:"time_scale"`       // time_scale: multiplies trace times
	TraceWindow    string  `json:"trace_window"`     // trace_window: START-END or START+LENGTH
	TraceModel     string  `json:"trace_model"`      // trace_model: a BurstGPT trace's model to keep
	TraceBlockSize int     `json:"trace_block_size"` // trace_block_size: tokens per Mooncake hash_ids block (0: DefaultTraceBlockSize)

	InputTokens  string        `json:"input_tokens"`  // input_tokens: prompt length (ParseDist)
	OutputTokens string        `json:"output_tokens"` // output_tokens: max_tokens (ParseDist)
	PrefixTokens int           `json:"prefix_tokens"` // prefix_tokens: shared by a prefix group
	PrefixGroups int           `json:"prefix_groups"` // prefix_groups: distinct shared prefixes
	Turns        int           `json:"turns"`         // turns per session
	ThinkTime    time.Duration `json:"think_time"`    // think_time between turns
	Prompts      string        `json:"prompts"`       // prompts: a prompt file (JSONL or ShareGPT JSON)

	// Agent sessions (docs/bench.md, "Agent sessions"): AgentSteps > 0 or
	// a sessions file makes every session an agent's.
	AgentSteps       int    `json:"agent_steps"`        // agent_steps: model calls per session
	AgentTools       int    `json:"agent_tools"`        // agent_tools: tool calls per step (but the last)
	ToolMode         string `json:"tool_mode"`          // tool_mode: parallel or sequential
	ToolLatency      string `json:"tool_latency"`       // tool_latency: the built-in tool simulator's latency (ParseDelay)
	ToolResultTokens string `json:"tool_result_tokens"` // tool_result_tokens: a tool result's length (ParseDist)
	AgentSessions    string `json:"agent_sessions"`     // agent_sessions: a JSONL file of sessions' steps (ReadAgentSessions)
}

// Agent reports whether the options describe agent sessions.
func (o Options) Agent() bool {
	return o.AgentSteps != 0 || o.AgentTools != 0 || o.AgentSessions != ""
}

// DefaultOptions are bench's defaults.
func DefaultOptions() Options {
	return Options{
		Arrival: string(Poisson), Burstiness: 1, Seed: 1, TimeScale: 1,
		InputTokens: "256", OutputTokens: "64", PrefixGroups: 1, Turns: 1,
		ToolMode: "parallel", ToolLatency: "100ms", ToolResultTokens: "100",
	}
}

// Build checks the options and returns what to send and when. chat builds
// chat messages (else completion prompts). given reports whether the user
// set a field, by its snake_case name: a rate of 0 given is an error, not
// given it means the default (DefaultRate, or none with a concurrency).
func (o Options) Build(chat bool, given func(field string) bool) (Source, Load, error) {
	l, err := o.load(given)
	if err != nil {
		return nil, Load{}, err
	}
	out, err := ParseDist(o.OutputTokens, "output")
	if err == nil {
		err = checkTokens(out)
	}
	if err != nil {
		return nil, Load{}, field.Wrap("output_tokens", err)
	}
	var src Source
	switch {
	case o.Agent():
		a, err := o.agent(chat, out)
		if err != nil {
			return nil, Load{}, err
		}
		src = a
	case o.Trace != "":
		rp, err := o.replay(chat, given)
		if err != nil {
			return nil, Load{}, err
		}
		l.Arrivals = rp.Arrivals
		if !given("requests") {
			l.Requests = rp.Len()
		}
		src = rp
	case o.Prompts != "":
		ps, err := ReadPromptFile(o.Prompts)
		if err != nil {
			return nil, Load{}, field.Wrap("prompts", err)
		}
		pr := &Prompts{List: ps, Chat: chat, Output: out, Seed: o.Seed}
		pr.Prepare()
		src = pr
	default:
		in, err := ParseDist(o.InputTokens, "input")
		if err == nil {
			err = checkTokens(in)
		}
		if err != nil {
			return nil, Load{}, field.Wrap("input_tokens", err)
		}
		s := &Synthetic{Chat: chat, Input: in, Output: out, PrefixTokens: o.PrefixTokens,
			PrefixGroups: o.PrefixGroups, Turns: o.Turns, Think: o.ThinkTime, Seed: o.Seed}
		if err := s.Validate(); err != nil {
			return nil, Load{}, err
		}
		src = s
	}
	if o.Trace == "" {
		if l.Rate == 0 && l.Concurrency == 0 {
			l.Rate = DefaultRate
		}
		if l.Requests == 0 && l.Duration == 0 {
			l.Requests = DefaultRequests
		}
	}
	return src, l, nil
}

// load checks the schedule's settings.
func (o Options) load(given func(string) bool) (Load, error) {
	l := Load{Rate: o.Rate, Burstiness: o.Burstiness, Concurrency: o.Concurrency, Requests: o.Requests,
		Duration: o.Duration, Seed: o.Seed}
	if given("rate") && !(o.Rate > 0) || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) || o.Rate < 0 {
		return l, field.Invalid("rate", o.Rate, "must be a positive number of requests per second")
	}
	if o.Concurrency < 0 || given("concurrency") && o.Concurrency == 0 {
		return l, field.Invalid("concurrency", o.Concurrency, "must be at least 1")
	}
	if o.Requests < 0 || given("requests") && o.Requests == 0 {
		return l, field.Invalid("requests", o.Requests, "must be at least 1")
	}
	if o.Duration < 0 || given("duration") && o.Duration == 0 {
		return l, field.Invalid("duration", o.Duration, "must be positive")
	}
	if err := parseRampUp(o.RampUp, &l); err != nil {
		return l, err
	}
	if (l.RampUp > 0 || l.RampFirstToken) && (o.Rate > 0 || o.Trace != "") {
		return l, field.Errorf("ramp_up", "staggers a closed loop's workers; an open loop's arrivals set its start (leave out {rate} or {ramp_up})")
	}
	p, err := ParseProcess(o.Arrival)
	if err != nil {
		return l, field.Wrap("arrival", err)
	}
	l.Arrival = p
	if p == Gamma && !(o.Burstiness > 0 && !math.IsInf(o.Burstiness, 0)) {
		return l, field.Invalid("burstiness", o.Burstiness, "must be positive")
	}
	if err := parseWarmup(o.Warmup, &l); err != nil {
		return l, err
	}
	return l, nil
}

// replay reads the trace and its window.
func (o Options) replay(chat bool, given func(string) bool) (*Replay, error) {
	if o.Prompts != "" {
		return nil, field.Errorf("trace", "cannot be combined with {prompts}: the trace gives the lengths")
	}
	if given("rate") {
		return nil, field.Errorf("trace", "sets the arrival times; leave out {rate} (use {time_scale})")
	}
	if o.TraceBlockSize < 0 {
		return nil, field.Invalid("trace_block_size", o.TraceBlockSize, "must be positive")
	}
	t, err := ReadTraceFile(o.Trace, TraceFilter{Model: o.TraceModel})
	if err != nil {
		if me := ModelError(""); errors.As(err, &me) {
			return nil, field.Wrap("trace_model", err)
		}
		return nil, field.Wrap("trace", err)
	}
	w, err := ParseWindow(o.TraceWindow)
	if err != nil {
		return nil, field.Wrap("trace_window", err)
	}
	if !(o.TimeScale > 0) || math.IsInf(o.TimeScale, 0) {
		return nil, field.Invalid("time_scale", o.TimeScale, "must be positive")
	}
	rp, err := NewReplay(t.Rows, ReplayConfig{Window: w, Scale: o.TimeScale, Chat: chat, Seed: o.Seed, BlockSize: o.TraceBlockSize})
	if err != nil {
		return nil, field.Wrap("trace_window", err)
	}
	return rp, nil
}

// agent checks the agent sessions' settings and builds their source.
func (o Options) agent(chat bool, out Dist) (*Agent, error) {
	switch {
	case o.Trace != "":
		return nil, field.Errorf("trace", "cannot be combined with agent sessions")
	case o.Prompts != "":
		return nil, field.Errorf("prompts", "cannot be combined with agent sessions")
	case o.Turns > 1:
		return nil, field.Errorf("turns", "an agent session's model calls are its {agent_steps}; leave out {turns}")
	case o.PrefixTokens > 0:
		return nil, field.Errorf("prefix_tokens", "cannot be combined with agent sessions")
	case o.ThinkTime < 0:
		return nil, field.Invalid("think_time", o.ThinkTime, "must not be negative")
	}
	var def AgentDefaults
	var err error
	if def.Input, err = ParseDist(o.InputTokens, "input"); err != nil {
		return nil, field.Wrap("input_tokens", err)
	}
	if def.ToolResult, err = ParseDist(o.ToolResultTokens, ""); err == nil {
		err = CheckToolResult(def.ToolResult)
	}
	if err != nil {
		return nil, field.Wrap("tool_result_tokens", err)
	}
	if def.ToolLatency, err = ParseDelay(o.ToolLatency); err == nil {
		err = CheckToolLatency(def.ToolLatency)
	}
	if err != nil {
		return nil, field.Wrap("tool_latency", err)
	}
	switch strings.ToLower(strings.TrimSpace(o.ToolMode)) {
	case "parallel":
		def.Parallel = true
	case "sequential":
	default:
		return nil, field.Invalid("tool_mode", o.ToolMode, "want parallel or sequential")
	}
	def.Output, def.Think = out, o.ThinkTime
	a := &Agent{Chat: chat, Seed: o.Seed}
	if o.AgentSessions != "" {
		if o.AgentSteps != 0 || o.AgentTools != 0 {
			return nil, field.Errorf("agent_sessions", "gives the steps; leave out {agent_steps} and {agent_tools}")
		}
		if a.Plans, err = ReadAgentSessionsFile(o.AgentSessions, def); err != nil {
			return nil, field.Wrap("agent_sessions", err)
		}
		return a, nil
	}
	plan, err := AgentSpec{Input: def.Input, Output: out, Steps: o.AgentSteps, Tools: o.AgentTools,
		ToolLatency: def.ToolLatency, ToolResult: def.ToolResult, Parallel: def.Parallel, Think: o.ThinkTime}.Plan()
	if err != nil {
		return nil, err
	}
	a.Plans = []AgentPlan{plan}
	return a, nil
}

// RampFirstToken is the ramp_up that starts each closed-loop worker when
// the previous one's first answer brings its first token.
const RampFirstToken = "first-token"

// parseRampUp reads a ramp-up into l: a duration (0: none) or
// RampFirstToken.
func parseRampUp(s string, l *Load) error {
	span, first, err := ParseRampUp(s)
	if err != nil {
		return field.Invalid("ramp_up", strings.TrimSpace(s), "want a duration such as 2s (worker k of N starts k/N of it after the first) or "+RampFirstToken+" (each worker when the previous one's first token arrives)")
	}
	l.RampUp, l.RampFirstToken = span, first
	return nil
}

// ParseRampUp reads a ramp-up as Load.RampName writes it: "" or a
// duration (the span), or RampFirstToken.
func ParseRampUp(s string) (span time.Duration, firstToken bool, err error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return 0, false, nil
	case strings.EqualFold(s, RampFirstToken):
		return 0, true, nil
	}
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = errors.New("negative")
	}
	return d, false, err
}

// parseWarmup reads a warm-up: a whole number of requests or a duration.
func parseWarmup(s string, l *Load) error {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 {
			return field.Invalid("warmup", n, "must not be negative")
		}
		l.WarmupRequests = n
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return field.Invalid("warmup", s, "want a number of requests or a duration such as 10s")
	}
	l.WarmupDuration = d
	return nil
}
