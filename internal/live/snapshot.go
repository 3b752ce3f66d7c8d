package live

// Snapshot is what the page and the table show at one instant: the JSON
// of /snapshot.json and of each /events event. Durations are
// milliseconds, rates per second.
type Snapshot struct {
	Seq int64 `json:"seq"` // 1, 2, … in publication order
	// View is "gateway" for the gateway's view (Config.Gateway), else
	// empty (a bench run).
	View  string `json:"view,omitempty"`
	Final bool   `json:"final"` // the run is over: Since is the report's
	// ElapsedS is the run's clock; WindowS the sliding window's width.
	ElapsedS float64 `json:"elapsed_s"`
	WindowS  float64 `json:"window_s"`
	Phase    string  `json:"phase,omitempty"` // the sweep point being sent
	Sent     int64   `json:"sent"`
	Done     int64   `json:"done"`
	InFlight int64   `json:"in_flight"`
	// Window is the last WindowS seconds; Since the run so far.
	Window Figures `json:"window"`
	Since  Figures `json:"since_start"`
	// SinceAtS is the run's clock when Since was computed (it lags: see
	// the package's doc).
	SinceAtS float64 `json:"since_at_s"`
	// Stages is the split of the window's successful requests along their
	// path: each part's mean and share.
	Stages []Stage `json:"stages"`
	// Failures counts failed requests by kind since start (warm-up
	// excluded; a success without an end as window.NoEnd).
	Failures map[string]int64 `json:"failures"`
	Gauges   *Gauges          `json:"gauges,omitempty"`
	Warnings []string         `json:"warnings"`
	// Findings are the report's rules on the records so far (provisional
	// until Final).
	Findings []Finding  `json:"findings"`
	SLOs     []SLOLine  `json:"slos"`
	Phases   []PhaseRow `json:"phases,omitempty"`
	// Groups are the gateway's pools and upstreams; Dropped counts the
	// records its hand-off was too full to take (the gateway's view).
	Groups  []Group `json:"groups,omitempty"`
	Dropped int64   `json:"dropped,omitempty"`
	// History is one point per tick, the oldest first (bounded).
	History []Point `json:"history"`

	// ttftP50 and ttftP99 are every record's TTFT so far (the plain line).
	ttftP50, ttftP99 float64
}

// Figures are rates, counts and latency percentiles over a span.
type Figures struct {
	Requests    int64     `json:"requests"`
	Succeeded   int64     `json:"succeeded"`
	Failed      int64     `json:"failed"`
	OfferedRPS  float64   `json:"offered_rps"`
	AchievedRPS float64   `json:"achieved_rps"`
	Metrics     []Metric  `json:"metrics"`
	Approx      bool      `json:"approx,omitempty"` // from histograms (the window)
	Errors      []KindNum `json:"errors,omitempty"`
}

// Metric is one latency metric's distribution.
type Metric struct {
	Name  string  `json:"name"`
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// KindNum is a count of failures of one kind.
type KindNum struct {
	Kind string `json:"kind"`
	N    int64  `json:"n"`
}

// Stage is one part of the window's split.
type Stage struct {
	Name   string  `json:"name"`
	MeanMS float64 `json:"mean_ms"`
	Share  float64 `json:"share"`
}

// Gauges are the server's figures as last scraped from its /metrics.
type Gauges struct {
	AtS     float64 `json:"at_s"`
	Running float64 `json:"running"`
	Waiting float64 `json:"waiting"`
	KVUsage float64 `json:"kv_usage"` // 0..1
}

// Finding is one of the report's findings.
type Finding struct {
	Rule     string `json:"rule"`
	Severity string `json:"severity"`
	Title    string `json:"title"`
	Evidence string `json:"evidence"`
}

// SLOLine is one objective, drawn on its metric's chart.
type SLOLine struct {
	Metric     string  `json:"metric"`
	Percentile float64 `json:"percentile"`
	MaxMS      float64 `json:"max_ms"`
	Text       string  `json:"text"`
}

// PhaseRow is one sweep point so far, from the report's phases.
type PhaseRow struct {
	Name          string  `json:"name"`
	OfferedRPS    float64 `json:"offered_rps"`
	ThroughputRPS float64 `json:"throughput_rps"`
	GoodputRPS    float64 `json:"goodput_rps"`
	TTFTP99       float64 `json:"ttft_p99_ms"`
	TPOTP99       float64 `json:"tpot_p99_ms"`
	SLOsMet       bool    `json:"slos_met"`
}

// Point is the window at one tick.
type Point struct {
	T        float64    `json:"t"`
	Offered  float64    `json:"offered"`
	Achieved float64    `json:"achieved"`
	InFlight int64      `json:"in_flight"`
	P50      [4]float64 `json:"p50"` // TTFT, TPOT, ITL, E2E
	P99      [4]float64 `json:"p99"`
	Waiting  float64    `json:"waiting"`
	Running  float64    `json:"running"`
	KV       float64    `json:"kv"`
}
