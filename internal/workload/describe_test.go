package workload

import (
	"testing"
	"time"
)

// TestLoadDescribe words each schedule as a run's log line prints it.
func TestLoadDescribe(t *testing.T) {
	for _, tt := range []struct {
		l    Load
		want string
	}{
		{Load{Rate: 20, Arrival: Poisson, Requests: 100}, "20 req/s poisson, 100 requests"},
		{Load{Rate: 5, Arrival: Gamma, Concurrency: 8, Duration: 2 * time.Minute}, "5 req/s gamma, at most 8 in flight, for 2m0s"},
		{Load{Concurrency: 64, Requests: 2000}, "64 concurrent, 2000 requests"},
		{Load{Arrivals: func() Arrivals { return nil }, Requests: 2}, "trace replay, 2 requests"},
		{Load{Rate: 200, Arrival: Poisson, Duration: 5 * time.Minute, Shard: Shard{Index: 2, Count: 4}},
			"200 req/s poisson, for 5m0s, shard 2/4 of the workload (its share of the above)"},
	} {
		if got := tt.l.Describe(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.l, got, tt.want)
		}
	}
}
