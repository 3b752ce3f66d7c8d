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
	w0, w1 := a.waitQuarters(split)
	growing := w1 > 1.5*w0 && w1-w0 > 1
	ld := judgeLoad(rep, growing, a.configuredRate())
	tail := a.ttftTail(rep)
	nums := map[string]float64{"offered_rps": s.OfferedRPS, "completion_rps": s.CompletionRPS, "capacity_rps": ld.capacity}
	var ev string
	var gauges, serial bool // named from the gauges alone; one request served at a time
	if split && tail != nil {
		ev, ok = splitQueueEvidence(why, tail, w0, w1, growing, ld.overloaded, nums)
	} else {
		ev, gauges, serial, ok = a.inferredQueueEvidence(why, s.CompletionRPS, w0, w1, ld.overloaded, nums)
	}
	if !ok {
		return Finding{}, false
	}
	ev += a.engineQueueEvidence(tail, split, gauges, nums)
	return a.queueingFinding(ld, s.CompletionRPS, ev, nums, serial), true
}

// waitQuarters returns the mean wait (server queue, or TTFT without a
// split) in the run's first and last quarter.
func (a *analysis) waitQuarters(split bool) (w0, w1 float64) {
	if split {
		return a.quarters(func(r *row) int64 { return r.sq })
	}
	// An answer that came whole (no first-token instant) counts to its end.
	return a.quarters(func(r *row) int64 { return r.firstOut() - r.sent })
}

// splitQueueEvidence words the queue from the server's stage split; false
// when the queue is not the tail's largest term.
func splitQueueEvidence(why string, tail *StageGroup, q0, q1 float64, growing, overloaded bool,
	nums map[string]float64) (string, bool) {
	share := tail.share(latency.StageServerQueue)
	if !tail.largestIs(latency.StageServerQueue) || share < 0.4 {
		return "", false
	}
	nums["queue_share_p95"], nums["queue_first_quarter_ms"], nums["queue_last_quarter_ms"] = share, q0, q1
	if !growing && !overloaded && share < 0.5 {
		return "", false
	}
	ev := fmt.Sprintf("%sServer queueing is the largest TTFT term in the tail: %.0f%% of TTFT %s "+
		"(mean wait %s of %s).", prefix(why), 100*share, tailWords(tail), fmtMS(tail.meanMS(latency.StageServerQueue)), fmtMS(tail.TotalMS))
	if growing {
		ev += fmt.Sprintf(" The queue grows over the run: mean wait %s in the first quarter, %s in the last.",
			fmtMS(q0), fmtMS(q1))
	}
	return ev, true
}

// inferredQueueEvidence infers queueing without a server split: from TTFT
// growing while arrivals outpace completions (an open loop's: a closed loop
// sends only as its answers come), else from the server's gauges, else
// from the run's own shape.
func (a *analysis) inferredQueueEvidence(why string, completionRPS, t0, t1 float64, overloaded bool,
	nums map[string]float64) (ev string, gauges, serial, ok bool) {
	nums["ttft_first_quarter_ms"], nums["ttft_last_quarter_ms"] = t0, t1
	switch {
	case overloaded && t1 > 2*t0 && !a.closedLoop():
		ev = fmt.Sprintf("%sThe server gave no stage split, but TTFT grows from a mean of %s in the first "+
			"quarter of the run to %s in the last while requests arrive faster than they complete: "+
			"requests are waiting in a queue.", prefix(why), fmtMS(t0), fmtMS(t1))
	case a.gaugeQueue(nums):
		gauges = true
		ev = prefix(why) + a.gaugeQueueText()
	case a.ev.has("waiting"):
		return "", false, false, false // the server's own gauge shows no queue
	default:
		sh, found := a.shapeQueue(completionRPS)
		if !found {
			return "", false, false, false
		}
		sh.put(nums)
		ev = prefix(why) + sh.text()
		serial = sh.serial()
	}
	return ev, gauges, serial, true
}

// engineQueueEvidence adds what the engine's own evidence says of its queue.
func (a *analysis) engineQueueEvidence(tail *StageGroup, split, gauges bool, nums map[string]float64) string {
	var ev string
	llama := a.engine() == latency.EngineLlamaCpp
	if e := a.ev; e.has("waiting") && e.waitingPeak > 0 && !llama && !gauges {
		nums["server_waiting_peak"] = e.waitingPeak
		ev += fmt.Sprintf(" The server's own queue (its /metrics) held up to %s requests waiting.", num0(e.waitingPeak))
	}
	switch {
	case llama:
		nums["server_waiting_peak"], nums["server_running_peak"] = a.ev.waitingPeak, a.ev.runningPeak
		ev += a.slotQueueing(tail)
	case a.engine() == latency.EngineOllama && a.queue != nil && split && tail != nil:
		ev += fmt.Sprintf(" Ollama runs at most OLLAMA_NUM_PARALLEL requests of a model at once and holds the rest. "+
			"In the tail, Ollama's own prompt processing (prompt_eval_duration) is %s of %s; the wait before it is %s "+
			"(inferred: Ollama reports no queue wait; %s left unattributed as every request's HTTP, templating and "+
			"tokenization).", fmtMS(tail.meanMS(latency.StagePrefill)), fmtMS(tail.TotalMS),
			fmtMS(tail.meanMS(latency.StageServerQueue)), fmtMS(a.queue.FloorMS))
	case a.queue != nil && split:
		ev += " The server reports no queue wait: " + a.queue.Basis + "."
	}
	return ev
}

