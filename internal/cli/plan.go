package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// planFlags are `tokentrace plan`'s settings.
type planFlags struct {
	engine    engine.Options
	workload  workload.Options
	endpoint  string
	ignoreEOS bool
	replicas  int
	balancer  string
	slo       string
	maximize  string
	budget    float64
	vary      []string
	prices    string
	output    string
	jsonOut   bool
	parallel  int
	force     bool
}

// defaultVary is the space a plan searches when no --vary is given, beside
// every priced GPU at its smallest TP (planDefaultVary): 16- and 8-bit
// weights and KV cache, with and without prefix caching, and (for a target
// rate) the replica counts from the roofline's minimum up.
var defaultVary = []string{"dtype=bf16,fp8", "kv-cache-dtype=auto,fp8", "enable-prefix-caching=false,true"}

// planDefaultVary is the space searched without --vary: every priced GPU
// and defaultVary's dimensions, less each dimension whose engine flag
// (--gpu, --dtype, --kv-cache-dtype, --enable-prefix-caching) was given:
// a value asked for is the value planned.
func planDefaultVary(given func(field string) bool, gpus []string) []string {
	var vary []string
	if !given("gpu") {
		vary = append(vary, "gpu="+strings.Join(gpus, ","))
	}
	for _, v := range defaultVary {
		key, _, _ := strings.Cut(v, "=")
		if !given(strings.ReplaceAll(key, "-", "_")) {
			vary = append(vary, v)
		}
	}
	return vary
}

func newPlanCmd() *cobra.Command {
	f := planFlags{engine: engine.DefaultOptions(), workload: workload.DefaultOptions(), endpoint: "chat", ignoreEOS: true,
		replicas: 1, balancer: route.NameLeastOutstanding}
	seed := f.workload.Seed
	var g *flagGroup
	cmd := &cobra.Command{
		Use:   "plan [RESULTS_DIR]",
		Short: "Find the cheapest deployment that meets SLOs at a rate, or the most throughput within them, by simulation",
		Long: `plan answers the capacity question before anyone touches a GPU: which GPU,
tensor parallelism, replicas, precisions, batch limits, chunked prefill,
prefix caching, speculative decoding, routing and max_tokens cap meet the
SLOs at the target rate for the least money — or, with --maximize
throughput, serve the most within them.

The workload is bench's (its flags; --rate is the target), a trace, or a
results folder (RESULTS_DIR) whose requests are replayed at their arrival
times (--rate then rescales them). Every candidate of the space (--vary
KEY=V1,V2,…, repeated; without it: every priced GPU, bf16/fp8 weights and
KV cache, prefix caching off/on) is bounded by the roofline model first,
and what can meet the objective is simulated (the engine, scheduler and
router of tokentrace simulate, in virtual time): at the target rate, then a
search of its goodput, the highest rate at which every SLO holds.

It prints the answer (and every cheaper candidate's miss), the Pareto front
of cost, latency and goodput with $ per million output tokens; -o FILE
writes them with charts as one HTML page; --json prints everything. Prices
are a built-in, dated table (--prices FILE replaces entries). See
docs/plan.md.

Exit status: 0 when a configuration meets the SLOs, 4 when none does (the
closest is named, with by how much it misses), 2 for bad flags or input (an
unknown GPU in --prices, a results folder without arrival times), 1 when the
HTML cannot be written (docs/cli.md).`,
		Example: `  tokentrace plan --rate 40 --input-tokens 2000 --output-tokens 200 --slo "ttft:p99<=1s,tpot:p99<=50ms"
  tokentrace plan --trace AzureLLMInferenceTrace_conv.csv --trace-window 0s+10m --slo "ttft:p99<=1s" -o plan.html
  tokentrace plan results/20261202-143131 --rate 80 --slo "e2e:p95<=10s" --vary gpu=H100-SXM,L40S --vary replicas=1-8
  tokentrace plan --maximize throughput --budget 20 --slo "ttft:p99<=1s" --vary gpu=H100-SXM,H200 --vary replicas=1-4`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.finish(); err != nil {
				return usageError(fmt.Errorf("plan: %w", err), g)
			}
			f.engine.Seed, f.workload.Seed = seed, seed
			dir := ""
			if len(args) == 1 {
				dir = args[0]
			}
			return f.run(cmd, g, dir)
		},
	}
	fl := cmd.Flags()
	g = newFlagGroup(fl, "", "", "seed")
	bindEngineFlags(g, &f.engine)
	bindRequestFlags(g, &f.endpoint, &f.ignoreEOS)
	bindWorkloadFlags(g, &f.workload)
	fl.Uint64Var(&seed, "seed", seed, "seed of every simulation: arrivals, prompts and the engines' draws (the same for every candidate and rate)")
	bindReplicaFlags(g, &f.replicas, &f.balancer)
	bindSLOFlag(g, &f.slo, `objectives every candidate must meet, e.g. "ttft:p99<=1s,tpot:p99<=50ms" (the first one's metric is the plan's latency)`)
	g.stringVar(&f.maximize, "maximize", "throughput: the deployment of highest goodput under the SLOs (instead of the cheapest at --rate)")
	g.float64Var(&f.budget, "budget", "with --maximize throughput: the most a deployment may cost, in $ per hour (0: no limit)")
	g.stringArrayVar(&f.vary, "vary", "a dimension of the search, KEY=V1,V2,… (repeat; KEY: "+strings.Join(capacity.VaryKeys, ", ")+"); ranges as in replicas=1-8")
	bindPricesFlag(g, &f.prices)
	bindOutputFile(g, &f.output, "write the plan with its charts as one HTML file")
	fl.BoolVar(&f.jsonOut, "json", false, "print the plan as JSON (every candidate)")
	g.intVar(&f.parallel, "parallel", "simulations at once (0: one per CPU)")
	g.boolVar(&f.force, "force", "plan over the bounds of one simulation (2,000,000 requests, 4096 replicas) and of one plan (100,000,000 simulated requests; docs/operate.md)")
	return cmd
}

