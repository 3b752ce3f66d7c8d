package perfmodel

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
)

// Request is what `tokentrace estimate` asks: names as the user typed them,
// resolved by Plan. A bad one gives a *field.Error named by the setting:
// model, gpu, gpu_file, tensor_parallel_size, dtype, kv_cache_dtype,
// gpu_memory_utilization, input_tokens, output_tokens, batch,
// speculative_k, speculative_alpha, draft_model, profile, prices.
type Request struct {
	Model   string // catalog name, or a path to a config.json
	GPU     string
	GPUFile string // optional YAML catalog extending/overriding the built-in one
	// TP is the tensor-parallel degree; 0 picks the smallest power of two
	// at which the weights fit.
	TP          int
	WeightDType string
	KVDType     string
	MemUtil     float64
	// Eff overrides the defaults field by field (nil keeps the GPU family's
	// default). Roofline sets every efficiency to 1 and every overhead to 0
	// first.
	Eff      EffOverride
	Roofline bool
	Input    int
	Output   int
	Batches  []int
	SpecK    int
	Alpha    float64
	// DraftModel (catalog name or config.json) is the speculative draft.
	DraftModel string
	// Base, when set, replaces the GPU family's default constants (an
	// engine family's, --engine); Profile and Eff still replace it.
	Base *Efficiency
	// Profile is a profile file (tokentrace calibrate) whose constants
	// replace the GPU family's defaults; Eff still overrides them field by
	// field. It must be for this model, GPU, TP and precisions.
	Profile string
	// Prices is a price file whose entries replace the built-in price
	// table's (LoadPrices); empty: the built-in table.
	Prices string
}

// Result is a Request resolved and estimated, one Estimate per batch size.
type Result struct {
	Est    *Estimator
	Model  ModelSpec
	GPU    GPU
	TPAuto bool
	Work   Workload
	Draft  *ModelSpec
	Rows   []Estimate
	// FitNote says why the auto-chosen TP is above 1 (the TP-1 no-fit error).
	FitNote string
	// Profile is the loaded profile, if any; OutOfRange says where the
	// estimated workloads lie outside the range it was fitted on.
	Profile    *Profile
	OutOfRange []string
	// Price is the GPU's price, when the price table has one; Costs then
	// prices each row (CostOf).
	Price *Price
	Costs []Cost
}

// Plan resolves req and estimates each batch size. Bad input gives an error
// that says what to fix: unknown names (with the nearest known one), weights
// that do not fit (with the numbers and the smallest TP that does), lengths
// ≤ 0, α outside [0, 1), k < 1, unknown precisions.
func Plan(req Request) (*Result, error) {
	cfg, prices, err := planConfig(req)
	if err != nil {
		return nil, err
	}
	work := Workload{Input: req.Input, Output: req.Output, Batch: req.Batches[0], SpecK: req.SpecK, SpecAlpha: req.Alpha}
	for _, b := range req.Batches {
		work.Batch = b
		if err := work.Validate(); err != nil {
			return nil, err
		}
	}
	if req.Base != nil {
		cfg.Eff = *req.Base
	}
	var prof *Profile
	if req.Profile != "" {
		if prof, err = LoadProfile(req.Profile); err != nil {
			return nil, field.Wrap("profile", err)
		}
		if cfg.TP == 0 {
			cfg.TP = prof.TP
		}
		if err := prof.Matches(cfg.Model, cfg.GPU, cfg.TP, cfg.WeightDType, cfg.KVDType); err != nil {
			return nil, field.Invalid("profile", req.Profile, "%w", err)
		}
		cfg.Eff = prof.Efficiency()
	}
	if req.Roofline {
		cfg.Eff = Roofline()
	}
	cfg.Eff = overlay(cfg.Eff, req.Eff)
	if err := cfg.Eff.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Model: cfg.Model, GPU: cfg.GPU, Draft: cfg.DraftModel, Profile: prof}
	if p, ok := prices.Lookup(cfg.GPU.Name); ok {
		res.Price = &p
	}
	if prof != nil {
		for _, b := range req.Batches {
			for _, n := range prof.OutOfRange(b, req.Input, req.Output) {
				if !slices.Contains(res.OutOfRange, n) {
					res.OutOfRange = append(res.OutOfRange, n)
				}
			}
		}
	}
	if cfg.TP == 0 {
		if cfg.TP, err = smallestTP(cfg, res); err != nil {
			return nil, err
		}
	}
	e, err := New(cfg)
	if err != nil {
		return nil, err
	}
	res.Est = e
	for _, b := range req.Batches {
		work.Batch = b
		r, err := e.Estimate(work)
		if err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, r)
		if res.Price != nil {
			res.Costs = append(res.Costs, CostOf(*res.Price, e.Config().TP, r, req.Input, req.Output))
		}
	}
	work.Batch = req.Batches[0]
	res.Work = work
	return res, nil
}

