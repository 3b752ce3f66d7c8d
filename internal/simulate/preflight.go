package simulate

import (
	"fmt"
	"math"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Bounds of one simulation (docs/operate.md), checked before anything is
// built; Config.Force (--force) lifts them.
const (
	// MaxRequests bounds the requests one run sends: each is held as a
	// record, about recordBytes of memory, until the run is written.
	MaxRequests = 2_000_000
	// MaxReplicas bounds the engine replicas: each holds its own KV cache
	// block tables and queues.
	MaxReplicas = 4096
	// recordBytes is what one request costs a run in memory, roughly
	// (its record and its share of the summaries).
	recordBytes = 2 << 10
)

// Preflight estimates what a run of replicas under load would hold and
// refuses one over the bounds, naming the flags, the estimate and the
// bound: requests (rate × duration, or requests) over MaxRequests,
// replicas over MaxReplicas.
func Preflight(replicas int, l workload.Load) error {
	if replicas > MaxReplicas {
		return field.Invalid("replicas", replicas, "over the %d replicas one simulation holds; pass {force} to run it anyway", MaxReplicas)
	}
	n, ok := l.Expected()
	if !ok || n <= MaxRequests {
		return nil
	}
	gib := n * recordBytes / (1 << 30)
	if l.Requests > 0 && float64(l.Requests+l.WarmupRequests) <= n {
		return field.Invalid("requests", l.Requests, "%s requests is over the %d one simulation holds (about %s GiB of records); lower it, or pass {force}",
			count(n), MaxRequests, count(gib))
	}
	return field.Invalid("rate", l.Rate, "over {duration} %v makes %s requests, over the %d one simulation holds (about %s GiB of records); lower them, or pass {force}",
		l.Duration+l.WarmupDuration, count(n), MaxRequests, count(gib))
}

// count writes a large count readably.
func count(v float64) string {
	if v >= 1e6 || math.IsInf(v, 0) {
		return fmt.Sprintf("%.3g", v)
	}
	return fmt.Sprintf("%.0f", v)
}
