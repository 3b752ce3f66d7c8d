package capacity

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// ErrNoArrivals marks a results folder whose records give no open-loop
// arrival times (a closed-loop run, or every request sent at one instant):
// a plan cannot take its demand from it.
var ErrNoArrivals = errors.New("no arrival times")

// Workload is the traffic a deployment must serve, at any rate: what is
// sent (Source) and the arrival pattern (Load), which At rescales.
type Workload struct {
	Source workload.Source
	// Load schedules the requests at the workload's own rate: an open-loop
	// rate, or fixed arrival instants (Load.Arrivals: a trace or a results
	// folder), which At stretches or compresses.
	Load workload.Load
	// Rate is the workload's own mean arrival rate in requests per second.
	Rate float64
	// IgnoreEOS sends every request with ignore_eos: answers run to
	// max_tokens (the default, as bench against the embedded engine).
	IgnoreEOS bool
	// DefaultWarmup warms every run up with a tenth of its requests (set
	// by NewWorkload when the load has no warm-up of its own).
	DefaultWarmup bool
	// Describe says what the workload is, for the output.
	Describe string
	// Closed says the workload is a closed loop (ClosedWorkload: a
	// measured closed-loop run replayed as one): its arrivals follow the
	// deployment's latencies, so At keeps the loop whatever the rate, and
	// no goodput is searched on it.
	Closed bool
	// Network is the one-way client transport every simulation of the
	// workload adds (simulate.Config.Network): a replayed run's measured
	// one, so that its closed loop resends as the run's client did.
	Network time.Duration
}

// ClosedWorkload is a closed-loop workload (Workload.Closed): load's
// workers each sending their next request as their answer ends, Network
// (the client's one-way transport) after it. Its Rate is the run's
// measured throughput, rate (requests per second).
func ClosedWorkload(src workload.Source, load workload.Load, rate float64, network time.Duration, ignoreEOS bool, describe string) (Workload, error) {
	w := Workload{Source: src, Load: load, IgnoreEOS: ignoreEOS, Describe: describe, Closed: true, Network: network, Rate: rate,
		DefaultWarmup: load.WarmupRequests == 0 && load.WarmupDuration == 0}
	switch {
	case src == nil:
		return w, field.Errorf("workload", "no workload")
	case load.Mode() != "closed":
		return w, field.Errorf("concurrency", "a closed-loop workload needs {concurrency}")
	case load.Requests == 0:
		return w, field.Errorf("requests", "a closed-loop replay needs {requests}")
	case !(rate > 0) || math.IsInf(rate, 0):
		return w, fmt.Errorf("closed-loop workload: throughput %v must be a positive number of requests per second", rate)
	}
	return w, load.Validate()
}

// NewWorkload checks that load is open-loop (a plan scales arrival rates)
// and measures its own rate: load.Rate, or for fixed arrivals the number
// of requests over their span.
func NewWorkload(src workload.Source, load workload.Load, ignoreEOS bool, describe string) (Workload, error) {
	w := Workload{Source: src, Load: load, IgnoreEOS: ignoreEOS, Describe: describe,
		DefaultWarmup: load.WarmupRequests == 0 && load.WarmupDuration == 0}
	if src == nil {
		return w, field.Errorf("workload", "no workload")
	}
	if err := load.Validate(); err != nil {
		return w, err
	}
	if load.Mode() != "open" {
		return w, field.Errorf("concurrency", "a plan needs open-loop arrivals to scale ({rate}, {trace} or a results folder), not a closed loop of {concurrency}")
	}
	if load.Concurrency > 0 {
		return w, field.Errorf("concurrency", "a cap on requests in flight would hide the deployment's own queue; leave {concurrency} out of a plan")
	}
	if load.Duration > 0 && load.Requests == 0 {
		return w, field.Errorf("duration", "a plan compares rates on the same requests: give {requests} rather than {duration}")
	}
	if load.Arrivals == nil {
		w.Rate = load.Rate
		return w, nil
	}
	n := load.Requests + load.WarmupRequests
	a := load.Arrivals()
	var first, last time.Duration
	count := 0
	for count < n || n == 0 {
		at, ok := a.Next()
		if !ok {
			break
		}
		if count == 0 {
			first = at
		}
		last = at
		count++
	}
	if count < 2 || last <= first {
		return w, fmt.Errorf("%w: the workload's %d requests all arrive at one instant", ErrNoArrivals, count)
	}
	w.Rate = float64(count-1) / (last - first).Seconds()
	return w, nil
}

