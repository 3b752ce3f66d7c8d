package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/sse"
)

// The paths the gateway serves.
const (
	chatPath        = "/v1/chat/completions"
	completionsPath = "/v1/completions"
	modelsPath      = "/v1/models"
)

// Request headers the gateway reads.
const (
	headerRequestID = "X-Request-Id"
	headerDeadline  = "X-Slo-Ttft-Ms" // TTFT deadline in milliseconds
	headerPriority  = "X-Priority"    // priority class, higher first
)

// ServeHTTP routes the OpenAI-compatible endpoints, /health and /metrics.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.init()
	switch r.URL.Path {
	case chatPath, completionsPath:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			openai.WriteError(w, http.StatusMethodNotAllowed, openai.NewError(openai.TypeInvalidRequest, "use POST", "", "method_not_allowed"), 0)
			return
		}
		g.complete(w, r, r.URL.Path == chatPath)
	case modelsPath:
		g.models(w, r)
	case "/health":
		g.health(w)
	case "/metrics":
		if g.MetricsHandler == nil {
			openai.WriteError(w, http.StatusNotFound, openai.NewError(openai.TypeNotFound, "metrics are not enabled", "", "not_found"), 0)
			return
		}
		g.MetricsHandler.ServeHTTP(w, r)
	default:
		openai.WriteError(w, http.StatusNotFound, openai.NewError(openai.TypeNotFound, "unknown path "+r.URL.Path, "", "not_found"), 0)
	}
}

func newIDPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "gw-" + hex.EncodeToString(b[:]) + "-"
}

func (g *Gateway) requestID(r *http.Request) string {
	if id := r.Header.Get(headerRequestID); id != "" && len(id) <= 128 {
		return id
	}
	return g.idPrefix + strconv.FormatUint(g.idSeq.Add(1), 10)
}

// exchange is one request's state inside the gateway.
type exchange struct {
	g      *Gateway
	w      http.ResponseWriter
	r      *http.Request
	id     string
	req    Request
	body   []byte
	route  *RouteConfig
	pool   *pool
	key    *keyState
	tl     timeline
	status int
	span   spanRecorder
	// chunkNS is the instant (ns since start) of every content event read
	// from upstream, the first token's first; chunkTokens, only while the
	// upstream sends continuous usage, the output tokens each carried
	// (latency.Record's ChunkNS and ChunkTokens).
	chunkNS     []int64
	chunkTokens []int32
	fields      map[string]any // body fields the policies change (setField)
	tokens      int            // output tokens
	noContent   bool           // the stream ended without content (no first token: no TTFT)
	wrote       bool
	errKind     string
	prio        int // priority class in the queues
	// metricsSplit is the upstream's queue, prefill and decode time from a
	// per-request metrics object, used when no Server-Timing gives them.
	metricsSplit *[3]time.Duration
}

// fail answers with an OpenAI-shaped error (if nothing was written yet).
func (x *exchange) fail(status int, typ, msg, param, code string, retryAfter time.Duration) {
	x.status = status
	x.errKind = code
	if x.wrote {
		return
	}
	x.wrote = true
	ra := 0
	if retryAfter > 0 || status == http.StatusTooManyRequests {
		ra = int((retryAfter + time.Second - 1) / time.Second)
		ra = max(ra, 1)
	}
	openai.WriteError(x.w, status, openai.NewError(typ, msg, param, code), ra)
}

