package gateway

import "time"

// A policy is one step of a completion request's way in, before the
// pool's queue: it reads the exchange, may change it (its key, body and
// request, route and pool, the body fields to rewrite, its priority and
// deadline), or refuses the request. The steps are one-method types run
// in a chain (inbound), each in its own file with its test, as caddy's
// reverse proxy chains its handlers.
type policy interface {
	apply(x *exchange) *rejection
}

// inbound is the chain every completion request passes, in order: the
// key, the body, the route, the route's length and the key's limits, the
// model name sent upstream, the body rewrite, then the request's
// priority and deadline in the queue.
var inbound = []policy{
	authenticate{},
	readBody{},
	routeRequest{},
	lengthControl{},
	keyLimits{},
	upstreamModel{},
	rewriteBody{},
	queuePriority{},
	ttftDeadline{},
}

// rejection is a policy's refusal: the OpenAI-shaped error the client
// gets. reason, when set, is counted in tokentrace_gateway_rejected_total
// (and is the error's code).
type rejection struct {
	status     int
	typ, msg   string
	param      string
	code       string
	reason     string
	pool       *pool // counted under this pool (nil: the request's)
	retryAfter time.Duration
}

// refuse makes a rejection that is not counted as a policy's.
func refuse(status int, typ, msg, param, code string) *rejection {
	return &rejection{status: status, typ: typ, msg: msg, param: param, code: code}
}

// shed makes a rejection counted under reason (also its code).
func shed(reason string, status int, typ, msg string, retryAfter time.Duration) *rejection {
	return &rejection{status: status, typ: typ, msg: msg, code: reason, reason: reason, retryAfter: retryAfter}
}

// admitInbound runs the inbound chain; false when a policy refused the
// request (it has then been answered).
func (x *exchange) admitInbound() bool {
	for _, p := range inbound {
		if r := p.apply(x); r != nil {
			x.refuse(r)
			return false
		}
	}
	return true
}

// refuse answers a rejection, counting a policy's.
func (x *exchange) refuse(r *rejection) {
	if r.reason != "" {
		if m := x.g.Metrics; m != nil {
			p := r.pool
			if p == nil {
				p = x.pool
			}
			pool := ""
			if p != nil {
				pool = p.name
			}
			m.Rejected.WithLabelValues(pool, r.reason).Inc()
		}
	}
	x.fail(r.status, r.typ, r.msg, r.param, r.code, r.retryAfter)
}

// setField notes a body field a policy changes; rewriteBody applies them
// all with one pass over the body.
func (x *exchange) setField(name string, v any) {
	if x.fields == nil {
		x.fields = map[string]any{}
	}
	x.fields[name] = v
}

// statusClientClosed records a request whose client went away (nginx's 499).
const statusClientClosed = 499
