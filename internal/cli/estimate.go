package cli

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// estimateFlags are the flags of `tokentrace estimate` beyond the model
// flags (bindModelFlags).
type estimateFlags struct {
	model                                  engine.Options
	prices                                 string
	input, output                          int
	batches                                string
	jsonOut, explain, list, roofline       bool
	effCompute, effMemory, effInterconnect float64
	stepOverhead, layerOverhead, arLatency time.Duration
	seqOverhead                            time.Duration
}

func newEstimateCmd() *cobra.Command {
	f := estimateFlags{input: 1024, output: 256, batches: "1,8,32,128", model: engine.Options{
		Model: "Llama-3.1-8B", GPU: "H100-SXM", DType: "bf16", KVCacheDType: "auto",
		GPUMemoryUtilization: perfmodel.DefaultMemUtil, SpeculativeAlpha: 0.7,
	}}
	var g *flagGroup
	cmd := &cobra.Command{
		Use:   "estimate",
		Short: "Estimate TTFT, TPOT, throughput and KV capacity from a roofline model of the GPU",
		Long: `estimate predicts LLM serving latency from first principles: the model's
FLOPs and bytes per engine step against the GPU's peak FLOPs and bandwidth,
scaled by named efficiency factors, plus tensor-parallel communication and
fixed overheads. It prints one row per batch size; --explain shows the
arithmetic of the first row; --list shows the catalogs.

Exit status: 0 when it printed an estimate, 2 for bad flags or a model that
does not fit (docs/cli.md).

Example (the worked example of docs/perfmodel.md, pure roofline):
  tokentrace estimate --model Llama-2-70B --gpu A100-80GB-SXM --dtype fp16 --roofline --input-tokens 512 --output-tokens 128 --batch 1 --explain`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if f.list {
				cat, err := perfmodel.GPUCatalogFor(f.model.GPUFile)
				if err != nil {
					return usageError(field.Wrap("gpu_file", err), g)
				}
				return perfmodel.WriteList(out, cat)
			}
			if err := g.finish(); err != nil {
				return usageError(err, g)
			}
			req, err := f.request(g)
			if err != nil {
				return usageError(err, g)
			}
			res, err := perfmodel.Plan(req)
			if err != nil {
				return usageError(err, g)
			}
			switch {
			case f.jsonOut:
				return res.WriteJSON(out)
			case f.explain:
				return res.WriteExplain(out)
			}
			if err := res.WriteText(out); err != nil {
				return err
			}
			if f.roofline {
				return nil
			}
			return f.writeEnvelope(out, req.Batches)
		},
	}
	fl := cmd.Flags()
	g = newFlagGroup(fl, "", "")
	bindModelFlags(g, &f.model) // first: a --profile's engine reaches --engine's defaults
	bindEngineFamilyFlag(g, &f.model)
	bindPricesFlag(g, &f.prices)
	g.intVar(&f.input, "input-tokens", "prompt tokens per request")
	g.intVar(&f.output, "output-tokens", "output tokens per request")
	g.alias("input", "input-tokens", true)
	g.alias("output", "output-tokens", true)
	g.stringVar(&f.batches, "batch", "comma-separated batch sizes (concurrent requests)")
	fl.BoolVar(&f.jsonOut, "json", false, "print JSON")
	fl.BoolVar(&f.explain, "explain", false, "print the arithmetic behind the first batch size, step by step")
	fl.BoolVar(&f.list, "list", false, "list catalog models and GPUs")
	fl.BoolVar(&f.roofline, "roofline", false, "pure roofline: every efficiency 1, no overheads")
	g.float64Var(&f.effCompute, "eff-compute", "achieved fraction of peak FLOPs (default: the GPU family's)")
	g.float64Var(&f.effMemory, "eff-memory", "achieved fraction of peak memory bandwidth (default: the GPU family's)")
	g.float64Var(&f.effInterconnect, "eff-interconnect", "achieved fraction of interconnect bandwidth (default: the GPU family's)")
	g.durationVar(&f.stepOverhead, "step-overhead", "fixed cost per engine step (default: the GPU family's)")
	g.durationVar(&f.layerOverhead, "layer-overhead", "fixed cost per layer per step (default: the GPU family's)")
	g.durationVar(&f.arLatency, "allreduce-latency", "fixed cost per all-reduce (default: the GPU family's)")
	g.durationVar(&f.seqOverhead, "seq-overhead", "cost per sequence per step: sampling, bookkeeping, detokenization (default: the GPU family's)")
	return cmd
}

// request turns the flags into a perfmodel.Request; only flags the user set
// override efficiency defaults.
func (f *estimateFlags) request(g *flagGroup) (perfmodel.Request, error) {
	batches, err := parseBatches(f.batches)
	if err != nil {
		return perfmodel.Request{}, err
	}
	m := f.model
	req := perfmodel.Request{
		Model: m.Model, GPU: m.GPU, GPUFile: m.GPUFile, TP: m.TensorParallelSize, WeightDType: m.DType,
		KVDType: m.KVCacheDType, MemUtil: m.GPUMemoryUtilization, Roofline: f.roofline, Input: f.input,
		Output: f.output, Batches: batches, SpecK: m.SpeculativeK, DraftModel: m.DraftModel, Profile: m.Profile,
		Prices: f.prices,
	}
	if m.GPUMemoryUtilization == 0 { // 0 would mean the default to perfmodel
		return req, field.Invalid("gpu_memory_utilization", 0, "must be in (0, 1]")
	}
	if eff, ok, err := m.EngineConstants(); err != nil {
		return req, err
	} else if ok {
		req.Base = &eff
	}
	if m.SpeculativeK != 0 {
		req.Alpha = m.SpeculativeAlpha
	} else if g.given("speculative_alpha") {
		return req, field.Errorf("speculative_alpha", "needs {speculative_k} ≥ 1")
	}
	if g.given("eff_compute") {
		req.Eff.Compute = &f.effCompute
	}
	if g.given("eff_memory") {
		req.Eff.Memory = &f.effMemory
	}
	if g.given("eff_interconnect") {
		req.Eff.Interconnect = &f.effInterconnect
	}
	if g.given("step_overhead") {
		req.Eff.StepOverhead = &f.stepOverhead
	}
	if g.given("layer_overhead") {
		req.Eff.LayerOverhead = &f.layerOverhead
	}
	if g.given("allreduce_latency") {
		req.Eff.AllReduceLatency = &f.arLatency
	}
	if g.given("seq_overhead") {
		req.Eff.SeqOverhead = &f.seqOverhead
	}
	return req, nil
}

// writeEnvelope says where the estimate lies outside what its constants
// were fitted on, and its 80 % interval (engine.Envelope.Interval80).
func (f *estimateFlags) writeEnvelope(w io.Writer, batches []int) error {
	env, err := f.model.Envelope()
	if err != nil {
		return err
	}
	c := engine.EnvelopeCase{Input: [2]int{f.input, f.input}, Output: [2]int{f.output, f.output}, Concurrency: slices.Max(batches)}
	for _, flag := range env.Flags(c) {
		if _, err := fmt.Fprintf(w, "outside the twin's envelope: %s\n", flag); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "interval 80 %%: %s\n", env.Interval80(c))
	return err
}

// parseBatches reads --batch: whole numbers ≥ 1, comma-separated.
func parseBatches(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return nil, field.Invalid("batch", part, "not a batch size ≥ 1")
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, field.Invalid("batch", s, "no batch sizes")
	}
	return out, nil
}
