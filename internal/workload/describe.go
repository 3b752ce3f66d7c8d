package workload

import (
	"fmt"
	"strings"
)

// Describe names a workload built from these options and its load, in
// words a report or plan prints.
func Describe(o Options, l Load) string {
	if o.Trace != "" {
		s := fmt.Sprintf("trace %s", o.Trace)
		if o.TraceWindow != "" {
			s += " window " + o.TraceWindow
		}
		if o.TraceModel != "" {
			s += " model " + o.TraceModel
		}
		if o.TimeScale != 1 {
			s += fmt.Sprintf(" at time scale %g", o.TimeScale)
		}
		return s + fmt.Sprintf(", %d requests at their arrival times", l.Requests)
	}
	s := fmt.Sprintf("prompts %s tokens, max_tokens %s, %s arrivals", o.InputTokens, o.OutputTokens, l.Arrival)
	if l.Arrival == Gamma {
		s += fmt.Sprintf(" (burstiness %g)", l.Burstiness)
	}
	if o.PrefixTokens > 0 {
		s += fmt.Sprintf(", %d-token prefixes shared by %d groups", o.PrefixTokens, o.PrefixGroups)
	}
	if o.Turns > 1 {
		s += fmt.Sprintf(", sessions of %d turns %v apart", o.Turns, o.ThinkTime)
	}
	if o.Prompts != "" {
		s = fmt.Sprintf("prompts of %s, %s arrivals", o.Prompts, l.Arrival)
	}
	return s + fmt.Sprintf("; at least %d requests, or a minute of arrivals, per simulation", l.Requests)
}

// Describe names the load's schedule in words, as a run's log line
// prints it: trace replay or the arrival rate and process, the
// concurrency, how many requests, for how long, and a shard's share.
func (l Load) Describe() string {
	var parts []string
	switch {
	case l.Arrivals != nil:
		parts = append(parts, "trace replay")
	case l.Rate > 0:
		parts = append(parts, fmt.Sprintf("%g req/s %s", l.Rate, l.Arrival))
	}
	if l.Concurrency > 0 {
		if l.Mode() == "open" {
			parts = append(parts, fmt.Sprintf("at most %d in flight", l.Concurrency))
		} else {
			parts = append(parts, fmt.Sprintf("%d concurrent", l.Concurrency))
		}
	}
	if l.Requests > 0 {
		parts = append(parts, fmt.Sprintf("%d requests", l.Requests))
	}
	if l.Duration > 0 {
		parts = append(parts, "for "+l.Duration.String())
	}
	if l.Shard.Sharded() {
		parts = append(parts, fmt.Sprintf("shard %s of the workload (its share of the above)", l.Shard))
	}
	return strings.Join(parts, ", ")
}
