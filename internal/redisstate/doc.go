// Package redisstate holds the state that several gateway replicas share
// in Redis: per-key token buckets (Take) and a pool's concurrency slots
// (Slots). Each operation is one Lua script, so it is atomic on the Redis
// server and reads the server's clock: replicas need no clock agreement
// and never talk to each other.
//
// The client is github.com/redis/go-redis/v9 (pooling, deadlines, URLs
// with TLS and ACL credentials, EVALSHA with EVAL on NOSCRIPT), used
// through this package only. Every call is bounded by Config.Timeout; after
// a failure the Client answers ErrUnavailable at once, without calling
// Redis, for Config.RetryInterval, then lets one call probe. A stalled or
// unreachable Redis therefore costs a request at most one timeout, and
// the caller decides what an unavailable Redis means (fail open or
// closed).
//
// It imports nothing of this module but internal/redact.
package redisstate
