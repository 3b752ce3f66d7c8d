package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// Config is everything a server needs: the engine's configuration and the
// server's own options. Zero server options take the defaults named on
// each field.
type Config struct {
	// Engine configures the simulated engine (engine.New fills its
	// defaults and validates it).
	Engine engine.Config
	// ServedModelName is the model name clients must send; default
	// Engine.Model.
	ServedModelName string
	// MaxBodyBytes bounds a request body; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// QueueFullStatus is the status of a request refused because the
	// engine's waiting queue is full (Engine.MaxWaiting): 429 (default) or
	// 503.
	QueueFullStatus int
	// Faults configures fault injection (none by default).
	Faults Faults
	// ReasoningField is the chat field of reasoning tokens (Engine.Reasoning):
	// openai.ReasoningField (default) or openai.ReasoningContentField. A
	// completions answer has no such field: its reasoning is text.
	ReasoningField string
	// EngineFamily is the serving engine the engine simulates
	// (engine.Options.Engine: vllm, sglang, trtllm, llamacpp, ollama[@version]),
	// shown as engine_family in tokentrace:scheduler_config_info so that a
	// report speaks that engine's settings; empty: vLLM's.
	EngineFamily string
	// CacheDType and GPUMemoryUtilization are shown in
	// vllm:cache_config_info.
	CacheDType           string
	GPUMemoryUtilization float64
	// Limits are the HTTP server's deadlines (request headers, request
	// body, idle keep-alive) and its connection cap; zero fields take
	// httplimit's defaults, the cap from the descriptor limit.
	Limits httplimit.Limits
	// Grace is how long requests in flight may finish after a stop
	// (grace) before the engine ends the rest with finish reason "abort";
	// 0: at once.
	Grace time.Duration
	// Role is the server's part in disaggregated prefill and decode:
	// RoleBoth (default), RolePrefill or RoleDecode. A decode request's KV
	// cache is pulled over Engine.KVLink.
	Role string
	// Clock is the engine's and the server's clock; default the wall clock.
	Clock engine.Clock
	// Tracer, when set, records one span per completion request, a child
	// of its traceparent, with one child span per Server-Timing stage
	// (docs/serve.md, "Traces"); nil traces nothing.
	Tracer trace.Tracer
	// GenAI, when set, records the OpenTelemetry GenAI server metrics of
	// every completion request (tracing.GenAISemconvVersion); nil records
	// none.
	GenAI *tracing.GenAIServer
}

// DefaultMaxBodyBytes is the default request body limit.
const DefaultMaxBodyBytes = 8 << 20

func (c Config) withDefaults() Config {
	if c.ServedModelName == "" {
		c.ServedModelName = c.Engine.Model
	}
	if c.ServedModelName == "" {
		c.ServedModelName = "tokentrace-sim"
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.QueueFullStatus == 0 {
		c.QueueFullStatus = http.StatusTooManyRequests
	}
	if c.CacheDType == "" {
		c.CacheDType = "auto"
	}
	if c.ReasoningField == "" {
		c.ReasoningField = openai.ReasoningField
	}
	if c.Clock == nil {
		c.Clock = engine.WallClock()
	}
	if c.Role == "" {
		c.Role = RoleBoth
	}
	c.Faults = c.Faults.withDefaults()
	c.Limits = c.Limits.WithDefaults(1)
	return c
}

// Validate reports why c cannot run: the engine's checks and the server's.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.Engine.WithDefaults().Validate(); err != nil {
		return err
	}
	if c.MaxBodyBytes < 1024 {
		return field.Invalid("max_body_bytes", c.MaxBodyBytes, "below 1 KiB")
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	if c.Grace < 0 {
		return field.Invalid("grace", c.Grace, "must not be negative")
	}
	if err := validRole(c.Role); err != nil {
		return err
	}
	if c.QueueFullStatus != http.StatusTooManyRequests && c.QueueFullStatus != http.StatusServiceUnavailable {
		return field.Invalid("queue_full_status", c.QueueFullStatus, "must be 429 or 503")
	}
	if c.ReasoningField != openai.ReasoningField && c.ReasoningField != openai.ReasoningContentField {
		return field.Invalid("reasoning_field", c.ReasoningField, "want %s (vLLM's) or %s (DeepSeek's)", openai.ReasoningField, openai.ReasoningContentField)
	}
	return c.Faults.validate()
}