// run builds the workload, the space and the objective, searches, prints.
func (f *planFlags) run(cmd *cobra.Command, g *flagGroup, dir string) error {
	wl, target, err := f.workloadAndTarget(g, dir)
	if err != nil {
		return err
	}
	slos, err := latency.ParseSLOs(f.slo)
	if err != nil {
		return usageError(fmt.Errorf("plan: %w", field.Wrap("slo", err)), g)
	}
	cat, err := perfmodel.GPUCatalogFor(f.engine.GPUFile)
	if err != nil {
		return usageError(fmt.Errorf("plan: %w", field.Wrap("gpu_file", err)), g)
	}
	prices, err := perfmodel.LoadPrices(f.prices, cat)
	if err != nil {
		return usageError(fmt.Errorf("plan: %w", field.Wrap("prices", err)), g)
	}
	vary := f.vary
	if len(vary) == 0 {
		var gpus []string
		for _, p := range prices.All() {
			if _, err := cat.Lookup(p.GPU); err == nil {
				gpus = append(gpus, p.GPU)
			}
		}
		if !g.given("tensor_parallel_size") {
			f.engine.TensorParallelSize = 0
		}
		vary = planDefaultVary(g.given, gpus)
	}
	space, err := capacity.ParseVary(vary)
	if err != nil {
		return usageError(fmt.Errorf("plan: %w", err), g)
	}
	if g.given("replicas") {
		// The count asked for is the count planned: a target rate does not
		// choose others (the answer then says whether N replicas meet it).
		if len(space.Replicas) > 0 {
			return usageError(fmt.Errorf("plan: %w", field.Errorf("replicas", "{vary} replicas=… sets the replica counts too; give one of them")), g)
		}
		space.Replicas = []int{f.replicas}
	}
	obj := capacity.Objective{SLOs: slos, TargetRate: target, Budget: f.budget}
	base := capacity.Deployment{Engine: f.engine, Replicas: f.replicas, Balancer: f.balancer}
	opts := capacity.SearchOptions{Options: capacity.Options{Seed: f.workload.Seed, Force: f.force}, Parallel: f.parallel}
	start, cpu0 := time.Now(), process.SelfCPU()
	pl, err := capacity.Search(cmd.Context(), base, space, wl, obj, prices, opts)
	if err != nil && !errors.Is(err, capacity.ErrNoneMeets) {
		return usageErrorIfField(fmt.Errorf("plan: %w", err), g)
	}
	out := cmd.OutOrStdout()
	if f.jsonOut {
		if werr := pl.WriteJSON(out); werr != nil {
			return werr
		}
	} else {
		if werr := pl.WriteText(out); werr != nil {
			return werr
		}
		fmt.Fprintf(out, "searched in %.1f s (%.1f s of CPU)\n", time.Since(start).Seconds(), (process.SelfCPU() - cpu0).Seconds())
	}
	if f.output != "" {
		stdout := out
		if f.jsonOut {
			stdout = io.Discard
		}
		if werr := writeReport(planHTML{pl}, f.output, "", stdout); werr != nil {
			return fmt.Errorf("plan: %w", werr)
		}
	}
	if err != nil {
		msg := "plan: no configuration meets the SLOs"
		if c := pl.Closest; c != nil {
			msg += fmt.Sprintf("; the closest, #%d %s, %s", c.ID, c.Name, planMiss(pl, c))
		}
		return &ExitError{Code: ExitNoneMeets, Err: errors.New(msg)}
	}
	return nil
}

