package serve

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// vLLM's histogram buckets (vllm/v1/metrics/loggers.py), so dashboards and
// routers built for vLLM read these unchanged.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	// latePromBuckets resolve the server's own write lateness (tokentrace's
	// metric, not vLLM's): 50 µs to 1 s.
	latePromBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
		0.025, 0.05, 0.1, 0.25, 0.5, 1}
)

// errorCodes are the values of tokentrace:http_errors_total's code label:
// the statuses the completion endpoints answer errors with, and "reset".
var errorCodes = []string{"400", "404", "408", "413", "429", "500", "503", "reset"}

// StatsFunc returns the engine's state; (*engine.Engine).Stats is one.
type StatsFunc func() engine.Stats

// CacheInfo is the label set of vllm:cache_config_info.
type CacheInfo struct {
	BlockSize            int
	NumGPUBlocks         int
	EnablePrefixCaching  bool
	CacheDType           string
	GPUMemoryUtilization float64
}

// SchedulerInfo is the label set of tokentrace:scheduler_config_info: the
// scheduler's settings, which vLLM does not expose, so that a report knows
// what is already on.
type SchedulerInfo struct {
	EnableChunkedPrefill bool
	MaxNumBatchedTokens  int
	MaxNumSeqs           int
	Policy               string
	// Family is the engine family simulated (engine_family; "" for vLLM's
	// settings).
	Family string
}

// labels are the gauge's: engine_family only where one is simulated.
func (sched SchedulerInfo) labels() prometheus.Labels {
	l := prometheus.Labels{
		"enable_chunked_prefill": strconv.FormatBool(sched.EnableChunkedPrefill),
		"max_num_batched_tokens": strconv.Itoa(sched.MaxNumBatchedTokens),
		"max_num_seqs":           strconv.Itoa(sched.MaxNumSeqs),
		"scheduling_policy":      sched.Policy,
		"engine":                 "0",
	}
	if sched.Family != "" {
		l["engine_family"] = sched.Family
	}
	return l
}

// Metrics is the /metrics exposition: vLLM's metric names, labels
// (model_name, engine) and buckets, plus a few tokentrace:* extras. The
// gauges and the prefix-cache and preemption counters read the engine's
// Stats at scrape time; the rest is observed by the handlers.
type Metrics struct {
	running, waiting, kvUsage               prometheus.GaugeFunc
	prefixQueries, prefixHits, preemptions  prometheus.CounterFunc
	prefixResets                            prometheus.CounterFunc
	cacheInfo, schedulerInfo                prometheus.Gauge
	ttft, itl, e2e, queue, prefill, decode  prometheus.Histogram
	promptTokens, generationTokens          prometheus.Counter
	success                                 *prometheus.CounterVec
	writeLateness                           prometheus.Histogram
	httpErrors                              *prometheus.CounterVec
	successStop, successLength, successAbrt prometheus.Counter
	// The OpenTelemetry GenAI server metrics in their Prometheus
	// translation (tracing.PromName), beside vLLM's names.
	genaiTTFT, genaiTPOT, genaiDuration, genaiUsage *prometheus.HistogramVec
}

// NewMetrics builds the metrics of one served model; stats is read at
// every scrape.
func NewMetrics(model string, stats StatsFunc, cache CacheInfo, sched SchedulerInfo) *Metrics {
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	gauge := func(name, help string, f func(engine.Stats) float64) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(stats()) })
	}
	counterFunc := func(name, help string, f func(engine.Stats) float64) prometheus.CounterFunc {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(stats()) })
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m := &Metrics{
		running: gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
			func(s engine.Stats) float64 { return float64(s.Running) }),
		waiting: gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
			func(s engine.Stats) float64 { return float64(s.Waiting) }),
		kvUsage: gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
			func(s engine.Stats) float64 { return s.KVUsage }),
		prefixQueries: counterFunc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
			func(s engine.Stats) float64 { return float64(s.PrefixQueries) }),
		prefixHits: counterFunc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
			func(s engine.Stats) float64 { return float64(s.PrefixHits) }),
		prefixResets: counterFunc("tokentrace:prefix_cache_resets_total", "Prefix cache resets applied (POST /reset_prefix_cache).",
			func(s engine.Stats) float64 { return float64(s.PrefixCacheResets) }),
		preemptions: counterFunc("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
			func(s engine.Stats) float64 { return float64(s.Preemptions) }),
		cacheInfo: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
			ConstLabels: prometheus.Labels{
				"block_size":             strconv.Itoa(cache.BlockSize),
				"num_gpu_blocks":         strconv.Itoa(cache.NumGPUBlocks),
				"enable_prefix_caching":  strconv.FormatBool(cache.EnablePrefixCaching),
				"cache_dtype":            cache.CacheDType,
				"gpu_memory_utilization": strconv.FormatFloat(cache.GPUMemoryUtilization, 'g', -1, 64),
				"engine":                 "0",
			}}),
		schedulerInfo: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tokentrace:scheduler_config_info", Help: "The scheduler's settings (vLLM's names); the value is 1.",
			ConstLabels: sched.labels()}),
		ttft:             hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:              hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets),
		e2e:              hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestLatencyBuckets),
		queue:            hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets),
		prefill:          hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestLatencyBuckets),
		decode:           hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestLatencyBuckets),
		promptTokens:     counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
		}, []string{"finished_reason"}),
		writeLateness: hist("tokentrace:stream_write_lateness_seconds",
			"Time from the engine step that produced a chunk's tokens to the chunk being written and flushed.", latePromBuckets),
		httpErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokentrace:http_errors_total", Help: "Error responses of the completion endpoints by HTTP status (\"reset\" for injected connection resets), injected faults included.", ConstLabels: labels,
		}, []string{"code"}),
	}
	m.cacheInfo.Set(1)
	m.schedulerInfo.Set(1)
	// The error series exist at zero from the start, so rate() and
	m.genAIHistograms(model)
	// increase() count the first error of each kind (a series born with
	// its first increment hides it).
	for _, code := range errorCodes {
		m.httpErrors.WithLabelValues(code)
	}
	m.successStop = m.success.WithLabelValues(string(engine.FinishStop))
	m.successLength = m.success.WithLabelValues(string(engine.FinishLength))
	m.successAbrt = m.success.WithLabelValues(string(engine.FinishAbort))
	return m
}

