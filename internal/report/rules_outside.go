package report

import (
	"fmt"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// ruleOutsideModel: a large share of E2E is spent outside the model —
// network, connection set-up, the gateway, the end of the stream.
func ruleOutsideModel(a *analysis, rep *Report) (Finding, bool) {
	if rep.Summary.ServerSplit*2 < rep.Summary.Succeeded || rep.Decomposition == nil {
		return Finding{}, false
	}
	outside := []latency.Stage{latency.StageConnect, latency.StageSend, latency.StageGateway,
		latency.StageNetwork, latency.StageStreamTail}
	var best Finding
	found := false
	for _, gname := range []string{"median", "p95+"} {
		g := group(rep.Decomposition, gname)
		if g == nil {
			continue
		}
		var share float64
		top, topShare := latency.Stage(""), 0.0
		var parts []string
		for _, st := range outside {
			s := g.share(st)
			share += s
			if s > topShare {
				top, topShare = st, s
			}
			if s >= 0.01 {
				parts = append(parts, fmt.Sprintf("%s %s (%.0f%%)", st, fmtMS(g.meanMS(st)), 100*s))
			}
		}
		if share < 0.2 || found {
			continue
		}
		found = true
		best = Finding{Severity: "warning", Title: "Much of the latency is spent outside the model",
			Numbers: map[string]float64{"outside_share": share, "largest_outside_share": topShare},
			Evidence: fmt.Sprintf("%.0f%% of E2E in the %s group (mean %s) is outside the server's queue, "+
				"prefill and decode: %s. The largest is %s.", 100*share, gname, fmtMS(g.TotalMS),
				strings.Join(parts, ", "), top),
			Remedies: outsideRemedies(top)}
	}
	return best, found
}

func outsideRemedies(top latency.Stage) []string {
	switch top {
	case latency.StageConnect:
		return []string{"reuse connections (keep-alive, HTTP/2), warm connection pools", "terminate TLS closer to the client"}
	case latency.StageGateway:
		return []string{"profile the gateway: its policy, auth and queue time are on every request's path"}
	case latency.StageStreamTail:
		return []string{"check post-processing after the last token (detokenization, filters, usage accounting)",
			"flush each event as it is produced (no response buffering in proxies)"}
	default:
		return []string{"move the client closer to the server (network transit both ways)",
			"check the HTTP frontend and tokenization time (API server CPU)",
			"disable buffering in proxies and load balancers between client and server"}
	}
}

// ruleErrors: failed requests, by kind.
func ruleErrors(a *analysis, rep *Report) (Finding, bool) {
	s := rep.Summary
	if s.Failed == 0 {
		return Finding{}, false
	}
	rate := float64(s.Failed) / float64(s.Requests)
	sev := "warning"
	if rate >= 0.01 {
		sev = "critical"
	}
	ev := fmt.Sprintf("%d of %d requests failed (%.1f%%): %s.", s.Failed, s.Requests, 100*rate,
		strings.TrimSuffix(strings.TrimPrefix(errorList(s.Errors), " ("), ")"))
	var rem []string
	if s.Errors[latency.ErrTimeout] > 0 {
		rem = append(rem, "timeouts: the server is overloaded or stalled; lower the load or raise capacity")
	}
	if s.Errors[latency.ErrRateLimited] > 0 {
		rem = append(rem, "429s: the server sheds load; the offered rate is above what it admits")
	}
	if s.Errors[latency.ErrHTTP5xx]+s.Errors[latency.ErrServer]+s.Errors[latency.ErrStreamCut]+s.Errors[latency.ErrReset] > 0 {
		rem = append(rem, "server errors and cut streams: check the server's logs (OOM, preemption, crashes)")
	}
	if s.Errors[latency.ErrConnect] > 0 {
		rem = append(rem, "connection failures: check the address, TLS and the server's accept queue")
	}
	if s.Errors[latency.ErrHTTP4xx]+s.Errors[latency.ErrInvalidEvent] > 0 {
		rem = append(rem, "4xx and invalid events: the requests or the server's stream format are wrong")
	}
	return Finding{Severity: sev, Title: "Requests failed", Evidence: ev, Remedies: rem,
		Numbers: map[string]float64{"failed": float64(s.Failed), "error_rate": rate}}, true
}

// ruleClientBottleneck: the load generator could not keep its schedule or
// its own overhead is a large part of what it measured: the run's numbers
// describe the client, not the server. Its own warnings alone, when the lag
// they describe is small against the latencies measured, make a warning
// rather than a verdict on the run.
func ruleClientBottleneck(a *analysis, rep *Report) (Finding, bool) {
	var strong, soft []string
	nums := map[string]float64{}
	ttft := rep.dist("ttft")
	cq := rep.dist("client_queue")
	if cq != nil && ttft != nil {
		nums["client_queue_p99_ms"], nums["ttft_p50_ms"] = cq.P99, ttft.P50
		if cq.P99 > 10 && cq.P99 > 0.1*ttft.P50 {
			strong = append(strong, fmt.Sprintf("requests left the client late: P99 client queue (schedule "+
				"lag) %s, %.0f%% of the median TTFT (%s)", fmtMS(cq.P99), 100*cq.P99/ttft.P50, fmtMS(ttft.P50)))
		}
	}
	for _, run := range a.runs {
		if run.OverheadFloor > 0 && ttft != nil && ms(int64(run.OverheadFloor)) > 0.1*ttft.P50 {
			nums["overhead_floor_ms"] = ms(int64(run.OverheadFloor))
			strong = append(strong, fmt.Sprintf("the client's own overhead floor is %s, over 10%% of the "+
				"median TTFT (%s)", dur(run.OverheadFloor), fmtMS(ttft.P50)))
		}
		for _, w := range run.Warnings {
			soft = append(soft, "bench warned: "+w)
		}
	}
	if len(strong) > 0 {
		return Finding{Severity: "critical", Title: "The client was a bottleneck: this run is not trustworthy",
			Evidence: strings.Join(append(strong, soft...), "; ") + ". Latencies include the load generator's own delays.",
			Numbers:  nums,
			Remedies: []string{"run the load generator on its own machine or with more CPU",
				"lower the request rate or the number of workers", "check in-flight caps and connection limits"}}, true
	}
	if len(soft) == 0 {
		return Finding{}, false
	}
	ev := strings.Join(soft, "; ") + "."
	if cq != nil && ttft != nil && ttft.P50 > 0 {
		ev += fmt.Sprintf(" The P99 client queue (%s) is %.1f%% of the median TTFT (%s), so the "+
			"latencies measured are still the server's.", fmtMS(cq.P99), 100*cq.P99/ttft.P50, fmtMS(ttft.P50))
	}
	return Finding{Severity: "info", Title: "The load generator doubted its own run", Evidence: ev,
		Numbers:  nums,
		Remedies: []string{"give the load generator more CPU, or lower the rate, before trusting small latencies"}}, true
}