func (g *Gateway) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	x := &exchange{g: g, w: w, r: r}
	x.tl.start = g.now()
	x.id = g.requestID(r)
	w.Header().Set(headerRequestID, x.id)
	ctx, span := g.startSpan(r, x.id)
	x.span = span
	defer x.finish()

	rt := g.rt.Load()
	if rt == nil {
		x.fail(http.StatusServiceUnavailable, openai.TypeServer, "the gateway has no upstreams configured", "", "no_upstreams", 0)
		return
	}
	if !x.authenticate(rt) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, rt.cfg.Server.MaxBodyBytes)
	body, err := readBody(r.Body, r.ContentLength, rt.cfg.Server.MaxBodyBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			x.fail(http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, fmt.Sprintf("request body exceeds %d bytes", mbe.Limit), "", "body_too_large", 0)
			return
		}
		if httplimit.IsBodyTimeout(err) {
			w.Header().Set("Connection", "close")
			x.fail(http.StatusRequestTimeout, openai.TypeInvalidRequest, "the request body was not received within server.body_timeout", "", "request_timeout", 0)
			return
		}
		x.fail(http.StatusBadRequest, openai.TypeInvalidRequest, "reading request body: "+err.Error(), "", "bad_body", 0)
		return
	}
	x.body = body
	x.req, err = ScanRequest(body, chat, rt.cfg.Server.PrefixBytes)
	if err != nil {
		x.fail(http.StatusBadRequest, openai.TypeInvalidRequest, err.Error(), "", "invalid_request", 0)
		return
	}
	x.route = rt.route(x.req.Model)
	if x.route == nil {
		x.fail(http.StatusNotFound, openai.TypeInvalidRequest, fmt.Sprintf("The model `%s` does not exist or is not served by this gateway.", x.req.Model), "model", "model_not_found", 0)
		return
	}
	x.pool = rt.poolFor(x.route, &x.req)
	if !x.applyLength() || !x.applyLimits() {
		return
	}
	if x.route.UpstreamModel != "" && x.route.UpstreamModel != x.req.Model {
		x.setField("model", x.route.UpstreamModel)
	}
	// The policies' field changes are applied in one pass over the body.
	if len(x.fields) > 0 && !x.rewrite(x.fields) {
		return
	}

	var cancel context.CancelFunc
	if tot := x.route.Timeouts.Total.D(); tot > 0 {
		ctx, cancel = context.WithTimeout(ctx, tot)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()

	prio := 0
	if x.key != nil {
		prio = x.key.cfg.Priority
	}
	if v := r.Header.Get(headerPriority); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			x.fail(http.StatusBadRequest, openai.TypeInvalidRequest, "X-Priority must be an integer", "", "invalid_priority", 0)
			return
		}
		if x.key == nil || p <= x.key.cfg.Priority {
			prio = p // a key's priority caps what its requests may claim
		}
	}
	var deadline time.Time
	if v := r.Header.Get(headerDeadline); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil || ms <= 0 {
			x.fail(http.StatusBadRequest, openai.TypeInvalidRequest, "X-SLO-TTFT-Ms must be a positive number of milliseconds", "", "invalid_deadline", 0)
			return
		}
		deadline = x.tl.start.Add(time.Duration(ms * float64(time.Millisecond)))
	} else if d := x.route.DeadlineTTFT.D(); d > 0 {
		deadline = x.tl.start.Add(d)
	}

	x.tl.in = g.now()
	x.span.event("queued")
	x.prio = prio
	admitted, err := x.pool.adm.acquire(ctx, g.now, prio, deadline, x.route.EarlyReject)
	if err != nil {
		var ae *admitError
		if errors.As(err, &ae) {
			reason, status, typ := "queue_full", http.StatusTooManyRequests, openai.TypeRateLimit
			switch {
			case errors.Is(err, errSharedUnavailable):
				reason, status, typ = "admission_unavailable", http.StatusServiceUnavailable, openai.TypeServer
			case !errors.Is(err, errQueueFull):
				reason = "deadline"
			}
			x.reject(reason, status, typ, ae.Error(), ae.retryAfter)
			return
		}
		x.fail(statusClientClosed, openai.TypeServer, "request cancelled while queued", "", "cancelled", 0)
		return
	}
	x.tl.admitted = admitted
	x.span.event("admitted")
	ok := false
	defer func() {
		if !ok && overloadStatus(x.status) {
			x.pool.adm.observeDrop(g.now())
		}
		x.pool.adm.release(g.now(), g.now().Sub(admitted), ok)
	}()
	ok = x.forward(ctx)
}

// statusClientClosed records a request whose client went away (nginx's 499).
const statusClientClosed = 499

