package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// Without a per-request split, the queueing rule names a queue from the
// server's gauges (gaugeQueue) or, with none, from the run's own shape
// (shapeQueue). docs/report.md ("Queueing without a split") gives the
// thresholds.

// gaugeQueue says whether the server's waiting gauge shows a queue over
// the run: requests waiting in at least half of the samples, half a
// request or more on average; it puts the figures in nums.
func (a *analysis) gaugeQueue(nums map[string]float64) bool {
	e := a.ev
	if e == nil || !e.has("waiting") || e.samples < 2 || e.waitingShare < 0.5 || e.waitingMean < 0.5 {
		return false
	}
	nums["server_waiting_mean"], nums["server_waiting_peak"], nums["server_waiting_share"] = e.waitingMean, e.waitingPeak, e.waitingShare
	if e.has("running") {
		nums["server_running_mean"], nums["server_running_peak"] = e.runningMean, e.runningPeak
	}
	if v, name, ok := a.batchLimit(); ok {
		nums[name] = v
	}
	return true
}

// batchLimit is the server's configured limit on requests run at once,
// where its /metrics give it: vLLM's (and tokentrace's) max_num_seqs,
// SGLang's max_running_requests.
func (a *analysis) batchLimit() (v float64, name string, ok bool) {
	for _, n := range []string{"max_num_seqs", "max_running_requests"} {
		if v, ok := a.ev.number(n); ok && v > 0 {
			return v, n, true
		}
	}
	return 0, "", false
}

// limitName is the engine's name for its limit on requests run at once.
func (a *analysis) limitName() string {
	switch a.family() {
	case latency.EngineLlamaCpp:
		return "-np/--parallel, its slots"
	case "sglang":
		return "max_running_requests"
	case "tgi":
		return "max_concurrent_requests, max_batch_total_tokens"
	}
	return "max_num_seqs"
}

// gaugeQueueText is the evidence of a queue named from the gauges alone.
func (a *analysis) gaugeQueueText() string {
	e := a.ev
	s := fmt.Sprintf("The server gave no per-request split, so how each request's TTFT divides into queue wait, "+
		"prefill and the network is unknown; but its own gauges (%s's /metrics, %d samples over the run) show "+
		"requests waiting throughout: waiting above zero in %.0f%% of the samples, %s on average, up to %s",
		e.engine, e.samples, 100*e.waitingShare, num(e.waitingMean), num0(e.waitingPeak))
	if e.has("running") {
		s += fmt.Sprintf(", while %s ran at once on average (up to %s)", num(e.runningMean), num0(e.runningPeak))
	}
	if v, name, ok := a.batchLimit(); ok {
		s += fmt.Sprintf("; its limit %s is %s", name, num0(v))
	}
	if d := a.sample(latency.TTFT); len(d) > 0 {
		s += fmt.Sprintf(". TTFT ranges from %s to %s (P50 %s)", fmtMS(ms(d[0])), fmtMS(ms(d[len(d)-1])), fmtMS(ms(d[len(d)/2])))
	}
	return s + ": requests queue for a place in the batch."
}

// runShape is the run's arithmetic by Little's law: with λ completions
// per second, the mean number of requests in flight is λ × mean E2E
// (here from the request written to its end); a request's service takes
// about its time to first token once served (least) plus the mean time
// after its first token, so about λ × that were being served at once, and
// the rest waited. A request's time to first token once served is the
// least TTFT (a request that did not wait), or, where the answers streamed
// one at a time, the median time from the end of the answer before it.
type runShape struct {
	rps                     float64
	e2e, ttft, least, after float64 // ms: mean E2E, mean TTFT, least (see above), mean after the first token
	inFlight, served        float64
	streaming               float64 // mean answers streaming while any is (0: too little streaming to tell)
}

// shapeQueue reads the run's shape from its streamed successes (rps is
// the completions per second); ok when it shows a queue: a request or
// more waiting on average, and a mean TTFT at least 3 times the least.
func (a *analysis) shapeQueue(rps float64) (runShape, bool) {
	var sh runShape
	var spans []shapeSpan
	for _, i := range a.ok {
		r := &a.rows[i]
		if r.firstTok == 0 || r.end <= r.firstTok {
			continue
		}
		// From the request written: a new connection's setup is no
		// part of the service.
		from := max(r.sent, r.wrote)
		sp := shapeSpan{from: from, first: r.firstOut(), end: r.end}
		t := ms(sp.first - sp.from)
		sh.e2e += ms(sp.end - sp.from)
		sh.ttft += t
		if len(spans) == 0 || t < sh.least {
			sh.least = t
		}
		spans = append(spans, sp)
	}
	n := len(spans)
	if n < 8 || rps <= 0 || sh.least <= 0 {
		return runShape{}, false
	}
	sh.e2e, sh.ttft, sh.rps = sh.e2e/float64(n), sh.ttft/float64(n), rps
	sh.after = sh.e2e - sh.ttft
	sh.inFlight = rps * sh.e2e / 1000
	sh.streaming = streamingAtOnce(spans)
	if sh.oneAtATime() {
		sh.least = serialFirstToken(spans)
	}
	sh.served = rps * (sh.least + sh.after) / 1000
	return sh, sh.waiting() >= 1 && sh.ttft >= 3*sh.least
}

