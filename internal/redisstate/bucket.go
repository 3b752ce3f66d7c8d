package redisstate

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bucket is one token bucket's settings: it refills at Rate tokens per
// second up to Burst. A zero Rate is no limit.
type Bucket struct {
	Rate  float64
	Burst int
}

// Level is one bucket's state after a Take, as the x-ratelimit-* headers
// report it.
type Level struct {
	Remaining int64         // whole tokens left
	Reset     time.Duration // until the bucket is full, or the wait on refusal
}

// Taken is a Take's answer.
type Taken struct {
	Allowed bool
	// Wait is how long until the request would be allowed, when it was not.
	Wait time.Duration
	// Requests and Tokens are the two buckets' states (zero for a bucket
	// with no limit).
	Requests, Tokens Level
	// Repaired reports that the key held corrupt state (a value of another
	// type, a level that is no number): it was taken as full and
	// overwritten.
	Repaired bool
}

// scriptStart opens both scripts: now in µs, ARGV[1] or the server's TIME.
const scriptStart = `
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
`

// scriptRepairType deletes a key that is not a hash (repaired = 1), as
// both scripts judge it.
const scriptRepairType = `local repaired = 0
local ty = redis.call('TYPE', KEYS[1])['ok']
if ty ~= 'none' and ty ~= 'hash' then
  redis.call('DEL', KEYS[1])
  repaired = 1
end
`

// takeScript is the token bucket of golang.org/x/time/rate (the
// gateway's in-process limiter) on the Redis server, for two buckets
// charged together: a request bucket charged 1 and a token bucket charged
// min(tokens, its burst), both or neither.
//
// KEYS[1]: the hash holding both buckets' levels and last instants
// (fields rl, rt, tl, tt). ARGV: now in µs ("" = the server's TIME),
// request rate per second, request burst, token rate per second, token
// burst, tokens. A bucket of rate 0 is no limit. A level is the stored
// level plus the elapsed time × rate, capped at the burst; an absent
// bucket is full. Returns {allowed, wait µs, repaired, request remaining,
// request reset µs, token remaining, token reset µs}. The key expires once
// both buckets would be full again (an absent bucket is full).
//
// A key that is not a hash, or a level that is not a number, below
// −burst (the most a settlement leaves owed, Settle) or NaN, is corrupt: the key (or that bucket) is taken as absent, i.e. full,
// and repaired is 1. A last instant in the future counts as now, so a wait
// is never longer than the bucket takes to fill from empty.
const takeScript = scriptStart + `local tokens = tonumber(ARGV[6])
` + scriptRepairType + `local st = redis.call('HMGET', KEYS[1], 'rl', 'rt', 'tl', 'tt')
local function level(l, t, rate, burst)
  if l == false and t == false then return burst end
  l, t = tonumber(l), tonumber(t)
  if l == nil or t == nil or l ~= l or t ~= t or l < -burst then
    repaired = 1
    return burst
  end
  if t > now then t = now end
  l = l + (now - t) / 1000000 * rate
  if l > burst then l = burst end
  return l
end
local b = {
  {rate = tonumber(ARGV[2]), burst = tonumber(ARGV[3]), n = 1},
  {rate = tonumber(ARGV[4]), burst = tonumber(ARGV[5]), n = tokens},
}
b[1].level = level(st[1], st[2], b[1].rate, b[1].burst)
b[2].level = level(st[3], st[4], b[2].rate, b[2].burst)
if b[2].n > b[2].burst then b[2].n = b[2].burst end
local wait = 0
for i = 1, 2 do
  b[i].wait = 0
  if b[i].rate > 0 and b[i].level < b[i].n then
    b[i].wait = (b[i].n - b[i].level) / b[i].rate * 1000000
  end
  if b[i].wait > wait then wait = b[i].wait end
end
local allowed = 0
local ttl = 1
if wait == 0 then
  allowed = 1
  for i = 1, 2 do
    if b[i].rate > 0 then b[i].level = b[i].level - b[i].n end
  end
end
local out = {allowed, math.floor(wait), repaired}
for i = 1, 2 do
  if b[i].rate > 0 then
    local reset = b[i].wait
    if reset == 0 then reset = (b[i].burst - b[i].level) / b[i].rate * 1000000 end
    local left = b[i].level
    if left < 0 then left = 0 end
    out[#out + 1] = math.floor(left)
    out[#out + 1] = math.floor(reset)
    local full = math.ceil((b[i].burst - b[i].level) / b[i].rate * 1000) + 1000
    if full > ttl then ttl = full end
  else
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
end
if allowed == 1 then
  local f = function(x) return string.format('%.17g', x) end
  redis.call('HSET', KEYS[1], 'rl', f(b[1].level), 'rt', f(now), 'tl', f(b[2].level), 'tt', f(now))
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return out
`

var take = redis.NewScript(takeScript)

