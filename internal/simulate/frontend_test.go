package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// frontendNS is a record's server stage "frontend" (0 when it has none).
func frontendNS(r *latency.Record) int64 {
	for _, s := range r.Timing {
		if s.Hop == latency.HopServer && s.Name == string(latency.TimingFrontend) {
			return s.NS
		}
	}
	return 0
}

// A replica's front end is a delay every request takes, many at once:
// three clients sending at 0 all reach the engine 10 ms later (a server
// of its own would give 10, 20 and 30 ms), each record carries exactly
// 10 ms as its "frontend" stage, and the client's TTFT is it plus the
// engine's own queue and prefill, which do not count it.
func TestFrontEndIsADelay(t *testing.T) {
	const fe = 10 * time.Millisecond
	cfg := Config{Engine: h100(t), Workload: synthetic(500, 8), IgnoreEOS: true, Model: "m",
		FrontEnd: fe, Load: workload.Load{Concurrency: 3, Requests: 6}}
	recs, _ := collect(t, cfg)
	for _, r := range recs {
		fn := frontendNS(r)
		sp := r.Server
		if got := r.FirstTokenNS - r.SentNS; got != fn+sp.QueueNS+sp.PrefillNS {
			t.Errorf("%s: TTFT %d ≠ frontend %d + queue %d + prefill %d", r.ID, got, fn, sp.QueueNS, sp.PrefillNS)
		}
		if fn != int64(fe) {
			t.Errorf("%s (sent at %v): frontend %v, want %v", r.ID, time.Duration(r.SentNS), time.Duration(fn), fe)
		}
	}

	cfg.FrontEnd = 0
	none, _ := collect(t, cfg)
	for _, r := range none {
		if fn := frontendNS(r); fn != 0 {
			t.Errorf("%s: no front end configured, frontend stage %d", r.ID, fn)
		}
	}
}

// --engine adds its release's front end (families.yaml intake_us: vLLM
// 0.11's 37.6 ms, none for SGLang 0.5 or TensorRT-LLM 0.x); --front-end replaces it, 0
// included; no engine, or a disaggregated deployment, adds none.
func TestOptionsFrontEnd(t *testing.T) {
	for _, c := range []struct {
		name     string
		engine   string
		given    time.Duration
		setGiven bool
		prefill  int
		want     time.Duration
	}{
		{"no engine", "", 0, false, 0, 0},
		{"vllm", "vllm", 0, false, 0, 37600 * time.Microsecond},
		{"vllm@0.11", "vllm@0.11", 0, false, 0, 37600 * time.Microsecond},
		{"sglang@0.5.7: none fitted", "sglang@0.5.7", 0, false, 0, 0},
		{"trtllm@0.21: no front end fitted", "trtllm@0.21", 0, false, 0, 0},
		{"given", "sglang", 5 * time.Millisecond, true, 0, 5 * time.Millisecond},
		{"given 0", "vllm", 0, true, 0, 0},
		{"disaggregated", "vllm", 0, false, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultOptions()
			o.Engine.Engine, o.FrontEnd, o.PrefillReplicas = c.engine, c.given, c.prefill
			got, err := o.FrontEndOf(func(f string) bool { return f == "front_end" && c.setGiven })
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("front end %v, want %v", got, c.want)
			}
		})
	}
	bad := Config{Engine: h100(t), Workload: synthetic(10, 2), FrontEnd: -time.Millisecond, Load: workload.Load{Concurrency: 1, Requests: 1}}
	if err := bad.withDefaults().validate(); err == nil || !strings.Contains(err.Error(), "front_end") {
		t.Errorf("a negative front end: %v, want an error naming front_end", err)
	}
}
