package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/sse"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// Request and response headers of docs/serve.md.
const (
	// RequestIDHeader carries the request id: echoed when the client sends
	// one, generated otherwise.
	RequestIDHeader = "X-Request-Id"
	// MetricsHeader set to "true" or "1" asks for the per-request metrics
	// object, like the body field "return_metrics".
	MetricsHeader = "X-Return-Metrics"
	// ServerTimingHeader is the trailer (and, for non-streaming answers,
	// also a header) with the server-side stages of the request.
	ServerTimingHeader = "Server-Timing"
)

// exchange is one generation request as it goes through the handler.
type exchange struct {
	api      openai.API
	rid      string
	received time.Time
	p        openai.Params
	prompt   []int32
	faults   faultPlan
	delay    time.Duration // fault delay injected so far
	// Stage durations for Server-Timing, known so far.
	frontend time.Duration
	tl       engine.Timeline
	hasTL    bool
	pd       pdKind
	// hv holds the values of the headers the response takes from x (the
	// request id, the Server-Timing trailer), so that setting them does not
	// allocate a slice each (http.Header.Set does).
	hv     [2]string
	respID string // responseID's, once made
}

// Header values shared by every response: net/http only reads a
// response's header values, and a slice of capacity 1 is copied, not
// written, by a later Add.
var (
	trailerServerTiming = []string{ServerTimingHeader}
	eventStreamType     = []string{"text/event-stream"}
	noCache             = []string{"no-cache"}
)

func (s *Server) generate(w http.ResponseWriter, r *http.Request, api openai.API) {
	x := &exchange{api: api, received: s.clock.Now()}
	if s.cfg.Tracer != nil {
		defer func() { s.traceRequest(r, x, s.clock.Now()) }()
	}
	defer func() { s.recordGenAI(x, s.clock.Now()) }()
	h := w.Header()
	h["Trailer"] = trailerServerTiming
	if !allowAs(w, r, api, http.MethodPost) {
		x.frontend = s.clock.Now().Sub(x.received)
		s.finishTiming(w, x)
		return
	}
	x.rid = r.Header.Get(RequestIDHeader)
	if x.rid == "" {
		x.rid = s.nextID()
	} else if !validID(x.rid) {
		s.fail(w, x, openai.BadRequest("", "%s must be 1 to 128 visible ASCII characters", RequestIDHeader), 0)
		return
	}
	x.hv[0] = x.rid
	h[RequestIDHeader] = x.hv[0:1:1]

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		e := s.bodyError(h, err)
		s.fail(w, x, &e, 0)
		return
	}
	if apiErr := s.parse(x, body, r.Header.Get(MetricsHeader)); apiErr != nil {
		s.fail(w, x, apiErr, 0)
		return
	}
	if apiErr := s.checkKVTransfer(x); apiErr != nil {
		s.fail(w, x, apiErr, 0)
		return
	}
	if apiErr, retryAfter := s.planFaults(x, r.Header.Get(FaultHeader)); apiErr != nil {
		s.fail(w, x, apiErr, retryAfter)
		return
	}

	ctx := r.Context()
	st, err := s.eng.Submit(ctx, engine.Request{
		ID: x.rid, Prompt: x.prompt, MaxTokens: x.p.MaxTokens, MinTokens: x.p.MinTokens,
		IgnoreEOS: x.p.IgnoreEOS, Priority: x.p.Priority, RemotePrefill: x.pd == pdDecode, RemoteTP: x.remoteTP(),
	})
	if err != nil {
		apiErr, retryAfter := s.submitError(x, err)
		s.fail(w, x, apiErr, retryAfter)
		return
	}
	x.frontend = st.Timeline().Arrival.Sub(x.received)
	if x.api != openai.APIChat && x.api != openai.APICompletions {
		s.answerAPI(ctx, w, st, x)
		return
	}
	if x.p.Stream {
		s.stream(ctx, w, st, x)
	} else {
		s.complete(ctx, w, r, st, x)
	}
}

