package simulate

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Like is a measured run's workload as `simulate --like RESULTS` replays
// it: the run's own requests, warm-up included and in the order they were
// sent — the prompt lengths the server counted and the output lengths it
// produced (answers run to them) — in the run's own shape: a closed loop
// at the run's concurrency, or an open loop at the intended send instants;
// and the client's measured transport as the network latency, so requests
// meet the engine's step boundaries as they met the server's.
type Like struct {
	Source workload.Source
	Load   workload.Load
	// Network is half the median transport of the run's requests (their
	// TTFT at the client less the server's queue + prefill), or 0 when
	// the records carry no server split.
	Network time.Duration
	// Notes say what is replayed and what cannot be.
	Notes []string
}

// likeRequest is one record as the replay needs it.
type likeRequest struct {
	intended, seq int64
	in, out       int
	warmup        bool
	transport     time.Duration
	split         bool
}

// LikeRun reads the results folder dir (bench's or simulate's) into the
// workload that replays it. chat builds chat prompts; seed draws their
// filler text.
func LikeRun(dir string, chat bool, seed uint64) (Like, error) {
	reqs, err := readLike(dir)
	if err != nil {
		return Like{}, err
	}
	info, _, err := results.ReadRunInfo(dir)
	if err != nil {
		return Like{}, err
	}
	rows := make([]workload.TraceRow, len(reqs))
	var transport []time.Duration
	warm := 0
	for i, r := range reqs {
		rows[i] = workload.TraceRow{At: time.Duration(r.intended - reqs[0].intended), Input: r.in, Output: r.out}
		if r.split {
			transport = append(transport, r.transport)
		}
		if r.warmup {
			warm++
		}
	}
	rp, err := workload.NewReplay(rows, workload.ReplayConfig{Chat: chat, Seed: seed})
	if err != nil {
		return Like{}, err
	}
	lk := Like{Source: rp, Notes: []string{fmt.Sprintf("replaying %s: %d requests (%d of them warm-up) in the order sent, with the prompt lengths the server counted and the output lengths it produced (answers run to them); which prompts shared a prefix is not in the records (none is shared)", dir, rp.Len(), warm)}}
	if len(transport) > 0 {
		slices.Sort(transport)
		med := transport[len(transport)/2]
		lk.Network = med / 2
		lk.Notes = append(lk.Notes, fmt.Sprintf("the client's measured transport (median %v: TTFT at the client less the server's queue + prefill) is the network, %v each way", med.Round(time.Microsecond), lk.Network.Round(time.Microsecond)))
	} else {
		lk.Notes = append(lk.Notes, "the records carry no server split: the client's transport is unknown and taken as 0")
	}
	switch {
	case info.Mode == "closed" && info.Concurrency > 0:
		lk.Load = workload.Load{Concurrency: info.Concurrency, Requests: rp.Len() - warm, WarmupRequests: warm, Seed: seed}
		lk.Notes = append(lk.Notes, fmt.Sprintf("a closed loop of %d workers, each sending its next request when its answer ends, as the run did", info.Concurrency))
	case info.Mode == "closed":
		return Like{}, fmt.Errorf("%s is a closed-loop run whose run.json does not say its concurrency", dir)
	default:
		if rows[len(rows)-1].At == 0 {
			return Like{}, fmt.Errorf("the %d requests of %s were all meant for one instant: no arrivals to replay", len(rows), dir)
		}
		lk.Load = workload.Load{Arrivals: rp.Arrivals, Requests: rp.Len() - warm, WarmupRequests: warm, Seed: seed}
		lk.Notes = append(lk.Notes, "an open loop at the records' intended send instants")
	}
	return lk, nil
}

// readLike reads a folder's successful records (warm-up included) in the
// order they were sent: by intended instant, then by the sequence number
// that ends a record's id (bench's and simulate's ids count sends).
func readLike(dir string) ([]likeRequest, error) {
	path := results.RecordsPath(dir)
	var out []likeRequest
	err := results.EachRecord(path, func(line int, r *latency.Record, err error) error {
		if err != nil {
			return fmt.Errorf("%s line %d: %w", path, line, err)
		}
		if !r.OK() || r.InputTokens <= 0 || r.OutputTokens <= 0 {
			return nil
		}
		q := likeRequest{intended: r.IntendedNS, in: r.InputTokens, out: r.OutputTokens, warmup: r.Warmup, seq: int64(line)}
		if i := strings.LastIndexByte(r.ID, '-'); i >= 0 {
			if n, err := strconv.ParseInt(r.ID[i+1:], 10, 64); err == nil {
				q.seq = n
			}
		}
		if s := r.Server; s != nil && s.PrefillNS > 0 && r.FirstTokenNS > 0 {
			q.split = true
			q.transport = max(0, time.Duration(r.FirstTokenNS-r.SentNS-s.QueueNS-s.PrefillNS))
		}
		out = append(out, q)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no successful request with token counts", path)
	}
	slices.SortStableFunc(out, func(a, b likeRequest) int {
		return cmp.Or(cmp.Compare(a.intended, b.intended), cmp.Compare(a.seq, b.seq))
	})
	return out, nil
}
