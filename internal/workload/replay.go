package workload

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// Window selects the rows of a trace with Start <= At < End (End 0: to the
// end), rebased so the first selected instant is Start.
type Window struct{ Start, End time.Duration }

// ParseWindow reads "START-END" or "START+LENGTH" in Go durations
// ("10m-20m", "1h+5m"); empty means the whole trace.
func ParseWindow(s string) (Window, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Window{}, nil
	}
	sep := "-"
	if strings.Contains(s, "+") {
		sep = "+"
	}
	a, b, ok := strings.Cut(s, sep)
	start, err1 := time.ParseDuration(strings.TrimSpace(a))
	d, err2 := time.ParseDuration(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return Window{}, fmt.Errorf("trace window %q: want START-END or START+LENGTH, as in 10m-20m or 1h+5m", s)
	}
	end := d
	if sep == "+" {
		end = start + d
	}
	if start < 0 || end <= start {
		return Window{}, fmt.Errorf("trace window %q: the end must be after the start", s)
	}
	return Window{start, end}, nil
}

// DefaultTraceBlockSize is the tokens of one of a Mooncake trace's hash_ids
// blocks, as Mooncake's traces were made.
const DefaultTraceBlockSize = 512

// ReplayConfig says how a trace is replayed.
type ReplayConfig struct {
	// Window selects the rows (the zero Window: all).
	Window Window
	// Scale multiplies the offsets measured from the window's start (0.5
	// replays twice as fast; 0 means 1).
	Scale float64
	// Chat builds chat messages, else completions prompts.
	Chat bool
	Seed uint64
	// BlockSize is the tokens of one hash_ids block of a Mooncake row
	// (0: DefaultTraceBlockSize).
	BlockSize int
}

// Replay turns trace rows into arrival offsets and one single-request
// session per row. Input lengths are the rows' context tokens (at least the
// chat role token plus one), output lengths their generated tokens (at
// least 1). A row with hash_ids (Mooncake) has a prompt of blocks: the
// block of hash id h is BlockSize tokens of filler text drawn from h alone,
// so requests whose hash_ids begin alike begin with the same tokens (the
// last block holds what is left of the input length; input beyond the
// blocks is the row's own text). Other rows' prompts are filler text of
// their own seed, sharing no block-sized prefix with another row's.
type Replay struct {
	rows  []TraceRow
	at    []time.Duration
	chat  bool
	seed  uint64
	block int
	// shared[i] is how many of row i's first prompt tokens an earlier row
	// of the replay sent too: its leading blocks whose chain of ids an
	// earlier row began with (and the chat role token before them).
	shared []int
	shares bool // some row shares a prefix with an earlier one
}

// Span is the replay's schedule from its first arrival to its last, at
// its time scale: how long a run replaying it in wall time lasts at least.
func (r *Replay) Span() time.Duration {
	if len(r.at) == 0 {
		return 0
	}
	return slices.Max(r.at) - slices.Min(r.at)
}

// LongSpan is the schedule past which a wall-clock replay is warned about
// at its start.
const LongSpan = 24 * time.Hour

// NewReplay selects and scales rows.
func NewReplay(rows []TraceRow, c ReplayConfig) (*Replay, error) {
	scale := c.Scale
	if scale == 0 {
		scale = 1
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		return nil, fmt.Errorf("time scale %g: must be positive", scale)
	}
	if c.BlockSize < 0 {
		return nil, fmt.Errorf("block size %d: must be positive", c.BlockSize)
	}
	r := &Replay{chat: c.Chat, seed: c.Seed, block: c.BlockSize}
	if r.block == 0 {
		r.block = DefaultTraceBlockSize
	}
	w := c.Window
	for _, row := range rows {
		if row.At < w.Start || (w.End > 0 && row.At >= w.End) {
			continue
		}
		r.rows = append(r.rows, row)
		r.at = append(r.at, time.Duration(float64(row.At-w.Start)*scale))
	}
	if len(r.rows) == 0 {
		span := time.Duration(0)
		if len(rows) > 0 {
			span = rows[len(rows)-1].At
		}
		return nil, fmt.Errorf("trace window %s-%s holds no rows (the trace spans 0s-%s)", w.Start, w.End, span)
	}
	r.sharedPrefixes()
	return r, nil
}

