package route

import (
	"errors"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type fakeReplica struct {
	name    string
	out     int64
	waiting float64
	kv      float64
	at      time.Time
}

func (r *fakeReplica) Name() string       { return r.name }
func (r *fakeReplica) Outstanding() int64 { return r.out }
func (r *fakeReplica) Load(now time.Time, maxAge time.Duration) (float64, float64, bool) {
	return r.waiting, r.kv, !r.at.IsZero() && now.Sub(r.at) <= maxAge
}

type key uint64

func (k key) AffinityKey() uint64 { return uint64(k) }

func replicas(names ...string) []*fakeReplica {
	var out []*fakeReplica
	for _, n := range names {
		out = append(out, &fakeReplica{name: n})
	}
	return out
}

func names(picks []*fakeReplica) string {
	var s []string
	for _, p := range picks {
		s = append(s, p.name)
	}
	return strings.Join(s, ",")
}

func TestRoundRobinAndLeastOutstanding(t *testing.T) {
	c := replicas("a", "b", "c")
	rr, _ := New[key, *fakeReplica](NameRoundRobin, Options{})
	var got []*fakeReplica
	for range 4 {
		got = append(got, rr.Pick(0, c))
	}
	if names(got) != "a,b,c,a" {
		t.Errorf("round robin picked %s", names(got))
	}
	lo, _ := New[key, *fakeReplica]("", Options{})
	c[0].out, c[1].out, c[2].out = 3, 1, 1
	got = got[:0]
	for range 3 {
		got = append(got, lo.Pick(0, c))
	}
	// Ties between b and c go round robin from a rotating start.
	if names(got) != "b,b,c" {
		t.Errorf("least outstanding picked %s, want b,b,c", names(got))
	}
}

func TestQueueAwareScoresAndStaleness(t *testing.T) {
	now := time.Unix(100, 0)
	c := replicas("a", "b")
	c[0].waiting, c[0].at = 10, now
	c[1].at = now
	b := &QueueAware[key, *fakeReplica]{MaxAge: 3 * time.Second, Now: func() time.Time { return now }}
	if got := b.Pick(0, c); got != c[1] {
		t.Fatalf("picked %s, want b (a reports 10 waiting)", got.name)
	}
	c[1].kv, c[1].out = 0.99, 1 // 1 + 4 × 9 = 37 > 10
	if got := b.Pick(0, c); got != c[0] {
		t.Fatalf("picked %s, want a (b's KV cache is nearly full)", got.name)
	}
	now = now.Add(10 * time.Second)
	if got := b.Pick(0, c); got != c[0] {
		t.Fatalf("stale figures: picked %s, want a (fewer outstanding)", got.name)
	}
	if _, err := New[key, *fakeReplica](NameQueueAware, Options{}); err == nil {
		t.Error("queue_aware without a clock was accepted")
	}
	if _, err := New[key, *fakeReplica]("fastest", Options{}); err == nil || !strings.Contains(err.Error(), "round_robin") {
		t.Errorf("unknown balancer: err = %v", err)
	}
}

func TestPrefixAffinityPrefersHashOrderThenLeastOutstanding(t *testing.T) {
	c := replicas("http://a", "http://b", "http://c", "http://d")
	b, _ := New[key, *fakeReplica](NamePrefixAffinity, Options{Slack: 2})
	// The two replicas of highest rendezvous weight, computed here by sorting.
	ranked := append([]*fakeReplica(nil), c...)
	for i := range ranked {
		for j := i + 1; j < len(ranked); j++ {
			if hrw(42, ranked[j].name) > hrw(42, ranked[i].name) {
				ranked[i], ranked[j] = ranked[j], ranked[i]
			}
		}
	}
	if got := b.Pick(42, c); got != ranked[0] {
		t.Fatalf("picked %s, want the highest weight %s", got.name, ranked[0].name)
	}
	ranked[0].out = 3 // 3 > 0 + slack 2
	if got := b.Pick(42, c); got != ranked[1] {
		t.Fatalf("picked %s, want the second in hash order %s", got.name, ranked[1].name)
	}
	ranked[1].out = 3
	if got := b.Pick(42, c); got == ranked[0] || got == ranked[1] {
		t.Fatalf("both preferred overloaded: picked %s, want a least-outstanding one", got.name)
	}
	// Equal keys stick; a single candidate is always picked.
	if got := b.Pick(7, c[:1]); got != c[0] {
		t.Fatalf("one candidate: picked %s", got.name)
	}
}

func TestHRWIsFNV1aThenSplitmix(t *testing.T) {
	ref := func(key uint64, name string) uint64 {
		h := fnv.New64a()
		var k [8]byte
		for i := range k {
			k[i] = byte(key >> (8 * i))
		}
		h.Write(k[:])
		h.Write([]byte(name))
		x := h.Sum64()
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		return x
	}
	for _, k := range []uint64{0, 1, 42, 1 << 63, 0xdeadbeefcafe} {
		for _, n := range []string{"", "http://a", "replica-7"} {
			if got, want := hrw(k, n), ref(k, n); got != want {
				t.Errorf("hrw(%d, %q) = %x, want %x", k, n, got, want)
			}
		}
	}
}

func TestBand(t *testing.T) {
	id := func(m int) int { return m }
	for _, tc := range []struct {
		bands []int
		in    int
		want  int
	}{
		{[]int{512, 4096, 0}, 100, 0},
		{[]int{512, 4096, 0}, 512, 0},
		{[]int{512, 4096, 0}, 513, 1},
		{[]int{512, 4096, 0}, 100000, 2},
		{[]int{512, 4096}, 5000, -1},
		{nil, 5, -1},
	} {
		if got := Band(tc.bands, id, tc.in); got != tc.want {
			t.Errorf("Band(%v, %d) = %d, want %d", tc.bands, tc.in, got, tc.want)
		}
	}
}

func TestQueueOrderPriorityDeadlineArrival(t *testing.T) {
	q := NewQueue[string](Limits{Concurrency: 1, MaxSize: 10})
	var order []string
	q.OnAdmit = func(s string) { order = append(order, s) }
	if !q.TryAdmit() {
		t.Fatal("first request not admitted at once")
	}
	now := time.Unix(0, 0)
	base := now.Add(time.Hour)
	for _, it := range []struct {
		name     string
		prio     int
		deadline time.Time
	}{
		{"low-nodeadline", 0, time.Time{}},
		{"low-late", 0, base.Add(2 * time.Second)},
		{"low-early", 0, base.Add(time.Second)},
		{"high", 5, time.Time{}},
	} {
		if q.TryAdmit() {
			t.Fatalf("%s admitted past the limit", it.name)
		}
		if _, err := q.Enqueue(now, it.prio, it.deadline, false, it.name); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		q.Release(time.Millisecond)
	}
	want := []string{"high", "low-early", "low-late", "low-nodeadline"}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("admission order (-want +got):\n%s", diff)
	}
	if q.Depth() != 0 || q.InFlight() != 0 {
		t.Errorf("depth %d, in flight %d after all released", q.Depth(), q.InFlight())
	}
}