// Server is a running OpenAI-compatible server in front of one engine.
type Server struct {
	cfg      Config
	eng      *engine.Engine
	clock    engine.Clock
	metrics  *Metrics
	registry *prometheus.Registry
	handler  http.Handler
	late     *Lateness
	stepLate *Lateness
	created  int64
	nonce    string
	seq      atomic.Uint64
	blockSeq atomic.Uint64 // block ids a prefill answer names

	ln       net.Listener // set by Start
	stop     context.CancelFunc
	served   chan error // Serve's result, once Start's Serve returned
	closeMu  sync.Mutex
	closed   bool
	closeErr error
}

// New builds a server and its engine without starting either: Handler
// serves HTTP once the caller runs Engine().Run. Start does both.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	eng, err := engine.New(cfg.Engine, cfg.Clock)
	if err != nil {
		return nil, err
	}
	ec := eng.Config()
	s := &Server{
		cfg:      cfg,
		eng:      eng,
		clock:    cfg.Clock,
		registry: prometheus.NewRegistry(),
		late:     &Lateness{},
		stepLate: &Lateness{},
		created:  cfg.Clock.Now().Unix(),
		nonce:    randomHex(4),
	}
	s.metrics = NewMetrics(cfg.ServedModelName, eng.Stats, CacheInfo{
		BlockSize: ec.BlockSize, NumGPUBlocks: ec.NumBlocks, EnablePrefixCaching: ec.EnablePrefixCaching,
		CacheDType: cfg.CacheDType, GPUMemoryUtilization: cfg.GPUMemoryUtilization,
	}, SchedulerInfo{
		EnableChunkedPrefill: !ec.DisableChunkedPrefill, MaxNumBatchedTokens: ec.MaxNumBatchedTokens,
		MaxNumSeqs: ec.MaxNumSeqs, Policy: ec.Policy, Family: cfg.EngineFamily,
	})
	if err := s.metrics.Register(s.registry); err != nil {
		return nil, fmt.Errorf("serve: metrics: %w", err)
	}
	eng.ObserveSteps(s.stepLate.Observe)
	s.handler = s.routes()
	return s, nil
}

// CloseGrace is how long, after a stop, the handlers have to write their
// last bytes (the engine has ended their requests) before every
// connection is closed.
const CloseGrace = 5 * time.Second

// Serve runs the engine and serves HTTP on ln until ctx ends; then it
// stops accepting requests, the requests in flight may finish within the
// grace (Config.Grace), the engine stops (the unfinished end with finish
// reason "abort"), and once the handlers have written their last bytes (at
// most CloseGrace more) every connection is closed: httplimit.Serve, the
// one lifecycle of this module's servers.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	engCtx, stopEng := context.WithCancel(context.WithoutCancel(ctx))
	engDone := make(chan struct{})
	go func() {
		defer close(engDone)
		_ = s.eng.Run(engCtx)
	}()
	stopEngine := func() {
		stopEng()
		<-engDone
	}
	defer stopEngine() // also when the server failed before ctx ended
	stopping := stopEngine
	if s.cfg.Grace > 0 {
		// The engine runs on for the grace; Serve returns (and the deferred
		// stop ends the engine) as soon as no request is in flight.
		var abort *time.Timer
		defer func() {
			if abort != nil {
				abort.Stop()
			}
		}()
		stopping = func() { abort = time.AfterFunc(s.cfg.Grace, stopEngine) }
	}
	stop := httplimit.Stop{Grace: s.cfg.Grace + CloseGrace, Stopping: stopping}
	if err := s.cfg.Limits.Serve(ctx, ln, s.handler, stop); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// Start builds the server and runs Serve on addr ("127.0.0.1:0" picks a
// free port) in the background until Close is called or ctx is done. A
// configuration that cannot run is an error here, with the reason.
func Start(ctx context.Context, cfg Config, addr string) (*Server, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve: listen: %w", err)
	}
	s.ln = ln
	runCtx, stop := context.WithCancel(ctx)
	s.stop = stop
	s.served = make(chan error, 1)
	go func() { s.served <- s.Serve(runCtx, ln) }()
	return s, nil
}

// URL is the OpenAI base URL of a started server, ending in /v1.
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String() + "/v1"
}

