package workload

import (
	"math"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
)

// Load is how one phase of a run schedules requests.
type Load struct {
	// Rate is the open-loop arrival rate in requests per second; 0 runs a
	// closed loop of Concurrency workers.
	Rate       float64
	Arrival    Process
	Burstiness float64
	// Concurrency is the number of closed-loop workers, or with Rate the
	// cap on requests in flight (0: no cap).
	Concurrency int
	// Requests bounds the measured requests, Duration the measured span
	// (from the end of the warm-up); at least one of them is set.
	Requests int
	Duration time.Duration
	// Warm-up requests are sent first and marked Warmup (excluded from
	// results): the first WarmupRequests, or those meant to be sent before
	// WarmupDuration.
	WarmupRequests int
	WarmupDuration time.Duration
	// RampUp staggers a closed loop's start: worker k of Concurrency sends
	// its first request k × RampUp / Concurrency after the phase starts,
	// so the first wave reaches the server in worker order (0: all at
	// once, in whatever order the client and the network deliver them).
	RampUp time.Duration
	// RampFirstToken starts a closed loop's workers one after another:
	// worker k+1 sends its first request when worker k's first answer
	// brings its first token (or ends without one). Each then reaches the
	// server just after a step ended, as a closed loop's next request
	// does, whatever the client's and the network's delays.
	RampFirstToken bool
	// Arrivals, when set, replaces the Rate process (trace replay).
	Arrivals func() Arrivals
	Seed     uint64
	// Shard, when set, is the share of the workload this generator sends
	// (Shard.Split sets it with the shard's budgets).
	Shard Shard
}

// Defaults of a load when neither is given.
const (
	DefaultRate     = 10
	DefaultRequests = 100
)

// Start is the offset from the phase's start at which closed-loop worker
// w (of Concurrency) sends its first request.
func (l Load) Start(w int) time.Duration {
	if l.RampUp <= 0 || l.Concurrency <= 0 {
		return 0
	}
	return time.Duration(int64(l.RampUp) * int64(w) / int64(l.Concurrency))
}

// RampName is the load's ramp-up as the ramp_up setting spells it: "",
// RampFirstToken or the span.
func (l Load) RampName() string {
	switch {
	case l.RampFirstToken:
		return RampFirstToken
	case l.RampUp > 0:
		return l.RampUp.String()
	}
	return ""
}

// Mode is "open" or "closed".
func (l Load) Mode() string {
	if l.Rate > 0 || l.Arrivals != nil {
		return "open"
	}
	return "closed"
}

// Expected is how many requests the load sends, warm-up included, when
// that is known before it runs: its Requests (capped by what Rate sends in
// Duration when both are set), or Rate × Duration. ok is false for a closed
// loop bounded by time alone, or a trace (its file bounds it).
func (l Load) Expected() (n float64, ok bool) {
	byRate := math.Inf(1)
	if l.Rate > 0 && l.Duration > 0 {
		byRate = l.Rate * (l.Duration + l.WarmupDuration).Seconds()
	}
	switch {
	case l.Arrivals != nil:
		return 0, false
	case l.Requests > 0:
		return math.Min(float64(l.Requests+l.WarmupRequests), byRate), true
	case !math.IsInf(byRate, 1):
		return byRate, true
	}
	return 0, false
}

// Validate checks a load; a bad one gives a *field.Error named as Options
// names the setting.
func (l Load) Validate() error {
	switch {
	case l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return field.Invalid("rate", l.Rate, "must be a positive number of requests per second")
	case l.Concurrency < 0:
		return field.Invalid("concurrency", l.Concurrency, "must be positive")
	case l.Rate == 0 && l.Arrivals == nil && l.Concurrency == 0:
		return field.Errorf("rate", "give a {rate} (open loop), a {concurrency} (closed loop), or both")
	case l.Requests < 0:
		return field.Invalid("requests", l.Requests, "must be positive")
	case l.Duration < 0:
		return field.Invalid("duration", l.Duration, "must be positive")
	case l.Requests == 0 && l.Duration == 0 && l.Arrivals == nil:
		return field.Errorf("requests", "give {requests} or {duration}")
	case l.WarmupRequests < 0 || l.WarmupDuration < 0:
		return field.Errorf("warmup", "must not be negative")
	case l.RampUp < 0:
		return field.Invalid("ramp_up", l.RampUp, "must not be negative")
	case (l.RampUp > 0 || l.RampFirstToken) && l.Mode() == "open":
		return field.Errorf("ramp_up", "staggers a closed loop's workers; an open loop's arrivals set its start (leave out {rate} or {ramp_up})")
	case l.Shard.Validate() != nil:
		return field.Wrap("shard", l.Shard.Validate())
	}
	return nil
}
