package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/redisstate"
	"github.com/tokentrace/tokentrace/internal/route"
)

// Config is the gateway's whole configuration, as read from YAML
// (docs/gateway.md shows every field). Its zero value plus one pool is a
// working configuration; SetDefaults fills the defaults, Validate checks.
type Config struct {
	Pools  []PoolConfig  `yaml:"pools"`
	Routes []RouteConfig `yaml:"routes"`
	// Keys are the accepted API keys. When Keys is non-empty every request
	// must carry one (Authorization: Bearer KEY). A reload may turn
	// authentication off only with Keys empty but not nil (`keys: []`): a
	// file without the section is refused in place of one with keys.
	Keys   []KeyConfig  `yaml:"keys"`
	Server ServerConfig `yaml:"server"`
	// OTLPEndpoint, when set, exports one span per request over OTLP/HTTP
	// to this URL (e.g. http://localhost:4318).
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// Redis, when set, holds what several gateway replicas share: every
	// key's rate and token limits, and the concurrency limit of pools
	// whose queue is shared.
	Redis *RedisConfig `yaml:"redis"`
}

// RedisConfig is the Redis that gateway replicas share (docs/gateway.md,
// "Several gateway replicas").
type RedisConfig struct {
	// URL is redis://[user:password@]host:port[/db] (rediss:// for TLS,
	// unix:///path); URLEnv names an environment variable holding it, the
	// place for a password. Neither is ever logged.
	URL    string `yaml:"url"`
	URLEnv string `yaml:"url_env"`
	// Timeout bounds each call (default 50ms): a stalled Redis costs a
	// request at most this, then OnError decides.
	Timeout Duration `yaml:"timeout"`
	// RetryInterval is how long after a failed call requests are decided
	// by OnError without calling Redis, before one call probes it again
	// (default 1s).
	RetryInterval Duration `yaml:"retry_interval"`
	// OnError is what an unreachable Redis means: fail_open (default:
	// limits allow, shared pools admit under their own limit) or
	// fail_closed (refused with 503).
	OnError string `yaml:"on_error"`
	// KeyPrefix starts every key the gateway writes (default
	// "tokentrace:").
	KeyPrefix string `yaml:"key_prefix"`
	// LeaseTTL is how long a shared pool's slots stay held by a gateway
	// replica that stops reporting (it crashed or lost Redis); each
	// replica reports every LeaseTTL / 3 while it holds slots (default 10s).
	LeaseTTL Duration `yaml:"lease_ttl"`
}

// What an unreachable Redis means (RedisConfig.OnError).
const (
	FailOpen   = "fail_open"
	FailClosed = "fail_closed"
)

// ServerConfig holds the listening server's limits. The deadlines and
// the connection cap are read once, when the gateway starts listening.
type ServerConfig struct {
	MaxBodyBytes int64 `yaml:"max_body_bytes"` // default 4 MiB
	// MaxResponseBytes bounds an upstream's answer that is not streamed
	// (read whole before it is passed on): beyond it the client gets 502
	// upstream_response_too_large and the upstream's connection is
	// closed; default 64 MiB. A streamed answer is passed on event by
	// event, each event bounded by 16 MiB.
	MaxResponseBytes  int64    `yaml:"max_response_bytes"`
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"` // default 10s
	// BodyTimeout bounds the request body's arrival, from the end of the
	// headers (408 after it); default 30s.
	BodyTimeout Duration `yaml:"body_timeout"`
	IdleTimeout Duration `yaml:"idle_timeout"` // default 120s
	// SendTimeout bounds each write of an answer to the client (nginx's
	// send_timeout): a client that takes longer to accept one has its
	// connection closed and the upstream cancelled; default
	// DefaultSendTimeout.
	SendTimeout Duration `yaml:"send_timeout"`
	// MaxConnections caps the client connections open at once (more wait
	// to be accepted); default from the descriptor limit, two per
	// connection (httplimit.DefaultMaxConns).
	MaxConnections int `yaml:"max_connections"`
	// PrefixBytes is how much of the prompt prefix affinity hashes; default 512.
	PrefixBytes int `yaml:"prefix_bytes"`
	// UnknownPaths says what becomes of a request on a path under /v1/
	// that is none of the APIs the gateway reads: "pass" (the default)
	// forwards it, measured, to the route of its body's model; "refuse"
	// answers 404.
	UnknownPaths string `yaml:"unknown_paths"`
}

