package redisstate

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/redisstate/redistest"
)

func open(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestTakeHandComputed checks the script's bucket arithmetic at given
// instants against values worked out by hand: requests 2/s with burst 3,
// tokens 600/min (10/s) with capacity 600.
func TestTakeHandComputed(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, Config{URL: srv.URL(), Timeout: 5 * time.Second})
	ctx := context.Background()
	req, tok := Bucket{Rate: 2, Burst: 3}, Bucket{Rate: 10, Burst: 600}
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	steps := []struct {
		at     time.Time
		tokens int
		want   Taken
	}{
		// Full buckets: 3 − 1 = 2 requests left, full again in 1/2 s;
		// 600 − 100 = 500 tokens left, full again in 100/10 = 10 s.
		{ms(0), 100, Taken{Allowed: true, Requests: Level{2, 500 * time.Millisecond}, Tokens: Level{500, 10 * time.Second}}},
		{ms(0), 100, Taken{Allowed: true, Requests: Level{1, time.Second}, Tokens: Level{400, 20 * time.Second}}},
		{ms(0), 100, Taken{Allowed: true, Requests: Level{0, 1500 * time.Millisecond}, Tokens: Level{300, 30 * time.Second}}},
		// No request left: the wait is (1 − 0) / 2 = 500 ms; nothing charged.
		{ms(0), 100, Taken{Wait: 500 * time.Millisecond, Requests: Level{0, 500 * time.Millisecond}, Tokens: Level{300, 30 * time.Second}}},
		// 250 ms later: 0.5 requests (wait 250 ms), 302.5 tokens.
		{ms(250), 100, Taken{Wait: 250 * time.Millisecond, Requests: Level{0, 250 * time.Millisecond}, Tokens: Level{302, 29750 * time.Millisecond}}},
		// At 500 ms: 1 request, 305 tokens; 400 tokens are wanted: wait
		// (400 − 305) / 10 = 9.5 s; the request bucket is not charged.
		{ms(500), 400, Taken{Wait: 9500 * time.Millisecond, Requests: Level{1, time.Second}, Tokens: Level{305, 9500 * time.Millisecond}}},
		// More tokens than the capacity waits for a full bucket: (600 − 305) / 10 = 29.5 s.
		{ms(500), 5000, Taken{Wait: 29500 * time.Millisecond, Requests: Level{1, time.Second}, Tokens: Level{305, 29500 * time.Millisecond}}},
		{ms(500), 5, Taken{Allowed: true, Requests: Level{0, 1500 * time.Millisecond}, Tokens: Level{300, 30 * time.Second}}},
	}
	key := c.BucketKey("hand")
	for i, s := range steps {
		got, err := c.Take(ctx, key, req, tok, s.tokens, s.at)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("step %d (+%s, %d tokens): -want +got\n%s", i, s.at.Sub(t0), s.tokens, diff)
		}
	}
	// A bucket of rate 0 is no limit and reports nothing.
	got, err := c.Take(ctx, c.BucketKey("unlimited"), Bucket{}, Bucket{}, 1e9, t0)
	if err != nil || !got.Allowed || got != (Taken{Allowed: true}) {
		t.Errorf("no limits: %+v, %v", got, err)
	}
}

