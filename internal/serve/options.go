package serve

import (
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// Options are `tokentrace serve`'s settings as a user gives them (the
// command line and config files are internal/cli's): the engine's, and
// the server's own. Config turns them into a runnable Config, or a
// *field.Error naming the setting that is wrong.
type Options struct {
	Engine engine.Options
	// ServedModelName (served_model_name) is the model name clients send;
	// empty: the model's name.
	ServedModelName string
	MaxBodyBytes    int64 // max_body_bytes
	QueueFullStatus int   // queue_full_status: 429 or 503
	Faults          Faults
	// The HTTP server's deadlines (read_header_timeout, body_timeout,
	// idle_timeout) and connection cap (max_connections; 0: from the
	// descriptor limit), as httplimit.Limits.
	ReadHeaderTimeout, BodyTimeout, IdleTimeout time.Duration
	MaxConnections                              int
	// Grace (grace) is how long requests in flight may finish after a
	// stop; 0: the engine ends them at once (finish reason "abort").
	Grace time.Duration
	// ReasoningField (reasoning_field) is the chat delta and message field
	// that carries reasoning tokens (engine.Options.ReasoningTokens):
	// openai.ReasoningField ("reasoning", vLLM's) or
	// openai.ReasoningContentField ("reasoning_content", DeepSeek's).
	ReasoningField string
	// Role (role) is the server's part in disaggregated prefill and
	// decode: both (default), prefill or decode.
	Role string
	// KVLink (kv_link) names the link preset a decode request's KV cache
	// is pulled over (perfmodel.LookupLink); empty: perfmodel.DefaultLink.
	KVLink string
}

// DefaultOptions are the defaults of `tokentrace serve`.
func DefaultOptions() Options {
	return Options{
		Engine:       engine.DefaultOptions(),
		MaxBodyBytes: DefaultMaxBodyBytes, QueueFullStatus: 429,
		Faults:            Faults{SlowFirstTokenDelay: DefaultSlowFirstTokenDelay, StallDuration: DefaultStallDuration},
		ReadHeaderTimeout: httplimit.DefaultReadHeaderTimeout, BodyTimeout: httplimit.DefaultBodyTimeout,
		IdleTimeout: httplimit.DefaultIdleTimeout, ReasoningField: openai.ReasoningField,
		Role: RoleBoth, KVLink: perfmodel.DefaultLink,
	}
}

// Config resolves the model and GPU, sizes the KV cache with the
// performance model and returns the server configuration, or the reason it
// cannot run.
func (o Options) Config() (Config, error) {
	ec, _, err := o.Engine.Config()
	if err != nil {
		return Config{}, err
	}
	linkName := o.KVLink
	if linkName == "" {
		linkName = perfmodel.DefaultLink
	}
	link, err := perfmodel.LookupLink(linkName)
	if err != nil {
		return Config{}, field.Invalid("kv_link", o.KVLink, "%w", err)
	}
	ec.KVLink = link
	kv := o.Engine.KVCacheDType
	if kv == "" {
		kv = "auto"
	}
	cfg := Config{
		Engine: ec, ServedModelName: o.ServedModelName, MaxBodyBytes: o.MaxBodyBytes,
		QueueFullStatus: o.QueueFullStatus, Faults: o.Faults, CacheDType: kv, ReasoningField: o.ReasoningField,
		GPUMemoryUtilization: o.Engine.GPUMemoryUtilization, EngineFamily: o.Engine.Engine,
		Limits: httplimit.Limits{ReadHeaderTimeout: o.ReadHeaderTimeout, BodyTimeout: o.BodyTimeout,
			IdleTimeout: o.IdleTimeout, MaxConns: o.MaxConnections},
		Grace: o.Grace, Role: o.Role,
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
