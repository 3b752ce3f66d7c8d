package report

import (
	"fmt"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/prediction"
	"github.com/tokentrace/tokentrace/internal/results"
)

// Schema is the version of the report's JSON form. Fields are only ever
// added within a version.
const Schema = 1

// Report is a run's analysis. Its exported fields are the JSON schema
// (docs/report.md); durations are milliseconds, rates per second.
type Report struct {
	Schema  int               `json:"schema"`
	Sources []string          `json:"sources"`
	Runs    []results.RunInfo `json:"runs,omitempty"`
	Summary Summary           `json:"summary"`
	// Metrics holds TTFT, TPOT, ITL, E2E, the intended-time variants, the
	// client queue and every stage the run has values for.
	Metrics []Dist `json:"metrics"`
	// Decomposition splits E2E from the intended send into stages; TTFTSplit
	// does the same for TTFT from the intended send.
	Decomposition *Decomposition `json:"decomposition,omitempty"`
	TTFTSplit     *Decomposition `json:"ttft_split,omitempty"`
	SLOs          []Verdict      `json:"slos,omitempty"`
	// AllSLOs is the verdict on every SLO together (goodput's definition).
	AllSLOs  *Verdict  `json:"all_slos,omitempty"`
	Findings []Finding `json:"findings"`
	// Quieted names what SLOs that held kept out of the diagnosis: the
	// findings the rules would raise were the run judged without them.
	Quieted *Quieted `json:"quieted,omitempty"`
	// WhatIf is the twin's prediction of each remedy (report --what-if);
	// nil when not asked for or not possible.
	WhatIf *prediction.Predictions `json:"what_if,omitempty"`
	// Phases summarises each sweep point (records grouped by Record.Phase).
	Phases []Phase `json:"phases,omitempty"`
	// Sessions is the run's multi-turn and agent sessions, when it has
	// any: their cumulative latency and its split.
	Sessions *Sessions `json:"sessions,omitempty"`
	Capacity *Capacity `json:"capacity,omitempty"`
	// Pareto is a sweep's trade-off between each user's token speed and
	// the server's token throughput, with its front and SLO knee.
	Pareto *Pareto `json:"pareto,omitempty"`
	// TimeSeries is the run in fixed time windows: per window the latency
	// percentiles, rates, requests in flight, failures and the server's
	// gauges; nil when several runs are reported together.
	TimeSeries *TimeSeries `json:"time_series,omitempty"`
	// Notes says what the report lacks or what input was dropped.
	Notes []string `json:"notes,omitempty"`

	// Compat is the run as vLLM, AIPerf and guidellm define their metrics
	// (docs/metrics.md, "Compatibility views"), computed from the records;
	// nil when no request streamed. The text form ends with it; bench
	// writes it as summary.json's compat, so it is not part of the JSON
	// form.
	Compat *CompatViews `json:"-"`

	// Figures is what the HTML charts are drawn from: curves and series
	// sampled from the per-request numbers, bounded in size whatever the
	// run's length. It is not part of the JSON form.
	Figures Figures `json:"-"`
}