func TestQueueFullEarlyRejectAndAbandon(t *testing.T) {
	q := NewQueue[int](Limits{Concurrency: 2, MaxSize: 2})
	now := time.Unix(0, 0)
	q.TryAdmit()
	q.TryAdmit()
	q.Release(time.Second) // hold estimate: 1 s per slot
	q.TryAdmit()
	a, err := q.Enqueue(now, 0, time.Time{}, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A deadline ranks before no deadline: rank 0 waits 1 × 1 s / 2 slots
	// = 500 ms, so a 400 ms deadline is hopeless.
	if _, err := q.Enqueue(now, 0, now.Add(400*time.Millisecond), true, 2); !errors.Is(err, ErrDeadline) {
		t.Fatalf("hopeless deadline: err = %v", err)
	} else if r := new(Rejection); !errors.As(err, &r) || r.RetryAfter != 500*time.Millisecond {
		t.Fatalf("rejection %+v, want Retry-After 500ms", err)
	}
	if _, err := q.Enqueue(now, 0, now.Add(2*time.Second), true, 3); err != nil {
		t.Fatalf("reachable deadline rejected: %v", err)
	}
	if _, err := q.Enqueue(now, 0, time.Time{}, false, 4); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third waiter in a queue of 2: err = %v", err)
	}
	if !q.Abandon(a) || q.Depth() != 1 {
		t.Fatalf("abandon: depth %d", q.Depth())
	}
	var admitted []int
	q.OnAdmit = func(v int) { admitted = append(admitted, v) }
	q.Release(time.Second)
	if diff := cmp.Diff([]int{3}, admitted); diff != "" {
		t.Errorf("admitted after abandon (-want +got):\n%s", diff)
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, l := range []Limits{
		{MaxSize: -1},
		{Concurrency: -1},
		{Concurrency: 4, Adaptive: true, MinConcurrency: 0, MaxConcurrency: 8},
		{Concurrency: 4, Adaptive: true, MinConcurrency: 4, MaxConcurrency: 2},
		{Concurrency: 4, Adaptive: true, MinConcurrency: 1, MaxConcurrency: 8, TargetTTFT: -time.Second},
	} {
		if l.Validate() == nil {
			t.Errorf("%+v accepted", l)
		}
	}
	for _, l := range []Limits{{MaxSize: 10, Concurrency: 4}, {MaxSize: 10, Concurrency: 4, Adaptive: true, MinConcurrency: 1, MaxConcurrency: 16}} {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	if err := (Limits{Concurrency: 0, Adaptive: true, MinConcurrency: 1, MaxConcurrency: 8}).Validate(); err == nil {
		t.Error("an adaptive limit without a concurrency to start from was accepted")
	}
	l := Limits{Concurrency: 4, Adaptive: true}.WithDefaults()
	if want := (Limits{MaxSize: 1024, Concurrency: 4, MinConcurrency: 1, MaxConcurrency: 16, Adaptive: true}); l != want {
		t.Errorf("defaults %+v, want %+v", l, want)
	}
	if err := l.Validate(); err != nil {
		t.Error(err)
	}
}

func TestWaitingHintNeedsEveryReplicaFresh(t *testing.T) {
	now := time.Unix(100, 0)
	c := replicas("a", "b")
	c[0].waiting, c[0].at = 3, now
	c[1].waiting, c[1].at = 4, now.Add(-2*time.Second)
	if WaitingHint(c, 0) != nil {
		t.Fatal("a hint without scraping")
	}
	h := WaitingHint(c, 3*time.Second)
	if w, fresh := h(now); !fresh || w != 7 {
		t.Errorf("hint %v, %v; want 7 waiting, fresh", w, fresh)
	}
	if _, fresh := h(now.Add(1500 * time.Millisecond)); fresh {
		t.Error("b's figures are 3.5 s old: the hint must be stale")
	}
}

func TestPrefixKeyIsFNV1aOverTheLimitWithZeroBytes(t *testing.T) {
	ref := func(limit int, texts ...string) uint64 {
		h := fnv.New64a()
		for _, s := range texts {
			if limit <= 0 {
				break
			}
			s = s[:min(len(s), limit)]
			limit -= len(s)
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
		return h.Sum64()
	}
	for _, tc := range []struct {
		limit int
		texts []string
	}{
		{512, []string{"system", "You are terse.", "user", "Hi!"}},
		{10, []string{"system", "You are terse.", "user", "Hi!"}},
		{6, []string{"system", "x"}},
		{0, []string{"a"}},
		{100, nil},
	} {
		a, b := NewPrefixKey(tc.limit), NewPrefixKey(tc.limit)
		for _, s := range tc.texts {
			a.Add([]byte(s))
			b.AddString(s)
		}
		if want := ref(tc.limit, tc.texts...); a.Sum() != want || b.Sum() != want {
			t.Errorf("limit %d %q: %x, %x; want %x", tc.limit, tc.texts, a.Sum(), b.Sum(), want)
		}
	}
}

func TestPrefixBoundedFollowsHashOrderUnderTheBound(t *testing.T) {
	c := replicas("http://a", "http://b", "http://c")
	b, err := New[key, *fakeReplica](NamePrefixBounded, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The replicas in key 42's rendezvous order, computed here by sorting.
	ranked := append([]*fakeReplica(nil), c...)
	for i := range ranked {
		for j := i + 1; j < len(ranked); j++ {
			if hrw(42, ranked[j].name) > hrw(42, ranked[i].name) {
				ranked[i], ranked[j] = ranked[j], ranked[i]
			}
		}
	}
	for _, tc := range []struct {
		out  [3]int64 // outstanding of ranked[0], [1], [2]
		want int      // index into ranked
	}{
		// m = 1, capacity ⌈1.25 × 1 / 3⌉ = 1: the first is free.
		{[3]int64{0, 0, 0}, 0},
		// m = 4 + 1 = 5, capacity ⌈1.25 × 5 / 3⌉ = ⌈2.083⌉ = 3: 2 < 3.
		{[3]int64{2, 1, 1}, 0},
		// m = 3 + 1 + 1 + 1 = 6, capacity ⌈2.5⌉ = 3: the first is full,
		// the second in hash order takes it.
		{[3]int64{3, 1, 1}, 1},
		// m = 3 + 3 + 0 + 1 = 7, capacity ⌈2.917⌉ = 3: both full.
		{[3]int64{3, 3, 0}, 2},
		// m = 9 + 3 + 3 + 1 = 16, capacity ⌈6.67⌉ = 7.
		{[3]int64{9, 3, 3}, 1},
	} {
		for i, o := range tc.out {
			ranked[i].out = o
		}
		if got := b.Pick(42, c); got != ranked[tc.want] {
			t.Errorf("outstanding %v: picked %s, want %s (rank %d)", tc.out, got.name, ranked[tc.want].name, tc.want)
		}
	}
	if got := boundedCapacity(1.2, 5, 6); got != 1 {
		t.Errorf("⌈1.2 × 5 / 6⌉ = %d, want 1 (exactly 1 in exact arithmetic)", got)
	}
	for _, f := range []float64{0.5, -1} {
		if _, err := New[key, *fakeReplica](NamePrefixBounded, Options{LoadFactor: f}); err == nil {
			t.Errorf("load factor %g accepted", f)
		}
	}
}

// TestPrefixBoundedHoldsTheBound places requests that never finish, with
// skewed keys, and checks that no replica's load exceeds ⌈c × m / n⌉ at
// any step, and that two routers over the same replicas pick alike while
// they see the same loads.
func TestPrefixBoundedHoldsTheBound(t *testing.T) {
	c := replicas("r0", "r1", "r2", "r3", "r4")
	b := &PrefixBounded[key, *fakeReplica]{LoadFactor: 1.25}
	other := &PrefixBounded[key, *fakeReplica]{LoadFactor: 1.25}
	for m := int64(1); m <= 400; m++ {
		k := key(m % 3) // three hot prefixes
		if m%7 == 0 {
			k = key(m) // and a tail of cold ones
		}
		got := b.Pick(k, c)
		if o := other.Pick(k, c); o != got {
			t.Fatalf("request %d: routers disagree (%s, %s) on equal loads", m, got.name, o.name)
		}
		got.out++
		limit := boundedCapacity(1.25, m, len(c))
		for _, r := range c {
			if r.out > limit {
				t.Fatalf("after %d requests %s holds %d > ⌈1.25 × %d / %d⌉ = %d", m, r.name, r.out, m, len(c), limit)
			}
		}
	}
}

func TestQueueCeiling(t *testing.T) {
	q := NewQueue[int](Limits{Concurrency: 4, MaxSize: 10})
	var admitted []int
	q.OnAdmit = func(v int) { admitted = append(admitted, v) }
	q.SetCeiling(0) // no slot granted yet
	if q.TryAdmit() {
		t.Fatal("admitted with a ceiling of 0")
	}
	now := time.Unix(0, 0)
	for i := range 3 {
		if _, err := q.Enqueue(now, 0, time.Time{}, false, i); err != nil {
			t.Fatal(err)
		}
	}
	q.SetCeiling(2) // two slots granted: two admitted
	if diff := cmp.Diff([]int{0, 1}, admitted); diff != "" {
		t.Fatalf("admitted at ceiling 2 (-want +got):\n%s", diff)
	}
	// A returned slot lowers the ceiling before the release: nobody new.
	q.SetCeiling(1)
	q.Release(2 * time.Second)
	if q.InFlight() != 1 || q.Depth() != 1 || len(admitted) != 2 {
		t.Fatalf("after a returned slot: in flight %d, depth %d, admitted %v", q.InFlight(), q.Depth(), admitted)
	}
	// The prediction divides by the slots held (1), not the limit (4):
	// rank 1 waits 2 × 2 s / 1.
	if w, ok := q.predictWait(1); !ok || w != 4*time.Second {
		t.Errorf("predicted wait %v, %v; want 4s", w, ok)
	}
	q.SetCeiling(-1) // lifted: the limit of 4 alone
	if diff := cmp.Diff([]int{0, 1, 2}, admitted); diff != "" || q.InFlight() != 2 {
		t.Errorf("ceiling lifted: admitted %v, in flight %d", admitted, q.InFlight())
	}
	if w, _ := q.predictWait(1); w != time.Second {
		t.Errorf("predicted wait without a ceiling %v, want 2 × 2 s / 4 = 1s", w)
	}
}