func (x *exchange) reject(reason string, status int, typ, msg string, retryAfter time.Duration) {
	if m := x.g.Metrics; m != nil {
		pool := ""
		if x.pool != nil {
			pool = x.pool.name
		}
		m.Rejected.WithLabelValues(pool, reason).Inc()
	}
	x.fail(status, typ, msg, "", reason, retryAfter)
}

func (x *exchange) authenticate(rt *liveConfig) bool {
	if len(rt.keys) == 0 {
		return true
	}
	auth := x.r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || key == "" {
		x.fail(http.StatusUnauthorized, openai.TypeAuthentication, "missing API key: send Authorization: Bearer KEY", "", "missing_api_key", 0)
		return false
	}
	ks := rt.keys[HashKey(strings.TrimSpace(key))]
	if ks == nil {
		x.fail(http.StatusUnauthorized, openai.TypeAuthentication, "invalid API key", "", "invalid_api_key", 0)
		return false
	}
	x.key = ks
	return true
}

// applyLength is the length-control policy.
func (x *exchange) applyLength() bool {
	l := x.route.Length
	if l.MaxInputTokens > 0 && x.req.InputTokens() > l.MaxInputTokens {
		x.reject("input_too_long", http.StatusBadRequest, openai.TypeInvalidRequest,
			fmt.Sprintf("the prompt has about %d tokens, over this route's limit of %d", x.req.InputTokens(), l.MaxInputTokens), 0)
		return false
	}
	field := x.req.MaxTokensField
	if field == "" {
		field = "max_tokens"
	}
	switch {
	case x.req.MaxTokens == 0 && l.DefaultMaxTokens > 0:
		x.req.MaxTokens = l.DefaultMaxTokens
		x.setField(field, l.DefaultMaxTokens)
	case l.MaxMaxTokens > 0 && x.req.MaxTokens > l.MaxMaxTokens:
		if l.OnExceed == "clamp" {
			x.req.MaxTokens = l.MaxMaxTokens
			x.setField(field, l.MaxMaxTokens)
			break
		}
		x.reject("max_tokens", http.StatusBadRequest, openai.TypeInvalidRequest,
			fmt.Sprintf("%s is %d, over this route's limit of %d", field, x.req.MaxTokens, l.MaxMaxTokens), 0)
		return false
	}
	return true
}

// applyLimits is the per-key rate and token limit.
func (x *exchange) applyLimits() bool {
	if x.key == nil || x.key.lim == nil {
		return true
	}
	d := x.key.lim.Allow(x.r.Context(), x.g.now(), x.req.InputTokens()+x.req.MaxTokens)
	setLimitHeaders(x.w.Header(), d)
	if !d.Allowed && d.Unchecked {
		x.reject("limits_unavailable", http.StatusServiceUnavailable, openai.TypeServer,
			"the key's limits cannot be checked: their store is unreachable; retry later", d.Wait)
		return false
	}
	if !d.Allowed {
		x.reject("rate_limit", http.StatusTooManyRequests, openai.TypeRateLimit,
			fmt.Sprintf("rate limit reached for key %q; retry after %s", x.key.cfg.Name, d.Wait.Round(time.Millisecond)), d.Wait)
		return false
	}
	return true
}

// setField notes a body field a policy changes; complete applies them all
// with one rewrite.
func (x *exchange) setField(name string, v any) {
	if x.fields == nil {
		x.fields = map[string]any{}
	}
	x.fields[name] = v
}

func (x *exchange) rewrite(set map[string]any) bool {
	b, err := rewriteFields(x.body, set)
	if err != nil {
		x.fail(http.StatusBadRequest, openai.TypeInvalidRequest, err.Error(), "", "invalid_request", 0)
		return false
	}
	x.body = b
	return true
}