// shapeSpan is one streamed answer's instants: written, first output, end.
type shapeSpan struct{ from, first, end int64 }

// streamingAtOnce is the mean number of answers streaming (between their
// first token and their end) while any is: about 1 where they never
// overlap. 0 when the answers streamed for less than 30 % of the run, too
// little to tell one at a time from together.
func streamingAtOnce(spans []shapeSpan) float64 {
	iv := make([]shapeSpan, len(spans))
	copy(iv, spans)
	slices.SortFunc(iv, func(x, y shapeSpan) int { return cmp.Compare(x.first, y.first) })
	var sum, union, curEnd int64
	lo, hi := iv[0].from, iv[0].end
	curEnd = iv[0].first
	for _, s := range iv {
		sum += s.end - s.first
		lo, hi = min(lo, s.from), max(hi, s.end)
		union += max(0, s.end-max(s.first, curEnd))
		curEnd = max(curEnd, s.end)
	}
	if union <= 0 || float64(union) < 0.3*float64(hi-lo) {
		return 0
	}
	return float64(sum) / float64(union)
}

// serialFirstToken is, for answers served one at a time, the median time
// (ms) from the later of a request's writing and the end of the answer
// before its first token to that first token: its time to first token
// once served.
func serialFirstToken(spans []shapeSpan) float64 {
	ends := make([]int64, len(spans))
	for i, s := range spans {
		ends[i] = s.end
	}
	slices.Sort(ends)
	ts := make([]float64, 0, len(spans))
	for _, s := range spans {
		start := s.from
		if k, _ := slices.BinarySearch(ends, s.first+1); k > 0 {
			start = max(start, ends[k-1])
		}
		ts = append(ts, ms(s.first-start))
	}
	slices.Sort(ts)
	return ts[len(ts)/2]
}

// oneAtATime says whether the answers streamed one at a time while two or
// more requests were in flight.
func (sh runShape) oneAtATime() bool {
	return sh.streaming > 0 && sh.streaming <= 1.1 && sh.inFlight >= 1.75
}

// waiting is the mean number of requests waiting: in flight, not served.
func (sh runShape) waiting() float64 { return sh.inFlight - sh.served }

// serial says whether the shape is of a server that serves one request at
// a time: about one served while two or more are in flight.
func (sh runShape) serial() bool {
	return sh.oneAtATime() || sh.served <= 1.5 && sh.inFlight >= 1.75
}

func (sh runShape) put(nums map[string]float64) {
	nums["in_flight_mean"], nums["served_at_once"], nums["waiting_mean"] = sh.inFlight, sh.served, sh.waiting()
	nums["ttft_mean_ms"], nums["ttft_least_ms"] = sh.ttft, sh.least
	if sh.streaming > 0 {
		nums["streaming_at_once"] = sh.streaming
	}
}

func (sh runShape) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "The server gave no per-request split and no queue gauge, so how each request's TTFT divides "+
		"into queue wait, prefill and the network is unknown; the run's own shape shows a queue (Little's law): "+
		"%s requests were in flight on average (%s completions/s × mean E2E %s); a request took about %s to serve ",
		num(sh.inFlight), num(sh.rps), fmtMS(sh.e2e), fmtMS(sh.least+sh.after))
	if sh.oneAtATime() {
		fmt.Fprintf(&b, "(%s from the end of the answer before it to its first token, the median, plus the mean %s "+
			"after the first token; the answers streamed one at a time, %s at once on average while any streamed)",
			fmtMS(sh.least), fmtMS(sh.after), num(sh.streaming))
	} else {
		fmt.Fprintf(&b, "(the least TTFT, %s, a request that did not wait, plus the mean %s after the first token)",
			fmtMS(sh.least), fmtMS(sh.after))
	}
	fmt.Fprintf(&b, ", so about %s were served at once and %s waited; the mean TTFT, %s, is %.1f× that first token.",
		num(sh.served), num(sh.waiting()), fmtMS(sh.ttft), sh.ttft/sh.least)
	if sh.serial() {
		b.WriteString(" The server serves one request at a time (one slot) and the rest wait for it.")
	}
	return b.String()
}