// TestSettleHandComputed settles charges in a token bucket of 10
// tokens a second, capacity 600, at given instants: given back up to a
// full bucket, owed down to −600, and Take waits out the debt.
func TestSettleHandComputed(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, Config{URL: srv.URL(), Timeout: 5 * time.Second})
	ctx := context.Background()
	tok := Bucket{Rate: 10, Burst: 600}
	t0 := time.Unix(1_700_000_000, 0)
	key := c.BucketKey("settle")
	if got, err := c.Take(ctx, key, Bucket{}, tok, 500, t0); err != nil || !got.Allowed || got.Tokens.Remaining != 100 {
		t.Fatalf("take 500: %+v, %v", got, err)
	}
	for i, s := range []struct {
		at     time.Duration
		tokens int
		want   int64
	}{
		{0, -300, 400},              // 300 of the 500 not used: given back
		{0, -1000, 600},             // never past a full bucket
		{0, 900, 0},                 // 900 owed: −300, reported as 0
		{10 * time.Second, 0, 0},    // nothing to settle, nothing called
		{10 * time.Second, 2000, 0}, // −300 + 100 refilled − 2000, held at −600
		{70 * time.Second, -50, 50}, // −600 + 600 refilled + 50
	} {
		got, repaired, err := c.Settle(ctx, key, tok, s.tokens, t0.Add(s.at))
		if err != nil || repaired || got != s.want {
			t.Errorf("step %d (+%s, %d tokens): remaining %d (repaired %v, %v), want %d", i, s.at, s.tokens, got, repaired, err, s.want)
		}
	}
	// At −600, one token waits (1 + 600) / 10 = 60.1 s.
	if _, _, err := c.Settle(ctx, key, tok, 10_000, t0.Add(70*time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := c.Take(ctx, key, Bucket{}, tok, 1, t0.Add(70*time.Second))
	if err != nil || got.Allowed || got.Wait != 60100*time.Millisecond {
		t.Errorf("a token at −600: %+v, %v; want refused, wait 60.1 s", got, err)
	}
	// A debt survives the key's expiry only as long as it takes to refill.
	if ttl, err := srv.Command("PTTL " + key); err != nil || ttl == "-1" || ttl == "-2" {
		t.Errorf("PTTL %s: %q, %v; want an expiry", key, ttl, err)
	}
}

// TestTakeIsAtomicAcrossClients charges one bucket from several clients
// at once (as several gateway replicas would) on the server's clock: a
// burst of 5 with a refill of one request per 1,000 s lets exactly 5 of 40
// through.
func TestTakeIsAtomicAcrossClients(t *testing.T) {
	srv := redistest.Start(t)
	var clients []*Client
	for range 4 {
		clients = append(clients, open(t, Config{URL: srv.URL(), Timeout: 5 * time.Second}))
	}
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			c := clients[i%len(clients)]
			got, err := c.Take(context.Background(), c.BucketKey("shared"), Bucket{Rate: 0.001, Burst: 5}, Bucket{}, 1, time.Time{})
			if err != nil {
				t.Error(err)
				return
			}
			if got.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 5 {
		t.Errorf("%d of 40 allowed, want exactly the burst of 5", allowed)
	}
}

func TestSlotsLimitTurnsAndExpiry(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, Config{URL: srv.URL(), Timeout: 5 * time.Second})
	ctx := context.Background()
	ask := func(replica string, held, want int, ttl time.Duration) SlotsAnswer {
		t.Helper()
		a, err := c.Slots(ctx, SlotsRequest{Pool: "p", Replica: replica, Held: held, Want: want, Limit: 4, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	const long = time.Minute
	steps := []struct {
		replica    string
		held, want int
		answer     SlotsAnswer
	}{
		{"a", 0, 3, SlotsAnswer{Granted: 3, InUse: 3}},
		// b wants 3, gets the 1 left and joins the line.
		{"b", 0, 3, SlotsAnswer{Granted: 1, InUse: 4, Waiting: 1}},
		// a wants 1 more: none free; a joins the line behind b.
		{"a", 3, 1, SlotsAnswer{InUse: 4, Waiting: 2}},
		// a returns one slot (held 3 → 2) and still wants one: b is ahead,
		// so the freed slot is b's turn, not a's.
		{"a", 2, 1, SlotsAnswer{InUse: 3, Waiting: 2}},
		// b takes it, still wants one more, and goes behind a.
		{"b", 1, 2, SlotsAnswer{Granted: 1, InUse: 4, Waiting: 2}},
		// b returns both and stops waiting; a is first in line and gets 1.
		{"b", 0, 0, SlotsAnswer{InUse: 2, Waiting: 1}},
		{"a", 2, 1, SlotsAnswer{Granted: 1, InUse: 3}},
		// Leaving returns everything.
		{"a", 0, 0, SlotsAnswer{}},
	}
	for i, s := range steps {
		if got := ask(s.replica, s.held, s.want, long); got != s.answer {
			t.Errorf("step %d (%s held %d want %d): %+v, want %+v", i, s.replica, s.held, s.want, got, s.answer)
		}
	}
	// A replica that stops reporting loses its slots after its TTL.
	if got := ask("gone", 0, 4, 100*time.Millisecond); got.Granted != 4 {
		t.Fatalf("gone: %+v", got)
	}
	if got := ask("c", 0, 1, long); got.Granted != 0 {
		t.Fatalf("c got a slot while gone holds all 4: %+v", got)
	}
	time.Sleep(150 * time.Millisecond) // past gone's TTL on the server's clock
	if got := ask("c", 0, 1, long); got.Granted != 1 || got.InUse != 1 {
		t.Errorf("after gone's TTL: %+v, want 1 granted, 1 in use", got)
	}
}

// TestUnreachableFailsFastThenProbes: a killed server fails the call and
// reports the change once; calls within the retry interval do not reach
// Redis; after it one call probes, and recovery is reported once.
func TestUnreachableFailsFastThenProbes(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	now := time.Unix(0, 0)
	var changes []string
	c := open(t, Config{URL: srv.URL(), Timeout: 2 * time.Second, RetryInterval: time.Second,
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		OnChange: func(up bool, err error) {
			mu.Lock()
			defer mu.Unlock()
			if up {
				changes = append(changes, "up")
			} else {
				changes = append(changes, "down: "+err.Error())
			}
		}})
	ctx := context.Background()
	take := func() error {
		_, err := c.Take(ctx, c.BucketKey("k"), Bucket{Rate: 1, Burst: 1}, Bucket{}, 1, time.Time{})
		return err
	}
	if err := take(); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := take(); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("first call after the kill: %v, want the connection's error", err)
	}
	if err := take(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("within the retry interval: %v, want ErrUnavailable", err)
	}
	if c.Up() {
		t.Error("Up() after a failure")
	}
	srv.Restart()
	if err := take(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("still within the retry interval: %v", err)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if err := take(); err != nil {
		t.Fatalf("probe after the interval: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || !strings.HasPrefix(changes[0], "down: redis: ") || changes[1] != "up" {
		t.Errorf("changes %q, want one down then one up", changes)
	}
}

// TestStalledServerCostsOneTimeout: a paused server (accepting, never
// answering) fails the call on the deadline instead of holding it.
func TestStalledServerCostsOneTimeout(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, Config{URL: srv.URL(), Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	if _, err := c.Take(ctx, c.BucketKey("k"), Bucket{Rate: 1, Burst: 1}, Bucket{}, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	_, err := c.Take(ctx, c.BucketKey("k"), Bucket{Rate: 1, Burst: 1}, Bucket{}, 1, time.Time{})
	if err == nil || !strings.Contains(err.Error(), "timeout") && !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("stalled server: %v, want a timeout", err)
	}
}

// TestPasswordNeverQuoted: neither a bad URL nor a refused password puts
// the password in an error.
func TestPasswordNeverQuoted(t *testing.T) {
	const secret = "s3cret-Pa55word"
	if _, err := Open(Config{URL: "redis://:" + secret + "@127.0.0.1:notaport/0"}); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("bad URL: %v", err)
	}
	srv := redistest.StartWithPassword(t, "right-password")
	c := open(t, Config{URL: "redis://:" + secret + "@" + srv.Addr + "/0", Timeout: 5 * time.Second})
	_, err := c.Take(context.Background(), c.BucketKey("k"), Bucket{Rate: 1, Burst: 1}, Bucket{}, 1, time.Time{})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("wrong password: %v", err)
	}
	ok := open(t, Config{URL: srv.URL(), Timeout: 5 * time.Second})
	if _, err := ok.Take(context.Background(), ok.BucketKey("k"), Bucket{Rate: 1, Burst: 1}, Bucket{}, 1, time.Time{}); err != nil {
		t.Errorf("right password: %v", err)
	}
}