// finish records metrics and ends the span.
func (x *exchange) finish() {
	if x.tl.end.IsZero() {
		x.tl.end = x.g.now()
	}
	st := x.tl.stages()
	var ttft time.Duration
	if !x.tl.firstTok.IsZero() {
		ttft = x.tl.firstTok.Sub(x.tl.start)
	}
	pool, model := "", ""
	if x.pool != nil {
		pool = x.pool.name
	}
	if x.route != nil {
		model = x.route.Model
	}
	if x.status == 0 {
		x.status = http.StatusOK
	}
	x.g.Metrics.observe(&observation{pool: pool, model: model, status: x.status, stream: x.req.Stream, stages: st, tl: &x.tl,
		ttft: ttft, noContent: x.noContent, outTokens: x.tokens, chunkNS: x.chunkNS, chunkTokens: x.chunkTokens})
	x.span.end(x, st)
}

// attempt is one upstream try: a replica, a model, and what was read from
// it up to the first content token.
type attempt struct {
	pool    *pool
	rep     *Replica
	cancel  context.CancelFunc // ends the attempt's upstream request
	started time.Time
	gotConn atomic.Pointer[time.Time] // when the connection was obtained
	resp    *http.Response
	rd      *sse.Reader // over up, in block mode (newEventReader)
	up      *waitReader // the upstream's stream, timed
	pending []byte      // stream bytes read up to and including the first content event
	body    []byte      // non-streaming body
	// wholeTokens is the non-streaming body's usage.completion_tokens;
	// scanned, the time reading it took.
	wholeTokens int
	scanned     time.Duration
	first       time.Time
	done        bool // the stream ended ([DONE]) before any content
	doneAt      int  // with done: where the [DONE] event starts in pending
	// outcome
	err error
	// phase: 0 waiting for the first token, 1 got it, 2 timed out; the
	// TTFT timer and the reader race for it with compare-and-swap.
	phase   atomic.Int32
	status  int // upstream status when it answered with an error
	errBody []byte
	tokens  int // output tokens counted in pending
	lastUse int // completion_tokens of the last usage seen

	ttftTimeout time.Duration // 0: none
	idleTimeout time.Duration // between data events after the first token; 0: none
	whole       bool          // the answer is one body, not an event stream
}

// timedOut reports whether the TTFT timeout fired before the first token.
func (a *attempt) timedOut() bool { return a.phase.Load() == 2 }

// claimFirst marks the first token as arrived; false (and the attempt
// failed) when the TTFT timeout won the race.
func (a *attempt) claimFirst() bool {
	if a.phase.CompareAndSwap(0, 1) {
		return true
	}
	a.err = errors.New("ttft timeout")
	return false
}

// drain receives the results of n attempts that lost (cancelled) and
// releases any that reached a first token before the cancel took effect.
func drain(results <-chan *attempt, n int) {
	for range n {
		a := <-results
		if a.err == nil && a.status == 0 {
			_ = a.resp.Body.Close()
			a.rep.outstanding.Add(-1)
			a.cancel()
		}
	}
}

// retryable reports whether another replica may succeed where a failed.
func (a *attempt) retryable() bool {
	return a.err != nil || a.status >= 500 || a.status == http.StatusTooManyRequests
}

