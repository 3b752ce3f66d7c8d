package workload

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseShard(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Shard
		bad  bool
	}{
		{"", Shard{}, false},
		{"0/4", Shard{0, 4}, false},
		{" 3 / 4 ", Shard{3, 4}, false},
		{"0/1", Shard{0, 1}, false},
		{"4/4", Shard{}, true},
		{"-1/4", Shard{}, true},
		{"1/0", Shard{}, true},
		{"1", Shard{}, true},
		{"a/b", Shard{}, true},
	} {
		got, err := ParseShard(tt.in)
		if (err != nil) != tt.bad || (!tt.bad && got != tt.want) {
			t.Errorf("ParseShard(%q) = %v, %v", tt.in, got, err)
		}
	}
}

// TestShareDealsRoundRobin: hand-computed shares of 10 over 4 shards
// (10 = 4·2 + 2: the first two shards take 3), and the shares of any n add
// up to n with each shard owning exactly its share of [0, n).
func TestShareDealsRoundRobin(t *testing.T) {
	var got []int
	for i := range 4 {
		got = append(got, Shard{i, 4}.Share(10))
	}
	if diff := cmp.Diff([]int{3, 3, 2, 2}, got); diff != "" {
		t.Errorf("shares of 10 (-want +got):\n%s", diff)
	}
	for n := range 50 {
		for count := 1; count <= 7; count++ {
			sum := 0
			for i := range count {
				s := Shard{i, count}
				owned := 0
				for k := range int64(n) {
					if s.Owns(k) {
						owned++
					}
				}
				if owned != s.Share(n) {
					t.Fatalf("%v owns %d of [0,%d), Share says %d", s, owned, n, s.Share(n))
				}
				sum += s.Share(n)
			}
			if sum != n {
				t.Fatalf("shares of %d over %d shards add up to %d", n, count, sum)
			}
		}
	}
}

// TestSplitLoad: a closed loop of 10 workers and 2 warm-up + 9 measured
// requests over 4 shards. The workload's requests 0–1 are warm-up and 2–10
// measured; shard 1 holds requests 1, 5, 9: one warm-up, two measured.
func TestSplitLoad(t *testing.T) {
	l := Load{Concurrency: 10, Requests: 9, WarmupRequests: 2, Rate: 5, Seed: 7}
	var conc, req, warm []int
	for i := range 4 {
		s, err := Shard{i, 4}.Split(l)
		if err != nil {
			t.Fatal(err)
		}
		if s.Rate != 5 || s.Seed != 7 || s.Shard != (Shard{i, 4}) {
			t.Errorf("shard %d: %+v", i, s)
		}
		conc, req, warm = append(conc, s.Concurrency), append(req, s.Requests), append(warm, s.WarmupRequests)
	}
	want := [][]int{{3, 3, 2, 2}, {2, 2, 3, 2}, {1, 1, 0, 0}}
	if diff := cmp.Diff(want, [][]int{conc, req, warm}); diff != "" {
		t.Errorf("concurrency, requests, warm-up (-want +got):\n%s", diff)
	}
	if _, err := (Shard{0, 4}).Split(Load{Concurrency: 3, Requests: 100}); err == nil {
		t.Error("3 workers split over 4 shards")
	}
	if _, err := (Shard{0, 4}).Split(Load{Rate: 1, Requests: 3}); err == nil {
		t.Error("3 requests split over 4 shards")
	}
	if got, _ := (Shard{}).Split(l); !cmp.Equal(got, l, cmp.Comparer(func(a, b func() Arrivals) bool { return true })) {
		t.Errorf("the whole workload changed: %+v", got)
	}
}