// bodyError is the answer to a body that could not be read: too large (413), too
// slow (408, closing the connection: h is the response's header), or cut
// off by the client, who reads no answer.
func (s *Server) bodyError(h http.Header, err error) openai.APIError {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return openai.APIError{Status: http.StatusRequestEntityTooLarge, Err: openai.NewError(openai.TypeInvalidRequest,
			fmt.Sprintf("request body is larger than the limit of %d bytes", tooBig.Limit), "", "request_too_large")}
	}
	if httplimit.IsBodyTimeout(err) {
		h.Set("Connection", "close")
		return openai.APIError{Status: http.StatusRequestTimeout, Err: openai.NewError(openai.TypeInvalidRequest,
			fmt.Sprintf("the request body was not received within %v", s.cfg.Limits.BodyTimeout), "", "request_timeout")}
	}
	return *openai.BadRequest("", "reading the request body: %v", err)
}

// planFaults plans the faults injected into x (header is its FaultHeader)
// and returns the error to answer at once, with its Retry-After, if any.
func (s *Server) planFaults(x *exchange, header string) (*openai.APIError, int) {
	var err error
	x.faults, err = s.cfg.Faults.plan(x.rid, x.p.MaxTokens, header)
	if err != nil {
		return openai.BadRequest("", "%v", err), 0
	}
	if x.faults.status == 0 {
		return nil, 0
	}
	retryAfter := 0
	if x.faults.status == http.StatusTooManyRequests || x.faults.status == http.StatusServiceUnavailable {
		retryAfter = 1
	}
	return s.injectedError(x), retryAfter
}

// parse decodes and validates the body, checks the model, tokenizes the
// prompt and settles max_tokens.
func (s *Server) parse(x *exchange, body []byte, metricsHeader string) *openai.APIError {
	if x.api != openai.APIChat && x.api != openai.APICompletions {
		if apiErr := s.parseAPI(x, body); apiErr != nil {
			return apiErr
		}
	} else if x.isChat() {
		req, apiErr := openai.DecodeChat(body)
		if apiErr != nil {
			return apiErr
		}
		x.p = req.Params()
		msgs := make([]tokenizer.Message, len(req.Messages))
		for i, m := range req.Messages {
			msgs[i] = tokenizer.Message{Role: m.Role, Content: string(m.Content)}
		}
		x.prompt = tokenizer.EncodeChat(make([]int32, 0, tokenizer.CountChat(msgs)), msgs)
	} else {
		req, apiErr := openai.DecodeCompletion(body)
		if apiErr != nil {
			return apiErr
		}
		x.p = req.Params()
		if req.Prompt.Tokens != nil {
			for i, id := range req.Prompt.Tokens {
				if id >= tokenizer.VocabSize {
					return openai.BadRequest("prompt", "prompt token id %d at position %d is outside the vocabulary (0..%d)", id, i, tokenizer.VocabSize-1)
				}
			}
			x.prompt = req.Prompt.Tokens
		} else {
			x.prompt = tokenizer.Encode(make([]int32, 0, tokenizer.Count(req.Prompt.Text)), req.Prompt.Text)
		}
		if len(x.prompt) == 0 {
			return openai.BadRequest("prompt", "the prompt has no tokens (it is only white space)")
		}
	}
	if x.p.Model != s.cfg.ServedModelName {
		return modelNotFound(x.p.Model)
	}
	switch strings.ToLower(metricsHeader) {
	case "":
	case "1", "true", "yes":
		x.p.ReturnMetrics = true
	case "0", "false", "no":
	default:
		return openai.BadRequest("", "%s must be true or false, got %q", MetricsHeader, metricsHeader)
	}
	maxLen := s.eng.Config().MaxModelLen
	if x.p.MaxTokens == 0 {
		x.p.MaxTokens = maxLen - len(x.prompt)
		if x.p.MaxTokens < 1 {
			param := x.promptParam()
			return contextLengthError(param, fmt.Sprintf(
				"This model's maximum context length is %d tokens. However, your prompt has %d tokens, which leaves no room for output. Please reduce the length of the %s.",
				maxLen, len(x.prompt), param))
		}
		if x.p.MinTokens > x.p.MaxTokens {
			return openai.BadRequest("min_tokens", "min_tokens (%d) is more than the %d tokens of context left after the prompt", x.p.MinTokens, x.p.MaxTokens)
		}
	}
	return nil
}

