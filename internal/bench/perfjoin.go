package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// maxPerfMetricsBytes bounds /perf_metrics' answer (about 600 bytes a
// record: 100,000 records and more).
const maxPerfMetricsBytes = 64 << 20

// fetchPerfMetrics reads TensorRT-LLM's GET /perf_metrics: the records of
// the requests finished since the last read.
func fetchPerfMetrics(ctx context.Context, t Target) ([]latency.TRTLLMPerf, error) {
	u, err := scrape.RootURL(t.BaseURL, "/perf_metrics")
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: %w", err)
	}
	t.authorize(req.Header)
	hc := &http.Client{CheckRedirect: httplimit.NoRedirects}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: GET: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("perf_metrics: GET answered %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPerfMetricsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: read: %w", err)
	}
	if len(b) > maxPerfMetricsBytes {
		return nil, fmt.Errorf("perf_metrics: answer over %d bytes", maxPerfMetricsBytes)
	}
	recs, err := latency.ParseTRTLLMPerfMetrics(b)
	if err != nil {
		return nil, fmt.Errorf("perf_metrics: %w", err)
	}
	return recs, nil
}

// joinPerfMetrics gives each successful record without a server split the
// split of the TensorRT-LLM record whose request id its answer's id
// carries (latency.TRTLLMRequestID), marks the records it took in used,
// and returns how many were joined.
func joinPerfMetrics(recs []*latency.Record, perf []latency.TRTLLMPerf, used map[int]bool) int {
	byID := make(map[string]int, len(perf))
	for i := range perf {
		byID[perf[i].RequestID] = i
	}
	joined := 0
	for _, rec := range recs {
		if !rec.OK() || rec.Server != nil {
			continue
		}
		if i, ok := byID[latency.TRTLLMRequestID(rec.ServerID)]; ok && !used[i] {
			c := *perf[i].Split
			rec.Server = &c
			serverHop(rec)
			used[i] = true
			joined++
		}
	}
	return joined
}

// serverHop adds the joined split to the path of a record whose hops came
// from a gateway's Server-Timing without the server's own (the gateway
// had no evidence of it), as the gateway would have sent them, so the
// gateway's upstream_ttft and decode split into the server's stages.
func serverHop(rec *latency.Record) {
	if len(rec.Timing) == 0 {
		return
	}
	for _, st := range rec.Timing {
		if st.Hop == latency.HopServer {
			return
		}
	}
	sp := rec.Server
	rec.Timing = append(rec.Timing,
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingServerQueue), NS: sp.QueueNS},
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingPrefill), NS: sp.PrefillNS},
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingServerDecode), NS: sp.DecodeNS})
}

// joinHeld reads /perf_metrics after the run and joins them to the held
// records, saying on the log and in the evidence summary what it found;
// it returns the warnings for the client's.
func (r *run) joinHeld(ctx context.Context, held []*latency.Record) (warnings []string) {
	ask := r.sum.Evidence
	perf, err := fetchPerfMetrics(ctx, r.target)
	if err != nil {
		return []string{"TensorRT-LLM's per-request evidence not read: " + err.Error()}
	}
	used := map[int]bool{}
	n := joinPerfMetrics(held, perf, used)
	byTime, why := 0, ""
	if n < len(held) && !r.target.Stream {
		byTime, why = r.joinByTime(ctx, held, perf, used)
	}
	if ask != nil {
		ask.Joined, ask.JoinedByTime, ask.PerfRecords = n+byTime, byTime, len(perf)
	}
	fmt.Fprintf(r.log, "bench: /perf_metrics gave %d records; %d of %d requests joined by their answer's id, %d by their instants%s\n",
		len(perf), n, len(held), byTime, why)
	if n+byTime < len(held) {
		return []string{fmt.Sprintf("TensorRT-LLM's /perf_metrics joined %d of %d requests (%d by id, %d by instants%s): "+
			"a whole answer's id is random (chatcmpl-<uuid>, not the engine's request id its record carries) and its request "+
			"may carry no id of the client's (trtllm-serve refuses unknown fields), so a whole answer is joined only by "+
			"its send and end against the record's server_arrival_time and last_token_time, where one record alone fits; "+
			"stream to join every answer by id; the server keeps at most perf_metrics_max_requests records",
			n+byTime, len(held), n, byTime, why)}
	}
	return nil
}

// joinByTime joins whole answers by their instants (joinPerfByTime), with
// the server's steady clock read at the run's start (perfClock) and now;
// why says, when it could not, why.
func (r *run) joinByTime(ctx context.Context, held []*latency.Record, perf []latency.TRTLLMPerf, used map[int]bool) (int, string) {
	if r.perfClockErr != nil {
		return 0, "; the server's steady clock not read: " + r.perfClockErr.Error()
	}
	after, err := readSteadyClock(ctx, r.target, func() int64 { return int64(r.clock.Now()) })
	if err != nil {
		return 0, "; the server's steady clock not read: " + err.Error()
	}
	// The two readings' mean; their difference (drift over the run) widens
	// the uncertainty.
	c := steadyClock{offset: (r.perfClock.offset + after.offset) / 2,
		err: max(r.perfClock.err, after.err) + (r.perfClock.offset-after.offset).Abs()/2}
	return joinPerfByTime(held, perf, used, c), ""
}

