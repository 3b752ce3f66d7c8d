package simulate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Config is one simulation.
type Config struct {
	// Engine is every replica's engine. Replica i draws with seed
	// Engine.Seed + i, so replicas do not draw the same output lengths.
	Engine engine.Config
	// Replicas is the number of engine replicas (default 1). With Pools it
	// may be left 0; given, it must equal the pools' total.
	Replicas int
	// Pools, when set, split the replicas into length pools: a request
	// goes to the first pool whose MaxInputTokens bounds its input (the
	// gateway's length_pools).
	Pools []Pool
	// PrefillReplicas, when positive, disaggregates the deployment, as the
	// gateway's prefill_pool does: each request is first prefilled (one
	// output token) on one of these replicas, picked by Balancer, then
	// decoded on the Replicas (Pools) as a remote prefill, its KV cache
	// pulled over Engine.KVLink (docs/simulate.md, "Disaggregated prefill
	// and decode"). PrefillEngine is theirs; nil: Engine.
	PrefillReplicas int
	PrefillEngine   *engine.Config
	// Balancer picks a replica within a pool: one of route.Names (default
	// least_outstanding, the gateway's).
	Balancer string
	// ReplicaNames, when set, name the replicas in order (one each): the
	// prefix balancers hash a prompt's prefix with each replica's name, and
	// the gateway's names are its replicas' URLs, so a twin given the same
	// URLs sends each prefix where the gateway does. Default replica-0,
	// replica-1, ….
	ReplicaNames []string
	// Slack is prefix_affinity's tolerance (default route.DefaultSlack).
	Slack int64
	// PrefixBytes is how much of a prompt's text prefix affinity hashes
	// (default 512, the gateway's prefix_bytes).
	PrefixBytes int
	// ScrapeInterval is how often the router reads each replica's waiting
	// requests and KV usage (queue_aware routing and the adaptive limit's hint see
	// figures up to 3 intervals old, as the gateway does). Default 1 s for
	// queue_aware, otherwise 0: never.
	ScrapeInterval time.Duration
	// ScrapePhase is when the first scrape falls after the run's start
	// (default 0: at the start), less than ScrapeInterval. The gateway
	// scrapes on its own ticker from the moment it loads its
	// configuration, so a twin of a measured run gives where in the
	// interval the run started.
	ScrapePhase time.Duration
	// Admission, when set, puts the gateway's admission queue in front of
	// every pool.
	Admission *Admission
	// Network is the one-way latency between the client and the router
	// (and replicas): a request reaches the router Network after it is
	// sent, and every token reaches the client Network after its step
	// ends. Default 0: the client sees the server's instants.
	Network time.Duration
	// NetworkSample, when set, replaces Network per request: each request
	// draws one of these one-way latencies (uniformly, seeded by
	// NetworkSeed) at its send and takes it both ways — to the router, and
	// back for each of its tokens. A measured client's transport varies
	// per request (a new connection or a reused one, the prompt's size,
	// the machine's scheduling), and in an open loop which step a request
	// meets depends on its own, not on the median (docs/simulate.md,
	// "Transport").
	NetworkSample []time.Duration
	NetworkSeed   uint64
	// FrontEnd is each replica's front end per request (HTTP, chat
	// template, tokenization, hand-off to the scheduler): a delay every
	// request picked for a replica takes before the engine sees it, many
	// at once (a latency, not a server with a throughput of its own); it
	// is its record's server stage "frontend" and counts in its TTFT and
	// E2E, not in the engine's queue. 0: none (the engine sees a request
	// when it is routed). Unified deployments only (not with
	// PrefillReplicas).
	FrontEnd time.Duration
	// QueueFullStatus is the status of a request an engine's MaxWaiting
	// refuses (default 429, serve's).
	QueueFullStatus int

	// Workload and Load are what is sent and when, as for bench.
	Workload workload.Source
	Load     workload.Load
	// Force runs a simulation over the bounds of Preflight.
	Force bool
	// IgnoreEOS sends every request with ignore_eos (answers run to
	// max_tokens), as bench does against the embedded engine.
	IgnoreEOS bool

	// Model names the model in the records.
	Model string
	// RunID prefixes request ids ("<RunID>-<n>"; default "sim").
	RunID string
	// Steps keeps every replica's step log (Result.Replicas[i].Steps).
	Steps bool
	// Priority, when set, gives each request its priority under the
	// engine's priority policy (scheduling_policy priority: lower is served
	// first) from its prompt length and max_tokens; nil: every request's is
	// 0, so the policy serves them in arrival order.
	Priority func(inputTokens, maxTokens int) int
	// NoTokenTimes leaves the records' per-chunk instants out (faster, and
	// smaller records; ITL and ICL then have no data).
	NoTokenTimes bool
	// RecycleRecords reuses each record's memory (and its ChunkNS) for a
	// later request once Emit has returned: Emit must copy what it keeps.
	// A consumer that only writes or aggregates records (WriteRun) saves
	// most of the simulation's allocation.
	RecycleRecords bool
	// SampleInterval, when positive, samples the replicas' running and
	// waiting requests and KV usage this often (Result.Samples).
	SampleInterval time.Duration
	// Stop, when set, is asked after every instant of virtual time; when
	// it returns true the simulation ends there (Result.Stopped): requests
	// not yet ended get no record. A caller that needs only a verdict
	// (capacity planning: an SLO already certain to fail) saves the rest.
	Stop func() bool
}