func contextLengthError(param, msg string) *openai.APIError {
	return &openai.APIError{Status: http.StatusBadRequest, Err: openai.NewError(openai.TypeInvalidRequest, msg, param, "context_length_exceeded")}
}

func (x *exchange) promptParam() string {
	switch x.api {
	case openai.APICompletions:
		return "prompt"
	case openai.APIResponses:
		return "input"
	}
	return "messages"
}

// submitError maps the engine's refusal to a response; the second result
// is the Retry-After in seconds.
func (s *Server) submitError(x *exchange, err error) (*openai.APIError, int) {
	var le *engine.LengthError
	switch {
	case errors.As(err, &le):
		return contextLengthError(x.promptParam(), le.Error()), 0
	case errors.Is(err, engine.ErrQueueFull):
		if s.cfg.QueueFullStatus == http.StatusServiceUnavailable {
			return &openai.APIError{Status: http.StatusServiceUnavailable, Err: openai.NewError(openai.TypeOverloaded,
				"The server's waiting queue is full; retry later.", "", "queue_full")}, 1
		}
		return &openai.APIError{Status: http.StatusTooManyRequests, Err: openai.NewError(openai.TypeRateLimit,
			"The server's waiting queue is full; retry later.", "", "queue_full")}, 1
	case errors.Is(err, engine.ErrInvalid):
		return openai.BadRequest("", "%v", err), 0
	case errors.Is(err, engine.ErrStopped):
		return &openai.APIError{Status: http.StatusServiceUnavailable, Err: openai.NewError(openai.TypeOverloaded,
			"The engine is shutting down.", "", "engine_stopped")}, 1
	default:
		// The request's context ended before it was queued: the client is gone.
		return &openai.APIError{Status: 499, Err: openai.NewError(openai.TypeInvalidRequest,
			fmt.Sprintf("request cancelled: %v", err), "", "cancelled")}, 0
	}
}

func (s *Server) injectedError(x *exchange) *openai.APIError {
	switch x.faults.status {
	case http.StatusTooManyRequests:
		return &openai.APIError{Status: 429, Err: openai.NewError(openai.TypeRateLimit,
			"Rate limit reached; retry later. (injected fault)", "", "rate_limit_exceeded")}
	case http.StatusInternalServerError:
		return &openai.APIError{Status: 500, Err: openai.NewError(openai.TypeServer,
			"The server had an error while processing your request. (injected fault)", "", "internal_error")}
	case http.StatusServiceUnavailable:
		return &openai.APIError{Status: 503, Err: openai.NewError(openai.TypeOverloaded,
			"The engine is currently overloaded; retry later. (injected fault)", "", "overloaded")}
	default:
		maxLen := s.eng.Config().MaxModelLen
		return contextLengthError(x.promptParam(), (&engine.LengthError{
			PromptTokens: len(x.prompt), MaxTokens: maxLen, MaxModelLen: maxLen,
		}).Error()+" (injected fault)")
	}
}

// fail answers with an OpenAI error and the Server-Timing trailer; for a
// request refused before the engine, frontend is the time to the refusal.
func (s *Server) fail(w http.ResponseWriter, x *exchange, e *openai.APIError, retryAfter int) {
	if x.frontend == 0 {
		x.frontend = s.clock.Now().Sub(x.received)
	}
	s.metrics.httpError(strconv.Itoa(e.Status))
	e.WriteAs(w, x.api, retryAfter)
	s.finishTiming(w, x)
}