// Addr is the address a started server listens on.
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Engine returns the server's engine, for its Stats and Config.
func (s *Server) Engine() *engine.Engine { return s.eng }

// Config returns the server's configuration with defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Handler returns the HTTP handler (the routes of docs/serve.md).
func (s *Server) Handler() http.Handler { return s.handler }

// Registry returns the Prometheus registry /metrics exposes.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// WriteLateness returns the distribution of the streamed chunks'
// lateness: the time from the engine step that produced a chunk's tokens
// to the chunk being written and flushed.
func (s *Server) WriteLateness() *Lateness { return s.late }

// StepLateness returns the distribution of the engine's step lateness
// (engine.ObserveSteps): how late the step loop began handing out each
// step's tokens behind the step's end. WriteLateness includes it; the rest
// of a chunk's lateness is its handler's wake-up, encoding and write.
func (s *Server) StepLateness() *Lateness { return s.stepLate }

// Describe is the start banner: the served model, the URL and the engine
// configuration in force (KV blocks, budgets).
func (s *Server) Describe() string {
	return fmt.Sprintf("tokentrace serve: model %q at %s\n%s", s.cfg.ServedModelName, s.URL(), s.eng.Config().Describe())
}

// Close stops a started server as the end of Start's ctx does (Serve)
// and waits until it has stopped. Handlers that outlast CloseGrace have
// their connections closed; that is no error here. It is safe to call
// more than once.
func (s *Server) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed || s.stop == nil {
		return s.closeErr
	}
	s.closed = true
	s.stop()
	if err := <-s.served; err != nil && !errors.Is(err, httplimit.ErrGraceExpired) {
		s.closeErr = err
	}
	return s.closeErr
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, api := range openai.APIs {
		mux.HandleFunc(api.Path(), func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, api) })
	}
	mux.HandleFunc("/v1/models", s.models)
	mux.HandleFunc("/v1/models/{id}", s.model)
	mux.HandleFunc("/health", s.health)
	mux.HandleFunc("/reset_prefix_cache", s.resetPrefixCache)
	mux.Handle("/metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, http.StatusNotFound, openai.NewError(openai.TypeNotFound,
			fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path), "", "not_found"), 0)
	})
	return mux
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	writeJSON(w, http.StatusOK, openai.ModelList{Object: openai.ObjectList, Data: []openai.Model{s.modelEntry()}})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	if id := r.PathValue("id"); id != s.cfg.ServedModelName {
		modelNotFound(id).Write(w, 0)
		return
	}
	writeJSON(w, http.StatusOK, s.modelEntry())
}

func (s *Server) modelEntry() openai.Model {
	return openai.Model{ID: s.cfg.ServedModelName, Object: openai.ObjectModel, Created: s.created,
		OwnedBy: "tokentrace", MaxModelLen: s.eng.Config().MaxModelLen}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	w.WriteHeader(http.StatusOK)
}

// resetPrefixCache is vLLM's POST /reset_prefix_cache: it empties the
// engine's prefix cache (blocks held by running requests keep theirs) and
// answers 200 with an empty body.
func (s *Server) resetPrefixCache(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	if _, err := s.eng.ResetPrefixCache(r.Context()); err != nil {
		openai.WriteError(w, http.StatusServiceUnavailable, openai.NewError(openai.TypeServer,
			"the prefix cache was not reset: "+err.Error(), "", "unavailable"), 0)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	return allowAs(w, r, openai.APIChat, methods...)
}

// allowAs is allow answering in api's error shape.
func allowAs(w http.ResponseWriter, r *http.Request, api openai.API, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	allowed := strings.Join(methods, ", ")
	w.Header().Set("Allow", allowed)
	openai.WriteErrorAs(w, api, http.StatusMethodNotAllowed, openai.NewError(openai.TypeInvalidRequest,
		fmt.Sprintf("method %s is not allowed on %s (use %s)", r.Method, r.URL.Path, allowed), "", "method_not_allowed"), 0)
	return false
}

func modelNotFound(name string) *openai.APIError {
	return &openai.APIError{Status: http.StatusNotFound, Err: openai.NewError(openai.TypeInvalidRequest,
		fmt.Sprintf("The model `%s` does not exist.", name), "model", "model_not_found")}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
