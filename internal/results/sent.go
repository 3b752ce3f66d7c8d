package results

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// CachedBlockTokens is the block size in which a replay rebuilds the
// prefix sharing that records without prefix_blocks show only as counts
// (cached_tokens, shared_prefix_tokens): vLLM's and serve's KV block, the
// unit a prefix cache hits in.
const CachedBlockTokens = 16

// Sent is one successful request of a results folder as a replay of the
// run needs it: when it was meant to be sent, what it was, what it shared,
// and its measured times.
type Sent struct {
	// Observed is the request as calibration compares it: its ID, its
	// lengths (the prompt tokens the server counted, the output tokens it
	// produced) and its prompt's leading Blocks of BlockTokens (Run's)
	// tokens each, where prompts whose blocks begin with the same ids
	// begin with the same tokens (Run.Sharing says where they come from);
	// its times only when Timed (Untimed says why not).
	Observed
	// Intended is when the run meant to send it (its intended instant, or
	// its send where the record has none), from the earliest request's.
	Intended time.Duration
	Warmup   bool
	// Cached is the prompt tokens the server's prefix cache supplied
	// (Record.CachedTokens), Shared those the workload shared with other
	// requests (Record.SharedPrefixTokens).
	Cached, Shared int
	// Transport is the client's transport of the request: its TTFT at the
	// client less the server's queue + prefill (HasTransport: the record
	// carries the server's split).
	Transport    time.Duration
	HasTransport bool
	// QueueUnreported says the server's split lacks the queue wait
	// (llama.cpp, Ollama): Transport then holds the request's wait for a
	// slot and for the engine's step as well.
	QueueUnreported bool
	// Turnaround is, in a closed loop, the client's time between the end
	// of the answer its worker received last and this request's intended
	// send (reading the stream to its close, building the request): the
	// k-th request sent after the workers' first ones follows the k-th
	// answer to end. 0 for a worker's first request, in an open loop, and
	// when the run's records do not show it.
	Turnaround time.Duration
	// end is the answer's end, on Intended's clock.
	end time.Duration
	// Timed is false when the record lacks the instants calibration
	// needs (Untimed says why).
	Timed   bool
	Untimed string
	// origin is the observed arrival on the records' clock.
	origin      int64
	seq         int64
	blockTokens int // the record's prefix_block_tokens
}

// Run is a results folder's workload: its successful requests with token
// counts, warm-up included, in the order they were sent — what simulate
// --like, calibrate, plan and the what-if replay (ReadRun). One reader, so
// that the four agree on which requests, in which order, sharing what.
type Run struct {
	Dir  string
	Info RunInfo
	// Requests are in the order sent: by intended instant, then by the
	// records' send order (Record.Seq; in records written before it, the
	// number ending the ID), then by line.
	Requests []Sent
	// Skipped counts records left out: failed, or without token counts.
	Skipped int
	// BlockTokens is the tokens of one of the requests' Blocks (0: none
	// has blocks).
	BlockTokens int
	// Sharing says what the Blocks stand for, for the replay's notes.
	Sharing string
}

// Warm counts the warm-up requests.
func (r *Run) Warm() int {
	n := 0
	for _, s := range r.Requests {
		if s.Warmup {
			n++
		}
	}
	return n
}

// ReadRun reads a results folder (bench's or simulate's) into the workload
// that replays it. Prefix sharing comes from the records, in this order:
// their prefix_blocks (a trace's hash_ids, exact); else the server's
// prefix-cache hits (cached_tokens), else the workload's shared prefixes
// (shared_prefix_tokens), each as that many leading tokens, in whole
// CachedBlockTokens blocks, of one prefix common to every request. A
// folder without records, or without a successful one with token counts,
// is an error wrapping ErrBadInput.
func ReadRun(dir string) (*Run, error) {
	path := RecordsPath(dir)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	run := &Run{Dir: dir}
	if info, ok, err := ReadRunInfo(dir); err == nil && ok {
		run.Info = info
	}
	err := EachRecord(path, func(line int, r *latency.Record, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %s line %d: %v", ErrBadInput, path, line, err)
		}
		if !r.OK() || r.InputTokens <= 0 || r.OutputTokens <= 0 {
			run.Skipped++
			return nil
		}
		run.Requests = append(run.Requests, sent(r, int64(line)))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadInput, path, err)
	}
	if len(run.Requests) == 0 {
		return nil, fmt.Errorf("%w: %s holds no successful request with token counts (%d records failed or had no input/output token counts)", ErrBadInput, path, run.Skipped)
	}
	slices.SortStableFunc(run.Requests, func(a, b Sent) int {
		return cmp.Or(cmp.Compare(a.Intended, b.Intended), cmp.Compare(a.seq, b.seq))
	})
	first := run.Requests[0].Intended
	for i := range run.Requests {
		run.Requests[i].Intended -= first
		run.Requests[i].end -= first
	}
	run.blocks()
	run.turnarounds()
	return run, nil
}