// stream answers with Server-Sent Events.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, st *engine.Stream, x *exchange) {
	h := w.Header()
	h["Content-Type"], h["Cache-Control"] = eventStreamType, noCache
	w.WriteHeader(http.StatusOK)
	c := s.newChunks(w, st, x)
	defer c.release()
	_ = c.sw.Flush()
	if _, ok := s.events(ctx, w, st, x, c.emit); !ok {
		return
	}
	if x.p.IncludeUsage || x.p.ReturnMetrics {
		c.usage.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: x.tl.CachedTokens}
		if c.reasons && x.tl.ReasoningTokens > 0 {
			c.usage.CompletionTokensDetails = &openai.CompletionTokensDetails{ReasoningTokens: x.tl.ReasoningTokens}
		}
		var m *openai.RequestMetrics
		if x.p.ReturnMetrics {
			rm := x.requestMetrics()
			m = &rm
		}
		if c.sw.EndData(c.enc.AppendUsage(c.sw.BeginData(), c.usage, m)) != nil {
			return
		}
	}
	if c.sw.Done() != nil {
		return
	}
	s.finishTiming(w, x)
}

// chunks is one streaming answer's writer of chunks: its encoder, text
// and usage, and what emit does for each engine event. Each chunk is
// encoded in the SSE writer's own buffer (sse.Writer.BeginData), not
// copied there.
type chunks struct {
	s       *Server
	st      *engine.Stream
	x       *exchange
	sw      sse.Writer
	enc     openai.ChunkEncoder
	text    textWriter
	txt     []byte // the text of an event's tokens
	usage   openai.Usage
	usageP  *openai.Usage // &usage with continuous usage stats, else nil
	reasons bool          // a chat answer of a reasoning model
	// more: the chunk being written is followed at once by another of
	// the same engine event, or by the answer's end (the usage chunk, the
	// [DONE] event): sw leaves it unflushed (Ready), so that they leave in
	// one write to the client.
	more bool
}

// Ready is the SSE writer's source (sse.Writer.CoalesceWith): true while
// the next chunk follows at once.
func (c *chunks) Ready() bool { return c.more }

// chunksPool holds the streaming state of answers that ended (chunks,
// release), so that an answer's SSE writer, chunk encoder and text buffer
// reuse an earlier one's memory.
var chunksPool = sync.Pool{New: func() any { return new(chunks) }}

// newChunks returns the streaming state of x's answer, written to w; call
// release once the answer ended.
func (s *Server) newChunks(w http.ResponseWriter, st *engine.Stream, x *exchange) *chunks {
	c := chunksPool.Get().(*chunks)
	c.s, c.st, c.x = s, st, x
	c.sw.Reset(w)
	c.enc.Reset(x.isChat(), x.responseID(), s.cfg.ServedModelName, x.received.Unix())
	c.text = newTextWriter(idSeed(x.rid))
	if c.txt == nil {
		c.txt = make([]byte, 0, 64)
	}
	c.usage = openai.Usage{PromptTokens: len(x.prompt), TotalTokens: len(x.prompt)}
	c.usageP = nil
	if x.p.ContinuousUsage {
		c.usageP = &c.usage
	}
	c.reasons = x.isChat() && s.cfg.Engine.Reasoning != nil
	c.more = false
	c.sw.CoalesceWith(c)
	return c
}

// release returns c to chunksPool, holding no request's state; c is not
// used after it.
func (c *chunks) release() {
	c.sw.Reset(nil)
	c.s, c.st, c.x, c.usageP = nil, nil, nil, nil
	chunksPool.Put(c)
}

