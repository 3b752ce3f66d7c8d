package perfmodel

import (
	"fmt"
	"time"
)

// Efficiency holds the named factors that turn datasheet peaks into the rates
// serving engines achieve. The defaults (DefaultEfficiency) come from
// published measurements, one set per GPU family; docs/perfmodel.md gives the
// sources and docs/performance.md the resulting error against measured
// latencies. Every factor can be set.
type Efficiency struct {
	// Compute is the achieved fraction of peak dense tensor FLOPs (model
	// FLOPs utilization of a large prefill).
	Compute float64 `json:"compute"`
	// Memory is the achieved fraction of peak HBM bandwidth while streaming
	// weights and KV cache (model bandwidth utilization of a decode step).
	Memory float64 `json:"memory"`
	// Interconnect is the achieved fraction of the link's bandwidth in a
	// tensor-parallel all-reduce.
	Interconnect float64 `json:"interconnect"`
	// AllReduceLatency is the fixed cost of one all-reduce (launch and
	// synchronisation), paid twice per layer when TP > 1. Each of the
	// ring's 2(TP−1) steps adds RingStep on top.
	AllReduceLatency time.Duration `json:"all_reduce_latency"`
	// RingStep is the latency of one of a ring all-reduce's 2(TP−1)
	// steps (a hop over the link and the wait for the slowest rank); 0
	// means the link's figure in NCCL's tuning model (RingStepLatency).
	// Fitted per engine where public rows show the all-reduce's cost
	// growing with TP faster than NCCL's model (docs/performance.md,
	// "Under load").
	RingStep time.Duration `json:"ring_step,omitempty"`
	// StepOverhead is the fixed cost of one engine step outside the forward
	// pass: scheduling, input preparation, sampling, detokenization.
	StepOverhead time.Duration `json:"step_overhead"`
	// LayerOverhead is the per-layer cost the roofline misses: norms,
	// rotary embedding, activation and residual kernels and their launches.
	LayerOverhead time.Duration `json:"layer_overhead"`
	// SeqOverhead is the cost of each sequence in a step outside the
	// forward pass's matmuls and attention: sampling over the vocabulary,
	// the request's bookkeeping and detokenization, its share of input
	// preparation. It is what makes a step of 100 decodes slower than the
	// roofline of its weights and KV reads.
	SeqOverhead time.Duration `json:"seq_overhead"`
	// ContextOverheadNS is a cost in nanoseconds per context token each
	// sequence of a step attends to, not shared across the tensor-parallel
	// ranks: the part of attention the bandwidth roofline misses where a
	// kernel walks a long context serially (one thread block per head,
	// without splitting the context). 0 in the defaults; fitted per
	// engine where public rows show TPOT growing with the context faster
	// than the KV reads (docs/performance.md, "Under load").
	ContextOverheadNS float64 `json:"context_overhead_ns,omitempty"`
}

// familyEfficiency is the one set of defaults per GPU family, checked by
// TestValidation. docs/perfmodel.md ("Efficiency factors", "Under load",
// "A CPU as the device") gives each value's source; MI300X and Blackwell
// are unvalidated, and the "cpu" family's overheads are starting points
// for calibrate, not measurements.
var familyEfficiency = map[string]Efficiency{
	"hopper":    {Compute: 0.55, Memory: 0.80, Interconnect: 0.70, AllReduceLatency: 8 * time.Microsecond, StepOverhead: 1500 * time.Microsecond, LayerOverhead: 25 * time.Microsecond, SeqOverhead: 40 * time.Microsecond},
	"blackwell": {Compute: 0.50, Memory: 0.80, Interconnect: 0.70, AllReduceLatency: 8 * time.Microsecond, StepOverhead: 1500 * time.Microsecond, LayerOverhead: 25 * time.Microsecond, SeqOverhead: 40 * time.Microsecond},
	"ampere":    {Compute: 0.60, Memory: 0.80, Interconnect: 0.70, AllReduceLatency: 10 * time.Microsecond, StepOverhead: 1500 * time.Microsecond, LayerOverhead: 25 * time.Microsecond, SeqOverhead: 100 * time.Microsecond},
	"ada":       {Compute: 0.60, Memory: 0.80, Interconnect: 0.70, AllReduceLatency: 25 * time.Microsecond, StepOverhead: 1500 * time.Microsecond, LayerOverhead: 25 * time.Microsecond, SeqOverhead: 100 * time.Microsecond},
	"cpu":       {Compute: 0.47, Memory: 0.90, Interconnect: 1, StepOverhead: 50 * time.Microsecond, SeqOverhead: 50 * time.Microsecond},
	"cdna3":     {Compute: 0.40, Memory: 0.65, Interconnect: 0.60, AllReduceLatency: 15 * time.Microsecond, StepOverhead: 1500 * time.Microsecond, LayerOverhead: 25 * time.Microsecond, SeqOverhead: 100 * time.Microsecond},
}