// sharedPrefixes finds, for every row, the leading blocks an earlier row
// began with: the chain of hash ids up to a block, not the block's id
// alone, since a block is shared only after the same blocks.
func (r *Replay) sharedPrefixes() {
	r.shared = make([]int, len(r.rows))
	seen := map[uint64]struct{}{}
	for i, row := range r.rows {
		if len(row.HashIDs) == 0 {
			continue
		}
		in, _ := r.Lengths(int64(i))
		role := r.role()
		left, shared, still := in-role, 0, true
		key := uint64(14695981039346656037)
		for _, h := range row.HashIDs {
			if left <= 0 {
				break
			}
			key = (key ^ uint64(h)) * 1099511628211
			key ^= key >> 29
			n := min(r.block, left)
			left -= n
			if _, ok := seen[key]; ok && still {
				shared += n
				continue
			}
			still = false
			seen[key] = struct{}{}
		}
		if shared > 0 {
			r.shared[i], r.shares = role+shared, true
		}
	}
}

func (r *Replay) role() int {
	if r.chat {
		return 1 // the user message's role token
	}
	return 0
}

// Len is the number of requests the replay sends.
func (r *Replay) Len() int { return len(r.rows) }

// Arrivals returns the replay's send offsets.
func (r *Replay) Arrivals() Arrivals { return &AtOffsets{At: r.at} }

// SharesPrefixes reports whether some request begins with blocks an
// earlier one sent: a simulator must then build the prompts for a prefix
// cache to see them, where lengths otherwise suffice.
func (r *Replay) SharesPrefixes() bool { return r.shares }

// SharedPrefixTokens is Session(i)'s Request.SharedPrefixTokens: how many
// of its first tokens an earlier request of the replay sent too.
func (r *Replay) SharedPrefixTokens(i int64) int { return r.shared[int(i%int64(len(r.rows)))] }

// Turnaround is row i's TraceRow.Turnaround: in a closed loop, how long
// after its worker's previous answer ends the row is sent
// (TurnaroundSource).
func (r *Replay) Turnaround(i int64) time.Duration {
	return r.rows[int(i%int64(len(r.rows)))].Turnaround
}

// TurnaroundSource is a source whose closed-loop sessions each follow
// their worker's previous answer by a time of their own (a measured run's
// client turnaround, Replay): a simulated closed loop waits that long
// before sending session i when it is not its worker's first.
type TurnaroundSource interface {
	Turnaround(i int64) time.Duration
}

// Session returns the request of row i.
func (r *Replay) Session(i int64) Session {
	in, out := r.Lengths(i)
	k := int(i % int64(len(r.rows)))
	text := r.text(r.rows[k].HashIDs, in-r.role(), i)
	req := Request{Session: i, MaxTokens: out, SharedPrefixTokens: r.shared[k], Filler: true}
	if ids := r.rows[k].HashIDs; len(ids) > 0 {
		n := min(len(ids), (in-r.role()+r.block-1)/r.block)
		req.PrefixBlocks, req.PrefixBlockTokens = ids[:n:n], r.block
	}
	setContent(&req, []tokenizer.Message{{Role: "user", Content: text}}, r.chat)
	return &single{req: req}
}

// text is n tokens of a row's prompt: its blocks, then its own filler.
func (r *Replay) text(ids []int64, n int, i int64) string {
	if len(ids) == 0 {
		return tokenizer.Filler(n, turnSeed(r.seed, i, 0, 3))
	}
	var b strings.Builder
	for _, h := range ids {
		if n <= 0 {
			break
		}
		k := min(r.block, n)
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(tokenizer.Filler(k, blockSeed(r.seed, h)))
		n -= k
	}
	if n > 0 {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(tokenizer.Filler(n, turnSeed(r.seed, i, 0, 3)))
	}
	return b.String()
}

// blockSeed is the filler seed of a trace's hash id: a stream of its own.
func blockSeed(seed uint64, id int64) uint64 {
	return seed ^ 0xB10C0000_00000000 ^ uint64(id)*0x9E3779B97F4A7C15
}

// Lengths returns the input tokens and max_tokens of Session(i)'s request
// without building its prompt. A consumer that needs only lengths (the
// simulator, when nothing caches prefixes of text, or when SharesPrefixes
// is false) loses nothing by skipping the text.
func (r *Replay) Lengths(i int64) (inputTokens, maxTokens int) {
	row := r.rows[int(i%int64(len(r.rows)))]
	role := r.role()
	return max(row.Input, role+1), max(row.Output, 1)
}
