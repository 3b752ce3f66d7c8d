package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

func init() { register(newEstimateCmd) }

// estimateFlags are the flags of `tokentrace estimate`.
type estimateFlags struct {
	model, gpu, gpuFile, dtype, kvDType, draft string
	tp, input, output, specK                   int
	batches                                    string
	alpha, memUtil                             float64
	jsonOut, explain, list, roofline           bool
	effCompute, effMemory, effInterconnect     float64
	stepOverhead, layerOverhead, arLatency     time.Duration
}

func newEstimateCmd() *cobra.Command {
	var f estimateFlags
	cmd := &cobra.Command{
		Use:   "estimate",
		Short: "Estimate TTFT, TPOT, throughput and KV capacity from a roofline model of the GPU",
		Long: `estimate predicts LLM serving latency from first principles: the model's
FLOPs and bytes per engine step against the GPU's peak FLOPs and bandwidth,
scaled by named efficiency factors, plus tensor-parallel communication and
fixed overheads. It prints one row per batch size; --explain shows the
arithmetic of the first row; --list shows the catalogs.

Example (the worked example of docs/perfmodel.md, pure roofline):
  tokentrace estimate --model Llama-2-70B --gpu A100-80GB-SXM --dtype fp16 --roofline --input 512 --output 128 --batch 1 --explain`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if f.list {
				cat, err := gpuCatalog(f.gpuFile)
				if err != nil {
					return err
				}
				return perfmodel.WriteList(out, cat)
			}
			req, err := f.request(cmd)
			if err != nil {
				return err
			}
			res, err := perfmodel.Plan(req)
			if err != nil {
				return err
			}
			switch {
			case f.jsonOut:
				return res.WriteJSON(out)
			case f.explain:
				return res.WriteExplain(out)
			}
			return res.WriteText(out)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "Llama-3.1-8B", "catalog model name, or a path to a Hugging Face config.json")
	fl.StringVar(&f.gpu, "gpu", "H100-SXM", "GPU name (see --list)")
	fl.StringVar(&f.gpuFile, "gpu-file", "", "YAML hardware catalog that adds to or overrides the built-in one")
	fl.IntVar(&f.tp, "tp", 0, "tensor-parallel degree (0: the smallest that fits)")
	fl.StringVar(&f.dtype, "dtype", "bf16", "weight precision: bf16, fp16, fp8, int8, int4")
	fl.StringVar(&f.kvDType, "kv-dtype", "", "KV-cache precision: bf16, fp16, fp8, int8 (default: fp16 with fp16 weights, else bf16)")
	fl.IntVar(&f.input, "input", 1024, "prompt tokens per request")
	fl.IntVar(&f.output, "output", 256, "output tokens per request")
	fl.StringVar(&f.batches, "batch", "1,8,32,128", "comma-separated batch sizes (concurrent requests)")
	fl.IntVar(&f.specK, "spec-k", 0, "speculative decoding: draft tokens per step (0: off)")
	fl.Float64Var(&f.alpha, "spec-alpha", 0.7, "speculative decoding: per-token acceptance rate in [0, 1)")
	fl.StringVar(&f.draft, "draft-model", "", "speculative draft model (catalog name or config.json); none: free n-gram proposals")
	fl.Float64Var(&f.memUtil, "mem-util", perfmodel.DefaultMemUtil, "fraction of GPU memory the engine may use")
	fl.BoolVar(&f.jsonOut, "json", false, "print JSON")
	fl.BoolVar(&f.explain, "explain", false, "print the arithmetic behind the first batch size, step by step")
	fl.BoolVar(&f.list, "list", false, "list catalog models and GPUs")
	fl.BoolVar(&f.roofline, "roofline", false, "pure roofline: every efficiency 1, no overheads")
	fl.Float64Var(&f.effCompute, "eff-compute", 0, "achieved fraction of peak FLOPs (default: the GPU family's)")
	fl.Float64Var(&f.effMemory, "eff-memory", 0, "achieved fraction of peak memory bandwidth (default: the GPU family's)")
	fl.Float64Var(&f.effInterconnect, "eff-interconnect", 0, "achieved fraction of interconnect bandwidth (default: the GPU family's)")
	fl.DurationVar(&f.stepOverhead, "step-overhead", 0, "fixed cost per engine step (default: the GPU family's)")
	fl.DurationVar(&f.layerOverhead, "layer-overhead", 0, "fixed cost per layer per step (default: the GPU family's)")
	fl.DurationVar(&f.arLatency, "allreduce-latency", 0, "fixed cost per all-reduce (default: the GPU family's)")
	return cmd
}

func gpuCatalog(file string) (*perfmodel.GPUCatalog, error) {
	if file == "" {
		return perfmodel.BuiltinGPUs(), nil
	}
	return perfmodel.LoadGPUCatalogFile(file)
}

// request turns the flags into a perfmodel.Request; only flags the user set
// override efficiency defaults.
func (f *estimateFlags) request(cmd *cobra.Command) (perfmodel.Request, error) {
	batches, err := parseBatches(f.batches)
	if err != nil {
		return perfmodel.Request{}, err
	}
	req := perfmodel.Request{
		Model: f.model, GPU: f.gpu, GPUFile: f.gpuFile, TP: f.tp, WeightDType: f.dtype, KVDType: f.kvDType,
		MemUtil: f.memUtil, Roofline: f.roofline, Input: f.input, Output: f.output, Batches: batches,
		SpecK: f.specK, DraftModel: f.draft,
	}
	if f.memUtil == 0 {
		return req, fmt.Errorf("--mem-util must be in (0, 1] (got 0)")
	}
	if f.tp < 0 {
		return req, fmt.Errorf("--tp must be ≥ 1, or 0 for the smallest that fits (got %d)", f.tp)
	}
	if f.specK != 0 {
		req.Alpha = f.alpha
	} else if cmd.Flags().Changed("spec-alpha") {
		return req, fmt.Errorf("--spec-alpha needs --spec-k ≥ 1")
	}
	changed := cmd.Flags().Changed
	if changed("eff-compute") {
		req.Eff.Compute = &f.effCompute
	}
	if changed("eff-memory") {
		req.Eff.Memory = &f.effMemory
	}
	if changed("eff-interconnect") {
		req.Eff.Interconnect = &f.effInterconnect
	}
	if changed("step-overhead") {
		req.Eff.StepOverhead = &f.stepOverhead
	}
	if changed("layer-overhead") {
		req.Eff.LayerOverhead = &f.layerOverhead
	}
	if changed("allreduce-latency") {
		req.Eff.AllReduceLatency = &f.arLatency
	}
	return req, nil
}

func parseBatches(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--batch: %q is not a batch size ≥ 1", part)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--batch: no batch sizes in %q", s)
	}
	return out, nil
}