// Summary is the run at a glance.
type Summary struct {
	Requests  int `json:"requests"` // measured requests (warm-up excluded)
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// Errors counts failed requests by latency.Err* kind.
	Errors map[string]int `json:"errors,omitempty"`
	// TopErrors is the most frequent distinct reasons requests failed
	// (Record.Error), most frequent first: at most five.
	TopErrors []ErrorMessage `json:"top_errors,omitempty"`
	Warmup    int            `json:"warmup_excluded,omitempty"`
	// Unreadable counts the input's lines that are not records (malformed,
	// or the incomplete last line of a killed run): no request, neither
	// succeeded nor failed.
	Unreadable int `json:"unreadable_lines,omitempty"`
	Truncated  int `json:"truncated,omitempty"` // finish_reason "length"
	// Resent counts the requests the client sent again, once, because the
	// pooled connection they took had been closed by the server before
	// any answer (Record.Resent): the keep-alive race, not a failure.
	Resent int `json:"resent,omitempty"`
	// DurationS is Σ over sources of (last end − first intended send).
	DurationS     float64 `json:"duration_s"`
	OfferedRPS    float64 `json:"offered_rps"`    // (requests − 1) / (last − first intended send)
	ThroughputRPS float64 `json:"throughput_rps"` // successes / duration
	// CompletionRPS is (successes − 1) / (last end − first end): the steady
	// rate at which requests completed, free of the start-up and drain
	// time that the duration includes. Under overload it is the capacity.
	CompletionRPS float64 `json:"completion_rps"`
	OutputTPS     float64 `json:"output_tok_s"`
	TotalTPS      float64 `json:"total_tok_s"`
	InputTokens   int64   `json:"input_tokens"`
	OutputTokens  int64   `json:"output_tokens"`
	// ServerSplit is the number of successful requests with the server's own stage split.
	ServerSplit int `json:"server_split"`
	// ServerEvidence counts them by the evidence the split came from
	// (latency.ServerSplit's Source; a metrics object with its engine:
	// "vllm-metrics (vllm)"), so that every figure about the server says
	// where it came from (docs/engines.md).
	ServerEvidence map[string]int `json:"server_evidence,omitempty"`
	// QueueInferred says how the queue wait was put on requests whose
	// server reports none (llama.cpp, Ollama); nil when none.
	QueueInferred *QueueInference `json:"queue_inferred,omitempty"`
	// SharedPrefixTokens and CachedTokens sum the successful requests'
	// prompt tokens the workload shares with earlier requests
	// (Record.SharedPrefixTokens: a prefix group, a session's history, a
	// trace's hash_ids) and those the server served from its prefix cache
	// (Record.CachedTokens); their shares of InputTokens are the run's
	// shared-prefix evidence (docs/metrics.md, "Prompt tokens shared and
	// cached").
	SharedPrefixTokens int64 `json:"shared_prefix_tokens,omitempty"`
	CachedTokens       int64 `json:"cached_tokens,omitempty"`
	// ServerTokens is the server's own count of the tokens it computed
	// over the run, beside the records' (its /metrics); nil when it
	// exposes none.
	ServerTokens *ServerTokens `json:"server_tokens,omitempty"`
}

// PrefixLine words the summary's shared-prefix evidence: the shares of
// input tokens the workload shares and the server served from its cache;
// empty when the records show neither.
func (s *Summary) PrefixLine() string {
	if s.InputTokens == 0 || s.SharedPrefixTokens == 0 && s.CachedTokens == 0 {
		return ""
	}
	in := float64(s.InputTokens)
	return fmt.Sprintf("prompt tokens shared with an earlier request %.1f%% (shared_prefix_tokens)  served from the prefix cache %.1f%% (cached_tokens)",
		100*float64(s.SharedPrefixTokens)/in, 100*float64(s.CachedTokens)/in)
}