// server.unknown_paths' values.
const (
	UnknownPathsPass   = "pass"
	UnknownPathsRefuse = "refuse"
)

// DefaultSendTimeout is server.send_timeout's default (nginx's).
const DefaultSendTimeout = 60 * time.Second

// DefaultMaxResponseBytes is server.max_response_bytes' default.
const DefaultMaxResponseBytes = 64 << 20

// fdsPerConn is what a client connection costs the gateway in
// descriptors: its own and one upstream.
const fdsPerConn = 2

// limits returns the listening server's deadlines and connection cap.
func (s ServerConfig) limits() httplimit.Limits {
	return httplimit.Limits{ReadHeaderTimeout: s.ReadHeaderTimeout.D(), BodyTimeout: s.BodyTimeout.D(),
		IdleTimeout: s.IdleTimeout.D(), MaxConns: s.MaxConnections}
}

func (s *ServerConfig) setLimits(l httplimit.Limits) {
	s.ReadHeaderTimeout, s.BodyTimeout, s.IdleTimeout = Duration(l.ReadHeaderTimeout), Duration(l.BodyTimeout), Duration(l.IdleTimeout)
	s.MaxConnections = l.MaxConns
}

// PoolConfig is a named set of interchangeable replicas.
type PoolConfig struct {
	Name     string          `yaml:"name"`
	Replicas []ReplicaConfig `yaml:"replicas"`
	// Balancer is round_robin, least_outstanding (default), queue_aware,
	// prefix_affinity or prefix_bounded_load.
	Balancer string `yaml:"balancer"`
	// LoadFactor is prefix_bounded_load's bound: no replica takes more
	// than LoadFactor × the average of the requests outstanding through
	// this gateway (default 1.25; at least 1).
	LoadFactor float64 `yaml:"load_factor"`
	// Queue bounds and orders the requests waiting for the pool.
	Queue QueueConfig `yaml:"queue"`
	// ScrapeInterval is how often queue_aware routing and shedding hints
	// read each replica's /metrics; 0 disables scraping. Default 1s for
	// queue_aware pools.
	ScrapeInterval Duration `yaml:"scrape_interval"`
	// Evidence is "ask" to ask each replica for its engine's per-request
	// evidence in that engine's dialect (its kind: vLLM's
	// "include_metrics", tokentrace serve's "return_metrics", each with
	// the final usage chunk it rides on; the kinds whose OpenAI API has no
	// such field are sent the client's body as it is: askFields), read it
	// into the gateway's split and take out of the client's answer what
	// the client did not ask for; "" or "pass" (the default) passes the
	// client's body and the answer as they are, reading whatever evidence
	// comes.
	Evidence string `yaml:"evidence"`
	// ContextTokens is the context of the model the pool's replicas
	// serve (vLLM's max_model_len, llama.cpp's n_ctx per slot): a key's
	// tokens_per_minute charges a request without max_tokens, on a route
	// with no default, the context left (ContextTokens − its input
	// estimate) per answer. 0: unknown.
	ContextTokens int `yaml:"context_tokens"`
}

// PoolConfig.Evidence's values.
const (
	EvidencePass = "pass"
	EvidenceAsk  = "ask"
)

// ReplicaConfig is one upstream server.
type ReplicaConfig struct {
	// URL is the replica's base URL. Credentials in it
	// (http://user:password@host) are sent as HTTP Basic authentication
	// unless APIKey is set; Validate moves them out of URL, so URL can be
	// logged.
	URL string `yaml:"url"`
	// APIKey is sent upstream as a bearer token; it is never logged nor
	// returned to clients. APIKeyEnv names an environment variable holding it.
	APIKey    string `yaml:"api_key"`
	APIKeyEnv string `yaml:"api_key_env"`
	// userinfo is the credentials Validate took out of URL.
	userinfo *url.Userinfo
	// Models are the model names the replica serves: listed in
	// /v1/models, and routed to this pool when no route names them.
	Models []string `yaml:"models"`
	// Kind is vllm, sglang, tgi, llamacpp, ollama, openai, trtllm or tokentrace;
	// it selects the metric names queue-aware routing scrapes.
	Kind string `yaml:"kind"`
}

