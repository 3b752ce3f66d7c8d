package redisstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tokentrace/tokentrace/internal/redact"
)

// ErrUnavailable is the answer while Redis is treated as unreachable:
// within Config.RetryInterval of a failed call.
var ErrUnavailable = errors.New("redis unavailable")

// ErrData is wrapped by a call's error that is about the data at its keys,
// not about Redis: Redis answered, with an error reply about a value (a
// key of the wrong type, a script failing on what it read) or with an
// answer of the wrong shape. It is that key's problem only: it does not
// make the Client treat Redis as unreachable. (The scripts repair what
// they can themselves: see Taken.Repaired.)
var ErrData = errors.New("redis data error")

// errShape is an answer of the wrong shape (a data error).
var errShape = errors.New("unexpected answer")

// stateReplies are the error replies that say the Redis server cannot
// serve now (loading, a read-only replica, out of memory, a script
// running too long, refused credentials): like an unreachable server,
// they make the Client fail fast for a while.
var stateReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "BUSY", "TRYAGAIN", "NOAUTH",
	"WRONGPASS", "NOPERM", "OOM", "MISCONF", "ERR max number of clients"}

// isDataError reports whether err is a data error (ErrData): an error
// reply of the server's that is not about its state, or an answer of the
// wrong shape. Connection errors, timeouts and state replies are not.
func isDataError(err error) bool {
	if errors.Is(err, errShape) {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range stateReplies {
		if strings.HasPrefix(msg, p) {
			return false
		}
	}
	return true
}

// Defaults of Config's zero fields.
const (
	DefaultTimeout       = 50 * time.Millisecond
	DefaultRetryInterval = time.Second
	DefaultKeyPrefix     = "tokentrace:"
)

// Config is how to reach Redis and how long to wait for it.
type Config struct {
	// URL is redis://[user:password@]host:port[/db], rediss:// for TLS,
	// or unix:///path. It may carry a password: it is never logged nor
	// quoted in an error.
	URL string
	// Timeout bounds each call, connecting included (default
	// DefaultTimeout).
	Timeout time.Duration
	// RetryInterval is how long calls answer ErrUnavailable after a
	// failure before one probes Redis again (default DefaultRetryInterval).
	RetryInterval time.Duration
	// KeyPrefix starts every key (default DefaultKeyPrefix).
	KeyPrefix string
	// OnChange, when set, is told each time Redis becomes unreachable (up
	// false, with the error) and reachable again (up true); never twice in
	// a row with the same up. It is called with no lock held, from the
	// goroutine whose call saw the change.
	OnChange func(up bool, err error)
	// Now is the clock of the retry interval; nil uses time.Now.
	Now func() time.Time
}

// Client is a connection pool to one Redis with the scripts loaded on
// demand. It is safe for concurrent use.
type Client struct {
	rdb *redis.Client
	cfg Config

	mu        sync.Mutex
	down      bool
	downUntil time.Time
}

// quietOnce routes go-redis's own log lines (a connection pool failing to
// dial, say) to slog's default logger at debug level, credentials masked:
// what matters of them reaches the caller as the call's error, and
// OnChange says it once.
var quietOnce sync.Once

type debugLog struct{}

func (debugLog) Printf(ctx context.Context, format string, v ...any) {
	slog.New(redact.Handler(slog.Default().Handler())).DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// Open checks cfg and returns a Client; it does not connect (the first
// call does).
func Open(cfg Config) (*Client, error) {
	quietOnce.Do(func() { redis.SetLogger(debugLog{}) })
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("redis url %q: %s", redact.URL(cfg.URL), redact.Quoting(err.Error(), cfg.URL))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// One attempt per call, bounded by the caller's deadline: a retry
	// would double what a stalled Redis costs a request.
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = cfg.Timeout, cfg.Timeout, cfg.Timeout
	opt.ContextTimeoutEnabled = true
	opt.Protocol = 2
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return &Client{rdb: redis.NewClient(opt), cfg: cfg}, nil
}

// Close closes the pool's connections.
func (c *Client) Close() error { return c.rdb.Close() }

// Timeout is the bound on each call.
func (c *Client) Timeout() time.Duration { return c.cfg.Timeout }

// RetryInterval is how long calls fail fast after a failure.
func (c *Client) RetryInterval() time.Duration { return c.cfg.RetryInterval }

// Up reports whether the last call reached Redis (true before any call).
func (c *Client) Up() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.down
}

// call runs fn with the per-call deadline, unless Redis is within its
// retry interval after a failure (ErrUnavailable); it records the outcome.
// An error of ctx itself (the caller gave up) says nothing about Redis.
func (c *Client) call(ctx context.Context, fn func(context.Context) error) error {
	now := c.cfg.Now()
	c.mu.Lock()
	if c.down {
		if now.Before(c.downUntil) {
			c.mu.Unlock()
			return ErrUnavailable
		}
		c.downUntil = now.Add(c.cfg.RetryInterval) // this call probes; the others keep failing fast
	}
	c.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	err := fn(cctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && isDataError(err) {
		// Redis answered: it is reachable, whatever this key holds.
		c.mu.Lock()
		changed := c.down
		c.down = false
		c.mu.Unlock()
		if changed && c.cfg.OnChange != nil {
			c.cfg.OnChange(true, nil)
		}
		return fmt.Errorf("%w: %s", ErrData, redact.Quoting(err.Error(), c.cfg.URL))
	}
	c.mu.Lock()
	changed := c.down != (err != nil)
	c.down = err != nil
	if err != nil {
		c.downUntil = c.cfg.Now().Add(c.cfg.RetryInterval)
	}
	c.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("redis: %s", redact.Quoting(err.Error(), c.cfg.URL))
	}
	if changed && c.cfg.OnChange != nil {
		c.cfg.OnChange(err == nil, err)
	}
	return err
}
