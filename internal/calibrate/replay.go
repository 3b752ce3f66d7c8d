package calibrate

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/results"
)

// anchorSlack is how far before a request's server scheduling instant a
// simulated step may start and still admit it, in an anchored replay: more
// than the instants' rounding (a quarter of a microsecond), far less than
// any engine step.
const anchorSlack = 20 * time.Microsecond

// replay is one run of the engine over the measured requests, in the
// requests' order: timelines, and the largest batch of any step.
type replay struct {
	timelines []engine.Timeline
	maxBatch  int
	// starts are the steps' start offsets, in order (anchored replays).
	starts []time.Duration
}

// replayFree runs the engine over the requests at their measured arrival
// instants: what the twin predicts for the same arrivals, queueing
// included.
func replayFree(cfg engine.Config, obs []results.Observed) (replay, error) {
	arr := make([]engine.Arrival, len(obs))
	for i, o := range obs {
		arr[i] = engine.Arrival{At: o.Arrival, Request: request(i, o)}
	}
	res, err := engine.Simulate(cfg, arr, engine.SimOptions{Steps: true})
	if err != nil {
		return replay{}, err
	}
	out := replay{timelines: res.Timelines}
	for _, s := range res.Steps {
		out.maxBatch = max(out.maxBatch, s.Seqs)
	}
	return out, nil
}

// replayAnchored runs the engine over Anchored requests, admitting each at
// the first simulated step that starts at or after its server scheduling
// instant (less anchorSlack), and starting an idle engine at the next such
// instant. With the server's constants the simulated steps then start on
// the server's step boundaries, so every request shares its steps with the
// same others as on the server, whatever the constants: the arrival
// instant's side of a step boundary, which no client-side estimate can
// tell, no longer matters. The timelines' Arrival is the admitting step's
// start: their queue is not simulated (the measured one stands for it).
func replayAnchored(cfg engine.Config, obs []results.Observed) (replay, error) {
	v, err := engine.NewVirtual(cfg)
	if err != nil {
		return replay{}, err
	}
	order := make([]int, len(obs))
	for i := range order {
		order[i] = i
	}
	// In arrival order: a first-come-first-served scheduler admits in that
	// order (so the scheduling instants rise with it, up to their
	// rounding), and the order decides which request a step's token budget
	// serves first.
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(obs[a].Arrival, obs[b].Arrival) })
	out := replay{timelines: make([]engine.Timeline, len(obs))}
	reqs := make([]engine.Request, len(obs))
	var now time.Duration
	next, done := 0, 0
	for done < len(obs) {
		for next < len(order) && obs[order[next]].Scheduled <= now+anchorSlack {
			i := order[next]
			next++
			reqs[i] = request(i, obs[i])
			if _, err := v.Submit(now, i, &reqs[i]); err != nil {
				return replay{}, fmt.Errorf("request %d (%s): %w", i, obs[i].ID, err)
			}
		}
		end, ok := v.Start(now)
		if !ok {
			if next == len(order) {
				return replay{}, errors.New("calibrate: the engine stalled with requests left")
			}
			now = obs[order[next]].Scheduled
			continue
		}
		out.maxBatch = max(out.maxBatch, v.LastStep().Seqs)
		out.starts = append(out.starts, now)
		for _, o := range v.Finish() {
			if o.Finish != "" {
				out.timelines[o.ID()] = o.Timeline()
				done++
			}
		}
		now = end
	}
	return out, nil
}

// request is the engine request replaying o: its lengths, answered to the
// last token as the benchmark asked; with the prompt's shared blocks
// (Observed.Blocks) its tokens, so that the engine's prefix cache hits
// where the server's did.
func request(i int, o results.Observed) engine.Request {
	q := engine.Request{ID: fmt.Sprint(i), PromptLen: o.Input, MaxTokens: o.Output, IgnoreEOS: true}
	if len(o.Blocks) > 0 && o.BlockTokens > 0 {
		q.Prompt = prompt(uint64(i), o)
	}
	return q
}

// prompt is o's Input tokens: BlockTokens drawn from each of its Blocks'
// ids in turn (the same ids, the same tokens), then its own, drawn from
// i. Token ids are opaque to the engine, which only hashes them.
func prompt(i uint64, o results.Observed) []int32 {
	p := make([]int32, o.Input)
	k := 0
	for _, id := range o.Blocks {
		for j := 0; j < o.BlockTokens && k < len(p); j++ {
			p[k] = token(uint64(id), uint64(j))
			k++
		}
	}
	for j := 0; k < len(p); j++ {
		p[k] = token(i|1<<63, uint64(j))
		k++
	}
	return p
}

// token is a token id drawn from a stream and a position (splitmix64).
func token(stream, pos uint64) int32 {
	z := stream*0x9E3779B97F4A7C15 + pos + 0x632BE59BD9B9B3A5
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return int32((z ^ z>>31) & 0x3FFFFFFF)
}
