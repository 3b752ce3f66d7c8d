package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
)

// forwardState names where a request's attempts stand: forward is a small
// state machine over them.
type forwardState int

const (
	// waiting: attempts are running; wait for a result, the hedge timer
	// or the end of the request's context.
	waiting forwardState = iota
	// retrying: the last attempt failed retryably and none runs: try a
	// replica of the pool not yet tried.
	retrying
	// fallingBack: the pool's tries are spent: send the request to the
	// route's fallback (once).
	fallingBack
	// streaming: an attempt produced a first token: stream it.
	streaming
	// failed: no first token will come: answer with the reason.
	failed
)

// attempts is one request's tries, in its route's pool and then in its
// fallback's. The settings in force are those of the route whose pool is
// tried: the request's route, then the fallback route (its timeouts,
// retries, hedging and early rejection; its length and key policies are
// not applied again).
type attempts struct {
	x     *exchange
	ctx   context.Context
	route *RouteConfig // whose settings apply
	pool  *pool        // where attempts go
	body  []byte       // what is sent (the fallback's has its model renamed)
	// admitted is when the request was admitted to pool: the start of its
	// attempts' upstream TTFT, which feeds pool's adaptive limit.
	admitted time.Time
	tries    int        // tries left in pool (1 + retries; a hedge takes none)
	tried    []*Replica // the pool's replicas tried (in triedBuf while few)
	triedBuf [4]*Replica
	fellBack bool
	// prefill: these are a disaggregated route's prefill half, which has
	// no fallback (prefillHalf).
	prefill bool
	// Every attempt's result is received exactly once: by wait, or by
	// stop for those still running (a loser that got a first token
	// anyway releases its connection there). An attempt run in forward's
	// own goroutine (no hedging) leaves its result in ready; hedged ones
	// send theirs on results (made for the first).
	ready      *attempt
	results    chan *attempt
	running    []*attempt // started, result not yet received
	runningBuf [2]*attempt
	// bufs are the attempts' pooled reading buffers (attemptBuf), given
	// back by stop.
	bufs    []*attemptBuf
	bufsBuf [2]*attemptBuf
	group   errgroup.Group // hedged attempts' goroutines
	hedge   <-chan time.Time
	timer   *time.Timer
	winner  *attempt
	last    *attempt   // the latest that failed
	refused *rejection // the fallback pool's queue refused the request
	release []func()   // admissions to give back (the fallback pool's)
}

// forward runs the attempts (retry, hedge, fallback) until one yields a
// first token, then streams it to the client. It reports whether a first
// token was produced.
func (x *exchange) forward(ctx context.Context) bool {
	f := &x.att
	*f = attempts{x: x, ctx: ctx, route: x.route, pool: x.pool, body: x.body, admitted: x.tl.admitted}
	f.tried, f.running, f.bufs = f.triedBuf[:0], f.runningBuf[:0], f.bufsBuf[:0]
	defer f.stop()
	f.start()
	for st := waiting; ; {
		switch st {
		case waiting:
			st = f.wait()
		case retrying:
			x.span.event("retry")
			f.launch()
			st = waiting
		case fallingBack:
			st = f.fallBack()
		case streaming:
			return x.stream(ctx, f.winner)
		case failed:
			f.answerFailure()
			return false
		}
	}
}

// start begins trying pool: the first attempt, and the hedge timer when
// the route hedges.
func (f *attempts) start() {
	f.tries = 1 + f.route.Timeouts.Retries
	f.tried = f.tried[:0]
	f.launch()
	if f.timer != nil {
		f.timer.Stop()
		f.timer, f.hedge = nil, nil
	}
	if f.route.Timeouts.Hedge && len(f.pool.replicas) > 1 {
		delay, ok := f.pool.p95TTFT()
		delay = max(delay, f.route.Timeouts.HedgeMinDelay.D())
		if ok || delay > 0 {
			f.timer = time.NewTimer(delay)
			f.hedge = f.timer.C
		}
	}
}

// launch starts one attempt on a replica of pool not yet tried.
func (f *attempts) launch() {
	x := f.x
	a := &attempt{pool: f.pool, admitted: f.admitted, ttftTimeout: f.route.Timeouts.ttft(), idleTimeout: f.route.Timeouts.idle(), now: x.g.clock}
	a.buf = attemptBufs.Get().(*attemptBuf)
	f.bufs = append(f.bufs, a.buf)
	a.rep = pickReplica(f.pool, &x.req, f.tried)
	f.tried = append(f.tried, a.rep)
	actx, cancel := context.WithCancel(f.ctx)
	a.cancel = cancel
	f.running = append(f.running, a)
	f.tries--
	body := x.askEngine(f.pool, a, f.body)
	if !f.route.Timeouts.Hedge {
		// Attempts never overlap: run this one here (no goroutine
		// hand-off on the path to the first byte, no channel).
		f.ready = x.run(actx, a, body)
		return
	}
	if f.results == nil {
		f.results = make(chan *attempt, 4)
	}
	f.group.Go(func() error {
		f.results <- x.run(actx, a, body)
		return nil
	})
}

// wait is the waiting state: the next result, the hedge timer or the end
// of the request's context.
func (f *attempts) wait() forwardState {
	if a := f.ready; a != nil {
		f.ready = nil
		return f.settle(a)
	}
	select {
	case <-f.hedge:
		f.hedge = nil
		f.x.span.event("hedge")
		f.tries++ // a hedge does not consume a retry
		f.launch()
		return waiting
	case a := <-f.results:
		return f.settle(a)
	case <-f.ctx.Done():
		return failed
	}
}