// Pool is one length band of replicas.
type Pool struct {
	// MaxInputTokens bounds the inputs the pool takes; 0: no bound.
	MaxInputTokens int
	Replicas       int
}

// Admission is the gateway's admission control in front of each pool.
type Admission struct {
	Limits route.Limits
	// DeadlineTTFT gives every request a TTFT deadline this long after it
	// reaches the router; 0: none.
	DeadlineTTFT time.Duration
	// EarlyReject rejects a request whose predicted wait already breaks
	// its deadline, and one whose deadline passes while it waits.
	EarlyReject bool
}

// Default settings.
const (
	DefaultPrefixBytes    = 512
	DefaultScrapeInterval = route.DefaultScrapeInterval
	DefaultRunID          = "sim"
)

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
		if len(c.Pools) > 0 {
			c.Replicas = 0
			for _, p := range c.Pools {
				c.Replicas += p.Replicas
			}
		}
	}
	if c.Balancer == "" {
		c.Balancer = route.NameLeastOutstanding
	}
	if c.Slack == 0 {
		c.Slack = route.DefaultSlack
	}
	if c.PrefixBytes == 0 {
		c.PrefixBytes = DefaultPrefixBytes
	}
	if c.ScrapeInterval == 0 && c.Balancer == route.NameQueueAware {
		c.ScrapeInterval = DefaultScrapeInterval
	}
	if c.QueueFullStatus == 0 {
		c.QueueFullStatus = 429
	}
	if c.RunID == "" {
		c.RunID = DefaultRunID
	}
	return c
}

// validate checks a configuration with its defaults filled in; errors
// name the setting.
func (c Config) validate() error {
	if c.Workload == nil {
		return field.Errorf("workload", "no workload")
	}
	if err := c.Load.Validate(); err != nil {
		return err
	}
	if err := c.Engine.WithDefaults().Validate(); err != nil {
		return err
	}
	if !c.Force {
		if err := Preflight(c.Replicas, c.Load); err != nil {
			return err
		}
	}
	switch {
	case c.Replicas < 1:
		return field.Invalid("replicas", c.Replicas, "must be at least 1")
	case c.PrefillReplicas < 0:
		return field.Invalid("prefill_replicas", c.PrefillReplicas, "must not be negative")
	case c.PrefillReplicas > 0 && c.Engine.KVLink.BytesPerSecond <= 0:
		return field.Errorf("kv_link", "a disaggregated deployment ({prefill_replicas} %d) needs a KV link", c.PrefillReplicas)
	case c.Slack < 0:
		return field.Invalid("prefix_slack", c.Slack, "must not be negative")
	case c.PrefixBytes < 0:
		return field.Invalid("prefix_bytes", c.PrefixBytes, "must not be negative")
	case c.ScrapeInterval < 0:
		return field.Invalid("scrape_interval", c.ScrapeInterval, "must not be negative")
	case c.ScrapePhase < 0 || c.ScrapePhase > 0 && c.ScrapePhase >= c.ScrapeInterval:
		return field.Invalid("scrape_phase", c.ScrapePhase, "want at least 0 and less than scrape_interval (%s)", c.ScrapeInterval)
	case c.Network < 0:
		return field.Invalid("network_latency", c.Network, "must not be negative")
	case c.FrontEnd < 0:
		return field.Invalid("front_end", c.FrontEnd, "must not be negative")
	case c.FrontEnd > 0 && c.PrefillReplicas > 0:
		return field.Errorf("front_end", "a front end per request is not simulated on a disaggregated deployment ({prefill_replicas} %d)", c.PrefillReplicas)
	case len(c.NetworkSample) > 0 && slices.Min(c.NetworkSample) < 0:
		return field.Invalid("network_sample", slices.Min(c.NetworkSample), "must not be negative")
	case c.SampleInterval < 0:
		return field.Invalid("sample_interval", c.SampleInterval, "must not be negative")
	case c.QueueFullStatus != 429 && c.QueueFullStatus != 503:
		return field.Invalid("queue_full_status", c.QueueFullStatus, "want 429 or 503")
	case len(c.ReplicaNames) > 0 && len(c.ReplicaNames) != c.Replicas:
		return field.Invalid("replica_names", len(c.ReplicaNames), "want one name per replica (%d)", c.Replicas)
	case len(c.ReplicaNames) > 0 && repeated(c.ReplicaNames) != "":
		return field.Invalid("replica_names", repeated(c.ReplicaNames), "named twice: the prefix balancers tell replicas apart by name")
	}
	if _, err := route.New[*call, *replica](c.Balancer, route.Options{Now: func() time.Time { return time.Time{} }}); err != nil {
		return field.Invalid("balancer", c.Balancer, "want one of %s", strings.Join(route.Names, ", "))
	}
	if c.PrefillEngine != nil {
		if err := c.PrefillEngine.WithDefaults().Validate(); err != nil {
			return field.Wrap("prefill_engine", err)
		}
	}
	if err := c.validatePools(); err != nil {
		return err
	}
	return c.validateAdmission()
}