// steadyClock is trtllm-serve's steady clock against the run's: offset is
// the server's instant less the run's, err its uncertainty (half the
// round trip less the server's hold), read from GET /steady_clock_offset,
// whose answer {"receive_ts", "transmit_ts"} gives the server's steady
// clock in seconds when the request arrived and when it answered
// (openai_server.py's get_steady_clock_offset, docs/engines.md).
type steadyClock struct {
	offset, err time.Duration
}

// readSteadyClock reads the server's steady clock against now (the run's
// clock) twice and keeps the reading of the shorter round trip.
func readSteadyClock(ctx context.Context, t Target, now func() int64) (steadyClock, error) {
	u, err := scrape.RootURL(t.BaseURL, "/steady_clock_offset")
	if err != nil {
		return steadyClock{}, fmt.Errorf("steady_clock_offset: %w", err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: httplimit.NoRedirects}
	var best steadyClock
	for i := range 2 {
		c, err := steadyClockOnce(ctx, hc, t, u, now)
		if err != nil {
			return steadyClock{}, err
		}
		if i == 0 || c.err < best.err {
			best = c
		}
	}
	return best, nil
}

func steadyClockOnce(ctx context.Context, hc *http.Client, t Target, u string, now func() int64) (steadyClock, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return steadyClock{}, fmt.Errorf("steady_clock_offset: %w", err)
	}
	t.authorize(req.Header)
	t0 := now()
	resp, err := hc.Do(req)
	if err != nil {
		return steadyClock{}, fmt.Errorf("steady_clock_offset: GET: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	t3 := now()
	if err != nil || resp.StatusCode != http.StatusOK {
		return steadyClock{}, fmt.Errorf("steady_clock_offset: GET answered %d", resp.StatusCode)
	}
	recv, xmit, err := latency.ParseSteadyClockOffset(b)
	if err != nil {
		return steadyClock{}, err
	}
	rtt := time.Duration(t3-t0) - (xmit - recv)
	return steadyClock{offset: (recv - time.Duration(t0) + xmit - time.Duration(t3)) / 2, err: max(rtt, 0) / 2}, nil
}

// joinPerfByTime gives each successful record still without a server
// split (a whole answer: its id is random) the split of a /perf_metrics
// record not yet joined whose server instants, on the run's clock (c),
// fit it: the server's arrival between the request's send and its end,
// and its last token between that arrival and the end, each within slack
// (c.err and 1 ms). Among a request's fits, scored by the arrival's
// distance from the send plus the last token's from the end, the best is
// taken when every other fit within twice the slack of it has a split
// that agrees with its own stage by stage within the slack (which of them
// is taken then changes no stage by more than that), and the request is
// among the record's best fits likewise; a request with no fit, or with
// close fits that disagree, stays unjoined. It returns how many were
// joined.
func joinPerfByTime(recs []*latency.Record, perf []latency.TRTLLMPerf, used map[int]bool, c steadyClock) int {
	slack := int64(c.err + time.Millisecond)
	at := func(s float64) int64 { return int64(s*1e9) - int64(c.offset) }
	var open []*latency.Record
	for _, rec := range recs {
		if rec.OK() && rec.Server == nil {
			open = append(open, rec)
		}
	}
	score := func(rec *latency.Record, p *latency.TRTLLMPerf) (int64, bool) {
		a, d := at(p.ArrivalS), at(p.DoneS)
		if rec.Server != nil || a < rec.SentNS-slack || a > rec.EndNS+slack || d < a || d > rec.EndNS+slack {
			return 0, false
		}
		return max(a-rec.SentNS, 0) + max(rec.EndNS-d, 0), true
	}
	joined := 0
	for changed := true; changed; {
		changed = false
		for _, rec := range open {
			if rec.Server != nil {
				continue
			}
			best, near := closeFits(len(perf), used, func(i int) (int64, bool) { return score(rec, &perf[i]) }, slack)
			if best < 0 || slices.ContainsFunc(near, func(i int) bool { return !splitsAgree(perf[best].Split, perf[i].Split, slack) }) {
				continue
			}
			// The request must be among the record's close fits too.
			back, backNear := closeFits(len(open), nil, func(j int) (int64, bool) { return score(open[j], &perf[best]) }, slack)
			if back < 0 || (open[back] != rec && !slices.Contains(backNear, slices.Index(open, rec))) {
				continue
			}
			sp := *perf[best].Split
			rec.Server = &sp
			serverHop(rec)
			used[best] = true
			joined++
			changed = true
		}
	}
	return joined
}

// closeFits is the index among n (not in used) whose fit scores best, -1
// for none, and the others whose score is within twice slack of it.
func closeFits(n int, used map[int]bool, fit func(int) (int64, bool), slack int64) (best int, near []int) {
	best = -1
	var bestScore int64
	scores := make(map[int]int64)
	for i := range n {
		if used[i] {
			continue
		}
		if s, ok := fit(i); ok {
			scores[i] = s
			if best < 0 || s < bestScore {
				best, bestScore = i, s
			}
		}
	}
	for i, s := range scores {
		if i != best && s-bestScore <= 2*slack {
			near = append(near, i)
		}
	}
	return best, near
}

// splitsAgree says whether two splits' queue, prefill and decode differ
// by at most tol each.
func splitsAgree(a, b *latency.ServerSplit, tol int64) bool {
	d := func(x, y int64) bool { return x-y <= tol && y-x <= tol }
	return d(a.QueueNS, b.QueueNS) && d(a.PrefillNS, b.PrefillNS) && d(a.DecodeNS, b.DecodeNS)
}