// DefaultEfficiency is the default factors for g's family (the Ampere set for
// an unknown family).
func DefaultEfficiency(g GPU) Efficiency {
	if e, ok := familyEfficiency[g.Family]; ok {
		return e
	}
	return familyEfficiency["ampere"]
}

// Roofline is every factor at its ideal: full peak FLOPs and bandwidth, no
// overheads. The design notes' worked example uses it.
func Roofline() Efficiency { return Efficiency{Compute: 1, Memory: 1, Interconnect: 1} }

// Validate checks every fraction is in (0, 1] and every duration ≥ 0.
func (e Efficiency) Validate() error {
	for _, f := range []struct {
		n string
		v float64
	}{{"compute", e.Compute}, {"memory", e.Memory}, {"interconnect", e.Interconnect}} {
		if !(f.v > 0 && f.v <= 1) {
			return fmt.Errorf("efficiency %s must be in (0, 1] (got %g)", f.n, f.v)
		}
	}
	for _, d := range []struct {
		n string
		v time.Duration
	}{{"all_reduce_latency", e.AllReduceLatency}, {"ring_step", e.RingStep}, {"step_overhead", e.StepOverhead}, {"layer_overhead", e.LayerOverhead}, {"seq_overhead", e.SeqOverhead}} {
		if d.v < 0 {
			return fmt.Errorf("efficiency %s must be ≥ 0 (got %v)", d.n, d.v)
		}
	}
	if !(e.ContextOverheadNS >= 0) {
		return fmt.Errorf("efficiency context_overhead_ns must be ≥ 0 (got %g)", e.ContextOverheadNS)
	}
	return nil
}

// Constants are an Efficiency as a file holds it: fractions as fractions,
// durations in microseconds (an engine family's shipped constants, a
// public-rows fit).
type Constants struct {
	Compute            float64 `yaml:"compute"`
	Memory             float64 `yaml:"memory"`
	Interconnect       float64 `yaml:"interconnect"`
	StepOverheadUS     float64 `yaml:"step_overhead_us"`
	LayerOverheadUS    float64 `yaml:"layer_overhead_us"`
	SeqOverheadUS      float64 `yaml:"seq_overhead_us"`
	AllReduceLatencyUS float64 `yaml:"all_reduce_latency_us"`
	// RingStepUS is absent (0: the link's NCCL figure) where none was
	// fitted.
	RingStepUS float64 `yaml:"ring_step_us,omitempty"`
	// ContextOverheadNS is absent (0) where none was fitted.
	ContextOverheadNS float64 `yaml:"context_overhead_ns,omitempty"`
}

// ConstantsOf is eff as a file holds it.
func ConstantsOf(eff Efficiency) Constants {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return Constants{Compute: eff.Compute, Memory: eff.Memory, Interconnect: eff.Interconnect, StepOverheadUS: us(eff.StepOverhead),
		LayerOverheadUS: us(eff.LayerOverhead), SeqOverheadUS: us(eff.SeqOverhead), AllReduceLatencyUS: us(eff.AllReduceLatency),
		RingStepUS: us(eff.RingStep), ContextOverheadNS: eff.ContextOverheadNS}
}

// Efficiency is the constants as the model's factors (durations to the
// nanosecond).
func (c Constants) Efficiency() Efficiency {
	d := func(us float64) time.Duration { return time.Duration(us * 1e3) }
	return Efficiency{Compute: c.Compute, Memory: c.Memory, Interconnect: c.Interconnect, StepOverhead: d(c.StepOverheadUS),
		LayerOverhead: d(c.LayerOverheadUS), SeqOverhead: d(c.SeqOverheadUS), AllReduceLatency: d(c.AllReduceLatencyUS),
		RingStep: d(c.RingStepUS), ContextOverheadNS: c.ContextOverheadNS}
}