// validatePools checks the length pools: increasing bounds, the last may be
// unbounded, and as many replicas as the deployment.
func (c Config) validatePools() error {
	if len(c.Pools) > 0 {
		sum := 0
		for i, p := range c.Pools {
			if p.Replicas < 1 || p.MaxInputTokens < 0 {
				return field.Errorf("length_pools", "pool %d: want MAX_INPUT_TOKENS:REPLICAS with at least 1 replica and a bound >= 0", i+1)
			}
			if i > 0 && c.Pools[i-1].MaxInputTokens == 0 {
				return field.Errorf("length_pools", "pool %d is unreachable after an unbounded pool", i+1)
			}
			if i > 0 && p.MaxInputTokens != 0 && p.MaxInputTokens <= c.Pools[i-1].MaxInputTokens {
				return field.Errorf("length_pools", "bounds must increase (pool %d: %d after %d)", i+1, p.MaxInputTokens, c.Pools[i-1].MaxInputTokens)
			}
			sum += p.Replicas
		}
		if sum != c.Replicas {
			return field.Errorf("replicas", "%d, but the {length_pools} hold %d replicas", c.Replicas, sum)
		}
	}
	return nil
}

// validateAdmission checks the admission controller's settings.
func (c Config) validateAdmission() error {
	if a := c.Admission; a != nil {
		if err := a.Limits.Validate(); err != nil {
			return field.Wrap("admission", err)
		}
		if a.DeadlineTTFT < 0 {
			return field.Invalid("deadline_ttft", a.DeadlineTTFT, "must not be negative")
		}
		if a.EarlyReject && a.DeadlineTTFT == 0 {
			return field.Errorf("early_reject", "needs a {deadline_ttft}")
		}
	}
	return nil
}

// ParsePools reads length pools, "MAX:N,MAX:N,...": the inputs up to MAX
// tokens go to a pool of N replicas; a last MAX of 0 (or "*") takes the
// rest, as in "2048:2,*:6".
func ParsePools(s string) ([]Pool, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []Pool
	for _, part := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("%q: want MAX_INPUT_TOKENS:REPLICAS, as in 2048:2,*:6", part)
		}
		var p Pool
		var err error
		if a = strings.TrimSpace(a); a != "*" {
			if p.MaxInputTokens, err = strconv.Atoi(a); err != nil || p.MaxInputTokens < 0 {
				return nil, fmt.Errorf("%q: the input bound %q is not a whole number of tokens (or *)", part, a)
			}
		}
		if p.Replicas, err = strconv.Atoi(strings.TrimSpace(b)); err != nil || p.Replicas < 1 {
			return nil, fmt.Errorf("%q: the replica count %q is not a whole number of at least 1", part, b)
		}
		out = append(out, p)
	}
	return out, nil
}

// Result is what a simulation observed besides the records.
type Result struct {
	// Replicas holds each replica's counters (and steps, when kept).
	Replicas []ReplicaResult
	// End is the virtual instant the last request ended.
	End time.Duration
	// Sent counts requests sent, Succeeded those that succeeded, Rejected
	// those refused by admission or by an engine's queue bound.
	Sent, Succeeded, Rejected int
	// Samples are the replicas' state over time (SampleInterval).
	Samples []Sample
	// Warnings are the simulator's doubts about its own run.
	Warnings []string
	// Stopped is true when Config.Stop ended the simulation early.
	Stopped bool
}

// ReplicaResult is one replica's share of a simulation.
type ReplicaResult struct {
	// Name is the replica's name ("replica-0", ...), which prefix affinity
	// hashes; Pool its length pool's index.
	Name string
	Pool int
	// Requests counts requests routed to it.
	Requests int
	// Stats are its engine's counters at the end.
	Stats engine.Stats
	// Steps is its step log (Config.Steps).
	Steps []engine.StepRecord
}

// Sample is the replicas' summed state at an instant.
type Sample struct {
	At               time.Duration
	Running, Waiting int
	// KVUsage is the mean over replicas of their KV cache usage (0..1).
	KVUsage float64
}

// Emit receives each finished request's record, in the order they end on
// the virtual clock. The record is the callee's to keep, unless
// Config.RecycleRecords is set.
type Emit func(*latency.Record)

// repeated is a name that names occurs more than once, else "".
func repeated(names []string) string {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return n
		}
		seen[n] = true
	}
	return ""
}