// settle takes one attempt's result: a win cancels the others; a failure
// leads to a retry, the fallback, or the end.
func (f *attempts) settle(a *attempt) forwardState {
	g := f.x.g
	f.running = slices.DeleteFunc(f.running, func(o *attempt) bool { return o == a })
	if a.won() {
		for _, o := range f.running {
			o.cancel()
			g.countAttempt(o.pool, "cancelled")
		}
		f.winner = a // counted as won by feedFirstToken, after the first write
		return streaming
	}
	f.last = a
	outcome := "failed"
	if a.timedOut() {
		outcome = "timeout"
	}
	g.countAttempt(a.pool, outcome)
	if a.err != nil && f.ctx.Err() == nil && !a.timedOut() {
		g.log().Warn("upstream attempt failed", "request_id", f.x.id, "pool", a.pool.name, "replica", a.rep.cfg.URL, "err", a.err)
	}
	switch {
	case f.ctx.Err() != nil, !a.retryable() && !a.timedOut():
		return failed
	case len(f.running) > 0:
		return waiting // a hedge is still going
	case f.tries > 0:
		return retrying
	case !f.fellBack && f.route.Fallback != "" && !f.prefill:
		return fallingBack
	}
	return failed
}

// fallBack is the fallingBack state: the request goes to its route's
// fallback (a route or a replica-listed model of the configuration the
// request started with), its body's model renamed to the fallback's
// upstream name, and waits its turn in the fallback's pool (its priority
// and deadline kept, the fallback route's early rejection applied). The
// pool given up counts the failure as overload when it was one (a TTFT
// timeout, 429, 503).
func (f *attempts) fallBack() forwardState {
	x := f.x
	f.fellBack = true
	fr := x.rt.route(f.route.Fallback)
	if fr == nil || fr.Model != f.route.Fallback {
		return failed
	}
	body, err := rewriteFields(x.body, map[string]any{"model": fr.upstreamName(fr.Model)})
	if err != nil {
		f.refused = refuse(http.StatusBadRequest, openai.TypeInvalidRequest, err.Error(), "", "invalid_request")
		return failed
	}
	if f.last != nil && f.last.overloaded() {
		f.pool.adm.observeDrop(x.g.now())
	}
	x.span.event("fallback")
	fp := x.rt.poolFor(fr, &x.req)
	if fp != f.pool {
		at, err := fp.adm.acquire(f.ctx, x.g.clock, x.prio, x.deadline, fr.EarlyReject)
		if err != nil {
			var ae *admitError
			if errors.As(err, &ae) {
				f.refused = queueRejection(ae)
				f.refused.pool = fp
			}
			return failed
		}
		f.release = append(f.release, func() { fp.adm.release(x.g.now(), x.g.now().Sub(at), true) })
		f.admitted = at
	}
	f.route, f.pool, f.body = fr, fp, body
	f.start()
	return waiting
}

// stop ends the attempts still running, waits for them, and gives back
// what they and the fallback pool hold.
func (f *attempts) stop() {
	if f.timer != nil {
		f.timer.Stop()
	}
	for _, a := range f.running {
		a.cancel()
	}
	_ = f.group.Wait()
	left := len(f.running)
	if a := f.ready; a != nil {
		f.ready = nil
		left--
		if a.won() {
			a.release()
		}
	}
	for range left {
		if a := <-f.results; a.won() {
			a.release()
		}
	}
	// The fallback pools' slots are given back with the request's own
	// (exchange.dequeue).
	// No attempt reads any more: every result was received above.
	for i, b := range f.bufs {
		b.rd.Reset(nil, nil) // the pool holds no upstream body
		b.up = waitReader{}
		attemptBufs.Put(b)
		f.bufs[i] = nil
	}
	f.bufs = f.bufs[:0]
}

// answerFailure is the failed state: the client is told why no first token
// came, and the pool last tried counts a failure on a sign of overload
// (429, 503, 504) against its adaptive limit.
func (f *attempts) answerFailure() {
	x, last := f.x, f.last
	switch {
	case f.refused != nil:
		x.refuse(f.refused)
	case x.r.Context().Err() != nil:
		x.fail(statusClientClosed, openai.TypeServer, "client closed the request", "", "cancelled", 0)
	case f.ctx.Err() != nil || pastDeadline(f.ctx, time.Now()):
		x.fail(http.StatusGatewayTimeout, openai.TypeServer, "total timeout expired before the first token", "", "timeout", 0)
	case last != nil && last.timedOut():
		x.fail(http.StatusGatewayTimeout, openai.TypeServer,
			fmt.Sprintf("no first token within %s (ttft timeout) after all retries", last.ttftTimeout), "", "ttft_timeout", 0)
	case last != nil && last.status != 0:
		x.passError(last)
	default:
		var pe *protocolError
		if last != nil && errors.As(last.err, &pe) {
			x.fail(http.StatusBadGateway, openai.TypeServer, protocolErrorMsg, "", "upstream_protocol_error", 0)
			break
		}
		var tl *tooLargeError
		if last != nil && errors.As(last.err, &tl) {
			x.fail(http.StatusBadGateway, openai.TypeServer, tl.Error(), "", "upstream_response_too_large", 0)
			break
		}
		msg := "upstream unavailable"
		if last != nil && last.err != nil {
			msg += ": " + redact.Text(last.err.Error())
		}
		x.fail(http.StatusBadGateway, openai.TypeServer, msg, "", "upstream_error", 0)
	}
	if overloadStatus(x.status) && f.refused == nil {
		f.pool.adm.observeDrop(x.g.now())
	}
}

// pastDeadline reports whether ctx's deadline has come at now: an attempt
// can fail on it (a dial's timeout) before ctx itself ends.
func pastDeadline(ctx context.Context, now time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && !now.Before(d)
}
