package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// Buckets. The GenAI histograms use the OpenTelemetry GenAI semantic
// conventions' advised boundaries (tracing.GenAIBounds); the stage
// histograms start at 25 µs so that the gateway's own sub-millisecond
// stages are resolved.
var stageBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10, 30, 60}

// Metrics holds the gateway's Prometheus collectors. Labels are bounded:
// pool and model are names from the configuration (model is the route's
// configured name, "*" for the catch-all route), code is the HTTP status,
// reason one of a fixed set.
type Metrics struct {
	TTFT     *prometheus.HistogramVec // gen_ai_server_time_to_first_token_seconds
	TPOT     *prometheus.HistogramVec // gen_ai_server_time_per_output_token_seconds
	Duration *prometheus.HistogramVec // gen_ai_server_request_duration_seconds
	// Usage is gen_ai_client_token_usage: each successful request's input
	// and output tokens, by gen_ai_token_type.
	Usage *prometheus.HistogramVec
	// Stage has one histogram per gateway stage and per upstream split
	// part, keyed by its Server-Timing name (promStage names the series).
	Stage    map[latency.TimingName]*prometheus.HistogramVec
	ChunkGap *prometheus.HistogramVec // gap between content events written to the client
	// FirstAnswer is the time to the first answer token (content, not
	// reasoning) of a stream; Reasoning, of a stream whose output began
	// with reasoning, the time from its first reasoning token to its
	// first answer token (the gateway hop's reasoning phase), whatever
	// the API.
	FirstAnswer, Reasoning *prometheus.HistogramVec
	ITL                    *prometheus.HistogramVec // per-token gap, when usage is continuous

	Requests *prometheus.CounterVec // by pool, model, code
	Rejected *prometheus.CounterVec // by pool, reason
	Attempts *prometheus.CounterVec // upstream attempts by pool, outcome
	// UpstreamErrors counts the upstream's faults by pool and kind:
	// protocol_error (an event that is not JSON), stream_broken (the
	// stream ended before [DONE] after the first token), idle_timeout
	// (no event within the idle timeout after the first token),
	// stale_connection (a pooled connection the upstream had closed before
	// any answer: the request was resent once on a fresh one),
	// error_event (the stream carried the upstream's error event, its
	// message logged).
	UpstreamErrors *prometheus.CounterVec

	QueueDepth  *prometheus.GaugeVec // waiting requests by pool
	InFlight    *prometheus.GaugeVec // admitted requests by pool
	Concurrency *prometheus.GaugeVec // concurrency limit by pool
	// Config is tokentrace_gateway_config_info: one series per configured
	// route, its labels the settings of the levers the gateway owns (the
	// route's and its pool's), reset at each reload; bench records them as
	// the run's evidence and verify reads a change in them.
	Config *prometheus.GaugeVec

	// The Redis that gateway replicas share (RedisConfig): whether the
	// last call reached it, calls that failed by use (limits, admission),
	// requests decided by on_error without it by use and decision
	// (allowed, refused), and each shared pool's slots held by every
	// replica as of this replica's last report.
	RedisUp       *prometheus.GaugeVec // no labels: absent until a redis is configured
	RedisErrors   *prometheus.CounterVec
	RedisFallback *prometheus.CounterVec
	SharedInUse   *prometheus.GaugeVec

	series sync.Map // [2]string{pool, model} → *seriesSet

	// GenAI, when set, records the OpenTelemetry GenAI server metrics of
	// every finished request (exported over OTLP with the spans).
	GenAI *tracing.GenAIServer
}

// seriesSet holds one pool/model's histograms, resolved once so that a
// request's observations do not hash label values again.
type seriesSet struct {
	ttft, tpot, duration, gap, itl prometheus.Observer
	usageIn, usageOut              prometheus.Observer
	stage                          map[latency.TimingName]prometheus.Observer
	ok                             prometheus.Counter // Requests{code="200"}
}