// forward runs the attempts (retry, fallback, hedge) until one yields a
// first token, then streams it to the client. It reports whether a first
// token was produced.
func (x *exchange) forward(ctx context.Context) bool {
	g := x.g
	pl := x.pool
	route := x.route
	tries := 1 + route.Timeouts.Retries
	tried := map[*Replica]bool{}
	// Every attempt's result is received exactly once: by this loop, or
	// by drain for attempts still running when the loop ends, so that a
	// loser that got its first token anyway releases its connection.
	results := make(chan *attempt, 4)
	ttftTimeout, idleTimeout := route.Timeouts.ttft(), route.Timeouts.idle()
	running := map[*attempt]bool{}
	fellBack := false
	var last *attempt

	launch := func() {
		a := &attempt{pool: pl, ttftTimeout: ttftTimeout, idleTimeout: idleTimeout}
		a.rep = pickReplica(pl, &x.req, tried)
		tried[a.rep] = true
		actx, cancel := context.WithCancel(ctx)
		a.cancel = cancel
		running[a] = true
		tries--
		body := x.body
		if !route.Timeouts.Hedge {
			// Attempts never overlap: run this one here (no goroutine
			// hand-off on the path to the first byte). The result channel
			// has room for it.
			results <- x.run(actx, a, body)
			return
		}
		go func() { results <- x.run(actx, a, body) }()
	}
	launch()

	var hedge <-chan time.Time
	if route.Timeouts.Hedge && len(pl.replicas) > 1 {
		delay, ok := pl.p95TTFT()
		delay = max(delay, route.Timeouts.HedgeMinDelay.D())
		if ok || delay > 0 {
			t := time.NewTimer(delay)
			defer t.Stop()
			hedge = t.C
		}
	}
	defer func() {
		for a := range running {
			a.cancel()
		}
		go drain(results, len(running))
	}()
	for {
		select {
		case <-hedge:
			hedge = nil
			x.span.event("hedge")
			tries++ // a hedge does not consume a retry
			launch()
			continue
		case a := <-results:
			delete(running, a)
			if a.err == nil && a.status == 0 {
				for o := range running {
					o.cancel()
					g.countAttempt(o.pool, "cancelled")
				}
				go drain(results, len(running))
				clear(running)
				g.countAttempt(a.pool, "won")
				return x.stream(ctx, a)
			}
			last = a
			outcome := "failed"
			if a.timedOut() {
				outcome = "timeout"
			}
			g.countAttempt(a.pool, outcome)
			if a.err != nil && ctx.Err() == nil && !a.timedOut() {
				g.log().Warn("upstream attempt failed", "request_id", x.id, "pool", a.pool.name, "replica", a.rep.cfg.URL, "err", a.err)
			}
			if ctx.Err() != nil {
				break
			}
			if !a.retryable() && !a.timedOut() {
				break
			}
			if len(running) > 0 {
				continue // a hedge is still going
			}
			if tries > 0 {
				x.span.event("retry")
				launch()
				continue
			}
			if !fellBack && route.Fallback != "" {
				rt := g.rt.Load()
				if fr := rt.route(route.Fallback); fr != nil && fr.Model == route.Fallback {
					model := fr.Model
					if fr.UpstreamModel != "" {
						model = fr.UpstreamModel
					}
					if !x.rewrite(map[string]any{"model": model}) {
						return false
					}
					fellBack = true
					x.span.event("fallback")
					fp := rt.poolFor(fr, &x.req)
					if fp != pl {
						// The fallback waits its turn in its own pool.
						at, err := fp.adm.acquire(ctx, g.now, x.prio, time.Time{}, false)
						if err != nil {
							break
						}
						defer func() { fp.adm.release(g.now(), g.now().Sub(at), true) }()
					}
					pl = fp
					tries = 1 + fr.Timeouts.Retries
					ttftTimeout, idleTimeout = fr.Timeouts.ttft(), fr.Timeouts.idle()
					clear(tried)
					launch()
					continue
				}
			}
		case <-ctx.Done():
		}
		break
	}
	// No first token.
	switch {
	case x.r.Context().Err() != nil:
		x.fail(statusClientClosed, openai.TypeServer, "client closed the request", "", "cancelled", 0)
	case ctx.Err() != nil:
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
		msg := "upstream unavailable"
		if last != nil && last.err != nil {
			msg += ": " + redact.Text(last.err.Error())
		}
		x.fail(http.StatusBadGateway, openai.TypeServer, msg, "", "upstream_error", 0)
	}
	return false
}

func (g *Gateway) countAttempt(p *pool, outcome string) {
	if g.Metrics != nil {
		g.Metrics.Attempts.WithLabelValues(p.name, outcome).Inc()
	}
}

// The kinds of tokentrace_gateway_upstream_errors_total.
const (
	faultProtocol    = "protocol_error"
	faultStreamBroke = "stream_broken"
	faultIdle        = "idle_timeout"
)

func (g *Gateway) countFault(p *pool, kind string) {
	if g.Metrics != nil {
		g.Metrics.UpstreamErrors.WithLabelValues(p.name, kind).Inc()
	}
}

