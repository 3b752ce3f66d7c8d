package simulate

import (
	"math"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// lengthSpan is the smallest and largest prompt and output lengths of the
// successful records a run wrote.
type lengthSpan struct{ in, out [2]int }

func (l *lengthSpan) add(r *latency.Record) {
	if r.ErrorKind != "" || r.InputTokens <= 0 {
		return
	}
	if l.in[1] == 0 {
		l.in, l.out = [2]int{r.InputTokens, r.InputTokens}, [2]int{r.OutputTokens, r.OutputTokens}
		return
	}
	l.in = [2]int{min(l.in[0], r.InputTokens), max(l.in[1], r.InputTokens)}
	l.out = [2]int{min(l.out[0], r.OutputTokens), max(l.out[1], r.OutputTokens)}
}

// envelopeCase is what a run covered, for Envelope.Check: its lengths,
// the most requests one replica ran at once (the samples' sum over the
// replicas, shared out), its preemptions and whether its queue grew
// without bound.
func envelopeCase(res Result, l lengthSpan, replicas int) engine.EnvelopeCase {
	c := engine.EnvelopeCase{Input: l.in, Output: l.out, QueueGrowing: queueGrowing(res.Samples)}
	for _, s := range res.Samples {
		c.Concurrency = max(c.Concurrency, int(math.Ceil(float64(s.Running)/float64(max(replicas, 1)))))
	}
	for _, r := range res.Replicas {
		c.Preemptions += r.Stats.Preemptions
	}
	return c
}

// queueGrowing reports a waiting queue that grew through the run: its
// mean over each quarter of the samples rose every quarter, and the last
// quarter's is at least twice the second's and at least 16 requests.
func queueGrowing(ss []Sample) bool {
	if len(ss) < 8 {
		return false
	}
	var q [4]float64
	for i, s := range ss {
		q[i*4/len(ss)] += float64(s.Waiting)
	}
	for i := 1; i < 4; i++ {
		if q[i] <= q[i-1] {
			return false
		}
	}
	n := float64(len(ss)) / 4
	return q[3]/n >= 16 && q[3] >= 2*q[1]
}