// QueueConfig is a pool's admission control.
type QueueConfig struct {
	// MaxSize bounds the waiting requests; a request arriving to a full
	// queue gets 429. Default 1024.
	MaxSize int `yaml:"max_size"`
	// Concurrency is the initial limit on requests in flight upstream;
	// 0 means unlimited (no queueing). When adaptive it moves between
	// MinConcurrency and MaxConcurrency.
	Concurrency    int `yaml:"concurrency"`
	MinConcurrency int `yaml:"min_concurrency"`
	MaxConcurrency int `yaml:"max_concurrency"`
	// Adaptive, when "gradient", moves the limit with the upstream TTFT
	// of admitted requests ("" = a fixed limit).
	Adaptive string `yaml:"adaptive"`
	// AIMD: true is the older spelling of Adaptive: gradient.
	AIMD bool `yaml:"aimd"`
	// TargetTTFT, when set, caps the upstream TTFT (admission to first
	// token) the adaptive limit accepts: a window whose mean exceeds it
	// cuts the limit. 0 = no cap.
	TargetTTFT Duration `yaml:"target_ttft"`
	// Shared holds Concurrency across every gateway replica using the
	// configuration's Redis: the pool's requests in flight from all of
	// them together stay within it. It needs a fixed limit.
	Shared bool `yaml:"shared"`
}

// AdaptiveGradient is QueueConfig.Adaptive's one controller.
const AdaptiveGradient = "gradient"

// adaptive is the controller in effect, aimd: true included.
func (q QueueConfig) adaptive() string {
	if q.AIMD {
		return AdaptiveGradient
	}
	return q.Adaptive
}

// RouteConfig maps a public model name to a pool and its policies. The
// model "*" matches any model no other route names.
type RouteConfig struct {
	Model string `yaml:"model"`
	Pool  string `yaml:"pool"`
	// UpstreamModel renames the model sent upstream (an alias).
	UpstreamModel string `yaml:"upstream_model"`
	// LengthPools, when set, choose the pool by input length: the first
	// whose MaxInputTokens is ≥ the request's input tokens (0 = no bound).
	LengthPools []LengthPool `yaml:"length_pools"`
	// Fallback is a route or a replica-listed model tried once, after a
	// failure the gateway retries (the TTFT timeout, a connection error,
	// 5xx or 429 before the first token) when retries are exhausted.
	Fallback string `yaml:"fallback"`
	// PrefillPool, when set, disaggregates the route: each request is
	// first prefilled on a replica of this pool (vLLM's kv_transfer_params:
	// one output token, do_remote_decode), then decoded on the route's
	// pool with the prefill instance's answer (docs/gateway.md,
	// "Disaggregated prefill and decode").
	PrefillPool string       `yaml:"prefill_pool"`
	Length      LengthPolicy `yaml:"length"`
	// DeadlineTTFT is the default TTFT deadline for requests without
	// X-SLO-TTFT-Ms; 0 = none.
	DeadlineTTFT Duration `yaml:"deadline_ttft"`
	// EarlyReject turns on rejecting (429) a request whose predicted queue
	// wait already breaks its deadline.
	EarlyReject bool           `yaml:"early_reject"`
	Timeouts    TimeoutsPolicy `yaml:"timeouts"`
}

// LengthPool is one band of length routing.
type LengthPool struct {
	MaxInputTokens int    `yaml:"max_input_tokens"`
	Pool           string `yaml:"pool"`
}

// LengthPolicy is length control; zero fields are off.
type LengthPolicy struct {
	DefaultMaxTokens int `yaml:"default_max_tokens"`
	MaxMaxTokens     int `yaml:"max_max_tokens"`
	MaxInputTokens   int `yaml:"max_input_tokens"`
	// OnExceed is reject (default: 400) or clamp (max_tokens lowered to the
	// limit; input over the limit is always rejected).
	OnExceed string `yaml:"on_exceed"`
}

// The timeouts a route has when its configuration leaves them unset:
// generous enough for long prompts behind a queue and for a non-streaming
// answer of a few thousand tokens, short enough that a silent upstream
// does not hold a client for ever.
const (
	DefaultTTFTTimeout = 5 * time.Minute
	DefaultIdleTimeout = time.Minute
)