// protocolError is an upstream event the gateway cannot parse: its data
// is neither [DONE] nor a JSON object. Its Error, logged, quotes the
// event's start; the client is told protocolErrorMsg only (an upstream's
// error page can name internal hosts).
type protocolError struct{ excerpt string }

const protocolErrorMsg = "upstream protocol error: the upstream sent an event that is not JSON"

func newProtocolError(ev []byte) *protocolError {
	ev = bytes.TrimSpace(ev)
	if len(ev) > 64 {
		ev = ev[:64]
	}
	return &protocolError{excerpt: redact.Text(strconv.Quote(string(ev)))}
}

func (e *protocolError) Error() string { return protocolErrorMsg + ": " + e.excerpt }

// pickReplica asks the pool's balancer among replicas not yet tried (all of
// them when every one was).
func pickReplica(p *pool, req *Request, tried map[*Replica]bool) *Replica {
	c := p.replicas
	if len(tried) > 0 {
		var left []*Replica
		for _, r := range c {
			if !tried[r] {
				left = append(left, r)
			}
		}
		if len(left) > 0 {
			c = left
		}
	}
	return p.balancer.Pick(req, c)
}

// passError forwards an upstream's error answer (already OpenAI-shaped
// when the upstream is OpenAI-compatible) with its status.
func (x *exchange) passError(a *attempt) {
	x.status = a.status
	x.errKind = "upstream_status"
	if x.wrote {
		return
	}
	x.wrote = true
	h := x.w.Header()
	ct := "application/json"
	if a.resp != nil && a.resp.Header.Get("Content-Type") != "" {
		ct = a.resp.Header.Get("Content-Type")
	}
	h.Set("Content-Type", ct)
	if a.resp != nil {
		if ra := a.resp.Header.Get("Retry-After"); ra != "" {
			h.Set("Retry-After", ra)
		}
	}
	// The upstream's words are passed on without credentials, in case
	// it quotes what it was sent.
	body := []byte(redact.Values(redact.Text(string(a.errBody)), a.rep.cfg.credentials()...))
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		b, _ := json.Marshal(openai.ErrorBody{Error: openai.NewError(openai.TypeServer,
			fmt.Sprintf("upstream answered %d: %s", a.status, strings.TrimSpace(string(body))), "", "upstream_error")})
		body = b
	}
	x.w.WriteHeader(a.status)
	_, _ = x.w.Write(body)
}