// At is the workload at rate requests per second: the open loop's rate
// set, or the fixed arrival instants scaled by Rate/rate; a closed loop
// as it is.
func (w Workload) At(rate float64) (workload.Source, workload.Load) {
	l := w.Load
	if w.Closed {
		return w.Source, l
	}
	if l.Arrivals == nil {
		l.Rate = rate
		return w.Source, l
	}
	inner, f := l.Arrivals, w.Rate/rate
	l.Arrivals = func() workload.Arrivals { return &scaled{a: inner(), f: f} }
	return w.Source, l
}

// scaled multiplies every arrival offset by f.
type scaled struct {
	a workload.Arrivals
	f float64
}

func (s *scaled) Next() (time.Duration, bool) {
	at, ok := s.a.Next()
	return time.Duration(math.Round(float64(at) * s.f)), ok
}

// FromResults reads a results folder (simulate.LikeRun over
// results.ReadRun, the one reader of a run's workload) into a workload
// that replays it: each successful request at its intended instant, with
// its served input length and its output length as max_tokens, answers
// running to it, sharing the prefixes its records show, the run's warm-up
// as the warm-up. A closed-loop run, or records whose arrivals all
// coincide, is an error wrapping ErrNoArrivals; a folder that cannot be
// read wraps results.ErrBadInput.
func FromResults(dir string, chat bool, seed uint64) (Workload, error) {
	lk, err := simulate.LikeRun(dir, chat, seed)
	switch {
	case errors.Is(err, simulate.ErrNoArrivals):
		return Workload{}, fmt.Errorf("%w: %v; plan needs their arrival times", ErrNoArrivals, err)
	case err != nil:
		return Workload{}, err
	case lk.Closed:
		return Workload{}, fmt.Errorf("%w: %s is a closed-loop run (its requests were sent as earlier ones ended, so their times follow that server, not a demand); plan needs an open-loop run or a trace", ErrNoArrivals, dir)
	}
	desc := fmt.Sprintf("%s: %d requests replayed at their arrival times", dir, lk.Source.Len())
	return NewWorkload(lk.Source, lk.Load, true, desc)
}

// lengths are a workload's request lengths, as the roofline bounds need
// them: for each request its input tokens, max_tokens and the input tokens
// a prefix cache could hold from earlier requests (a shared prefix of the
// first turn, the history of a later one).
type lengths struct {
	in, out, cacheable []int
}

// sampleLengths draws the lengths of the workload's first n requests.
func (w Workload) sampleLengths(n int) lengths {
	var l lengths
	if ls, ok := w.Source.(workload.LengthSource); ok {
		sp, _ := ls.(workload.SharedPrefixSource)
		for i := range int64(n) {
			in, out := ls.Lengths(i)
			cacheable := 0
			if sp != nil {
				cacheable = sp.SharedPrefixTokens(i)
			}
			l.add(in, out, cacheable)
		}
		return l
	}
	prefix := 0
	if s, ok := unwrapSynthetic(w.Source); ok {
		prefix = s.PrefixTokens
		if s.Turns <= 1 { // drawn without building prompts
			sl := synthLengths{s}
			for i := range int64(n) {
				in, out := sl.Lengths(i)
				l.add(in, out, min(prefix, in))
			}
			return l
		}
	}
	for i := int64(0); len(l.in) < n; i++ {
		sess := w.Source.Session(i)
		prevIn, prevOut := 0, 0
		for turn := 1; len(l.in) < n; turn++ {
			req, ok := sess.Next(prevOut)
			if !ok {
				break
			}
			cacheable := min(prefix, req.InputTokens)
			if turn > 1 {
				cacheable = min(prevIn+prevOut, req.InputTokens)
			}
			l.add(req.InputTokens, req.MaxTokens, cacheable)
			prevIn, prevOut = req.InputTokens, req.MaxTokens
		}
		if i > int64(n)*64 { // sessions that send nothing
			break
		}
	}
	return l
}

func (l *lengths) add(in, out, cacheable int) {
	l.in = append(l.in, max(in, 1))
	l.out = append(l.out, max(out, 1))
	l.cacheable = append(l.cacheable, max(cacheable, 0))
}

// capped is the lengths with every max_tokens capped (0: no cap).
func (l lengths) capped(maxMaxTokens int) lengths {
	if maxMaxTokens <= 0 {
		return l
	}
	out := slices.Clone(l.out)
	for i := range out {
		out[i] = min(out[i], maxMaxTokens)
	}
	l.out = out
	return l
}

func (l lengths) maxOut() int {
	if len(l.out) == 0 {
		return 0
	}
	return slices.Max(l.out)
}

func mean(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += float64(x)
	}
	return s / float64(len(xs))
}
