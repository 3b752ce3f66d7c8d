package simulate

import (
	"github.com/tokentrace/tokentrace/internal/engine"
)

// RunConfig is a run's configuration typed, as config.json's "run"
// records it (results.Config.Run, schema results.ConfigVersion): what the
// twin of the run is rebuilt from (whatif.TwinOf), by key, not by flag.
type RunConfig struct {
	// Options are simulate's settings (its engine, workload and
	// deployment); for bench, its workload, endpoint and ignore_eos, the
	// rest at DefaultOptions.
	Options Options `json:"options"`
	// SimEngine is the engine bench embeds (its --sim-* settings); nil
	// for a simulated run or one against a server.
	SimEngine *engine.Options `json:"sim_engine,omitempty"`
	// Given names the settings the run set itself, by their snake_case
	// field names (workload.Options.Build's given).
	Given []string `json:"given,omitempty"`
	// Stream is whether bench streamed its answers; nil for a simulated
	// run and for folders written before it was recorded.
	Stream *bool `json:"stream,omitempty"`
}

// GivenFunc is Given as a function of a field name.
func (c RunConfig) GivenFunc() func(string) bool {
	set := make(map[string]bool, len(c.Given))
	for _, g := range c.Given {
		set[g] = true
	}
	return func(f string) bool { return set[f] }
}

// runConfig is Run for results.Config: nil (no run written) when unset.
func (o Output) runConfig() any {
	if o.Run == nil {
		return nil
	}
	return o.Run
}