// planConfig resolves req's names (model, GPU, draft model, prices) and
// precisions into a Config with the GPU's default efficiency; TP 0 is left
// for the caller to choose.
func planConfig(req Request) (Config, *Prices, error) {
	model, err := ResolveModel(req.Model)
	if err != nil {
		return Config{}, nil, field.Wrap("model", err)
	}
	cat, err := GPUCatalogFor(req.GPUFile)
	if err != nil {
		return Config{}, nil, field.Wrap("gpu_file", err)
	}
	gpu, err := cat.Lookup(req.GPU)
	if err != nil {
		return Config{}, nil, field.Wrap("gpu", err)
	}
	prices, err := LoadPrices(req.Prices, cat)
	if err != nil {
		return Config{}, nil, field.Wrap("prices", err)
	}
	if req.TP < 0 {
		return Config{}, nil, field.Invalid("tensor_parallel_size", req.TP, "must be ≥ 1, or 0 for the smallest that fits")
	}
	wd, err := ParseDType(orDefault(req.WeightDType, "bf16"))
	if err != nil {
		return Config{}, nil, field.Wrap("dtype", err)
	}
	kd, err := ParseDType(KVDTypeFor(req.KVDType, wd))
	if err != nil {
		return Config{}, nil, field.Wrap("kv_cache_dtype", err)
	}
	if !kd.validKV() {
		return Config{}, nil, field.Invalid("kv_cache_dtype", string(kd), "not a KV-cache precision (bf16, fp16, fp8, int8)")
	}
	if len(req.Batches) == 0 {
		return Config{}, nil, field.Errorf("batch", "at least one batch size is required")
	}
	if req.MemUtil != 0 && !(req.MemUtil > 0 && req.MemUtil <= 1) {
		return Config{}, nil, field.Invalid("gpu_memory_utilization", req.MemUtil, "must be in (0, 1]")
	}
	cfg := Config{Model: model, GPU: gpu, TP: req.TP, WeightDType: wd, KVDType: kd, MemUtil: req.MemUtil, Eff: DefaultEfficiency(gpu)}
	if req.DraftModel != "" {
		d, err := ResolveModel(req.DraftModel)
		if err != nil {
			return Config{}, nil, field.Wrap("draft_model", err)
		}
		cfg.DraftModel = &d
	}
	return cfg, prices, nil
}

// smallestTP is the smallest tensor parallelism at which cfg's weights and
// some KV cache fit; res notes that it was chosen, and why TP 1 does not do.
func smallestTP(cfg Config, res *Result) (int, error) {
	res.TPAuto = true
	tp := MinTP(cfg)
	if tp == 0 {
		cfg.TP = LargestTP(cfg.Model)
		_, err := New(cfg)
		return 0, fmt.Errorf("%w (tried TP 1 to %d)", err, cfg.TP)
	}
	if tp > 1 {
		one := cfg
		one.TP = 1
		var nf *NoFitError
		if _, err := newEstimator(one, false); errors.As(err, &nf) {
			nf.MinTP = tp
			res.FitNote = nf.Error()
		}
	}
	return tp, nil
}

// KVDTypeFor is the KV cache precision a setting names: "auto" or empty
// follows the weights when they are 16-bit and is bf16 (the activations')
// otherwise, as vLLM's kv_cache_dtype "auto".
func KVDTypeFor(kv string, weights DType) string {
	if kv != "" && kv != "auto" {
		return kv
	}
	if weights == FP16 {
		return string(FP16)
	}
	return string(BF16)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// EffOverride sets some efficiency factors; nil fields keep the default.
type EffOverride struct {
	Compute, Memory, Interconnect                 *float64
	AllReduceLatency, StepOverhead, LayerOverhead *time.Duration
	SeqOverhead                                   *time.Duration
}

// overlay replaces base's fields with o's set ones.
func overlay(base Efficiency, o EffOverride) Efficiency {
	setF := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	setD := func(dst *time.Duration, v *time.Duration) {
		if v != nil {
			*dst = *v
		}
	}
	setF(&base.Compute, o.Compute)
	setF(&base.Memory, o.Memory)
	setF(&base.Interconnect, o.Interconnect)
	setD(&base.AllReduceLatency, o.AllReduceLatency)
	setD(&base.StepOverhead, o.StepOverhead)
	setD(&base.LayerOverhead, o.LayerOverhead)
	setD(&base.SeqOverhead, o.SeqOverhead)
	return base
}

// durationMS is a duration in milliseconds, for JSON.
func durationMS(d time.Duration) float64 { return float64(d) / 1e6 }

// GPUCatalogFor is the built-in GPU catalog, extended and overridden by the
// YAML file at path when path is not empty.
func GPUCatalogFor(path string) (*GPUCatalog, error) {
	if path == "" {
		return BuiltinGPUs(), nil
	}
	return LoadGPUCatalogFile(path)
}