// emit writes the chunks of one engine event (the role chunk before the
// first, for chat), sent tokens having been sent before it, and records
// the write's lateness behind the event; false when the client is gone.
func (c *chunks) emit(ev engine.Event, first bool, sent int) bool {
	s, x := c.s, c.x
	think := 0
	if c.reasons {
		// The first ReasoningTokens of the answer are reasoning; an
		// event may hold the last of them and the first of the answer.
		think = min(max(c.st.Timeline().ReasoningTokens-sent, 0), ev.Tokens)
	}
	rest := ev.Tokens - think
	text := rest > 0 || think == 0 || ev.Finish != ""
	if first && x.isChat() {
		c.more = true // a reasoning or text chunk follows
		if c.sw.EndData(c.enc.AppendRole(c.sw.BeginData(), c.usageP)) != nil {
			return false
		}
	}
	if think > 0 {
		sent += think
		c.usage.CompletionTokens, c.usage.TotalTokens = sent, len(x.prompt)+sent
		c.txt = c.text.append(c.txt[:0], think)
		c.more = text
		if c.sw.EndData(c.enc.AppendReasoning(c.sw.BeginData(), s.cfg.ReasoningField, c.txt, c.usageP)) != nil {
			return false
		}
	}
	if text {
		sent += rest
		c.usage.CompletionTokens, c.usage.TotalTokens = sent, len(x.prompt)+sent
		c.txt = c.text.append(c.txt[:0], rest)
		c.more = ev.Finish != "" // the answer's end follows
		if c.sw.EndData(c.enc.AppendText(c.sw.BeginData(), c.txt, string(ev.Finish), c.usageP)) != nil {
			return false
		}
	}
	late := s.clock.Since(ev.At)
	s.late.Observe(late)
	s.metrics.lateness(late)
	return true
}

// complete answers with one JSON body once the request finished.
func (s *Server) complete(ctx context.Context, w http.ResponseWriter, r *http.Request, st *engine.Stream, x *exchange) {
	sent, ok := s.events(ctx, w, st, x, nil)
	if !ok {
		return
	}
	text := newTextWriter(idSeed(x.rid))
	think := 0
	if x.isChat() && s.cfg.Engine.Reasoning != nil {
		think = min(x.tl.ReasoningTokens, sent)
	}
	reasoning := string(text.append(make([]byte, 0, 6*think), think))
	content := string(text.append(make([]byte, 0, 6*(sent-think)), sent-think))
	usage := openai.Usage{PromptTokens: len(x.prompt), CompletionTokens: sent, TotalTokens: len(x.prompt) + sent,
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: x.tl.CachedTokens}}
	msg := openai.ChatMessage{Role: "assistant", Content: openai.Content(content)}
	if think > 0 {
		usage.CompletionTokensDetails = &openai.CompletionTokensDetails{ReasoningTokens: think}
		if s.cfg.ReasoningField == openai.ReasoningContentField {
			msg.ReasoningContent = reasoning
		} else {
			msg.Reasoning = reasoning
		}
	}
	var m *openai.RequestMetrics
	if x.p.ReturnMetrics {
		rm := x.requestMetrics()
		m = &rm
	}
	finish := string(x.tl.Finish)
	kv := s.kvTransferAnswer(r, x)
	var body any
	if x.isChat() {
		body = openai.ChatCompletion{ID: x.responseID(), Object: openai.ObjectChatCompletion, Created: x.received.Unix(),
			Model: s.cfg.ServedModelName, Usage: usage, Metrics: m, KVTransferParams: kv,
			Choices: []openai.ChatChoice{{Message: msg,
				Logprobs: json.RawMessage("null"), FinishReason: finish}}}
	} else {
		body = openai.Completion{ID: x.responseID(), Object: openai.ObjectTextCompletion, Created: x.received.Unix(),
			Model: s.cfg.ServedModelName, Usage: usage, Metrics: m, KVTransferParams: kv,
			Choices: []openai.CompletionChoice{{Text: content, Logprobs: json.RawMessage("null"), FinishReason: &finish}}}
	}
	timing := x.serverTiming()
	w.Header().Set(ServerTimingHeader, timing)
	writeJSON(w, http.StatusOK, body)
	// The header carried the timing; the declared trailer repeats it.
	w.Header().Set(ServerTimingHeader, timing)
}