// turnarounds sets the requests' Turnaround in a closed loop of
// Info.Concurrency workers: a worker sends its next request when its
// answer ends, so the k-th request after the workers' first ones is the
// next request of the worker whose answer ended k-th, and the time
// between the two is the client's turnaround. Records without an end
// (whose answers' order is unknown) leave every Turnaround 0.
func (run *Run) turnarounds() {
	c := run.Info.Concurrency
	if run.Info.Mode != "closed" || c < 1 || len(run.Requests) <= c {
		return
	}
	ends := make([]time.Duration, len(run.Requests))
	for i, s := range run.Requests {
		if !s.Timed {
			return
		}
		ends[i] = s.end
	}
	slices.Sort(ends)
	for j := c; j < len(run.Requests); j++ {
		run.Requests[j].Turnaround = max(0, run.Requests[j].Intended-ends[j-c])
	}
}

// sent reduces a successful record with token counts.
func sent(r *latency.Record, line int64) Sent {
	at := r.IntendedNS
	if at == 0 {
		at = r.SentNS
	}
	s := Sent{Observed: Observed{ID: r.ID, Input: r.InputTokens, Output: r.OutputTokens}, Intended: time.Duration(at),
		Warmup: r.Warmup, Cached: r.CachedTokens, Shared: r.SharedPrefixTokens, seq: line}
	if len(r.PrefixBlocks) > 0 && r.PrefixBlockTokens > 0 {
		s.Blocks, s.blockTokens = slices.Clone(r.PrefixBlocks), r.PrefixBlockTokens
	}
	switch {
	case r.Seq > 0:
		s.seq = r.Seq
	default: // a record written before seq was kept: its ID ends with it
		if i := strings.LastIndexByte(r.ID, '-'); i >= 0 {
			if n, err := strconv.ParseInt(r.ID[i+1:], 10, 64); err == nil {
				s.seq = n
			}
		}
	}
	if sp := r.Server; sp != nil && sp.PrefillNS > 0 && r.FirstTokenNS > 0 {
		s.HasTransport = true
		s.Transport = max(0, time.Duration(r.FirstTokenNS-r.SentNS-sp.QueueNS-sp.PrefillNS))
		s.QueueUnreported = slices.Contains(sp.Unreported, latency.SplitQueue)
	}
	s.end = time.Duration(r.EndNS)
	switch {
	case r.FirstTokenNS == 0 || r.EndNS == 0 || r.FirstTokenNS < r.SentNS || r.EndNS < r.FirstTokenNS:
		s.Untimed = "no first-token or end timestamp, or one before the send"
	default:
		s.origin = s.observe(r)
		s.Timed = true
	}
	return s
}

// blocks settles every request's Blocks and the run's BlockTokens: the
// records' own prefix_blocks when any has them (of the first such
// record's block size; a record of another size keeps none), else common
// leading blocks standing for the cached, else the shared, tokens.
func (run *Run) blocks() {
	for _, s := range run.Requests {
		if s.blockTokens > 0 {
			run.BlockTokens = s.blockTokens
			break
		}
	}
	if run.BlockTokens > 0 {
		mixed := 0
		for i := range run.Requests {
			if s := &run.Requests[i]; s.blockTokens != run.BlockTokens {
				mixed += min(len(s.Blocks), 1)
				s.Blocks = nil
			}
		}
		run.Sharing = fmt.Sprintf("the prompts' leading blocks of %d tokens as the records name them (prefix_blocks)", run.BlockTokens)
		if mixed > 0 {
			run.Sharing += fmt.Sprintf("; %d records of another block size share nothing", mixed)
		}
		run.setBlockTokens()
		return
	}
	var cached, shared bool
	for _, s := range run.Requests {
		cached, shared = cached || s.Cached > 0, shared || s.Shared > 0
	}
	count := func(s Sent) int { return s.Cached }
	switch {
	case cached:
		run.Sharing = "the server's prefix-cache hits (cached_tokens): each request's first cached tokens are a prefix common to every request, so the replay's cache serves them once an earlier request sent as many"
	case shared:
		count = func(s Sent) int { return s.Shared }
		run.Sharing = "the workload's shared prefixes (shared_prefix_tokens; the server cached none): each request's first shared tokens are a prefix common to every request (which requests shared which prefix is not in the records)"
	default:
		run.Sharing = "no prompt shares a prefix (the records show no cached or shared tokens)"
		return
	}
	run.BlockTokens = CachedBlockTokens
	for i := range run.Requests {
		s := &run.Requests[i]
		n := min(count(*s), s.Input) / CachedBlockTokens
		s.Blocks = make([]int64, n)
		for k := range s.Blocks {
			s.Blocks[k] = int64(k + 1)
		}
	}
	run.setBlockTokens()
}

// setBlockTokens gives each request with Blocks the run's BlockTokens.
func (run *Run) setBlockTokens() {
	for i := range run.Requests {
		if s := &run.Requests[i]; len(s.Blocks) > 0 {
			s.BlockTokens = run.BlockTokens
		}
	}
}
