package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// SimEpoch is the virtual instant at offset 0 of a simulation: Timelines
// from Simulate are SimEpoch plus the virtual offset.
var SimEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Arrival is one request of a simulation, arriving At after the start.
type Arrival struct {
	At      time.Duration
	Request Request
	// AbortAt, when positive, aborts the request at the first step that
	// starts at or after that offset (a client that gives up).
	AbortAt time.Duration
}

// SimOptions selects what Simulate records besides the timelines.
type SimOptions struct {
	// Steps records one StepRecord per engine step.
	Steps bool
	// Emissions records, per request, every emission (instant and tokens).
	Emissions bool
	// Chunks records, per request, every step that computed its prompt.
	Chunks bool
}

// Chunk is one step's prompt work for one request: the step's start and end
// offsets and the tokens computed (a prefill chunk, or a recomputation after
// preemption).
type Chunk struct {
	Start, End time.Duration
	Tokens     int
}

// Emission is one step's tokens for one request, at a virtual offset.
type Emission struct {
	At     time.Duration
	Tokens int
}

// StepRecord describes one simulated step.
type StepRecord struct {
	Start, Duration time.Duration
	// Seqs is the number of sequences computed; PrefillTokens and
	// DecodeSeqs split them into prompt work and decodes.
	Seqs, PrefillTokens, DecodeSeqs int
	// Running and Waiting are the queue lengths after scheduling;
	// UsedBlocks the KV blocks held after scheduling.
	Running, Waiting, UsedBlocks int
	// Preempted counts preemptions made while scheduling this step.
	Preempted int
}

// SimResult is what Simulate observed.
type SimResult struct {
	// Timelines holds one timeline per arrival, in the order given.
	Timelines []Timeline
	// Emissions (when recorded) holds each arrival's emissions.
	Emissions [][]Emission
	// Chunks (when recorded) holds each arrival's prefill chunks.
	Chunks [][]Chunk
	// Steps (when recorded) holds every step.
	Steps []StepRecord
	// End is the virtual offset at which the last request finished.
	End time.Duration
	// Stats are the engine counters at the end (Running and Waiting 0).
	Stats Stats
}

// Offset returns t as a virtual offset from SimEpoch.
func Offset(t time.Time) time.Duration { return t.Sub(SimEpoch) }

// Simulate runs the engine in virtual time over arrivals and returns every
// request's timeline. It never sleeps; the same cfg (Seed included) and
// arrivals give the same result, token for token and step for step. A
// request that fails validation makes Simulate return an error naming it.
// MaxWaiting does not apply: every arrival is queued (Virtual.Submit
// enforces it for callers that can handle a rejection).
func Simulate(cfg Config, arrivals []Arrival, opts SimOptions) (*SimResult, error) {
	cfg = cfg.WithDefaults()
	cfg.MaxWaiting = 0
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkArrivals(cfg, arrivals); err != nil {
		return nil, err
	}
	order, aborts := simOrder(arrivals)
	v, err := NewVirtual(cfg)
	if err != nil {
		return nil, err
	}
	res := &SimResult{Timelines: make([]Timeline, len(arrivals))}
	if opts.Emissions {
		res.Emissions = make([][]Emission, len(arrivals))
	}
	if opts.Chunks {
		res.Chunks = make([][]Chunk, len(arrivals))
	}
	var handles []Handle
	if len(aborts) > 0 {
		handles = make([]Handle, len(arrivals))
	}
	var (
		now    time.Duration
		next   int // into order
		nextAb int // into aborts
	)
	for {
		for next < len(order) && arrivals[order[next]].At <= now {
			i := order[next]
			next++
			h, err := v.Submit(arrivals[i].At, i, &arrivals[i].Request)
			if err != nil {
				return nil, fmt.Errorf("arrival %d (%q): %w", i, arrivals[i].Request.ID, err)
			}
			if handles != nil {
				handles[i] = h
			}
		}
		for nextAb < len(aborts) && arrivals[aborts[nextAb]].AbortAt <= now {
			i := aborts[nextAb]
			nextAb++
			if handles[i].r == nil {
				continue // not arrived (cannot happen: AbortAt >= At)
			}
			if tl, ok := v.Abort(handles[i], now); ok {
				res.Timelines[i] = tl
			}
		}
		end, ok := v.Start(now)
		if !ok {
			if next == len(order) {
				if v.Live() > 0 {
					return nil, errors.New("engine: simulation stalled with requests left (a scheduler bug)")
				}
				break
			}
			now = arrivals[order[next]].At
			continue
		}
		res.recordStep(v, opts, now, end)
		now = end
	}
	for i := range res.Timelines {
		if t := res.Timelines[i].Finished; !t.IsZero() && Offset(t) > res.End {
			res.End = Offset(t)
		}
	}
	res.Stats = v.Stats()
	res.Stats.Running, res.Stats.Waiting = 0, 0
	return res, nil
}