// events runs one request's event loop: it receives each engine event,
// feeds the metrics, applies the request's faults, and hands the event to
// emit (nil: nothing to write per event) with the tokens sent before it;
// emit returns false when the client is gone. events returns the tokens
// sent and true once the request finished, with x's timeline complete, or
// false when the answer must stop (the client left, a write failed, or a
// fault reset the connection).
func (s *Server) events(ctx context.Context, w http.ResponseWriter, st *engine.Stream, x *exchange,
	emit func(ev engine.Event, first bool, sent int) bool) (sent int, ok bool) {
	first, stalled := true, false
	var prevAt time.Time
	for {
		ev, err := st.Recv(ctx)
		if err == io.EOF {
			break
		}
		if err != nil { // the client went away; the engine aborts the request
			s.metrics.aborted()
			return sent, false
		}
		s.observe(st, x, ev, prevAt, first)
		switch s.faultsBeforeWrite(ctx, x, &stalled, first, sent, ev) {
		case faultReset:
			s.abortConn(w)
			return sent, false
		case faultClientGone:
			s.metrics.aborted()
			return sent, false
		}
		if emit != nil && !emit(ev, first, sent) {
			s.metrics.aborted()
			return sent, false
		}
		sent += ev.Tokens
		first, prevAt = false, ev.At
	}
	x.tl, x.hasTL = st.Timeline(), true
	s.metrics.finished(x.tl, x.received)
	return sent, true
}

// observe feeds the Prometheus metrics from one engine event.
func (s *Server) observe(st *engine.Stream, x *exchange, ev engine.Event, prevAt time.Time, first bool) {
	if first && ev.Tokens > 0 {
		tl := st.Timeline()
		s.metrics.firstToken(tl.FirstToken.Sub(x.received), tl.PromptTokens)
	}
	if ev.Tokens > 0 {
		s.metrics.tokens(ev.Tokens, ev.At.Sub(prevAt), first)
	}
}

// Outcomes of faultsBeforeWrite.
const (
	faultNone       = iota // write the chunk
	faultReset             // reset the connection instead
	faultClientGone        // the client left during an injected delay
)

// faultsBeforeWrite applies the request's slow-first-token and stall
// delays before the chunk of ev is written, and says whether to write it.
func (s *Server) faultsBeforeWrite(ctx context.Context, x *exchange, stalled *bool, first bool, sent int, ev engine.Event) int {
	f := &x.faults
	if first && f.slowFirstToken > 0 {
		if !s.sleep(ctx, f.slowFirstToken) {
			return faultClientGone
		}
		x.delay += f.slowFirstToken
	}
	if f.stall > 0 && !*stalled && !first && (sent+ev.Tokens >= f.stallAt || ev.Finish != "") {
		*stalled = true
		if !s.sleep(ctx, f.stall) {
			return faultClientGone
		}
		x.delay += f.stall
	}
	if f.resetAt > 0 && (sent+ev.Tokens >= f.resetAt || ev.Finish != "") {
		return faultReset
	}
	return faultNone
}