func (m *Metrics) seriesFor(pool, model string) *seriesSet {
	key := [2]string{pool, model}
	if s, ok := m.series.Load(key); ok {
		return s.(*seriesSet)
	}
	s := &seriesSet{
		ttft: m.TTFT.WithLabelValues(pool, model), tpot: m.TPOT.WithLabelValues(pool, model),
		duration: m.Duration.WithLabelValues(pool, model), gap: m.ChunkGap.WithLabelValues(pool, model),
		itl: m.ITL.WithLabelValues(pool, model), stage: map[latency.TimingName]prometheus.Observer{},
		usageIn: m.Usage.WithLabelValues(pool, model, "input"), usageOut: m.Usage.WithLabelValues(pool, model, "output"),
		ok: m.Requests.WithLabelValues(pool, model, "200"),
	}
	for name, h := range m.Stage {
		s.stage[name] = h.WithLabelValues(pool, model)
	}
	actual, _ := m.series.LoadOrStore(key, s)
	return actual.(*seriesSet)
}

// NewMetrics builds the collectors; register them with Register.
func NewMetrics() *Metrics {
	pm := []string{"pool", "model"}
	h := func(name, help string, b []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b}, pm)
	}
	genai := func(name, unit, help string) *prometheus.HistogramVec {
		return h(tracing.PromName(name, unit), help, tracing.GenAIBounds(name))
	}
	genaiLike := func(name, help string) *prometheus.HistogramVec { // the TTFT's buckets
		return h(name, help, tracing.GenAIBounds(tracing.MetricServerTTFT))
	}
	m := &Metrics{
		TTFT: genai(tracing.MetricServerTTFT, tracing.UnitSeconds,
			"Time from the gateway receiving a streaming request to the first content token it read from upstream."),
		TPOT: genai(tracing.MetricServerTPOT, tracing.UnitSeconds,
			"Per-request (E2E − TTFT)/(output tokens − 1) of streaming requests with at least 2 output tokens."),
		Duration: genai(tracing.MetricServerDuration, tracing.UnitSeconds,
			"Gateway-observed end-to-end request duration (successful and failed)."),
		Usage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: tracing.PromName(tracing.MetricTokenUsage, tracing.UnitTokens),
			Help:    "Input and output tokens of successful requests (usage, or the gateway's count), by gen_ai_token_type.",
			Buckets: tracing.GenAIBounds(tracing.MetricTokenUsage)}, []string{"pool", "model", tracing.PromLabel(tracing.AttrTokenType)}),
		ChunkGap: h("tokentrace_gateway_chunk_gap_seconds", "Gap between consecutive content-bearing stream events read from upstream.", stageBuckets),
		ITL:      h("tokentrace_gateway_itl_seconds", "Per-token gap, from upstream chunks carrying continuous usage.", stageBuckets),
		FirstAnswer: genaiLike("tokentrace_gateway_time_to_first_answer_seconds",
			"Time from the gateway receiving a streaming request to the first answer token (content, not reasoning) it read from upstream."),
		Reasoning: h("tokentrace_gateway_reasoning_seconds",
			"Time from the first reasoning token to the first answer token read from upstream, of streams whose output began with reasoning.", stageBuckets),
		Stage:    map[latency.TimingName]*prometheus.HistogramVec{},
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokentrace_gateway_requests_total", Help: "Completion requests by final HTTP status."}, []string{"pool", "model", "code"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokentrace_gateway_rejected_total", Help: "Requests refused by a policy, by reason."}, []string{"pool", "reason"}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokentrace_gateway_upstream_attempts_total", Help: "Upstream attempts by outcome (won, failed, timeout, cancelled)."}, []string{"pool", "outcome"}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokentrace_gateway_upstream_errors_total",
			Help: "Upstream faults by kind (protocol_error, stream_broken, idle_timeout, stale_connection: resent once on a fresh connection, error_event: an error event in the stream)."}, []string{"pool", "kind"}),

		QueueDepth:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tokentrace_gateway_queue_depth", Help: "Requests waiting for admission."}, []string{"pool"}),
		InFlight:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tokentrace_gateway_in_flight", Help: "Requests admitted and not finished."}, []string{"pool"}),
		Concurrency: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tokentrace_gateway_concurrency_limit", Help: "Current concurrency limit (0 = unlimited)."}, []string{"pool"}),
		Config: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ConfigInfo,
			Help: "The configured levers of each route and its pool (admission limit, max-tokens cap, shedding, deadline, routing policy, replica set); the value is 1."}, configLabels),

		RedisUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tokentrace_gateway_redis_up", Help: "1 while the last call to the shared Redis succeeded, 0 while it is treated as unreachable."}, nil),
		RedisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokentrace_gateway_redis_errors_total",
			Help: "Calls to the shared Redis that failed or timed out, by use (limits, admission)."}, []string{"use"}),
		RedisFallback: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokentrace_gateway_redis_fallback_total",
			Help: "Requests decided by redis.on_error because Redis was unreachable, by use (limits, admission) and decision (allowed, refused)."}, []string{"use", "decision"}),
		SharedInUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tokentrace_gateway_shared_in_flight",
			Help: "A shared pool's slots held by every gateway replica together, as of this replica's last report."}, []string{"pool"}),
	}
	for _, s := range stageSeries {
		m.Stage[s] = h("tokentrace_gateway_stage_"+promStage(s)+"_seconds", "Time per request in stage "+string(s)+" (docs/metrics.md, Gateway stages).", stageBuckets)
	}
	return m
}

