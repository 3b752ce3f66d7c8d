package serve

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
)

// FaultHeader is the request header that forces faults on one request
// (docs/serve.md): a comma-separated list of 429, 500, 503, 400,
// slow-first-token[=DURATION], stall[=DURATION], reset, or none (no
// random fault for this request).
const FaultHeader = "X-TokenTrace-Fault"

// Faults configures fault injection. Rates are per-request probabilities
// in [0, 1]; each request's draws come from a generator seeded with Seed
// and the request's key (its X-Request-Id when the client sent one, its
// arrival number otherwise), so a run that sends the same ids gets the same
// faults whatever the timing.
type Faults struct {
	Seed uint64
	// Error responses before the request reaches the engine. Their rates
	// must sum to at most 1.
	Rate429           float64
	Rate500           float64
	Rate503           float64
	RateContextLength float64
	// SlowFirstTokenRate of the requests wait SlowFirstTokenDelay before
	// their first token is written (tokens produced meanwhile are sent
	// together after it).
	SlowFirstTokenRate  float64
	SlowFirstTokenDelay time.Duration
	// StallRate of the requests pause StallDuration once, at a token
	// position drawn uniformly in [1, max_tokens).
	StallRate     float64
	StallDuration time.Duration
	// ResetRate of the requests have their connection reset (TCP RST) at a
	// token position drawn uniformly in [1, max_tokens), or before the last
	// chunk if the output ends sooner.
	ResetRate float64
}

// Default fault durations, used when a rate is set without one and by the
// fault header's bare forms.
const (
	DefaultSlowFirstTokenDelay = 2 * time.Second
	DefaultStallDuration       = time.Second
)

func (f Faults) withDefaults() Faults {
	if f.SlowFirstTokenDelay == 0 {
		f.SlowFirstTokenDelay = DefaultSlowFirstTokenDelay
	}
	if f.StallDuration == 0 {
		f.StallDuration = DefaultStallDuration
	}
	return f
}

func (f Faults) validate() error {
	rates := []struct {
		name string
		v    float64
	}{
		{"fault_429_rate", f.Rate429}, {"fault_500_rate", f.Rate500}, {"fault_503_rate", f.Rate503},
		{"fault_400_rate", f.RateContextLength}, {"fault_slow_first_token_rate", f.SlowFirstTokenRate},
		{"fault_stall_rate", f.StallRate}, {"fault_reset_rate", f.ResetRate},
	}
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) {
			return field.Invalid(r.name, r.v, "must be in [0, 1]")
		}
	}
	if s := f.Rate429 + f.Rate500 + f.Rate503 + f.RateContextLength; s > 1+1e-9 {
		return field.Errorf("fault_429_rate", "the error rates ({fault_429_rate}, {fault_500_rate}, {fault_503_rate}, {fault_400_rate}) sum to %g, more than 1", s)
	}
	if f.SlowFirstTokenDelay < 0 {
		return field.Invalid("fault_slow_first_token_delay", f.SlowFirstTokenDelay, "must not be negative")
	}
	if f.StallDuration < 0 {
		return field.Invalid("fault_stall_duration", f.StallDuration, "must not be negative")
	}
	return nil
}

// faultPlan is what happens to one request.
type faultPlan struct {
	status         int           // injected error status (0: none); 400 is a context-length error
	slowFirstToken time.Duration // delay before the first token is written
	stall          time.Duration // one pause ...
	stallAt        int           // ... once this many tokens were written
	resetAt        int           // reset once this many tokens were written (0: no reset)
}

// plan draws the faults of the request with the given key; maxTokens
// places the mid-stream faults. header is the FaultHeader value, which
// overrides the draws.
func (f Faults) plan(key string, maxTokens int, header string) (faultPlan, error) {
	var p faultPlan
	if header == "" && f.Rate429+f.Rate500+f.Rate503+f.RateContextLength+f.SlowFirstTokenRate+f.StallRate+f.ResetRate == 0 {
		return p, nil // no fault to draw: the plan every draw would give
	}
	rng := rand.New(rand.NewPCG(f.Seed, idSeed(key)))
	pos := func() int {
		if maxTokens <= 1 {
			return 1
		}
		return 1 + rng.IntN(maxTokens-1)
	}
	if header != "" {
		return parseFaultHeader(header, f, pos)
	}
	// Every draw is made whatever the outcome, so one fault's rate does
	// not shift another's draws.
	uErr, uSlow, uStall, uReset := rng.Float64(), rng.Float64(), rng.Float64(), rng.Float64()
	stallAt, resetAt := pos(), pos()
	switch c := f.Rate429; {
	case uErr < c:
		p.status = http.StatusTooManyRequests
	case uErr < c+f.Rate500:
		p.status = http.StatusInternalServerError
	case uErr < c+f.Rate500+f.Rate503:
		p.status = http.StatusServiceUnavailable
	case uErr < c+f.Rate500+f.Rate503+f.RateContextLength:
		p.status = http.StatusBadRequest
	}
	if uSlow < f.SlowFirstTokenRate {
		p.slowFirstToken = f.SlowFirstTokenDelay
	}
	if uStall < f.StallRate {
		p.stall, p.stallAt = f.StallDuration, stallAt
	}
	if uReset < f.ResetRate {
		p.resetAt = resetAt
	}
	return p, nil
}

func parseFaultHeader(v string, f Faults, pos func() int) (faultPlan, error) {
	var p faultPlan
	for _, item := range strings.Split(v, ",") {
		name, arg, hasArg := strings.Cut(strings.TrimSpace(item), "=")
		dur := func(def time.Duration) (time.Duration, error) {
			if !hasArg {
				return def, nil
			}
			d, err := time.ParseDuration(arg)
			if err != nil || d < 0 || d > 10*time.Minute {
				return 0, fmt.Errorf("%s: %q is not a duration between 0 and 10m", FaultHeader, arg)
			}
			return d, nil
		}
		var err error
		switch name {
		case "none", "":
		case "429":
			p.status = http.StatusTooManyRequests
		case "500":
			p.status = http.StatusInternalServerError
		case "503":
			p.status = http.StatusServiceUnavailable
		case "400":
			p.status = http.StatusBadRequest
		case "slow-first-token":
			p.slowFirstToken, err = dur(f.SlowFirstTokenDelay)
		case "stall":
			p.stall, err = dur(f.StallDuration)
			p.stallAt = pos()
		case "reset":
			p.resetAt = pos()
		default:
			return p, fmt.Errorf("%s: unknown fault %q (want 429, 500, 503, 400, slow-first-token[=DUR], stall[=DUR], reset or none)", FaultHeader, name)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}
