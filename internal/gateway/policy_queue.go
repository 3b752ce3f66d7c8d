package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// The request headers the queue policies read.
const (
	headerDeadline = "X-Slo-Ttft-Ms" // TTFT deadline in milliseconds
	headerPriority = "X-Priority"    // priority class, higher first
)

// queuePriority sets the request's priority class in the queues: its
// key's, or X-Priority's when that is not above the key's (a key's
// priority caps what its requests may claim; without keys X-Priority
// sets it, default 0).
type queuePriority struct{}

func (queuePriority) apply(x *exchange) *rejection {
	x.prio = 0
	if x.key != nil {
		x.prio = x.key.cfg.Priority
	}
	v := x.r.Header.Get(headerPriority)
	if v == "" {
		return nil
	}
	p, err := strconv.Atoi(v)
	if err != nil {
		return refuse(http.StatusBadRequest, openai.TypeInvalidRequest, "X-Priority must be an integer", "", "invalid_priority")
	}
	if x.key == nil || p <= x.key.cfg.Priority {
		x.prio = p
	}
	return nil
}

// maxDeadlineMs bounds X-SLO-TTFT-Ms: one hour, in milliseconds.
const maxDeadlineMs = 3_600_000

// ttftDeadline sets the request's TTFT deadline: X-SLO-TTFT-Ms after its
// arrival, else the route's deadline_ttft; none without either. The
// header is a number of milliseconds in (0, maxDeadlineMs]; with keys it
// is a key's to claim, as X-Priority is: no tighter than the key's
// min_deadline_ttft, and ignored (the route's stands) for a key without
// one.
type ttftDeadline struct{}

func (ttftDeadline) apply(x *exchange) *rejection {
	x.deadline = time.Time{}
	d := x.route.DeadlineTTFT.D()
	if v := x.r.Header.Get(headerDeadline); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil || !(ms > 0 && ms <= maxDeadlineMs) {
			return refuse(http.StatusBadRequest, openai.TypeInvalidRequest, "X-SLO-TTFT-Ms must be a number of milliseconds above 0 and at most 3600000 (one hour)", "", "invalid_deadline")
		}
		hd := time.Duration(ms * float64(time.Millisecond))
		switch {
		case x.key == nil:
			d = hd
		case x.key.cfg.MinDeadlineTTFT > 0:
			d = max(hd, x.key.cfg.MinDeadlineTTFT.D())
		}
	}
	if d > 0 {
		x.deadline = x.tl.start.Add(d)
	}
	return nil
}