// Dist describes one metric's distribution over the run's successful
// requests (nearest-rank percentiles, docs/metrics.md), in milliseconds.
type Dist struct {
	Metric string  `json:"metric"`
	Count  int64   `json:"count"`
	Mean   float64 `json:"mean_ms"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P95    float64 `json:"p95_ms"`
	P99    float64 `json:"p99_ms"`
	P999   float64 `json:"p99_9_ms"`
	Max    float64 `json:"max_ms"`
	// P95CI and P99CI are 95 % bootstrap intervals [low, high].
	P95CI [2]float64 `json:"p95_ci_ms"`
	P99CI [2]float64 `json:"p99_ci_ms"`
	// P99Trusted is false when fewer than 10 values lie above the P99
	// (under 1,000 values): too few to pin the tail down.
	P99Trusted bool `json:"p99_trusted"`
	// Approx is true when the values came from a histogram (0.05 % resolution).
	Approx bool `json:"approx,omitempty"`
}

// Decomposition is the mean of each stage over groups of requests ranked by
// the decomposed metric: the median band and the tails.
type Decomposition struct {
	Of     latency.Metric `json:"of"` // latency.E2EIntended or latency.TTFTIntended
	Groups []StageGroup   `json:"groups"`
}

// StageGroup is a set of requests and how their time splits along their
// path (latency.Record.Path): the client's stages, each hop's stages under
// its hop, the network between hops and what no hop accounts for, in path
// order; the parts sum to the total.
type StageGroup struct {
	// Name is "median" (ranked between P40 and P60), "p95+" or "p99+"
	// (ranked above the P95 / P99 request; at least one request).
	Name     string       `json:"name"`
	Requests int          `json:"requests"`
	TotalMS  float64      `json:"total_ms"` // mean of the decomposed metric
	Stages   []StageShare `json:"stages"`
	// Largest is the stage with the largest mean, LargestHop its hop.
	Largest    string `json:"largest"`
	LargestHop string `json:"largest_hop"`
}

// StageShare is one part's mean time in a group and its share of the
// total. Hop is the hop that reported the stage ("client", "app",
// "gateway", "server", or any hop a record names), a link "a→b" for the
// network between two hops, or "" for time no hop accounts for; Stage is
// its name within the hop, as the hop named it (a tokentrace server's
// server_decode is its "decode").
type StageShare struct {
	Hop    string  `json:"hop"`
	Stage  string  `json:"stage"`
	MeanMS float64 `json:"mean_ms"`
	Share  float64 `json:"share"` // 0..1
}

// Verdict is an SLO judged on the run.
type Verdict struct {
	SLO         string         `json:"slo"` // as written, e.g. "ttft:p99<=1.5s"; "all" for AllSLOs
	Metric      latency.Metric `json:"metric,omitempty"`
	Percentile  float64        `json:"percentile,omitempty"`
	ThresholdMS float64        `json:"threshold_ms,omitempty"`
	ValueMS     float64        `json:"value_ms,omitempty"` // the run's percentile
	CI          [2]float64     `json:"ci_ms,omitzero"`
	// Status is StatusPass, StatusFail or StatusNoData; Uncertain is set
	// when the threshold lies inside the value's confidence interval.
	Status    Status `json:"status"`
	Uncertain bool   `json:"uncertain,omitempty"`
	// Meeting counts requests that succeeded and met the threshold (all
	// thresholds for AllSLOs); Attainment is Meeting / requests.
	Meeting    int     `json:"meeting"`
	Attainment float64 `json:"attainment"`
	GoodputRPS float64 `json:"goodput_rps"`
}

// Status is an SLO's verdict, as JSON spells it.
type Status string

// The verdicts of an SLO.
const (
	StatusPass   Status = "pass"
	StatusFail   Status = "fail"
	StatusNoData Status = "no data" // no request to judge
)

// Severity is how much a finding matters, as JSON spells it.
type Severity string

// The severities of a finding, most severe first.
const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
	SeverityInfo     Severity = "info"
)

// Finding is one diagnosis: what is wrong, the numbers that show it, and
// what to do about it.
type Finding struct {
	Rule     string             `json:"rule"`
	Severity Severity           `json:"severity"`
	Title    string             `json:"title"`
	Evidence string             `json:"evidence"`
	Remedies []string           `json:"remedies,omitempty"`
	Numbers  map[string]float64 `json:"numbers,omitempty"`
}

// Phase is one sweep point.
type Phase struct {
	Name          string  `json:"name"`
	OfferedRPS    float64 `json:"offered_rps"`
	Concurrency   int     `json:"concurrency,omitempty"`
	Requests      int     `json:"requests"`
	Succeeded     int     `json:"succeeded"`
	DurationS     float64 `json:"duration_s"`
	ThroughputRPS float64 `json:"throughput_rps"`
	CompletionRPS float64 `json:"completion_rps"`
	GoodputRPS    float64 `json:"goodput_rps"`
	// OutputTPS is the phase's output tokens of successful requests per
	// second of its span.
	OutputTPS  float64 `json:"output_tps"`
	Attainment float64 `json:"attainment"`
	TTFTP50    float64 `json:"ttft_p50_ms"`
	TTFTP99    float64 `json:"ttft_p99_ms"`
	TPOTP50    float64 `json:"tpot_p50_ms"`
	TPOTP99    float64 `json:"tpot_p99_ms"`
	E2EP50     float64 `json:"e2e_p50_ms"`
	E2EP99     float64 `json:"e2e_p99_ms"`
	SLOsMet    bool    `json:"slos_met"`
	// BeforeCell says what bench did to the server before the phase (a
	// prefix-cache reset, a hook: run.json's points); BeforeCellWarning
	// what of it failed.
	BeforeCell        string `json:"before_cell,omitempty"`
	BeforeCellWarning string `json:"before_cell_warning,omitempty"`
}

// Capacity is the measured capacity of the system under test.
type Capacity struct {
	RPS   float64 `json:"rps"`
	Phase string  `json:"phase,omitempty"`
	Basis string  `json:"basis"`
}

// SLOsFailed reports whether any SLO verdict of the report is not a pass
// (a failure, or no data to judge).
func (r *Report) SLOsFailed() bool {
	for _, v := range r.SLOs {
		if v.Status != StatusPass {
			return true
		}
	}
	return false
}

// dist returns the distribution of a metric, or nil when the run has none.
func (r *Report) dist(m latency.Metric) *Dist {
	for i := range r.Metrics {
		if r.Metrics[i].Metric == string(m) {
			return &r.Metrics[i]
		}
	}
	return nil
}
