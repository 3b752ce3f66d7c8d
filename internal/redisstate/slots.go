package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// SlotsRequest is one replica's report on a pool's shared concurrency
// slots and its request for more.
type SlotsRequest struct {
	Pool    string // the pool's name
	Replica string // this gateway replica's identity, unique among those sharing the pool
	// Held is how many slots the replica holds now: granted earlier and
	// not yet returned. A report lower than the last one returns the rest.
	Held int
	// Want is how many more it asks for (its requests waiting for one).
	Want int
	// Limit is the pool's limit across replicas.
	Limit int
	// TTL is how long the report stands: a replica that does not report
	// again within TTL loses its slots and its place in line.
	TTL time.Duration
}

// SlotsAnswer is Slots' answer.
type SlotsAnswer struct {
	Granted int // new slots, at most Want
	InUse   int // the pool's slots held by every replica, these included
	Waiting int // replicas waiting for a slot, this one included
	// Repaired reports that the pool's keys held corrupt state, which
	// was dropped.
	Repaired bool
}

// slotsScript is a pool's concurrency limit held across replicas.
//
// KEYS[1]: hash replica → slots held; KEYS[2]: sorted set replica →
// expiry (ms, server time); KEYS[3]: sorted set of replicas waiting for
// a slot, by turn; KEYS[4]: the turn counter. ARGV: replica, held, want,
// limit, ttl ms.
//
// Replicas whose report expired are removed (their slots free, their turn
// lost). The replica's held count replaces what was stored. With want > 0
// it is granted min(want, limit − held by every replica − one slot for
// each replica waiting ahead of it): a replica that waits keeps its turn,
// one granted less than it wants goes to the back of the line, so
// replicas that all wait take freed slots in turn and none can hold the
// pool by asking first. Returns {granted, held by all, replicas waiting,
// repaired}: a key of the wrong type is deleted, a held count that is no
// number (or outside 0…limit) is dropped, and repaired is 1.
const slotsScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, held, want, limit, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local repaired = 0
local types = {'hash', 'zset', 'zset', 'string'}
for i = 1, 4 do
  local ty = redis.call('TYPE', KEYS[i])['ok']
  if ty ~= 'none' and ty ~= types[i] then
    redis.call('DEL', KEYS[i])
    repaired = 1
  end
end
for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('HDEL', KEYS[1], d)
  redis.call('ZREM', KEYS[3], d)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local others = 0
local h = redis.call('HGETALL', KEYS[1])
for i = 1, #h, 2 do
  local n = tonumber(h[i + 1])
  if n == nil or n ~= n or n < 0 or n > limit then
    redis.call('HDEL', KEYS[1], h[i])
    repaired = 1
  elseif h[i] ~= id then
    others = others + n
  end
end
local granted = 0
if want > 0 then
  local rank = redis.call('ZRANK', KEYS[3], id)
  local ahead = rank
  if ahead == false then ahead = redis.call('ZCARD', KEYS[3]) end
  local free = limit - others - held - ahead
  if free > 0 then granted = math.min(want, free) end
  if granted == want then
    redis.call('ZREM', KEYS[3], id)
  elseif granted > 0 or rank == false then
    redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), id)
  end
else
  redis.call('ZREM', KEYS[3], id)
end
held = held + granted
if held > 0 then
  redis.call('HSET', KEYS[1], id, held)
else
  redis.call('HDEL', KEYS[1], id)
end
if held > 0 or want > granted then
  redis.call('ZADD', KEYS[2], now + ttl, id)
else
  redis.call('ZREM', KEYS[2], id)
end
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], 2 * ttl) end
return {granted, others + held, redis.call('ZCARD', KEYS[3]), repaired}
`

var slots = redis.NewScript(slotsScript)

// slotKeys are a pool's keys, with the pool in a hash tag so that a Redis
// Cluster keeps them in one slot (a script's keys must be).
func (c *Client) slotKeys(pool string) []string {
	base := c.cfg.KeyPrefix + "{pool:" + pool + "}:"
	return []string{base + "held", base + "alive", base + "waiting", base + "turn"}
}

// Slots reports r and asks for r.Want more slots, atomically on the
// server. A report with Held and Want 0 leaves the pool.
func (c *Client) Slots(ctx context.Context, r SlotsRequest) (SlotsAnswer, error) {
	ttl := max(1, r.TTL.Milliseconds())
	var res []int64
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = slots.Run(ctx, c.rdb, c.slotKeys(r.Pool), r.Replica, max(0, r.Held), max(0, r.Want), r.Limit, ttl).Int64Slice()
		if err == nil && len(res) != 4 {
			err = fmt.Errorf("%w: slots script answered %d values, want 4", errShape, len(res))
		}
		return err
	})
	if err != nil {
		return SlotsAnswer{}, err
	}
	return SlotsAnswer{Granted: int(res[0]), InUse: int(res[1]), Waiting: int(res[2]), Repaired: res[3] == 1}, nil
}
