package gateway

import (
	"math"
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

// ttftDeadline sets the request's TTFT deadline: X-SLO-TTFT-Ms after its
// arrival, else the route's deadline_ttft; none without either.
type ttftDeadline struct{}

func (ttftDeadline) apply(x *exchange) *rejection {
	x.deadline = time.Time{}
	if v := x.r.Header.Get(headerDeadline); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil || !(ms > 0) || math.IsInf(ms, 0) {
			return refuse(http.StatusBadRequest, openai.TypeInvalidRequest, "X-SLO-TTFT-Ms must be a positive number of milliseconds", "", "invalid_deadline")
		}
		x.deadline = x.tl.start.Add(time.Duration(ms * float64(time.Millisecond)))
	} else if d := x.route.DeadlineTTFT.D(); d > 0 {
		x.deadline = x.tl.start.Add(d)
	}
	return nil
}