// TimeoutsPolicy is the timeouts and degradation policy. TTFT and Idle
// have defaults when unset (nil) and are off at 0; the other fields are
// off at 0.
type TimeoutsPolicy struct {
	// TTFT bounds each attempt's wait for its first content token (for a
	// non-streaming request, for the whole answer). Default
	// DefaultTTFTTimeout.
	TTFT *Duration `yaml:"ttft"`
	// Idle bounds the wait for the upstream's next data event once the
	// first token has arrived (keep-alive comments do not count). Default
	// DefaultIdleTimeout.
	Idle  *Duration `yaml:"idle"`
	Total Duration  `yaml:"total"`
	// Retries is how many other replicas to try after a failure or TTFT
	// timeout before the first token.
	Retries int `yaml:"retries"`
	// Hedge starts a second attempt on another replica when the first has
	// given no token after the pool's observed P95 TTFT (at least
	// HedgeMinDelay); the slower one is cancelled.
	Hedge         bool     `yaml:"hedge"`
	HedgeMinDelay Duration `yaml:"hedge_min_delay"`
}

// authorization is the Authorization header sent to the replica: its
// api_key as a bearer token, else its URL's credentials as Basic
// authentication, else "" (none).
func (r *ReplicaConfig) authorization() string {
	if r.APIKey != "" {
		return "Bearer " + r.APIKey
	}
	if b := r.basic(); b != "" {
		return "Basic " + b
	}
	return ""
}

// basic is the URL's credentials encoded for Basic authentication; "" when
// the URL had none.
func (r *ReplicaConfig) basic() string {
	if r.userinfo == nil {
		return ""
	}
	pw, _ := r.userinfo.Password()
	return base64.StdEncoding.EncodeToString([]byte(r.userinfo.Username() + ":" + pw))
}

// credentials are the replica's secret values, masked in any text of the
// upstream's that the gateway passes on (an error answer quoting them).
func (r *ReplicaConfig) credentials() []string {
	c := []string{r.APIKey, r.basic()}
	if r.userinfo != nil {
		if pw, ok := r.userinfo.Password(); ok {
			c = append(c, pw)
		} else {
			c = append(c, r.userinfo.Username()) // a token as the user name
		}
	}
	return c
}

// ttft is the first-token timeout in force: TTFT, else the default.
func (t TimeoutsPolicy) ttft() time.Duration {
	if t.TTFT == nil {
		return DefaultTTFTTimeout
	}
	return t.TTFT.D()
}

// idle is the idle timeout in force: Idle, else the default.
func (t TimeoutsPolicy) idle() time.Duration {
	if t.Idle == nil {
		return DefaultIdleTimeout
	}
	return t.Idle.D()
}

// KeyConfig is one accepted API key, stored as the hex SHA-256 of the key.
type KeyConfig struct {
	Name   string `yaml:"name"`
	SHA256 string `yaml:"sha256"`
	// Priority orders queued requests: higher first. Default 0.
	Priority int `yaml:"priority"`
	// MinDeadlineTTFT is the tightest TTFT deadline the key's requests may
	// claim with X-SLO-TTFT-Ms (a tighter one is raised to it); 0: the
	// key's requests may not claim one (the route's deadline_ttft holds).
	MinDeadlineTTFT Duration `yaml:"min_deadline_ttft"`
	// RequestsPerSecond and TokensPerMinute limit the key (0 = unlimited).
	// Tokens are input estimate + max_tokens, charged at admission.
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	Burst             int     `yaml:"burst"`
	TokensPerMinute   int     `yaml:"tokens_per_minute"`
}

// Duration is a time.Duration written in YAML as "250ms", "2s".
type Duration time.Duration