// planMiss is how far the plan's closest candidate misses, for the error.
func planMiss(pl *capacity.Plan, c *capacity.Candidate) string {
	switch {
	case c.Check != nil && c.Check.Values != nil || c.Goodput != nil && c.Goodput.Above != nil:
		return "misses: " + c.Reason
	}
	return c.Reason
}

// workloadAndTarget builds the workload (bench's flags, or a results
// folder) and the target rate (0 with --maximize).
func (f *planFlags) workloadAndTarget(g *flagGroup, dir string) (capacity.Workload, float64, error) {
	var wl capacity.Workload
	switch f.maximize {
	case "":
		if g.given("budget") {
			return wl, 0, usageError(fmt.Errorf("plan: %w", field.Errorf("budget", "needs {maximize} throughput (a target rate is met at the least cost already)")), g)
		}
	case "throughput":
	default:
		return wl, 0, usageError(fmt.Errorf("plan: %w", field.Invalid("maximize", f.maximize, "want throughput")), g)
	}
	if f.budget < 0 {
		return wl, 0, usageError(fmt.Errorf("plan: %w", field.Invalid("budget", f.budget, "must not be negative")), g)
	}
	chat := f.endpoint == "chat"
	if !chat && f.endpoint != "completions" {
		return wl, 0, usageError(fmt.Errorf("plan: %w", field.Invalid("endpoint", f.endpoint, "want chat or completions")), g)
	}
	var err error
	if dir != "" {
		for _, name := range []string{"trace", "trace_model", "trace_block_size", "prompts", "input_tokens", "output_tokens", "prefix_tokens", "turns", "concurrency", "duration"} {
			if g.given(name) {
				return wl, 0, usageError(fmt.Errorf("plan: %w", field.Errorf(name, "the workload comes from %s; leave {%s} out", dir, name)), g)
			}
		}
		wl, err = capacity.FromResults(dir, chat, f.workload.Seed)
		switch {
		case errors.Is(err, capacity.ErrNoArrivals), errors.Is(err, results.ErrBadInput):
			return wl, 0, &ExitError{Code: ExitUsage, Err: fmt.Errorf("plan: %w", err)}
		case err != nil:
			return wl, 0, usageError(fmt.Errorf("plan: %w", err), g)
		}
		wl.IgnoreEOS = f.ignoreEOS
	} else {
		src, load, err := f.workload.Build(chat, g.given)
		if err != nil {
			return wl, 0, usageError(fmt.Errorf("plan: %w", err), g)
		}
		if f.workload.Trace == "" && !g.given("rate") && f.maximize == "" {
			return wl, 0, usageError(fmt.Errorf("plan: %w", field.Errorf("rate", "give the target {rate} (requests per second to serve), or {maximize} throughput")), g)
		}
		if wl, err = capacity.NewWorkload(src, load, f.ignoreEOS, workload.Describe(f.workload, load)); err != nil {
			return wl, 0, usageError(fmt.Errorf("plan: %w", err), g)
		}
	}
	if f.maximize != "" {
		return wl, 0, nil
	}
	if dir != "" && g.given("rate") {
		return wl, f.workload.Rate, nil
	}
	return wl, wl.Rate, nil
}

// planHTML is a plan as its HTML page.
type planHTML struct{ *capacity.Plan }

func (p planHTML) Write(w io.Writer) error { return p.WriteHTML(w) }