// queueingFinding names the queue's cause and its remedies.
func (a *analysis) queueingFinding(ld load, completionRPS float64, ev string, nums map[string]float64,
	serial bool) Finding {
	sev, title := SeverityWarning, "TTFT is dominated by waiting in the server's queue"
	if serial {
		title = "Requests are served one at a time: the rest wait in a queue"
	}
	first := fmt.Sprintf("keep the offered rate below the measured capacity (%s req/s) or scale out replicas", num(ld.capacity))
	rest := []string{"admission control or load shedding (answer 429 early instead of queueing past the SLO)",
		"priority scheduling for latency-sensitive requests"}
	switch {
	case a.ev.preempting():
		// The queue waits for KV blocks: the cache, not the rate, is the limit.
		title = "TTFT is dominated by waiting in the server's queue, behind a full KV cache"
		ev += fmt.Sprintf(" The server's KV cache ran out (%s): waiting requests wait for blocks to free.",
			a.ev.counters())
		return Finding{Severity: sev, Title: title, Evidence: ev, Numbers: nums,
			Remedies: append(a.kvRemedies(), rest...)}
	case a.closedLoop() && serial:
		ev += " The closed loop keeps more requests in flight than the server serves at once."
		first = "fewer workers, or more parallel slots on the server (Ollama's OLLAMA_NUM_PARALLEL, llama.cpp's -np), " +
			"or more replicas"
	case a.closedLoop() && a.engine() == latency.EngineOllama:
		ev += " The closed loop keeps more requests in flight than Ollama runs at once; the rest wait."
		first = "fewer workers than OLLAMA_NUM_PARALLEL, or a larger OLLAMA_NUM_PARALLEL (each parallel request " +
			"gets num_ctx tokens of KV cache), or more Ollama replicas"
	case a.closedLoop() && a.engine() == latency.EngineLlamaCpp:
		ev += " The closed loop keeps more requests in flight than the server has slots; the rest wait for one."
		first = "fewer workers than slots, or more slots (-np, with -c large enough for each slot's context: " +
			"each slot gets -c ÷ -np tokens), or more llama-server replicas"
	case a.closedLoop():
		// A closed loop offers only as many requests as it has workers.
		limit := a.limitName()
		ev += " The closed loop keeps its workers' requests in flight; the server runs fewer at once and the " +
			"rest wait: its batch limit (" + limit + ") or its KV cache sets how many run."
		first = "fewer workers, or a server that runs more requests at once (" + limit + ", KV cache, replicas)"
	case ld.overloaded:
		sev = SeverityCritical
		ev += ld.evidence
		ev += fmt.Sprintf(" Measured capacity: %s req/s (%s).", num(ld.capacity), ld.basis)
	default:
		// Not overloaded on average: the queue comes from bursts.
		ev += fmt.Sprintf(" On average the server kept up (offered %s req/s, completed %s req/s), so the "+
			"queue builds in bursts of arrivals.", num(ld.offered), num(completionRPS))
		first = "headroom for bursts: more replicas at peak, or smoother arrivals upstream"
	}
	return Finding{Severity: sev, Title: title, Evidence: ev, Numbers: nums, Remedies: append([]string{first}, rest...)}
}

// configuredRate is the mean arrival rate of a single open-loop run, as
// configured (run.json); 0 when unknown, for sweeps and for several inputs.
func (a *analysis) configuredRate() float64 {
	if len(a.runs) != 1 || a.runs[0].Mode != "open" || len(a.runs[0].Points) > 0 {
		return 0
	}
	return a.runs[0].OfferedRate
}

// closedLoop says whether the run is one closed loop (not a sweep).
func (a *analysis) closedLoop() bool {
	for _, run := range a.runs {
		if run.Mode == "closed" && len(run.Points) == 0 {
			return true
		}
	}
	return false
}

// load is whether the run offered more than the server completed, and the
// capacity measured.
type load struct {
	offered    float64 // the rate judged: configured when known, else realized
	overloaded bool
	capacity   float64
	basis      string // how capacity was measured
	evidence   string // the rates that show the overload
}

// judgeLoad compares offered and completion rates, per step in a sweep.
// Rate estimates from a finite run are rough (a burst at the end raises the
// offered rate): a small excess counts as overload only when the queue
// grows too, a large one (25 %) on its own. The mean rate the load was
// configured with (configured > 0), when known, is the offered rate: a
// short run of bursty arrivals realizes a rate far from its mean, and
// queueing behind such bursts is not overload.
func judgeLoad(rep *Report, growing bool, configured float64) load {
	s := rep.Summary
	isOver := func(offered, completed float64) bool {
		return completed > 0 && (offered > 1.25*completed || (offered > 1.05*completed && growing))
	}
	offered, arrived := s.OfferedRPS, fmt.Sprintf("arrived at %s req/s", num(s.OfferedRPS))
	if configured > 0 {
		offered = configured
		arrived = fmt.Sprintf("were sent at a mean of %s req/s (configured; %s realized)", num(configured), num(s.OfferedRPS))
	}
	ld := load{overloaded: isOver(offered, s.CompletionRPS), capacity: s.CompletionRPS,
		basis: "requests completed per second from the first answer's end to the last, with the server busy throughout: what it can serve", offered: offered}
	if !ld.overloaded {
		ld.basis = "the rate requests completed at; the run did not saturate the server, so capacity is at least this"
	}
	ld.evidence = fmt.Sprintf(" Requests %s but completed at %s req/s: the offered rate is "+
		"above the measured capacity.", arrived, num(s.CompletionRPS))
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
		ld.capacity, ld.basis = peak, "the highest completion rate of any sweep step (requests completed per second, first answer's end to the last)"
		ld.evidence = " Steps offered more than the server completed: " + strings.Join(over, ", ") + "."
	}
	if rep.Capacity != nil {
		ld.capacity, ld.basis = rep.Capacity.RPS, rep.Capacity.Basis
	}
	return ld
}