// UnmarshalYAML reads a Go duration string or a number of seconds.
func (d *Duration) UnmarshalYAML(b []byte) error {
	s := strings.Trim(strings.TrimSpace(string(b)), `"'`)
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// HashKey returns the hex SHA-256 of an API key, the form keys take in the
// configuration.
func HashKey(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

// ParseConfig reads and validates a YAML configuration. Unknown fields are
// errors, so a typo is not silently ignored. Errors carry no credential
// of the document (see yamlError).
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalWithOptions(data, &c, yaml.Strict()); err != nil {
		return nil, yamlError(data, err)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// yamlError is a YAML parse error of data without the document's
// credentials: the parser's own error quotes the lines around the problem
// (api_key values, URLs with passwords), so only the position and the
// problem are kept, credentials Text recognises are masked, and so is any
// api_key or password of the document that the message quotes bare (a
// duration error quoting its value). The parser's error is not wrapped,
// so nothing can print its source excerpt later.
func yamlError(data []byte, err error) error {
	return errors.New("parse config: " + redact.Quoting(yaml.FormatError(err, false, false), string(data)))
}

// LoadConfig reads, parses and validates the configuration file at path.
// It also returns the bytes it parsed, for Watch to compare later reads
// against.
func LoadConfig(path string) (*Config, []byte, error) {
	data, err := field.ReadFile(path, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("read config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, data, nil
}

// QuickConfig is the configuration of `tokentrace gateway --upstream URL`:
// one pool of the given replicas, least-outstanding routing, every model
// routed to it, no other policy.
func QuickConfig(upstreams []string) (*Config, error) {
	c := &Config{Pools: []PoolConfig{{Name: "default"}}, Routes: []RouteConfig{{Model: "*", Pool: "default"}}}
	for _, u := range upstreams {
		c.Pools[0].Replicas = append(c.Pools[0].Replicas, ReplicaConfig{URL: u})
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

var kinds = map[string]bool{"": true, "vllm": true, "sglang": true, "tgi": true, "llamacpp": true, "ollama": true, "openai": true, "tokentrace": true, "trtllm": true}

// SetDefaults fills what c leaves unset with its default and puts
// values in their canonical form: credentials taken out of replica URLs
// (authorization sends them) and a URL's trailing slash removed, an
// api_key_env read from the environment, key hashes in lower case. It
// changes nothing that is set, so it can run twice; a value that cannot
// work is left for Validate to report.
func (c *Config) SetDefaults() {
	if c.Server.MaxBodyBytes == 0 {
		c.Server.MaxBodyBytes = 4 << 20
	}
	if c.Server.MaxResponseBytes == 0 {
		c.Server.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.Server.SendTimeout == 0 {
		c.Server.SendTimeout = Duration(DefaultSendTimeout)
	}
	if c.Server.MaxConnections >= 0 {
		c.Server.setLimits(c.Server.limits().WithDefaults(fdsPerConn))
	}
	if c.Server.PrefixBytes <= 0 {
		c.Server.PrefixBytes = 512
	}
	if c.Server.UnknownPaths == "" {
		c.Server.UnknownPaths = UnknownPathsPass
	}
	for i := range c.Pools {
		c.Pools[i].setDefaults()
	}
	for i := range c.Routes {
		if c.Routes[i].Length.OnExceed == "" {
			c.Routes[i].Length.OnExceed = "reject"
		}
	}
	for i := range c.Keys {
		c.Keys[i].SHA256 = strings.ToLower(c.Keys[i].SHA256)
	}
	if c.Redis != nil {
		c.Redis.setDefaults()
	}
}

func (p *PoolConfig) setDefaults() {
	if p.Balancer == "" {
		p.Balancer = route.NameLeastOutstanding
	}
	if p.Balancer == route.NameQueueAware && p.ScrapeInterval == 0 {
		p.ScrapeInterval = Duration(route.DefaultScrapeInterval)
	}
	for j := range p.Replicas {
		r := &p.Replicas[j]
		if u, err := url.Parse(r.URL); err == nil && u.User != nil && u.Host != "" {
			// The credentials leave the URL, which is logged and shown;
			// authorization sends them.
			r.userinfo, u.User = u.User, nil
			r.URL = u.String()
		}
		r.URL = strings.TrimSuffix(r.URL, "/")
		if r.APIKeyEnv != "" && r.APIKey == "" {
			r.APIKey = os.Getenv(r.APIKeyEnv)
		}
	}
	q := &p.Queue
	if q.MaxSize == 0 {
		q.MaxSize = 1024
	}
	if q.adaptive() != "" && q.Concurrency > 0 {
		if q.MinConcurrency == 0 {
			q.MinConcurrency = 1
		}
		if q.MaxConcurrency == 0 {
			q.MaxConcurrency = 4 * q.Concurrency
		}
	}
}

// problems collects a configuration's problems.
type problems []error

func (ps *problems) add(format string, a ...any) { *ps = append(*ps, fmt.Errorf(format, a...)) }

// Validate reports every problem of c, joined; it changes nothing. Zero
// values stand for their defaults (SetDefaults fills them); ParseConfig,
// QuickConfig and SetConfig run both.
func (c *Config) Validate() error {
	var ps problems
	if len(c.Pools) == 0 {
		ps.add("no pools: at least one pool with one replica is needed")
	}
	if c.Server.MaxBodyBytes < 0 {
		ps.add("server.max_body_bytes is negative")
	}
	if u := c.Server.UnknownPaths; u != "" && u != UnknownPathsPass && u != UnknownPathsRefuse {
		ps.add("server.unknown_paths is %q: want pass or refuse", u)
	}
	if c.Server.MaxResponseBytes < 0 {
		ps.add("server.max_response_bytes is negative")
	}
	if c.Server.SendTimeout < 0 {
		ps.add("server.send_timeout is negative")
	}
	if err := c.Server.limits().Validate(); err != nil {
		ps.add("server.%v", err)
	}
	pools := map[string]bool{}
	for i := range c.Pools {
		c.Pools[i].validate(i, pools, c.Redis != nil, &ps)
	}
	if c.Redis != nil {
		ps = append(ps, c.Redis.validate()...)
	}
	models := map[string]bool{}
	for i := range c.Routes {
		c.Routes[i].validate(i, pools, models, &ps)
	}
	c.validateFallbacks(models, &ps)
	hashes := map[string]bool{}
	for i := range c.Keys {
		c.Keys[i].validate(i, hashes, &ps)
	}
	if c.OTLPEndpoint != "" {
		if u, err := url.Parse(c.OTLPEndpoint); err != nil || u.Host == "" {
			ps.add("otlp_endpoint %q must be a URL", redact.URL(c.OTLPEndpoint))
		}
	}
	if len(ps) > 0 {
		return fmt.Errorf("invalid config: %w", errors.Join(ps...))
	}
	return nil
}

func (p *PoolConfig) validate(i int, names map[string]bool, redis bool, ps *problems) {
	if p.Name == "" {
		ps.add("pools[%d]: missing name", i)
	}
	if names[p.Name] {
		ps.add("pools[%d]: duplicate name %q", i, p.Name)
	}
	names[p.Name] = true
	if p.ContextTokens < 0 {
		ps.add("pool %q: context_tokens %d must not be negative", p.Name, p.ContextTokens)
	}
	if p.Evidence != "" && p.Evidence != EvidencePass && p.Evidence != EvidenceAsk {
		ps.add("pool %q: unknown evidence %q (pass, ask)", p.Name, p.Evidence)
	}
	balancer := p.Balancer
	if balancer == "" {
		balancer = route.NameLeastOutstanding
	}
	if !slices.Contains(route.Names, balancer) {
		ps.add("pool %q: unknown balancer %q (%s)", p.Name, p.Balancer, strings.Join(route.Names, ", "))
	}
	switch {
	case p.LoadFactor != 0 && balancer != route.NamePrefixBounded:
		ps.add("pool %q: load_factor is prefix_bounded_load's setting (the balancer is %s)", p.Name, balancer)
	case p.LoadFactor != 0 && !(p.LoadFactor >= 1 && p.LoadFactor <= 1e6):
		ps.add("pool %q: load_factor %g must be at least 1", p.Name, p.LoadFactor)
	}
	if len(p.Replicas) == 0 {
		ps.add("pool %q: no replicas", p.Name)
	}
	for j, r := range p.Replicas {
		if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			ps.add("pool %q replica %d: url %q must be an absolute http(s) URL", p.Name, j, redact.URL(r.URL))
		}
		if !kinds[r.Kind] {
			ps.add("pool %q replica %d: unknown kind %q", p.Name, j, r.Kind)
		}
		if r.APIKeyEnv != "" && r.APIKey == "" && os.Getenv(r.APIKeyEnv) == "" {
			ps.add("pool %q replica %d: environment variable %s is empty", p.Name, j, r.APIKeyEnv)
		}
	}
	q := p.Queue
	if q.MaxSize < 0 || q.Concurrency < 0 || q.MinConcurrency < 0 || q.MaxConcurrency < 0 {
		ps.add("pool %q: queue sizes must not be negative", p.Name)
	}
	if q.Adaptive != "" && q.Adaptive != AdaptiveGradient {
		ps.add("pool %q: queue.adaptive is %q, want gradient (or leave it out for a fixed limit)", p.Name, q.Adaptive)
	}
	if q.Shared {
		switch {
		case !redis:
			ps.add("pool %q: queue.shared needs redis (the store the gateway replicas share)", p.Name)
		case q.Concurrency == 0:
			ps.add("pool %q: queue.shared needs queue.concurrency, the limit to share", p.Name)
		case q.adaptive() != "":
			ps.add("pool %q: queue.shared needs a fixed limit (each replica's adaptive limit follows the upstream TTFT that every replica's load makes)", p.Name)
		}
	}
	if q.adaptive() == "" {
		return
	}
	if q.Concurrency == 0 {
		ps.add("pool %q: queue.adaptive needs queue.concurrency", p.Name)
		return
	}
	lo, hi := q.MinConcurrency, q.MaxConcurrency
	if lo == 0 {
		lo = 1
	}
	if hi == 0 {
		hi = 4 * q.Concurrency
	}
	if lo > q.Concurrency || q.Concurrency > hi {
		ps.add("pool %q: need min_concurrency ≤ concurrency ≤ max_concurrency", p.Name)
	}
}

func (r *RouteConfig) validate(i int, pools, models map[string]bool, ps *problems) {
	if r.Model == "" {
		ps.add("routes[%d]: missing model", i)
	}
	if models[r.Model] {
		ps.add("routes[%d]: duplicate model %q", i, r.Model)
	}
	models[r.Model] = true
	if r.Pool == "" && len(r.LengthPools) == 0 {
		ps.add("route %q: needs pool or length_pools", r.Model)
	}
	if r.Pool != "" && !pools[r.Pool] {
		ps.add("route %q: unknown pool %q", r.Model, r.Pool)
	}
	if r.PrefillPool != "" && !pools[r.PrefillPool] {
		ps.add("route %q: unknown prefill_pool %q", r.Model, r.PrefillPool)
	}
	if r.PrefillPool != "" && (r.PrefillPool == r.Pool || slices.ContainsFunc(r.LengthPools, func(lp LengthPool) bool { return lp.Pool == r.PrefillPool })) {
		ps.add("route %q: prefill_pool %q is also its decode pool; give the prefill instances a pool of their own", r.Model, r.PrefillPool)
	}
	for j, lp := range r.LengthPools {
		if !pools[lp.Pool] {
			ps.add("route %q length_pools[%d]: unknown pool %q", r.Model, j, lp.Pool)
		}
		if lp.MaxInputTokens < 0 {
			ps.add("route %q length_pools[%d]: negative max_input_tokens", r.Model, j)
		}
		if j > 0 && lp.MaxInputTokens != 0 && r.LengthPools[j-1].MaxInputTokens == 0 {
			ps.add("route %q length_pools[%d]: unreachable after an unbounded band", r.Model, j)
		}
	}
	l := r.Length
	if l.DefaultMaxTokens < 0 || l.MaxMaxTokens < 0 || l.MaxInputTokens < 0 {
		ps.add("route %q: length limits must not be negative", r.Model)
	}
	if l.MaxMaxTokens > 0 && l.DefaultMaxTokens > l.MaxMaxTokens {
		ps.add("route %q: default_max_tokens %d exceeds max_max_tokens %d", r.Model, l.DefaultMaxTokens, l.MaxMaxTokens)
	}
	switch l.OnExceed {
	case "", "reject", "clamp":
	default:
		ps.add("route %q: length.on_exceed %q must be reject or clamp", r.Model, l.OnExceed)
	}
	if r.Timeouts.Retries < 0 {
		ps.add("route %q: negative retries", r.Model)
	}
}

// validateFallbacks checks that every fallback names a route or a model
// a replica lists, other than the route's own.
func (c *Config) validateFallbacks(models map[string]bool, ps *problems) {
	served := map[string]bool{}
	for _, p := range c.Pools {
		for _, r := range p.Replicas {
			for _, m := range r.Models {
				served[m] = true
			}
		}
	}
	for _, r := range c.Routes {
		if f := r.Fallback; f != "" && !models[f] && !served[f] {
			ps.add("route %q: fallback %q is neither a route nor a model a replica lists", r.Model, f)
		}
		if f := r.Fallback; f == r.Model && f != "" {
			ps.add("route %q: falls back to itself", f)
		}
	}
}

func (k *KeyConfig) validate(i int, hashes map[string]bool, ps *problems) {
	h := strings.ToLower(k.SHA256)
	if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
		ps.add("keys[%d] (%s): sha256 must be 64 hex digits (tokentrace gateway hash-key)", i, k.Name)
	}
	if hashes[h] {
		ps.add("keys[%d] (%s): duplicate key", i, k.Name)
	}
	hashes[h] = true
	if k.RequestsPerSecond < 0 || k.TokensPerMinute < 0 || k.Burst < 0 {
		ps.add("keys[%d] (%s): negative limit", i, k.Name)
	}
}

// validate checks r and fills its defaults.
// setDefaults fills r's unset fields.
func (r *RedisConfig) setDefaults() {
	if r.Timeout == 0 {
		r.Timeout = Duration(redisstate.DefaultTimeout)
	}
	if r.RetryInterval == 0 {
		r.RetryInterval = Duration(redisstate.DefaultRetryInterval)
	}
	if r.LeaseTTL == 0 {
		r.LeaseTTL = Duration(10 * time.Second)
	}
	if r.KeyPrefix == "" {
		r.KeyPrefix = redisstate.DefaultKeyPrefix
	}
	if r.OnError == "" {
		r.OnError = FailOpen
	}
}

// url is the server's URL: url, or the value of the environment
// variable url_env names.
func (r *RedisConfig) url() string {
	if r.URLEnv != "" {
		return os.Getenv(r.URLEnv)
	}
	return r.URL
}

// validate reports r's problems; zero values stand for their defaults.
func (r *RedisConfig) validate() []error {
	var ps problems
	u := r.url()
	switch {
	case r.URL != "" && r.URLEnv != "":
		ps.add("redis: give url or url_env, not both")
	case r.URLEnv != "" && u == "":
		ps.add("redis: environment variable %s is empty", r.URLEnv)
	case u == "":
		ps.add("redis: needs url or url_env")
	}
	if u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "redis" && pu.Scheme != "rediss" && pu.Scheme != "unix") {
			ps.add("redis: url %q must be a redis://, rediss:// or unix:// URL", redact.URL(u))
		}
	}
	if r.LeaseTTL != 0 && r.LeaseTTL < Duration(30*time.Millisecond) {
		ps.add("redis: lease_ttl %s is too short (each replica reports every lease_ttl / 3)", r.LeaseTTL.D())
	}
	switch r.OnError {
	case "", FailOpen, FailClosed:
	default:
		ps.add("redis: on_error %q must be fail_open or fail_closed", r.OnError)
	}
	return ps
}

// Watch re-reads the configuration file at path every interval until ctx
// ends. loaded is the content the running configuration was parsed from
// (LoadConfig returns it), so a change made before Watch starts is not
// missed. When the content changes, and reads the same on the next poll too
// (so a half-written file is never parsed), it is parsed and validated, then given to
// apply (Gateway.SetConfig); a file that fails either step is logged with
// the reason and the running configuration is kept. It returns when ctx
// is done.
func Watch(ctx context.Context, path string, loaded []byte, interval time.Duration, apply func(*Config) error, log *slog.Logger) {
	log = slog.New(redact.Handler(log.Handler()))
	last := loaded
	var pending []byte // a change seen once, waiting to read the same again
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := field.ReadFile(path, 0)
		if err != nil {
			if !bytes.Equal(last, nil) {
				log.Error("config reload: keeping the running configuration", "path", path, "err", err)
				last = nil
			}
			continue
		}
		if bytes.Equal(data, last) {
			pending = nil
			continue
		}
		// Apply a change only once it has read the same on two polls in a
		// row, so a file caught half-written (an editor or a copy writing
		// in place) is never parsed.
		if !bytes.Equal(data, pending) {
			pending = data
			continue
		}
		last, pending = data, nil
		c, err := ParseConfig(data)
		if err == nil {
			err = apply(c)
		}
		if err != nil {
			log.Error("config reload: invalid, keeping the running configuration", "path", path, "err", err)
			continue
		}
		log.Info("config reloaded", "path", path, "pools", len(c.Pools), "routes", len(c.Routes))
	}
}
