package report

import (
	"fmt"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// ruleServerQueueing: TTFT's tail is mostly waiting in the server's
// scheduler, the queue grows over the run or requests arrive faster than
// they complete.
func ruleServerQueueing(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TTFT, latency.TTFTIntended)
	if !ok || len(a.ok) < 8 {
		return Finding{}, false
	}
	s := rep.Summary
	split := s.ServerSplit*2 >= s.Succeeded
	var w0, w1 float64 // mean wait (server queue, or TTFT without a split), first and last quarter
	if split {
		w0, w1 = a.quarters(func(r *row) int64 { return r.sq })
	} else {
		// An answer that came whole (no first-token instant) counts to its end.
		w0, w1 = a.quarters(func(r *row) int64 { return r.firstOut() - r.sent })
	}
	growing := w1 > 1.5*w0 && w1-w0 > 1
	ld := judgeLoad(rep, growing)
	overloaded, capacity := ld.overloaded, ld.capacity
	tail := a.tail(rep.TTFTSplit)
	nums := map[string]float64{"offered_rps": s.OfferedRPS, "completion_rps": s.CompletionRPS, "capacity_rps": capacity}
	var ev string
	if split && tail != nil {
		share := tail.share(latency.StageServerQueue)
		if tail.Largest != string(latency.StageServerQueue) || share < 0.4 {
			return Finding{}, false
		}
		q0, q1 := w0, w1
		nums["queue_share_p95"], nums["queue_first_quarter_ms"], nums["queue_last_quarter_ms"] = share, q0, q1
		if !growing && !overloaded && share < 0.5 {
			return Finding{}, false
		}
		ev = fmt.Sprintf("%sServer queueing is the largest TTFT term in the tail: %.0f%% of TTFT %s "+
			"(mean wait %s of %s).", prefix(why), 100*share, tailWords(tail), fmtMS(tail.meanMS(latency.StageServerQueue)), fmtMS(tail.TotalMS))
		if growing {
			ev += fmt.Sprintf(" The queue grows over the run: mean wait %s in the first quarter, %s in the last.",
				fmtMS(q0), fmtMS(q1))
		}
	} else {
		// No server split: infer queueing from TTFT growing while arrivals outpace completions.
		t0, t1 := w0, w1
		nums["ttft_first_quarter_ms"], nums["ttft_last_quarter_ms"] = t0, t1
		if !(overloaded && t1 > 2*t0) {
			return Finding{}, false
		}
		ev = fmt.Sprintf("%sThe server gave no stage split, but TTFT grows from a mean of %s in the first "+
			"quarter of the run to %s in the last while requests arrive faster than they complete: "+
			"requests are waiting in a queue.", prefix(why), fmtMS(t0), fmtMS(t1))
	}
	if e := a.ev; e.has("waiting") && e.waitingPeak > 0 {
		nums["server_waiting_peak"] = e.waitingPeak
		ev += fmt.Sprintf(" The server's own queue (its /metrics) held up to %s requests waiting.", num0(e.waitingPeak))
	}
	sev := "warning"
	first := fmt.Sprintf("keep the offered rate below the measured capacity (%s req/s) or scale out replicas", num(capacity))
	if overloaded {
		sev = "critical"
		ev += ld.evidence
		ev += fmt.Sprintf(" Measured capacity: %s req/s (%s).", num(capacity), ld.basis)
	} else {
		// Not overloaded on average: the queue comes from bursts.
		ev += fmt.Sprintf(" On average the server kept up (offered %s req/s, completed %s req/s), so the "+
			"queue builds in bursts of arrivals.", num(s.OfferedRPS), num(s.CompletionRPS))
		first = "headroom for bursts: more replicas at peak, or smoother arrivals upstream"
	}
	return Finding{
		Severity: sev, Title: "TTFT is dominated by waiting in the server's queue",
		Evidence: ev, Numbers: nums,
		Remedies: []string{
			first,
			"admission control or load shedding (answer 429 early instead of queueing past the SLO)",
			"priority scheduling for latency-sensitive requests",
		},
	}, true
}

// load is whether the run offered more than the server completed, and the
// capacity measured.
type load struct {
	overloaded bool
	capacity   float64
	basis      string // how capacity was measured
	evidence   string // the rates that show the overload
}

// judgeLoad compares offered and completion rates, per step in a sweep.
// Rate estimates from a finite run are rough (a burst at the end raises the
// offered rate): a small excess counts as overload only when the queue
// grows too, a large one (25 %) on its own.
func judgeLoad(rep *Report, growing bool) load {
	s := rep.Summary
	isOver := func(offered, completed float64) bool {
		return completed > 0 && (offered > 1.25*completed || (offered > 1.05*completed && growing))
	}
	ld := load{overloaded: isOver(s.OfferedRPS, s.CompletionRPS), capacity: s.CompletionRPS,
		basis: "the steady rate requests completed at while overloaded"}
	if !ld.overloaded {
		ld.basis = "the rate requests completed at; the run did not saturate the server, so capacity is at least this"
	}
	ld.evidence = fmt.Sprintf(" Requests arrived at %s req/s but completed at %s req/s: the offered rate is "+
		"above the measured capacity.", num(s.OfferedRPS), num(s.CompletionRPS))
	if len(rep.Phases) > 0 {
		// A sweep: judge each step on its own rates.
		ld.overloaded = false
		var over []string
		peak := 0.0
		for _, ph := range rep.Phases {
			peak = max(peak, ph.CompletionRPS)
			if isOver(ph.OfferedRPS, ph.CompletionRPS) {
				ld.overloaded = true
				over = append(over, fmt.Sprintf("%s (offered %s, completed %s req/s)", ph.Name,
					num(ph.OfferedRPS), num(ph.CompletionRPS)))
			}
		}
		ld.capacity, ld.basis = peak, "the highest steady completion rate of any sweep step"
		ld.evidence = " Steps offered more than the server completed: " + strings.Join(over, ", ") + "."
	}
	if rep.Capacity != nil {
		ld.capacity, ld.basis = rep.Capacity.RPS, rep.Capacity.Basis
	}
	return ld
}