// hopHeaders are not forwarded in either direction (RFC 9110 §7.6.1; the
// list httputil.ReverseProxy strips, Proxy-Connection included).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopHeaders deletes from h the headers its Connection header names,
// then the standard hop-by-hop headers.
func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for k := range strings.SplitSeq(f, ",") {
			if k = textproto.TrimString(k); k != "" {
				h.Del(k)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// copyResponseHeaders adds to dst the end-to-end headers of src, an
// upstream's response: neither the hop-by-hop headers nor those its
// Connection header names (so that it cannot remove the gateway's own).
func copyResponseHeaders(dst, src http.Header) {
	conn := src.Values("Connection")
	for k, vs := range src {
		if slices.Contains(hopHeaders, k) || namedIn(conn, k) {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
}

// namedIn reports whether a Connection header's values name the header k.
func namedIn(connection []string, k string) bool {
	for _, f := range connection {
		for n := range strings.SplitSeq(f, ",") {
			if strings.EqualFold(textproto.TrimString(n), k) {
				return true
			}
		}
	}
	return false
}

// run performs one attempt up to the first content token (or the whole
// body when not streaming). It returns a with its outcome set.
func (x *exchange) run(ctx context.Context, a *attempt, body []byte) *attempt {
	g := x.g
	a.rep.outstanding.Add(1)
	a.started = g.now()
	if d := a.ttftTimeout; d > 0 {
		t := time.AfterFunc(d, func() {
			if a.phase.CompareAndSwap(0, 2) {
				a.cancel()
			}
		})
		defer t.Stop()
	}
	ok := false
	defer func() {
		if !ok {
			a.rep.outstanding.Add(-1)
			if a.resp != nil {
				_ = a.resp.Body.Close()
			}
			a.cancel()
		}
	}()
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		t := g.now()
		a.gotConn.Store(&t)
	}}
	ctx = httptrace.WithClientTrace(ctx, trace)
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, a.rep.cfg.URL+x.r.URL.Path, bytes.NewReader(body))
	if err != nil {
		a.err = fmt.Errorf("build upstream request: %w", err)
		return a
	}
	copyRequestHeaders(out.Header, x.r.Header)
	out.Header.Set(headerRequestID, x.id)
	out.Header.Set("Content-Type", "application/json")
	x.span.inject(out.Header)
	if auth := a.rep.cfg.authorization(); auth != "" {
		out.Header.Set("Authorization", auth)
	} else if x.key != nil {
		out.Header.Del("Authorization") // the gateway's key is not the upstream's
	}
	resp, err := g.transport.RoundTrip(out)
	if err != nil {
		a.err = fmt.Errorf("%s: %w", a.rep.cfg.URL, err)
		return a
	}
	a.resp = resp
	if resp.StatusCode != http.StatusOK {
		a.status = resp.StatusCode
		a.errBody, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return a
	}
	if !x.req.Stream || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// Not streaming (or an upstream that answered a stream request
		// with one JSON body): pass the body through whole.
		a.whole = true
		a.body, err = io.ReadAll(resp.Body)
		if err != nil {
			a.err = fmt.Errorf("read upstream body: %w", err)
			return a
		}
		a.first = g.now()
		// The answer is read as a chunk is (usage for the token count);
		// one that is not a JSON object is a protocol error, as an event
		// would be.
		a.wholeTokens, err = answerTokens(a.body)
		a.scanned = g.now().Sub(a.first)
		if err != nil {
			a.err = newProtocolError(a.body)
			g.countFault(a.pool, faultProtocol)
			return a
		}
		ok = a.claimFirst()
		return a
	}
	a.up = &waitReader{r: resp.Body, now: g.now}
	a.rd = newEventReader(a.up)
	var probe chunkProbe
	for {
		ev, err := a.rd.Next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // no [DONE]
			}
			a.err = fmt.Errorf("upstream stream before first token: %w", err)
			return a
		}
		start := len(a.pending)
		a.pending = append(a.pending, ev.Raw...)
		switch probe.inspect(ev) {
		case eventContent:
			a.first = g.now()
			a.tokens, a.lastUse = 1, 0
			if used, ok := probe.usage(); ok {
				a.tokens, a.lastUse = used, used
			}
			ok = a.claimFirst()
			return a
		case eventDone:
			a.first = g.now()
			a.done, a.doneAt = true, start
			ok = a.claimFirst()
			return a
		case eventError:
			a.status = http.StatusBadGateway
			a.errBody = bytes.TrimSpace(ev.Data)
			return a
		case eventInvalid:
			a.err = newProtocolError(ev.Raw)
			g.countFault(a.pool, faultProtocol)
			return a
		}
	}
}

func copyRequestHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	removeHopHeaders(dst)
	dst.Del("Accept-Encoding") // keep the stream uncompressed, readable event by event
	dst.Del("Content-Length")
	dst.Del("Traceparent") // set by the span (or copied back by inject)
	dst.Del("Tracestate")
	dst.Del(headerPriority)
}

// readBody reads a request body into one buffer sized from Content-Length
// when the client sent it (no regrowth for large prompts).
func readBody(rd io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength <= 0 || contentLength > limit {
		return io.ReadAll(rd)
	}
	buf := make([]byte, contentLength, contentLength+1)
	if _, err := io.ReadFull(rd, buf); err != nil {
		return nil, err
	}
	// Drain to EOF so a body longer than announced is caught by the limit.
	var one [1]byte
	if n, err := rd.Read(one[:]); n > 0 || (err != nil && err != io.EOF) {
		if err == nil {
			err = errors.New("body longer than its Content-Length")
		}
		return nil, err
	}
	return buf, nil
}
