package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// AgentDefaults fill what a sessions file's step leaves out.
type AgentDefaults struct {
	Input, Output, ToolResult Dist
	ToolLatency               DelayDist
	Parallel                  bool
	Think                     time.Duration
}

// sessionLine is one line of a sessions file.
type sessionLine struct {
	Steps []struct {
		InputTokens  json.RawMessage `json:"input_tokens"`
		OutputTokens json.RawMessage `json:"output_tokens"`
		Think        *string         `json:"think"`
		Parallel     *bool           `json:"parallel"`
		Tools        []struct {
			Name         string          `json:"name"`
			Latency      *string         `json:"latency"`
			ResultTokens json.RawMessage `json:"result_tokens"`
		} `json:"tools"`
	} `json:"steps"`
}

// ReadAgentSessionsFile reads a sessions file (ReadAgentSessions).
func ReadAgentSessionsFile(path string, def AgentDefaults) ([]AgentPlan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // opened for reading: a failed Close loses nothing
	plans, err := ReadAgentSessions(f, def)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return plans, nil
}

// ReadAgentSessions reads agent sessions, one JSON object per line:
//
//	{"steps": [{"input_tokens": 400, "output_tokens": 80, "think": "0s", "parallel": true,
//	            "tools": [{"name": "search", "latency": "uniform:80ms-120ms", "result_tokens": 300}]},
//	           {"output_tokens": 200}]}
//
// Lengths are a number or a ParseDist spec, latencies and think times a
// ParseDelay spec; what a step leaves out comes from def (a later step's
// input_tokens from nowhere: it adds none). Blank lines are skipped; an
// unknown key, a bad value or a session without steps is an error naming
// the line and the field.
func ReadAgentSessions(r io.Reader, def AgentDefaults) ([]AgentPlan, error) {
	var plans []AgentPlan
	err := scanJSONL(r, 16<<20, func(line int, b []byte) error {
		p, err := parseSessionLine(b, def)
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		plans = append(plans, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(plans) == 0 {
		return nil, errors.New("sessions file has no sessions")
	}
	return plans, nil
}

// maxPlanSteps and maxPlanTools bound one session's plan.
const (
	maxPlanSteps = 10000
	maxPlanTools = 1000
)

func parseSessionLine(b []byte, def AgentDefaults) (AgentPlan, error) {
	var l sessionLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("not a session object: %w", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value on the line")
	}
	if len(l.Steps) == 0 {
		return nil, errors.New(`want {"steps": [...]} with at least one step`)
	}
	if len(l.Steps) > maxPlanSteps {
		return nil, fmt.Errorf("%d steps: at most %d", len(l.Steps), maxPlanSteps)
	}
	plan := make(AgentPlan, len(l.Steps))
	for i, s := range l.Steps {
		at := fmt.Sprintf("steps[%d]", i)
		st := AgentStep{Output: def.Output, Parallel: def.Parallel}
		var err error
		if i == 0 {
			st.InputTokens = def.Input
		} else {
			st.Think = def.Think
		}
		if st.InputTokens, err = lengthField(s.InputTokens, st.InputTokens); err != nil {
			return nil, fmt.Errorf("%s.input_tokens: %w", at, err)
		}
		if i == 0 && st.InputTokens == nil {
			return nil, fmt.Errorf("%s.input_tokens: the first step needs a prompt length", at)
		}
		if st.Output, err = lengthField(s.OutputTokens, st.Output); err != nil || st.Output == nil {
			return nil, fmt.Errorf("%s.output_tokens: %w", at, orMissing(err))
		}
		if s.Think != nil {
			d, err := time.ParseDuration(strings.TrimSpace(*s.Think))
			if err != nil || d < 0 {
				return nil, fmt.Errorf("%s.think: %q is not a non-negative duration such as 500ms", at, *s.Think)
			}
			st.Think = d
		}
		if s.Parallel != nil {
			st.Parallel = *s.Parallel
		}
		if len(s.Tools) > maxPlanTools {
			return nil, fmt.Errorf("%s.tools: %d calls, at most %d", at, len(s.Tools), maxPlanTools)
		}
		for k, t := range s.Tools {
			tat := fmt.Sprintf("%s.tools[%d]", at, k)
			tp := ToolPlan{Name: strings.TrimSpace(t.Name), Latency: def.ToolLatency, Result: def.ToolResult}
			if tp.Name == "" {
				tp.Name = fmt.Sprintf("tool%d", k+1)
			}
			if t.Latency != nil {
				if tp.Latency, err = ParseDelay(*t.Latency); err != nil {
					return nil, fmt.Errorf("%s.latency: %w", tat, err)
				}
			}
			if err := CheckToolLatency(tp.Latency); err != nil {
				return nil, fmt.Errorf("%s.latency: %w", tat, err)
			}
			if tp.Result, err = lengthField(t.ResultTokens, tp.Result); err != nil || tp.Result == nil {
				return nil, fmt.Errorf("%s.result_tokens: %w", tat, orMissing(err))
			}
			if err := CheckToolResult(tp.Result); err != nil {
				return nil, fmt.Errorf("%s.result_tokens: %w", tat, err)
			}
			st.Tools = append(st.Tools, tp)
		}
		plan[i] = st
	}
	return plan, nil
}

// lengthField reads a length given as a number or a ParseDist spec; an
// absent field keeps def.
func lengthField(raw json.RawMessage, def Dist) (Dist, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	spec := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &spec); err != nil {
			return nil, err
		}
	} else if _, err := strconv.Atoi(spec); err != nil {
		return nil, fmt.Errorf("%s is not a whole number of tokens or a distribution", spec)
	}
	return ParseDist(spec, "")
}

func orMissing(err error) error {
	if err == nil {
		return errors.New("missing, and no default")
	}
	return err
}