// observePD observes a disaggregated request's hops: the prefill half,
// and each instance's stages as far as it reported them.
func (ss *seriesSet) observePD(st stageDurations, pd *pdStages) {
	ss.stage[latency.TimingUpstreamPrefill].Observe(st.UpstreamPrefill.Seconds())
	if pd.hasPrefill {
		ss.stage[latency.TimingName(latency.PrefillQueue)].Observe(pd.prefillQueue.Seconds())
		ss.stage[latency.TimingPrefill].Observe(pd.prefill.Seconds())
	}
	if pd.hasDecode {
		ss.stage[latency.TimingKVTransfer].Observe(pd.kvTransfer.Seconds())
		ss.stage[latency.TimingDecodeQueue].Observe(pd.decodeQueue.Seconds())
		ss.stage[latency.TimingFirstDecode].Observe(pd.firstDecode.Seconds())
	}
}

// stageSeries are the stages with a histogram: the gateway's stages and
// the parts of the upstream's split.
var stageSeries = append(slices.Clone(latency.GatewayStages), latency.TimingServerQueue, latency.TimingPrefill, latency.TimingNetwork,
	latency.TimingName(latency.PrefillQueue), latency.TimingKVTransfer, latency.TimingDecodeQueue, latency.TimingFirstDecode)

// promStage names a stage's histogram: its Server-Timing name, except the
// gateway's own queue, whose series keeps the name it had before the wire
// name gained its prefix (tokentrace_gateway_stage_queue_seconds, which
// dashboards and recording rules read; in the gateway's own namespace it
// cannot be mistaken for the server's queue, server_queue).
func promStage(s latency.TimingName) string {
	if s == latency.TimingGatewayQueue {
		return "queue"
	}
	return string(s)
}

// Register registers every collector with r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	cs := []prometheus.Collector{m.TTFT, m.TPOT, m.Duration, m.Usage, m.ChunkGap, m.ITL, m.FirstAnswer, m.Reasoning, m.Requests, m.Rejected, m.Attempts, m.UpstreamErrors, m.QueueDepth, m.InFlight, m.Concurrency, m.Config,
		m.RedisUp, m.RedisErrors, m.RedisFallback, m.SharedInUse}
	for _, s := range stageSeries {
		cs = append(cs, m.Stage[s])
	}
	var errs []error
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

// observation is what one finished request contributes to the metrics.
type observation struct {
	pool, model string
	status      int
	stream      bool
	stages      stageDurations
	tl          *timeline
	ttft        time.Duration // 0 when no token was produced
	firstAnswer time.Time     // exchange.firstAnswer
	// noContent: a stream that ended ([DONE]) without content; its end
	// stands in for the first token in the stages, but it is no TTFT.
	noContent bool
	outTokens int
	inTokens  int // the request's prompt tokens as the gateway counts them
	// chunkNS and chunkTokens are the content events' instants and, with
	// continuous usage, their token counts: the chunk gaps and ITLs follow
	// latency.Record's formulas (ICLs, ITLs).
	chunkNS     []int64
	chunkTokens []int32
}