// checkArrivals refuses arrivals before 0, aborts before their arrival
// and requests the engine would not take.
func checkArrivals(cfg Config, arrivals []Arrival) error {
	for i := range arrivals {
		a := &arrivals[i]
		if a.At < 0 {
			return fmt.Errorf("arrival %d (%q): negative arrival offset %v", i, a.Request.ID, a.At)
		}
		if a.AbortAt > 0 && a.AbortAt < a.At {
			return fmt.Errorf("arrival %d (%q): abort at %v is before its arrival at %v", i, a.Request.ID, a.AbortAt, a.At)
		}
		if err := validate(&a.Request, cfg); err != nil {
			return fmt.Errorf("arrival %d (%q): %w", i, a.Request.ID, err)
		}
	}
	return nil
}

// simOrder returns the arrivals' indices by arrival offset (stable), and
// those with an abort by abort offset.
func simOrder(arrivals []Arrival) (order, aborts []int) {
	order = make([]int, len(arrivals))
	for i := range order {
		order[i] = i
	}
	if !slices.IsSortedFunc(arrivals, func(a, b Arrival) int { return cmpDur(a.At, b.At) }) {
		slices.SortStableFunc(order, func(i, j int) int { return cmpDur(arrivals[i].At, arrivals[j].At) })
	}
	for i := range arrivals {
		if arrivals[i].AbortAt > 0 {
			aborts = append(aborts, i)
		}
	}
	slices.SortStableFunc(aborts, func(i, j int) int { return cmpDur(arrivals[i].AbortAt, arrivals[j].AbortAt) })
	return order, aborts
}

// recordStep keeps what opts asks of the step that ran from now to end,
// and the timelines of the requests it finished.
func (res *SimResult) recordStep(v *Virtual, opts SimOptions, now, end time.Duration) {
	if opts.Steps {
		res.Steps = append(res.Steps, v.LastStep())
	}
	if opts.Chunks {
		v.EachPrefill(func(id, n int) {
			res.Chunks[id] = append(res.Chunks[id], Chunk{Start: now, End: end, Tokens: n})
		})
	}
	outs := v.Finish()
	for i := range outs {
		o := &outs[i]
		if opts.Emissions {
			res.Emissions[o.ID()] = append(res.Emissions[o.ID()], Emission{At: end, Tokens: o.Tokens})
		}
		if o.Finish != "" {
			res.Timelines[o.ID()] = o.Timeline()
		}
	}
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// timeline converts r's instants (offsets from epoch) to a Timeline.
func (r *request) timeline(epoch time.Time) Timeline {
	at := func(i int64) time.Time {
		if i < 0 {
			return time.Time{}
		}
		return epoch.Add(time.Duration(i))
	}
	tl := Timeline{
		Arrival:         at(r.arrival),
		Scheduled:       at(r.scheduled),
		FirstToken:      at(r.firstTok),
		FirstAnswer:     at(r.firstAnswer),
		Finished:        at(r.finish),
		PromptTokens:    r.promptLen,
		CachedTokens:    r.cachedTokens,
		OutputTokens:    r.output,
		ReasoningTokens: min(r.reasoning, r.output),
		PrefillChunks:   r.chunks,
		Preemptions:     r.preemptions,
		Finish:          r.reason,
	}
	if r.xferStart >= 0 {
		tl.KVTransferStart, tl.KVTransferEnd, tl.KVTransferTokens = at(r.xferStart), at(r.xferEnd), r.xferTokens
	}
	return tl
}
