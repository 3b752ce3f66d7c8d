package report

import (
	"fmt"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
)

// ruleOutsideModel: a large share of E2E is spent outside the model —
// the network between hops, connection set-up and sending, the gateway.
// Application stages are ruleAppStage's.
func ruleOutsideModel(a *analysis, rep *Report) (Finding, bool) {
	if rep.Summary.ServerSplit*2 < rep.Summary.Succeeded || rep.Decomposition == nil {
		return Finding{}, false
	}
	for _, gname := range []string{"median", "p95+"} {
		g := group(rep.Decomposition, gname)
		if g == nil {
			continue
		}
		var share, topShare float64
		var top StageShare
		var parts []string
		for _, s := range g.Stages {
			if !outsideModel(s) {
				continue
			}
			share += s.Share
			if s.Share > topShare {
				top, topShare = s, s.Share
			}
			if s.Share >= 0.01 {
				parts = append(parts, fmt.Sprintf("%s %s (%.0f%%)", partWords(s), fmtMS(s.MeanMS), 100*s.Share))
			}
		}
		if share < 0.2 {
			continue
		}
		return Finding{Severity: SeverityWarning, Title: "Much of the latency is spent outside the model",
			Numbers: map[string]float64{"outside_share": share, "largest_outside_share": topShare},
			Evidence: fmt.Sprintf("%.0f%% of E2E in the %s group (mean %s) is outside the server's queue, "+
				"prefill and decode and the application's stages: %s. The largest is %s.", 100*share, gname, fmtMS(g.TotalMS),
				strings.Join(parts, ", "), partWords(top)),
			Remedies: partRemedies(top)}, true
	}
	return Finding{}, false
}

// outsideModel says whether a part is outside the model and the
// application: the client's connect and send, the gateway's stages, the
// network between hops and the stream's tail.
func outsideModel(s StageShare) bool {
	return s.is(latency.StageConnect) || s.is(latency.StageSend) || s.is(latency.StageGateway) ||
		((s.Stage == latency.PartNetwork || s.is(latency.StageStreamTail)) && strings.Contains(s.Hop, "→"))
}

// partWords names a part in evidence text: "network client→server",
// "app retrieval", "unattributed".
func partWords(s StageShare) string {
	switch {
	case s.Hop == "":
		return s.Stage
	case strings.Contains(s.Hop, "→"):
		return s.Stage + " " + s.Hop
	}
	return s.Hop + " " + s.Stage
}

// partRemedies are the levers that act on a part: the vocabulary's
// stages' own, the application's by the stage's name.
func partRemedies(s StageShare) []string {
	switch {
	case s.is(latency.StageConnect):
		return outsideRemedies(latency.StageConnect)
	case s.is(latency.StageGateway):
		return outsideRemedies(latency.StageGateway)
	case s.is(latency.StageStreamTail):
		return outsideRemedies(latency.StageStreamTail)
	case s.Stage == latency.PartNetwork || s.is(latency.StageSend):
		return outsideRemedies(latency.StageNetwork)
	case s.Stage == latency.PartUnattributed:
		return []string{"have the server (and every hop) report its stages in Server-Timing, so that this time is attributed",
			"check the HTTP frontend and tokenization time (API server CPU)"}
	case appStage(s):
		return appRemedies(s.Stage)
	case s.Hop == string(latency.HopServer) && s.Stage == string(latency.TimingFrontend):
		return outsideRemedies(latency.StageNetwork)
	}
	return stageRemedies(latency.Stage(s.Stage))
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
	sev := SeverityWarning
	if rate >= 0.01 {
		sev = SeverityCritical
	}
	ev := fmt.Sprintf("%d of %d requests failed (%.1f%%): %s.", s.Failed, s.Requests, 100*rate,
		strings.TrimSuffix(strings.TrimPrefix(errorList(s.Errors), " ("), ")"))
	if len(s.TopErrors) > 0 {
		m := s.TopErrors[0]
		ev += fmt.Sprintf(" Most frequent: %q (%d of them).", m.Message, m.Count)
	}
	var rem []string
	if s.Errors[string(latency.FailTimeout)] > 0 {
		rem = append(rem, "timeouts: the server is overloaded or stalled; lower the load or raise capacity")
	}
	if s.Errors[string(latency.FailRateLimited)] > 0 {
		rem = append(rem, "429s: the server sheds load; the offered rate is above what it admits")
	}
	if s.Errors[string(latency.FailHTTP5xx)]+s.Errors[string(latency.FailServer)]+s.Errors[string(latency.FailStreamCut)]+s.Errors[string(latency.FailReset)] > 0 {
		rem = append(rem, "server errors and cut streams: check the server's logs (OOM, preemption, crashes)")
	}
	if s.Errors[string(latency.FailConnect)] > 0 {
		rem = append(rem, "connection failures: check the address, TLS and the server's accept queue")
	}
	if s.Errors[string(latency.FailHTTP4xx)]+s.Errors[string(latency.FailInvalidEvent)] > 0 {
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
	ttft := rep.dist(latency.TTFT)
	cq := rep.dist(latency.ClientQueue)
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
			if !results.IsEnvelopeWarning(w) {
				soft = append(soft, "bench warned: "+w)
			}
		}
	}
	if len(strong) > 0 {
		return Finding{Severity: SeverityCritical, Title: "The client was a bottleneck: this run is not trustworthy",
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
	return Finding{Severity: SeverityInfo, Title: "The load generator doubted its own run", Evidence: ev,
		Numbers:  nums,
		Remedies: []string{"give the load generator more CPU, or lower the rate, before trusting small latencies"}}, true
}
