package app

import (
	"log/slog"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Retrieval modes.
const (
	// RetrievalSequential calls the sources one after another: the
	// retrieval stage lasts the sum of their latencies.
	RetrievalSequential = "sequential"
	// RetrievalParallel calls them at once: it lasts the slowest one's.
	RetrievalParallel = "parallel"
)

// Config is a reference application: where its model is, how it retrieves
// and how it checks answers. Field names in errors are the snake_case
// names below (docs/app.md).
type Config struct {
	// Upstream is the base URL of the model's OpenAI-compatible server or
	// of a gateway in front of it (upstream), with or without /v1.
	Upstream string
	// Model is the model name sent upstream (model); empty: the client's.
	Model string
	// APIKey is sent upstream as a bearer token (api_key); never logged.
	APIKey string
	// Sources is the number of retrieval calls, one per source (shard of
	// the index) (sources).
	Sources int
	// Retrieval is RetrievalSequential or RetrievalParallel (retrieval).
	Retrieval string
	// RetrievalLatency is added to each retrieval call, standing for a
	// remote vector store (retrieval_latency, workload.ParseDelay).
	RetrievalLatency string
	// Candidates is how many passages each call returns (candidates).
	Candidates int
	// TopK is how many passages, after reranking, go into the prompt
	// (top_k); 0 sends the question alone.
	TopK int
	// Guardrail is GuardrailOff, GuardrailBlocking or GuardrailStreaming
	// (guardrail).
	Guardrail string
	// GuardrailCost is the check's cost per output token
	// (guardrail_cost), standing for a safety classifier.
	GuardrailCost time.Duration
	// Blocklist are words the output filter masks (blocklist), besides
	// API keys and e-mail addresses.
	Blocklist []string
	// UpstreamTimeout bounds one answer from upstream (upstream_timeout;
	// 0: 10 minutes).
	UpstreamTimeout time.Duration
	// MaxResponseBytes bounds the answer the app holds: the whole answer
	// for a client that does not stream, the unchecked answer for the
	// blocking guardrail (max_response_bytes; 0: DefaultMaxResponseBytes).
	// Beyond it the client gets 502 upstream_response_too_large and the
	// upstream's connection is closed.
	MaxResponseBytes int64
	// Seed seeds the retrieval latency draws (seed).
	Seed uint64
	// Limits are the HTTP server's deadlines and connection cap.
	Limits httplimit.Limits
	// Grace is how long requests in flight may finish after a stop
	// (grace; 0: httplimit.DefaultGrace).
	Grace time.Duration
	// Tracer, when set, records a span per request with a child span per
	// stage and per retrieval call; nil traces nothing (a client's
	// traceparent is still passed upstream).
	Tracer trace.Tracer
	// Clock is the server's clock; nil: the wall clock.
	Clock Clock
	// Log receives the server's log lines (masked through redact); nil:
	// slog's default.
	Log *slog.Logger
}

// DefaultMaxResponseBytes is Config.MaxResponseBytes' default.
const DefaultMaxResponseBytes = 64 << 20

// DefaultConfig is `tokentrace app`'s defaults, upstream aside.
func DefaultConfig() Config {
	return Config{Sources: 4, Retrieval: RetrievalSequential, RetrievalLatency: "20ms", Candidates: 4, TopK: 4,
		Guardrail: GuardrailStreaming, GuardrailCost: 0, Seed: 1, Grace: httplimit.DefaultGrace}
}

// Validate names the first setting that cannot run.
func (c Config) Validate() error {
	u, err := url.Parse(strings.TrimSpace(c.Upstream))
	if c.Upstream == "" {
		return field.Errorf("upstream", "the model's server (or a gateway) is required, e.g. http://127.0.0.1:8000")
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return field.Invalid("upstream", redact.URL(c.Upstream), "want http://host[:port][/v1] or https://…")
	}
	if c.Sources < 1 || c.Sources > 64 {
		return field.Invalid("sources", c.Sources, "want 1 to 64 retrieval sources")
	}
	if c.Retrieval != RetrievalSequential && c.Retrieval != RetrievalParallel {
		return field.Invalid("retrieval", c.Retrieval, "want sequential or parallel")
	}
	if _, err := workload.ParseDelay(c.RetrievalLatency); err != nil {
		return field.Invalid("retrieval_latency", c.RetrievalLatency, "%v", err)
	}
	if c.Candidates < 1 {
		return field.Invalid("candidates", c.Candidates, "each retrieval call returns at least 1 passage")
	}
	if c.TopK < 0 || c.TopK > c.Sources*c.Candidates {
		return field.Invalid("top_k", c.TopK, "want 0 to {sources} × {candidates} passages")
	}
	switch c.Guardrail {
	case GuardrailOff, GuardrailBlocking, GuardrailStreaming:
	default:
		return field.Invalid("guardrail", c.Guardrail, "want off, blocking or streaming")
	}
	if c.GuardrailCost < 0 {
		return field.Invalid("guardrail_cost", c.GuardrailCost, "must not be negative")
	}
	if c.UpstreamTimeout < 0 {
		return field.Invalid("upstream_timeout", c.UpstreamTimeout, "must not be negative")
	}
	if c.MaxResponseBytes < 0 {
		return field.Invalid("max_response_bytes", c.MaxResponseBytes, "must not be negative")
	}
	if c.Grace < 0 {
		return field.Invalid("grace", c.Grace, "must not be negative")
	}
	return c.Limits.Validate()
}
