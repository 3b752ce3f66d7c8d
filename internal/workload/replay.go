package workload

import (
	"fmt"
	"math"
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

// Replay turns trace rows into arrival offsets and one single-request
// session per row. The rows within the window are kept; their offsets,
// measured from the window's start, are multiplied by scale (0.5 replays
// twice as fast). Input lengths are the rows' context tokens (at least the
// chat role token plus one), output lengths their generated tokens (at
// least 1).
type Replay struct {
	rows []TraceRow
	at   []time.Duration
	chat bool
	seed uint64
}

// NewReplay selects and scales rows.
func NewReplay(rows []TraceRow, w Window, scale float64, chat bool, seed uint64) (*Replay, error) {
	if !(scale > 0) || math.IsInf(scale, 0) {
		return nil, fmt.Errorf("time scale %g: must be positive", scale)
	}
	r := &Replay{chat: chat, seed: seed}
	for _, row := range rows {
		if row.At < w.Start || (w.End > 0 && row.At >= w.End) {
			continue
		}
		r.rows = append(r.rows, row)
		r.at = append(r.at, time.Duration(float64(row.At-w.Start)*scale))
	}
	if len(r.rows) == 0 {
		return nil, fmt.Errorf("trace window %s-%s holds no rows", w.Start, w.End)
	}
	return r, nil
}

// Len is the number of requests the replay sends.
func (r *Replay) Len() int { return len(r.rows) }

// Arrivals returns the replay's send offsets.
func (r *Replay) Arrivals() Arrivals { return &AtOffsets{At: r.at} }

// Session returns the request of row i.
func (r *Replay) Session(i int64) Session {
	in, out := r.Lengths(i)
	role := 0
	if r.chat {
		role = 1
	}
	text := tokenizer.Filler(in-role, turnSeed(r.seed, i, 0, 3))
	req := Request{Session: i, MaxTokens: out}
	setContent(&req, []tokenizer.Message{{Role: "user", Content: text}}, r.chat)
	return &single{req: req}
}

// Lengths returns the input tokens and max_tokens of Session(i)'s request
// without building its prompt. Each row's prompt is filler text of its own
// seed, sharing no block-sized prefix with another row's, so a consumer that
// needs only lengths (the simulator, when nothing caches prefixes of text)
// loses nothing by skipping the text.
func (r *Replay) Lengths(i int64) (inputTokens, maxTokens int) {
	row := r.rows[int(i%int64(len(r.rows)))]
	role := 0
	if r.chat {
		role = 1
	}
	return max(row.Input, role+1), max(row.Output, 1)
}
