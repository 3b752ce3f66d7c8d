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
func Simulate(cfg Config, arrivals []Arrival, opts SimOptions) (*SimResult, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for i := range arrivals {
		a := &arrivals[i]
		if a.At < 0 {
			return nil, fmt.Errorf("arrival %d (%q): negative arrival offset %v", i, a.Request.ID, a.At)
		}
		if a.AbortAt > 0 && a.AbortAt < a.At {
			return nil, fmt.Errorf("arrival %d (%q): abort at %v is before its arrival at %v", i, a.Request.ID, a.AbortAt, a.At)
		}
		if err := validate(&a.Request, cfg); err != nil {
			return nil, fmt.Errorf("arrival %d (%q): %w", i, a.Request.ID, err)
		}
	}
	order := make([]int, len(arrivals))
	for i := range order {
		order[i] = i
	}
	if !slices.IsSortedFunc(arrivals, func(a, b Arrival) int { return cmpDur(a.At, b.At) }) {
		slices.SortStableFunc(order, func(i, j int) int { return cmpDur(arrivals[i].At, arrivals[j].At) })
	}
	var aborts []int // arrival indices with AbortAt, by AbortAt
	for i := range arrivals {
		if arrivals[i].AbortAt > 0 {
			aborts = append(aborts, i)
		}
	}
	slices.SortStableFunc(aborts, func(i, j int) int { return cmpDur(arrivals[i].AbortAt, arrivals[j].AbortAt) })

	s := newScheduler(cfg)
	reqs := make([]request, len(arrivals))
	res := &SimResult{Timelines: make([]Timeline, len(arrivals))}
	if opts.Emissions {
		res.Emissions = make([][]Emission, len(arrivals))
	}
	if opts.Chunks {
		res.Chunks = make([][]Chunk, len(arrivals))
	}
	var (
		now      int64
		next     int // into order
		nextAb   int // into aborts
		live     int
		finished bool
	)
	for {
		for next < len(order) && int64(arrivals[order[next]].At) <= now {
			i := order[next]
			next++
			r := &reqs[i]
			s.initRequest(r, &arrivals[i].Request, int64(arrivals[i].At))
			r.idx = i
			s.add(r)
			live++
		}
		for nextAb < len(aborts) && int64(arrivals[aborts[nextAb]].AbortAt) <= now {
			r := &reqs[aborts[nextAb]]
			nextAb++
			if r.state != stNew && s.abort(r, now) {
				live--
				finished = true
			}
		}
		if finished {
			s.compactRunning()
			finished = false
		}
		dur, ok := s.schedule(now)
		if !ok {
			if next == len(order) {
				if live > 0 {
					return nil, errors.New("engine: simulation stalled with requests left (a scheduler bug)")
				}
				break
			}
			now = int64(arrivals[order[next]].At)
			continue
		}
		if opts.Steps {
			rec := StepRecord{Start: time.Duration(now), Duration: dur, Seqs: len(s.plan),
				Running: len(s.running), Waiting: s.numWaiting(), UsedBlocks: s.kv.used(), Preempted: s.nPreempt}
			for _, p := range s.plan {
				if p.decode {
					rec.DecodeSeqs++
				} else {
					rec.PrefillTokens += p.n
				}
			}
			res.Steps = append(res.Steps, rec)
		}
		end := now + int64(dur)
		if opts.Chunks {
			for _, p := range s.plan {
				if !p.decode {
					res.Chunks[p.r.idx] = append(res.Chunks[p.r.idx], Chunk{Start: time.Duration(now), End: time.Duration(end), Tokens: p.n})
				}
			}
		}
		s.complete(end)
		for _, m := range s.emits {
			if opts.Emissions {
				res.Emissions[m.r.idx] = append(res.Emissions[m.r.idx], Emission{At: time.Duration(end), Tokens: m.n})
			}
			if m.finish != "" {
				live--
			}
		}
		now = end
	}
	for i := range reqs {
		r := &reqs[i]
		res.Timelines[i] = r.timeline(SimEpoch)
		if t := time.Duration(r.finish); r.finish >= 0 && t > res.End {
			res.End = t
		}
	}
	res.Stats = Stats{
		PrefixQueries:    s.prefixQueries,
		PrefixHits:       s.prefixHits,
		Preemptions:      s.preemptions,
		NumBlocks:        cfg.NumBlocks,
		BlockSize:        cfg.BlockSize,
		Steps:            s.steps,
		PromptTokens:     s.promptTokens,
		GenerationTokens: s.genTokens,
		KVUsage:          float64(s.kv.used()) / float64(cfg.NumBlocks),
	}
	return res, nil
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
	return Timeline{
		Arrival:       at(r.arrival),
		Scheduled:     at(r.scheduled),
		FirstToken:    at(r.firstTok),
		Finished:      at(r.finish),
		PromptTokens:  r.promptLen,
		CachedTokens:  r.cachedTokens,
		OutputTokens:  r.output,
		PrefillChunks: r.chunks,
		Preemptions:   r.preemptions,
		Finish:        r.reason,
	}
}
