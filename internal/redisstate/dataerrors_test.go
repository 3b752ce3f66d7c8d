package redisstate

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/redisstate/redistest"
)

// TestDataErrorsAreTheKeysOnly: a WRONGTYPE reply is that key's problem:
// the call fails with ErrData, Redis stays up, and the next call (another
// key's) reaches Redis at once instead of failing fast.
func TestDataErrorsAreTheKeysOnly(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, Config{URL: srv.URL(), Timeout: 5 * time.Second, RetryInterval: time.Hour})
	ctx := context.Background()
	if err := c.rdb.Set(ctx, "tokentrace:a", "text", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := c.call(ctx, func(ctx context.Context) error { return c.rdb.HGet(ctx, "tokentrace:a", "f").Err() })
	if !errors.Is(err, ErrData) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("WRONGTYPE: %v, want ErrData", err)
	}
	if !c.Up() {
		t.Error("a data error made Redis count as down")
	}
	if _, err := c.Take(ctx, c.BucketKey("b"), Bucket{Rate: 1, Burst: 2}, Bucket{}, 0, time.Time{}); err != nil {
		t.Errorf("another key after a data error: %v", err)
	}
	srv.Kill()
	if err := c.call(ctx, func(ctx context.Context) error { return c.rdb.Ping(ctx).Err() }); err == nil || errors.Is(err, ErrData) {
		t.Errorf("a dead server: %v, want a connection error", err)
	}
	if c.Up() {
		t.Error("a connection error left Redis up")
	}
}

// TestCorruptBucketsAreRepaired: a bucket key holding another type, or
// levels that are no number, negative or NaN, or a last instant far in the
// future, is taken as full and repaired (Repaired), and a wait is never
// longer than the bucket takes to fill: 1 request/s with burst 5 waits
// 5 s at most (a level of −5e7 once gave Retry-After: 50000000).
func TestCorruptBucketsAreRepaired(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, Config{URL: srv.URL(), Timeout: 5 * time.Second})
	ctx := context.Background()
	req := Bucket{Rate: 1, Burst: 5}
	t0 := time.Unix(1_700_000_000, 0)
	now := strconv.FormatInt(t0.UnixMicro(), 10)
	for _, tc := range []struct {
		name     string
		set      func(key string) error
		repaired bool
	}{
		{"a string", func(k string) error { return c.rdb.Set(ctx, k, "x", 0).Err() }, true},
		{"a list", func(k string) error { return c.rdb.RPush(ctx, k, "x").Err() }, true},
		{"a level that is no number", func(k string) error { return c.rdb.HSet(ctx, k, "rl", "lots", "rt", now).Err() }, true},
		{"a negative level", func(k string) error { return c.rdb.HSet(ctx, k, "rl", "-49999999", "rt", now).Err() }, true},
		{"a NaN level", func(k string) error { return c.rdb.HSet(ctx, k, "rl", "nan", "rt", now).Err() }, true},
		{"an instant in the future", func(k string) error { return c.rdb.HSet(ctx, k, "rl", "0", "rt", "1e30").Err() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := c.BucketKey(tc.name)
			if err := tc.set(key); err != nil {
				t.Fatal(err)
			}
			got, err := c.Take(ctx, key, req, Bucket{}, 0, t0)
			if err != nil {
				t.Fatalf("Take: %v", err)
			}
			if got.Repaired != tc.repaired {
				t.Errorf("repaired %v, want %v", got.Repaired, tc.repaired)
			}
			if got.Wait > 5*time.Second || got.Requests.Reset > 5*time.Second {
				t.Errorf("wait %v reset %v: longer than the bucket's 5 s window", got.Wait, got.Requests.Reset)
			}
			if tc.repaired && (!got.Allowed || got.Requests.Remaining != 4) {
				t.Errorf("%+v, want a full bucket charged once", got)
			}
			again, err := c.Take(ctx, key, req, Bucket{}, 0, t0)
			if err != nil || again.Repaired {
				t.Errorf("the second Take: %+v %v, want the key repaired", again, err)
			}
		})
	}
}

// TestCorruptSlotsAreRepaired: a pool's keys of another type, or a held
// count that is no number, are dropped; the pool's slots go on working.
func TestCorruptSlotsAreRepaired(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, Config{URL: srv.URL(), Timeout: 5 * time.Second})
	ctx := context.Background()
	keys := c.slotKeys("p")
	if err := c.rdb.HSet(ctx, keys[0], "other", "many").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.rdb.Set(ctx, keys[2], "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := c.Slots(ctx, SlotsRequest{Pool: "p", Replica: "r", Want: 2, Limit: 4, TTL: time.Minute})
	if err != nil || !got.Repaired || got.Granted != 2 || got.InUse != 2 {
		t.Fatalf("%+v %v, want 2 granted of 4 and the corrupt state dropped", got, err)
	}
}
