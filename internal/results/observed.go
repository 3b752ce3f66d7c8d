package results

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// ErrBadInput marks a results folder whose requests cannot be replayed or
// calibrated from (no records, or records without lengths or timestamps);
// the command line maps it to exit status 2.
var ErrBadInput = errors.New("bad calibration input")

// Observed is one measured request, reduced to what calibration compares:
// when the server received it (offset from the first arrival), its lengths,
// and its measured TTFT and E2E.
type Observed struct {
	ID            string
	Arrival       time.Duration
	Input, Output int
	TTFT, E2E     time.Duration
	// Queue is the server's queueing part of TTFT (ServerSide only).
	Queue time.Duration
	// ServerSide is true when the times are the server's own split
	// (Server-Timing or vLLM's metrics), free of the client's overhead.
	ServerSide bool
	// Scheduled is when the server first scheduled the request, on the
	// server's own clock (offset from the workload's first arrival), when
	// Anchored: then Arrival is Scheduled − Queue on that clock too, and
	// both are exact, where the client's instants carry the network's and
	// the client's jitter.
	Scheduled time.Duration
	Anchored  bool
	// Blocks are the prompt's leading blocks of BlockTokens tokens each:
	// what the request shared with others (ReadRun settles them).
	Blocks      []int64
	BlockTokens int
}

// TPOT is (E2E − TTFT) / (Output − 1); ok is false for one-token answers.
func (o Observed) TPOT() (time.Duration, bool) {
	if o.Output < 2 {
		return 0, false
	}
	return (o.E2E - o.TTFT) / time.Duration(o.Output-1), true
}

// Observations are the requests of a results folder as its server saw
// them: what calibration fits and plan replays.
type Observations struct {
	Dir      string
	Requests []Observed
	// Skipped counts records left out: failed, warm-up, or incomplete.
	Skipped int
	Run     RunInfo
}

// ReadObserved reads a bench results folder (ReadRun: requests.jsonl,
// run.json) and reconstructs the workload the server saw: its measured
// requests (the warm-up left out: calibration compares them), in arrival
// order. When every record carries the server's first-scheduled instant
// (its metrics object; asked by bench --server-metrics), arrivals and scheduling
// instants are the server's own (Anchored). Otherwise arrivals are
// estimated: the first token instant − the server's TTFT when the records
// carry its split, else the client's send instants. A folder without
// records, or whose successful records lack token counts or timestamps,
// or that holds fewer than MinObserved measured requests, is an error
// wrapping ErrBadInput.
func ReadObserved(dir string) (*Observations, error) {
	run, err := ReadRun(dir)
	if err != nil {
		return nil, err
	}
	w := &Observations{Dir: dir, Run: run.Info, Skipped: run.Skipped}
	var origin int64
	for _, s := range run.Requests {
		switch {
		case s.Warmup:
			w.Skipped++
			continue
		case !s.Timed:
			return nil, fmt.Errorf("%w: %s: a successful record lacks what calibration needs: %s (%s)", ErrBadInput, RecordsPath(dir), s.ID, s.Untimed)
		}
		if len(w.Requests) == 0 || s.origin < origin {
			origin = s.origin
		}
		w.Requests = append(w.Requests, s.Observed)
	}
	if len(w.Requests) < MinObserved {
		return nil, fmt.Errorf("%w: %s holds %d usable records; calibration needs at least %d", ErrBadInput, RecordsPath(dir), len(w.Requests), MinObserved)
	}
	anchor(w.Requests, time.Duration(origin))
	slices.SortStableFunc(w.Requests, func(a, b Observed) int { return cmp.Compare(a.Arrival, b.Arrival) })
	return w, nil
}

// MinObserved is the fewest measured requests calibration fits on.
const MinObserved = 8

// observe sets o's times from a successful record and returns the instant
// the server received it on the records' clock: the first token − the
// server's TTFT when the record carries the server's split, else the
// client's send.
func (o *Observed) observe(r *latency.Record) int64 {
	var arrival int64
	if s := r.Server; s != nil && s.PrefillNS > 0 {
		o.ServerSide = true
		o.Queue = time.Duration(s.QueueNS)
		o.TTFT = time.Duration(s.QueueNS + s.PrefillNS)
		o.E2E = o.TTFT + time.Duration(s.DecodeNS)
		arrival = r.FirstTokenNS - int64(o.TTFT)
	} else {
		o.TTFT = time.Duration(r.FirstTokenNS - r.SentNS)
		o.E2E = time.Duration(r.EndNS - r.SentNS)
		arrival = r.SentNS
	}
	o.Arrival = time.Duration(arrival)
	if s := r.Server; s != nil && s.FirstScheduledUnixNS > 0 {
		o.Scheduled, o.Anchored = time.Duration(s.FirstScheduledUnixNS), true
	}
	return arrival
}

// anchor makes the requests' instants offsets from the first arrival: on
// the server's clock when every request is Anchored (its scheduling
// instant minus its queue), else from origin on the client's clock.
func anchor(obs []Observed, origin time.Duration) {
	all := len(obs) > 0
	for _, o := range obs {
		all = all && o.Anchored
	}
	if !all {
		for i := range obs {
			obs[i].Arrival -= origin
			obs[i].Scheduled, obs[i].Anchored = 0, false
		}
		return
	}
	first := obs[0].Scheduled - obs[0].Queue
	for _, o := range obs {
		first = min(first, o.Scheduled-o.Queue)
	}
	for i := range obs {
		obs[i].Scheduled -= first
		obs[i].Arrival = obs[i].Scheduled - obs[i].Queue
	}
}

// Merge joins workloads of separate runs against the same server into one
// list of requests, each run shifted after the previous one's last finish
// (plus a second), so that runs do not overlap in the replay.
func Merge(ws ...*Observations) *Observations {
	out := &Observations{}
	var shift time.Duration
	for _, w := range ws {
		var end time.Duration
		for _, o := range w.Requests {
			o.Arrival += shift
			o.Scheduled += shift
			end = max(end, o.Arrival+o.E2E)
			out.Requests = append(out.Requests, o)
		}
		out.Skipped += w.Skipped
		if out.Dir != "" {
			out.Dir += ", "
		}
		out.Dir += w.Dir
		shift = end + time.Second
	}
	return out
}