// observe records one finished request.
func (m *Metrics) observe(o *observation) {
	if m == nil {
		return
	}
	pool, model := o.pool, o.model
	ss := m.seriesFor(pool, model)
	if o.status == http.StatusOK {
		ss.ok.Inc()
	} else {
		m.Requests.WithLabelValues(pool, model, strconv.Itoa(o.status)).Inc()
	}
	e2e := o.stages.sum()
	ss.duration.Observe(e2e.Seconds())
	m.recordGenAI(o, e2e)
	if o.status == 200 {
		ss.usageIn.Observe(float64(o.inTokens))
		ss.usageOut.Observe(float64(o.outTokens))
	}
	if o.status != 200 || o.ttft == 0 {
		return
	}
	st := o.stages
	ss.stage[latency.TimingGatewayIn].Observe(st.In.Seconds())
	ss.stage[latency.TimingGatewayQueue].Observe(st.Queue.Seconds())
	if !o.tl.prefilled.IsZero() {
		ss.observePD(st, &o.tl.pd)
	}
	ss.stage[latency.TimingConnect].Observe(st.Connect.Seconds())
	ss.stage[latency.TimingUpstreamTTFT].Observe(st.UpstreamTTFT.Seconds())
	ss.stage[latency.TimingDecode].Observe(st.Decode.Seconds())
	ss.stage[latency.TimingPostProcess].Observe(st.Post.Seconds())
	ss.stage[latency.TimingBackpressure].Observe(st.Backpressure.Seconds())
	if sp, ok := o.tl.split(st.UpstreamTTFT); ok {
		// A stage the upstream does not report is not observed as 0.
		if sp.hasQueue {
			ss.stage[latency.TimingServerQueue].Observe(sp.queue.Seconds())
		}
		if sp.hasPrefill {
			ss.stage[latency.TimingPrefill].Observe(sp.prefill.Seconds())
		}
		if sp.hasNetwork {
			ss.stage[latency.TimingNetwork].Observe(sp.network.Seconds())
		}
	}
	if !o.stream || o.noContent {
		return
	}
	ss.ttft.Observe(o.ttft.Seconds())
	if fa := o.firstAnswer; !fa.IsZero() {
		m.FirstAnswer.WithLabelValues(pool, model).Observe(fa.Sub(o.tl.start).Seconds())
		if r := fa.Sub(o.tl.firstTok); r > 0 {
			m.Reasoning.WithLabelValues(pool, model).Observe(r.Seconds())
		}
	}
	if o.outTokens >= 2 {
		ss.tpot.Observe((e2e - o.ttft).Seconds() / float64(o.outTokens-1))
	}
	rec := latency.Record{ChunkNS: o.chunkNS, ChunkTokens: o.chunkTokens}
	var gaps [64]int64 // on the stack for the usual answer
	for _, d := range rec.ICLs(gaps[:0]) {
		ss.gap.Observe(time.Duration(d).Seconds())
	}
	if len(o.chunkTokens) > 0 { // without token counts there is no per-token gap
		for _, d := range rec.ITLs(gaps[:0]) {
			ss.itl.Observe(time.Duration(d).Seconds())
		}
	}
}

// recordGenAI feeds the GenAI server metrics with the same definitions as
// the Prometheus histograms beside them: TTFT and TPOT of streams that
// produced content, the duration of every request, errors by status.
func (m *Metrics) recordGenAI(o *observation, e2e time.Duration) {
	if m.GenAI == nil {
		return
	}
	req := tracing.GenAIRequest{Operation: "chat", Model: o.model, Duration: e2e,
		InputTokens: o.inTokens, OutputTokens: o.outTokens}
	if o.status != 200 {
		req.ErrorType = strconv.Itoa(o.status)
	} else if o.stream && !o.noContent && o.ttft > 0 {
		req.TTFT = o.ttft
		if o.outTokens >= 2 {
			req.TPOT = (e2e - o.ttft) / time.Duration(o.outTokens-1)
		}
	}
	m.GenAI.Record(context.Background(), req)
}

