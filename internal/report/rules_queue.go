package report

import (
	"fmt"
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
// (here from the request written to its end); a
// request's service takes about the least TTFT (a request that did not
// wait) plus the mean time after its first token, so about λ × that were
// being served at once, and the rest waited.
type runShape struct {
	rps                     float64
	e2e, ttft, least, after float64 // ms: mean E2E, mean TTFT, least TTFT, mean after the first token
	inFlight, served        float64
}

// shapeQueue reads the run's shape from its streamed successes (rps is
// the completions per second); ok when it shows a queue: a request or
// more waiting on average, and a mean TTFT at least 3 times the least.
func (a *analysis) shapeQueue(rps float64) (runShape, bool) {
	var sh runShape
	var n int
	for _, i := range a.ok {
		r := &a.rows[i]
		if r.firstTok == 0 || r.end <= r.firstTok {
			continue
		}
		// From the request written: a new connection's setup is no
		// part of the service.
		from := r.sent
		if r.wrote > r.sent {
			from = r.wrote
		}
		t := ms(r.firstOut() - from)
		sh.e2e += ms(r.end - from)
		sh.ttft += t
		if n == 0 || t < sh.least {
			sh.least = t
		}
		n++
	}
	if n < 8 || rps <= 0 || sh.least <= 0 {
		return runShape{}, false
	}
	sh.e2e, sh.ttft, sh.rps = sh.e2e/float64(n), sh.ttft/float64(n), rps
	sh.after = sh.e2e - sh.ttft
	sh.inFlight, sh.served = rps*sh.e2e/1000, rps*(sh.least+sh.after)/1000
	return sh, sh.waiting() >= 1 && sh.ttft >= 3*sh.least
}

// waiting is the mean number of requests waiting: in flight, not served.
func (sh runShape) waiting() float64 { return sh.inFlight - sh.served }

// serial says whether the shape is of a server that serves one request at
// a time: about one served while two or more are in flight.
func (sh runShape) serial() bool { return sh.served <= 1.5 && sh.inFlight >= 1.75 }

func (sh runShape) put(nums map[string]float64) {
	nums["in_flight_mean"], nums["served_at_once"], nums["waiting_mean"] = sh.inFlight, sh.served, sh.waiting()
	nums["ttft_mean_ms"], nums["ttft_least_ms"] = sh.ttft, sh.least
}

func (sh runShape) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "The server gave no per-request split and no queue gauge, so how each request's TTFT divides "+
		"into queue wait, prefill and the network is unknown; the run's own shape shows a queue (Little's law): "+
		"%s requests were in flight on average (%s completions/s × mean E2E %s); a request took about %s to serve "+
		"(the least TTFT, %s, a request that did not wait, plus the mean %s after the first token), so about %s "+
		"were served at once and %s waited; the mean TTFT, %s, is %.1f× the least.", num(sh.inFlight), num(sh.rps),
		fmtMS(sh.e2e), fmtMS(sh.least+sh.after), fmtMS(sh.least), fmtMS(sh.after), num(sh.served), num(sh.waiting()),
		fmtMS(sh.ttft), sh.ttft/sh.least)
	if sh.serial() {
		b.WriteString(" The server serves one request at a time (one slot) and the rest wait for it.")
	}
	return b.String()
}