// Register registers every metric with r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{
		m.running, m.waiting, m.kvUsage, m.prefixQueries, m.prefixHits, m.prefixResets, m.preemptions, m.cacheInfo, m.schedulerInfo,
		m.ttft, m.itl, m.e2e, m.queue, m.prefill, m.decode, m.promptTokens, m.generationTokens,
		m.success, m.writeLateness, m.httpErrors, m.genaiTTFT, m.genaiTPOT, m.genaiDuration, m.genaiUsage,
	} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}

// firstToken records a request's first token: its TTFT (from the server's
// receipt of the request) and its prompt tokens, as vLLM counts them when
// the prefill completes.
func (m *Metrics) firstToken(ttft time.Duration, promptTokens int) {
	m.ttft.Observe(ttft.Seconds())
	m.promptTokens.Add(float64(promptTokens))
}

// tokens records n generated tokens and, after the first event, the gap
// since the previous event (one inter-token latency per engine output, as
// vLLM observes one per iteration).
func (m *Metrics) tokens(n int, gap time.Duration, first bool) {
	m.generationTokens.Add(float64(n))
	if !first {
		m.itl.Observe(gap.Seconds())
	}
}

// finished records a request that ran to its end; received is when the
// server got it.
func (m *Metrics) finished(tl engine.Timeline, received time.Time) {
	switch tl.Finish {
	case engine.FinishStop:
		m.successStop.Inc()
	case engine.FinishLength:
		m.successLength.Inc()
	default:
		m.successAbrt.Inc()
	}
	if tl.Finish == engine.FinishAbort {
		return
	}
	m.e2e.Observe(tl.Finished.Sub(received).Seconds())
	m.queue.Observe(tl.Queue().Seconds())
	m.prefill.Observe(tl.Prefill().Seconds())
	m.decode.Observe(tl.Decode().Seconds())
}

// genAIHistograms makes the GenAI histograms: the OTLP instruments' names,
// units, bucket boundaries and attributes, translated as an OpenTelemetry
// Collector's prometheus exporter would (docs/metrics.md, "OpenTelemetry
// GenAI metrics").
func (m *Metrics) genAIHistograms(model string) {
	constant := prometheus.Labels{tracing.PromLabel(tracing.AttrProvider): GenAIProvider,
		tracing.PromLabel(tracing.AttrRequestModel): model, tracing.PromLabel(tracing.AttrResponseModel): model}
	op := tracing.PromLabel(tracing.AttrOperation)
	hist := func(name, unit, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: tracing.PromName(name, unit), Help: help,
			ConstLabels: constant, Buckets: tracing.GenAIBounds(name)}, append([]string{op}, labels...))
	}
	m.genaiTTFT = hist(tracing.MetricServerTTFT, tracing.UnitSeconds,
		"Time to generate the first token of successful responses (from the request's receipt).")
	m.genaiTPOT = hist(tracing.MetricServerTPOT, tracing.UnitSeconds,
		"Time per output token generated after the first token for successful responses (decode / (output tokens - 1)).")
	m.genaiDuration = hist(tracing.MetricServerDuration, tracing.UnitSeconds,
		"Generative AI server request duration, from receipt to the end; failed requests carry error_type.",
		tracing.PromLabel(tracing.AttrErrorType))
	m.genaiUsage = hist(tracing.MetricTokenUsage, tracing.UnitTokens,
		"Number of input and output tokens used, by gen_ai_token_type.", tracing.PromLabel(tracing.AttrTokenType))
}

// GenAIProvider is serve's gen_ai.provider.name.
const GenAIProvider = "tokentrace"

// genAI records a finished request's GenAI metrics with the definitions
// of the OTLP instruments (tracing.GenAIServer.Record): a failed request
// only its duration, with its error type. A nil *Metrics records nothing.
func (m *Metrics) genAI(r tracing.GenAIRequest) {
	if m == nil {
		return
	}
	if r.ErrorType != "" {
		m.genaiDuration.WithLabelValues(r.Operation, r.ErrorType).Observe(r.Duration.Seconds())
		return
	}
	m.genaiDuration.WithLabelValues(r.Operation, "").Observe(r.Duration.Seconds())
	if r.TTFT > 0 {
		m.genaiTTFT.WithLabelValues(r.Operation).Observe(r.TTFT.Seconds())
	}
	if r.TPOT > 0 {
		m.genaiTPOT.WithLabelValues(r.Operation).Observe(r.TPOT.Seconds())
	}
	m.genaiUsage.WithLabelValues(r.Operation, "input").Observe(float64(r.InputTokens))
	m.genaiUsage.WithLabelValues(r.Operation, "output").Observe(float64(r.OutputTokens))
}

// aborted records a request its client abandoned.
func (m *Metrics) aborted() { m.successAbrt.Inc() }

func (m *Metrics) lateness(d time.Duration) { m.writeLateness.Observe(d.Seconds()) }

func (m *Metrics) httpError(code string) { m.httpErrors.WithLabelValues(code).Inc() }