// The fixed label values of Rejected and Attempts (proxy.go), and the
// statuses the gateway answers a routed request with itself (an
// upstream's other statuses pass through and make their series then).
var (
	rejectReasons   = []string{"queue_full", "deadline", "input_too_long", "max_tokens", "rate_limit", "limits_unavailable", "admission_unavailable"}
	redisUses       = []string{useLimits, useAdmission}
	attemptOutcomes = []string{"won", "failed", "timeout", "cancelled"}
	routedCodes     = []string{"200", "400", "401", "413", "429", "500", "502", "503", "504"}
)

// initSeries creates at zero the series the live configuration can
// produce with known label values: each route's histograms and request
// counts by status for every pool it can send to, and each pool's
// rejection reasons and attempt outcomes.
// A series born with its first increment hides that increment from
// rate() and increase(); born at zero, every request counts from the
// first, and a dashboard shows 0 rather than no data.
func (m *Metrics) initSeries(rt *liveConfig) {
	if m == nil {
		return
	}
	m.setConfigInfo(rt)
	for _, r := range rt.routes {
		pools := []string{r.Pool}
		for _, lp := range r.LengthPools {
			pools = append(pools, lp.Pool)
		}
		for _, p := range pools {
			if rt.pools[p] == nil {
				continue
			}
			m.seriesFor(p, r.Model)
			for _, code := range routedCodes {
				m.Requests.WithLabelValues(p, r.Model, code)
			}
		}
	}
	for name := range rt.pools {
		for _, reason := range rejectReasons {
			m.Rejected.WithLabelValues(name, reason)
		}
		for _, o := range attemptOutcomes {
			m.Attempts.WithLabelValues(name, o)
		}
	}
	if rt.redis != nil {
		up := 0.0
		if rt.redis.client.Up() {
			up = 1
		}
		m.RedisUp.WithLabelValues().Set(up)
		for _, use := range redisUses {
			m.RedisErrors.WithLabelValues(use)
			m.RedisFallback.WithLabelValues(use, "allowed")
			m.RedisFallback.WithLabelValues(use, "refused")
		}
		for name, p := range rt.pools {
			if p.cfg.Queue.Shared {
				m.SharedInUse.WithLabelValues(name)
			}
		}
	}
}

// ConfigInfo is the name of the gateway's configuration info metric.
const ConfigInfo = "tokentrace_gateway_config_info"

// configLabels are ConfigInfo's labels: the route and pool, then the
// settings by the names verify reads (replicas, balancer and
// max_max_tokens as the twin's deployment names them; prefill_replicas
// the route's prefill pool's count, 0 when it is not disaggregated).
var configLabels = []string{"model", "pool", "replicas", "balancer", "gateway_concurrency", "gateway_max_queue", "gateway_adaptive",
	"max_max_tokens", "on_exceed", "early_reject", "deadline_ttft", "prefill_replicas"}

// setConfigInfo sets ConfigInfo's series to the live configuration's.
func (m *Metrics) setConfigInfo(rt *liveConfig) {
	m.Config.Reset()
	for _, r := range rt.cfg.Routes {
		p := rt.pools[r.Pool]
		if p == nil {
			continue
		}
		q := p.cfg.Queue
		prefill := 0
		if pp := rt.pools[r.PrefillPool]; r.PrefillPool != "" && pp != nil {
			prefill = len(pp.cfg.Replicas)
		}
		m.Config.WithLabelValues(r.Model, r.Pool, strconv.Itoa(len(p.cfg.Replicas)), p.cfg.Balancer,
			strconv.Itoa(q.Concurrency), strconv.Itoa(q.MaxSize), q.adaptive(),
			strconv.Itoa(r.Length.MaxMaxTokens), r.Length.OnExceed, strconv.FormatBool(r.EarlyReject),
			r.DeadlineTTFT.D().String(), strconv.Itoa(prefill)).Set(1)
	}
}
