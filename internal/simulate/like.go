package simulate

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Like is a measured run's workload as `simulate --like RESULTS`, plan and
// the what-if replay it (results.ReadRun reads it, LikeRun builds it): the
// run's own requests, warm-up included and in the order they were sent —
// the prompt lengths the server counted and the output lengths it
// produced (answers run to them), their prompts sharing the prefixes the
// records show — in the run's own shape: a closed loop at the run's
// concurrency, or an open loop at the intended send instants; and the
// client's measured transport as the network latency and, in a closed
// loop, each request's measured client turnaround before its send, so
// requests meet the engine's step boundaries as they met the server's.
type Like struct {
	Source *workload.Replay
	Load   workload.Load
	// Closed says the run was a closed loop: its arrivals followed its
	// server's latencies, so a replay keeps the loop, not the instants.
	Closed bool
	// Network is half the median transport of the run's requests (their
	// TTFT at the client less the server's queue + prefill) — half the
	// least where the server reports no queue wait (likeNetwork) — or 0
	// when the records carry no server split.
	Network time.Duration
	// NetworkSample are an open loop's one-way latencies, half each
	// measured request's transport, that each replayed request draws its
	// own from (Config.NetworkSample): which step an open loop's request
	// meets depends on its own transport, not on the median. Nil for a
	// closed loop (its resends reach the engine after a step end either
	// way, and its measured turnarounds are replayed) and where the
	// server reports no queue wait.
	NetworkSample []time.Duration
	// Requests and Warmup count the replay's measured and warm-up requests.
	Requests, Warmup int
	// Rate is the run's requests per second over the span of their
	// intended instants (a closed loop's: its throughput); 0 when they
	// were all meant for one instant.
	Rate float64
	// Notes say what is replayed and what cannot be.
	Notes []string
}

// LikeRun reads the results folder dir (bench's or simulate's) into the
// workload that replays it. chat builds chat prompts; seed draws their
// filler text. An error wraps results.ErrBadInput when the folder cannot
// be read.
func LikeRun(dir string, chat bool, seed uint64) (Like, error) {
	run, err := results.ReadRun(dir)
	if err != nil {
		return Like{}, err
	}
	rows := make([]workload.TraceRow, len(run.Requests))
	var transport []time.Duration
	unreported, turnarounds := true, 0
	for i, r := range run.Requests {
		rows[i] = workload.TraceRow{At: r.Intended, Input: r.Input, Output: r.Output, HashIDs: r.Blocks, Turnaround: r.Turnaround}
		if r.HasTransport {
			transport = append(transport, r.Transport)
			unreported = unreported && r.QueueUnreported
		}
		turnarounds += min(int(r.Turnaround), 1)
	}
	rp, err := workload.NewReplay(rows, workload.ReplayConfig{Chat: chat, Seed: seed, BlockSize: run.BlockTokens})
	if err != nil {
		return Like{}, err
	}
	warm := run.Warm()
	lk := Like{Source: rp, Requests: rp.Len() - warm, Warmup: warm, Notes: []string{
		fmt.Sprintf("replaying %s: %d requests (%d of them warm-up) in the order sent, with the prompt lengths the server counted and the output lengths it produced (answers run to them)", dir, rp.Len(), warm),
		"prefix sharing: " + run.Sharing,
	}}
	lk.Network, lk.Notes = likeNetwork(transport, unreported, lk.Notes)
	if turnarounds > 0 {
		lk.Notes = append(lk.Notes, fmt.Sprintf("each worker sends its next request after the client's measured turnaround (%d requests: the time between the answer that ended before it and its send)", turnarounds))
	}
	if span := rows[len(rows)-1].At - rows[0].At; span > 0 {
		lk.Rate = float64(len(rows)-1) / span.Seconds()
	}
	info := run.Info
	switch {
	case info.Mode == "closed" && info.Concurrency > 0:
		lk.Closed = true
		lk.Load = workload.Load{Concurrency: info.Concurrency, Requests: lk.Requests, WarmupRequests: warm, Seed: seed}
		lk.Notes = append(lk.Notes, fmt.Sprintf("a closed loop of %d workers, each sending its next request when its answer ends, as the run did", info.Concurrency))
		if lk.Load.RampUp, lk.Load.RampFirstToken, err = workload.ParseRampUp(info.RampUp); err != nil {
			return Like{}, fmt.Errorf("%s: run.json's ramp_up %q: %w", dir, info.RampUp, err)
		}
		if r := lk.Load.RampName(); r != "" {
			lk.Notes = append(lk.Notes, "the workers ramp up as the run's did: "+r)
		}
	case info.Mode == "closed":
		return Like{}, fmt.Errorf("%s is a closed-loop run whose run.json does not say its concurrency", dir)
	default:
		if rows[len(rows)-1].At == 0 {
			return Like{}, fmt.Errorf("%w: the %d requests of %s were all meant for one instant", ErrNoArrivals, len(rows), dir)
		}
		lk.Load = workload.Load{Arrivals: rp.Arrivals, Requests: lk.Requests, WarmupRequests: warm, Seed: seed}
		lk.Notes = append(lk.Notes, "an open loop at the records' intended send instants")
		if len(transport) > 0 && !unreported {
			for _, t := range transport {
				lk.NetworkSample = append(lk.NetworkSample, t/2)
			}
		}
	}
	return lk, nil
}

// likeNetwork is the replay's one-way network latency from the requests'
// measured transports (TTFT at the client less the server's queue +
// prefill), and notes saying how: half their median; or, where the server
// reports no queue wait (unreported, llama.cpp), half the least of them —
// their transport then holds each request's wait for a slot and for the
// engine's step, which the replay simulates itself, and the least is the
// part every request pays (the report's inferred queue takes the same
// floor, docs/metrics.md).
func likeNetwork(transport []time.Duration, unreported bool, notes []string) (time.Duration, []string) {
	if len(transport) == 0 {
		return 0, append(notes, "the records carry no server split: the client's transport is unknown and taken as 0")
	}
	slices.Sort(transport)
	if unreported {
		least := transport[0]
		return least / 2, append(notes, fmt.Sprintf("the server reports no queue wait, so the client's transport (TTFT at the client less the server's prefill: median %v) holds the waits the replay simulates; the least of it, %v, is the network, %v each way", transport[len(transport)/2].Round(time.Microsecond), least.Round(time.Microsecond), (least/2).Round(time.Microsecond)))
	}
	med := transport[len(transport)/2]
	return med / 2, append(notes, fmt.Sprintf("the client's measured transport (median %v: TTFT at the client less the server's queue + prefill) is the network, %v each way", med.Round(time.Microsecond), (med/2).Round(time.Microsecond)))
}

// ErrNoArrivals marks a run whose requests were all meant for one instant:
// there are no arrivals to replay.
var ErrNoArrivals = errors.New("no arrival times to replay")
