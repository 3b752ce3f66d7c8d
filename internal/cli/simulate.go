package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/simulate"
)

func newSimulateCmd() *cobra.Command {
	opts := simulate.DefaultOptions()
	seed := opts.Workload.Seed
	var g *flagGroup
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Simulate a deployment (load, router, admission, engine replicas) in virtual time",
		Long: `simulate runs bench's workload against replicas of the simulated engine on a
virtual clock: no server, no sleeping, the same records as bench would write.
The engine's flags are serve's, the workload's bench's, and the replicas sit
behind the gateway's balancer and admission queue (the same code). A run of
hours takes seconds, and the same --seed gives the same records.

Results go to a folder (--output-dir) that tokentrace report reads as it
reads bench's: requests.jsonl, summary.json, run.json (marked simulated),
command.txt, config.json, and with --steps the engines' step log,
steps.jsonl. See docs/simulate.md.

Exit status: 0 when the run completed (and every --slo holds), 3 when an SLO
failed, 2 for bad flags or input (nothing is written), 1 when the results
cannot be written (docs/cli.md).`,
		Example: `  tokentrace simulate --rate 20 --requests 2000
  tokentrace simulate --concurrency 64 --duration 10m --input-tokens uniform:500-1500
  tokentrace simulate --trace AzureLLMInferenceTrace_conv.csv --replicas 4 --balancer prefix_affinity --enable-prefix-caching
  tokentrace simulate --rate 50 --replicas 8 --length-pools 2048:6,*:2 --queue-concurrency 256 --deadline-ttft 2s --early-reject`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.finish(); err != nil {
				return usageError(fmt.Errorf("simulate: %w", err), g)
			}
			opts.Engine.Seed, opts.Workload.Seed = seed, seed
			cfg, out, err := opts.Config(g.given, time.Now())
			if err != nil {
				return usageError(fmt.Errorf("simulate: %w", err), g)
			}
			prefix := "simulate: unlike bench --url: "
			if opts.Like != "" {
				prefix = "simulate: like: "
			}
			for _, d := range opts.BenchDifferences(g.given) {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s%s\n", prefix, d)
			}
			out.Command = os.Args
			echo := flagValues(cmd.Flags())
			out.Echo = echo
			out.Run = &simulate.RunConfig{Options: opts, Given: g.givenFields()}
			sum, err := simulate.WriteRun(cfg, out, cmd.OutOrStdout())
			if err != nil {
				return usageErrorIfField(fmt.Errorf("simulate: %w", err), g)
			}
			if opts.Engine.Profile != "" {
				if err := warnOutsideProfile(cmd.ErrOrStderr(), opts.Engine.Profile, out.Dir, opts.Replicas); err != nil {
					return fmt.Errorf("simulate: %w", err)
				}
			}
			if sum.SLOsFailed {
				return &ExitError{Code: ExitSLOFailed, Err: fmt.Errorf("simulate: an SLO failed (%s)", opts.SLO)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	g = newFlagGroup(f, "", "", "seed")
	bindEngineFlags(g, &opts.Engine)
	bindAnswerFlags(g, &opts.ServedModelName, &opts.QueueFullStatus)
	bindRequestFlags(g, &opts.Endpoint, &opts.IgnoreEOS)
	bindWorkloadFlags(g, &opts.Workload)
	f.Uint64Var(&seed, "seed", seed, "seed of the whole simulation: arrivals, prompts and the engines' draws (replica i draws with seed + i)")
	bindDeploymentFlags(g, &opts)
	bindSLOFlag(g, &opts.SLO, `objectives, e.g. "ttft:p99<=1.5s,tpot:p99<=50ms"`)
	bindOutputDir(g, &opts.OutputDir, "results folder (default ./results/<timestamp>/)")
	g.boolVar(&opts.Steps, "steps", "write every engine step to steps.jsonl")
	g.stringVar(&opts.Like, "like", "replay a results folder's workload (bench's or simulate's): its requests' served prompt lengths and produced output lengths, its closed loop or arrivals, its client's measured transport; the engine is this command's flags")
	g.boolVar(&opts.Force, "force", "run over the bounds of one simulation (2,000,000 requests, 4096 replicas; docs/operate.md)")
	return cmd
}

// bindDeploymentFlags binds what stands around the engines: replicas, the
// router's balancer and length pools, the admission queue and the network
// (simulate). The names are the gateway configuration's keys.
func bindDeploymentFlags(g *flagGroup, o *simulate.Options) {
	bindReplicaFlags(g, &o.Replicas, &o.Balancer)
	g.intVar(&o.PrefillReplicas, "prefill-replicas", "disaggregate: prefill replicas in front of the --replicas, which then decode (0: aggregated)")
	g.stringVar(&o.KVLink, "kv-link", "disaggregated: the link the KV cache is pulled over: "+strings.Join(perfmodel.LinkNames(), ", "))
	g.stringVar(&o.PrefillGPU, "prefill-gpu", "disaggregated: the prefill pool's GPU (default: --gpu's)")
	g.intVar(&o.PrefillTensorParallelSize, "prefill-tensor-parallel-size", "disaggregated: the prefill pool's TP (default: --tensor-parallel-size's); the KV transfer moves min(prefill, decode TP) shards at once")
	g.stringVar(&o.LengthPools, "length-pools", `length pools "MAX:N,…": inputs up to MAX tokens go to a pool of N replicas, "*" the rest, e.g. 2048:6,*:2`)
	g.intVar(&o.PrefixBytes, "prefix-bytes", "how many bytes of a prompt prefix_affinity hashes")
	g.durationVar(&o.ScrapeInterval, "scrape-interval", "how often the router reads each replica's queue (queue_aware; the adaptive limit's hint); default 1s for queue_aware")
	g.durationVar(&o.NetworkLatency, "network-latency", "one-way latency between the client and the router (0: the client sees the server's instants)")
	g.durationVar(&o.FrontEnd, "front-end", "each replica's front end per request before its engine (HTTP, chat template, tokenization), a delay every request takes; default: the --engine release's fitted figure (docs/engines.md), none without --engine; 0: none")
	q := &o.Queue
	g.intVar(&q.Concurrency, "queue-concurrency", "admission: most requests in flight to the replicas (0: no admission queue)")
	g.intVar(&q.MaxSize, "queue-max-size", "admission: most requests waiting; more get 429 (default 1024)")
	g.stringVar(&q.Adaptive, "queue-adaptive", "admission: gradient moves the concurrency limit with the replicas' TTFT (none: a fixed limit)")
	g.intVar(&q.MinConcurrency, "queue-min-concurrency", "admission: the adaptive limit's lowest (default 1)")
	g.intVar(&q.MaxConcurrency, "queue-max-concurrency", "admission: the adaptive limit's highest (default 4 × --queue-concurrency)")
	g.durationVar(&q.TargetTTFT, "queue-target-ttft", "admission: cap on the upstream TTFT (admission to first token) the adaptive limit accepts (0: none)")
	g.durationVar(&o.DeadlineTTFT, "deadline-ttft", "admission: every request's TTFT deadline from its arrival at the router (0: none)")
	g.boolVar(&o.EarlyReject, "early-reject", "admission: refuse (429) a request whose predicted wait breaks its deadline, or whose deadline passes in the queue")
}

// bindReplicaFlags binds how many replicas and how the router picks one
// (simulate; plan's base deployment).
func bindReplicaFlags(g *flagGroup, replicas *int, balancer *string) {
	g.intVar(replicas, "replicas", "engine replicas behind the router")
	g.stringVar(balancer, "balancer", "how the router picks a replica: "+strings.Join(route.Names, ", "))
}

// usageErrorIfField is err as bad input (exit 2) when it names a setting
// (a *field.Error: a results folder that already holds a run), else as a
// failure (exit 1).
func usageErrorIfField(err error, g *flagGroup) error {
	if r := g.flagError(err); r != err {
		return &ExitError{Code: ExitUsage, Err: r}
	}
	return err
}