// settleScript settles a request's token charge in the token bucket of
// takeScript: the level (refilled to now, as takeScript reads it) is
// lowered by the tokens the request used beyond its charge, or raised by
// those it did not use, in whole tokens within [−burst, burst] (as the
// in-process limiter's Settle): what it owes is waited out by later
// requests, up to one bucket. The request bucket is left as
// it is.
//
// KEYS[1]: takeScript's hash. ARGV: now in µs ("" = the server's TIME),
// token rate per second, token burst, tokens (used − charged). An absent
// bucket is full; a corrupt one (as takeScript judges) is taken as full
// and repaired. The key's expiry is extended to when the token bucket is
// full again, never shortened. Returns {remaining, repaired}.
const settleScript = scriptStart + `local rate, burst, delta = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
` + scriptRepairType + `local st = redis.call('HMGET', KEYS[1], 'tl', 'tt')
local l = burst
if st[1] ~= false or st[2] ~= false then
  local sl, t = tonumber(st[1]), tonumber(st[2])
  if sl == nil or t == nil or sl ~= sl or t ~= t or sl < -burst then
    repaired = 1
  else
    if t > now then t = now end
    l = sl + (now - t) / 1000000 * rate
    if l > burst then l = burst end
  end
end
if delta > 0 then
  local owe = math.min(delta, math.floor(l + burst))
  if owe > 0 then l = l - owe end
elseif delta < 0 then
  local back = math.min(-delta, math.floor(burst - l))
  if back > 0 then l = l + back end
end
local f = function(x) return string.format('%.17g', x) end
redis.call('HSET', KEYS[1], 'tl', f(l), 'tt', f(now))
local full = math.ceil((burst - l) / rate * 1000) + 1000
if redis.call('PTTL', KEYS[1]) < full then redis.call('PEXPIRE', KEYS[1], full) end
local left = l
if left < 0 then left = 0 end
return {math.floor(left), repaired}
`

var settle = redis.NewScript(settleScript)

// BucketKey is the key of an API key's buckets: the prefix, "limit:" and
// the key's hex SHA-256 (the form the gateway's configuration holds; the
// key itself never reaches Redis).
func (c *Client) BucketKey(sha256Hex string) string {
	return c.cfg.KeyPrefix + "limit:" + sha256Hex
}

// Take charges one request of tokens to the buckets at key (BucketKey)
// when both allow it, atomically on the server, and returns the decision.
// at is the instant to decide at; the zero time uses the Redis server's
// clock (TIME), which every replica shares: set it only in tests.
func (c *Client) Take(ctx context.Context, key string, requests, tok Bucket, tokens int, at time.Time) (Taken, error) {
	now := ""
	if !at.IsZero() {
		now = strconv.FormatInt(at.UnixMicro(), 10)
	}
	args := []any{now, num(requests.Rate), requests.Burst, num(tok.Rate), tok.Burst, max(0, tokens)}
	var res []int64
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = take.Run(ctx, c.rdb, []string{key}, args...).Int64Slice()
		if err == nil && len(res) != 7 {
			err = fmt.Errorf("%w: token bucket script answered %d values, want 7", errShape, len(res))
		}
		return err
	})
	if err != nil {
		return Taken{}, err
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	// A settled debt (Settle) can leave the token bucket at −burst: two
	// windows to full.
	window := max(requests.window(), 2*tok.window())
	return Taken{
		Allowed:  res[0] == 1,
		Wait:     min(us(res[1]), window),
		Repaired: res[2] == 1,
		Requests: Level{Remaining: res[3], Reset: min(us(res[4]), requests.window())},
		Tokens:   Level{Remaining: res[5], Reset: min(us(res[6]), 2*tok.window())},
	}, nil
}

// Settle settles a request's token charge in the token bucket at key
// (BucketKey) atomically on the server: tokens (what the request used
// minus what Take charged) are taken from the bucket when positive, down
// to −Burst at most, or given back when negative, up to a full bucket.
// It refuses nothing. at is as Take's. It returns the whole tokens left
// and whether corrupt state was repaired (taken as a full bucket). A
// bucket with no limit (zero Rate) or zero tokens calls nothing.
func (c *Client) Settle(ctx context.Context, key string, tok Bucket, tokens int, at time.Time) (remaining int64, repaired bool, err error) {
	if num(tok.Rate) == "0" || tokens == 0 {
		return 0, false, nil
	}
	now := ""
	if !at.IsZero() {
		now = strconv.FormatInt(at.UnixMicro(), 10)
	}
	var res []int64
	err = c.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = settle.Run(ctx, c.rdb, []string{key}, now, num(tok.Rate), tok.Burst, tokens).Int64Slice()
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("%w: token settlement script answered %d values, want 2", errShape, len(res))
		}
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return res[0], res[1] == 1, nil
}

// window is the time a bucket takes to fill from empty (0 for no
// limit): the longest a request bucket makes a request wait (a token
// bucket owing a settlement, twice that).
func (b Bucket) window() time.Duration {
	if !(b.Rate > 0) || math.IsInf(b.Rate, 0) {
		return 0
	}
	return time.Duration(math.Ceil(float64(b.Burst)/b.Rate*1e6)) * time.Microsecond
}

// num writes a rate for the script: exact, and 0 for a negative or
// non-finite one (no limit).
func num(v float64) string {
	if !(v > 0) || math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