func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-s.clock.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// abortConn resets the client's connection mid-response: over HTTP/1 it
// takes the connection over and closes it with a TCP RST; otherwise (or if
// that fails) it aborts the handler, which resets the HTTP/2 stream.
func (s *Server) abortConn(w http.ResponseWriter) {
	s.metrics.httpError("reset")
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		if tc, ok := httplimit.NetConn(conn).(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

// finishTiming sets the Server-Timing trailer.
func (s *Server) finishTiming(w http.ResponseWriter, x *exchange) {
	x.hv[1] = x.serverTiming()
	w.Header()[ServerTimingHeader] = x.hv[1:2:2]
}

// nextID is a generated request id: the server's nonce and a sequence
// number.
func (s *Server) nextID() string {
	var b [48]byte
	id := append(append(b[:0], s.nonce...), '-')
	return string(strconv.AppendUint(id, s.seq.Add(1), 10))
}

// serverTiming renders the Server-Timing value: frontend, server_queue,
// prefill and server_decode (once known), server_reasoning for a chat
// answer whose first tokens were reasoning deltas (the reasoning tokens'
// decode, a part of server_decode), and fault when delays were injected;
// dur in milliseconds (latency's names).
func (x *exchange) serverTiming() string {
	b := make([]byte, 0, 96)
	add := func(name latency.TimingName, d time.Duration) {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, name...)
		b = append(b, ";dur="...)
		b = strconv.AppendFloat(b, float64(d)/1e6, 'f', 3, 64)
	}
	add(latency.TimingFrontend, x.frontend)
	if x.hasTL && x.pd == pdDecode {
		// A decode request: its pull, its wait for blocks and a step, the
		// first step (the rest of the prompt), then its decode.
		q, p, d := x.split()
		add(latency.TimingKVTransfer, x.tl.KVTransfer())
		add(latency.TimingDecodeQueue, q)
		add(latency.TimingFirstDecode, p)
		add(latency.TimingServerDecode, d)
	} else if x.hasTL {
		q, p, d := x.split()
		add(latency.TimingServerQueue, q)
		add(latency.TimingPrefill, p)
		add(latency.TimingServerDecode, d)
		if r := x.tl.Reasoning(); x.api != openai.APICompletions && r > 0 {
			add(latency.TimingServerReasoning, r)
		}
	}
	if x.delay > 0 {
		add(latency.TimingFault, x.delay)
	}
	return string(b)
}

// split is the timeline's queue, prefill and decode as Server-Timing
// reports them. The engine never schedules a request before its arrival,
// even while its loop catches up after a host stall (docs/engine.md); the
// queue is clamped at 0 all the same, as Server-Timing has no negative
// durations.
func (x *exchange) split() (queue, prefill, decode time.Duration) {
	return max(x.tl.Queue(), 0), x.tl.Prefill(), x.tl.Decode()
}

// requestMetrics computes the per-request metrics object (docs/metrics.md).
func (x *exchange) requestMetrics() openai.RequestMetrics {
	tl := x.tl
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	m := openai.RequestMetrics{
		ArrivalTime:      float64(x.received.UnixNano()) / 1e9,
		FrontendTimeMs:   ms(tl.Arrival.Sub(x.received)),
		QueueTimeMs:      ms(tl.Queue()),
		PrefillTimeMs:    ms(tl.Prefill()),
		GenerationTimeMs: ms(tl.Decode()),
		FaultDelayMs:     ms(x.delay),
		PromptTokens:     tl.PromptTokens,
		CachedTokens:     tl.CachedTokens,
		CompletionTokens: tl.OutputTokens,
		PrefillChunks:    tl.PrefillChunks,
		Preemptions:      tl.Preemptions,
	}
	if !tl.FirstToken.IsZero() {
		m.TimeToFirstTokenMs = ms(tl.FirstToken.Sub(x.received))
	}
	if !tl.Finished.IsZero() {
		m.E2ETimeMs = ms(tl.Finished.Sub(x.received))
	}
	if tl.OutputTokens >= 2 {
		m.MeanITLMs = m.GenerationTimeMs / float64(tl.OutputTokens-1)
	}
	return m
}

func (x *exchange) responseID() string {
	if x.respID == "" {
		x.respID = "cmpl-" + x.rid
		if x.isChat() {
			x.respID = "chatcmpl-" + x.rid
		}
	}
	return x.respID
}

// idSeed is the FNV-1a hash (64 bits) of rid.
func idSeed(rid string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(rid) {
		h ^= uint64(rid[i])
		h *= 1099511628211
	}
	return h
}

func validID(s string) bool {
	if len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		openai.WriteError(w, http.StatusInternalServerError, openai.NewError(openai.TypeServer, "encoding the response: "+err.Error(), "", ""), 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// isChat reports a chat completions request.
func (x *exchange) isChat() bool { return x.api == openai.APIChat }
