package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/jsonscan"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/sse"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// exchange is one chat request as it goes through the application.
type exchange struct {
	s   *Server
	w   http.ResponseWriter
	r   *http.Request
	id  string
	tl  timeline
	out *output

	span  trace.Span
	calls []call

	// The answer as it arrives from upstream.
	sf        streamFilter
	held      []byte // blocking: the whole answer, unchecked
	tokens    int    // output tokens so far
	prevCompl int    // cumulative completion tokens (continuous usage)
	finish    string
	usage     *openai.Usage
	ch        openai.ChunkInfo // the chunk being read
	text      []byte           // its first choice's content, unescaped
	forward   string           // the upstream's stages, passed on
	errKind   string
	status    int
	final     *stages // the stages the trailer carries
}

// chat serves POST /v1/chat/completions.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	x := &exchange{s: s, w: w, r: r, tl: timeline{start: s.clock.Now()}, sf: streamFilter{f: s.filter}}
	x.id = s.requestID(r)
	w.Header().Set("X-Request-Id", x.id)
	ctx := r.Context()
	if s.cfg.Tracer != nil {
		ctx, x.span = s.cfg.Tracer.Start(tracing.Extract(ctx, r.Header), "app "+r.URL.Path,
			trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(x.tl.start),
			trace.WithAttributes(attribute.String("tokentrace.request_id", x.id)))
		defer x.endSpan(ctx)
	}
	if r.Method != http.MethodPost {
		x.fail(http.StatusMethodNotAllowed, openai.NewError(openai.TypeInvalidRequest, "use POST", "", "method_not_allowed"))
		return
	}
	x.run(ctx)
}

// run answers the request: read it, retrieve, rerank, assemble the prompt,
// call upstream, check and send the answer.
func (x *exchange) run(ctx context.Context) {
	s := x.s
	body, err := io.ReadAll(http.MaxBytesReader(x.w, x.r.Body, maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			x.fail(http.StatusRequestEntityTooLarge, openai.NewError(openai.TypeInvalidRequest,
				fmt.Sprintf("request body is larger than the limit of %d bytes", tooBig.Limit), "", "request_too_large"))
		case httplimit.IsBodyTimeout(err):
			x.w.Header().Set("Connection", "close")
			x.fail(http.StatusRequestTimeout, openai.NewError(openai.TypeInvalidRequest, "the request body was not received in time", "", "request_timeout"))
		default:
			x.fail(http.StatusBadRequest, openai.NewError(openai.TypeInvalidRequest, "reading the request body: "+err.Error(), "", ""))
		}
		return
	}
	req, apiErr := openai.DecodeChat(body)
	if apiErr != nil {
		x.fail(apiErr.Status, apiErr.Err)
		return
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields) // DecodeChat accepted it: an object
	query := question(req.Messages)
	x.tl.parsed = s.clock.Now()

	hits, calls, err := s.retrieve(ctx, query)
	x.calls = calls
	if err != nil {
		x.errKind = "client_closed"
		return // the client left
	}
	x.tl.retrieved = s.clock.Now()
	top := Rerank(query, hits, s.cfg.TopK)
	x.tl.reranked = s.clock.Now()
	up, err := s.upstreamBody(fields, req, top)
	if err != nil {
		x.fail(http.StatusInternalServerError, openai.NewError(openai.TypeServer, "assembling the prompt: "+err.Error(), "", ""))
		return
	}
	x.tl.prompted = s.clock.Now()
	x.call(ctx, up, req)
}

// upstreamBody is the client's request with the assembled messages,
// streamed (with usage) whatever the client asked, and the configured
// model; every other field is passed on as the client sent it.
func (s *Server) upstreamBody(fields map[string]json.RawMessage, req *openai.ChatCompletionRequest, top []Hit) ([]byte, error) {
	msgs, err := json.Marshal(prompt(req.Messages, top))
	if err != nil {
		return nil, err
	}
	fields["messages"] = msgs
	fields["stream"] = json.RawMessage("true")
	cont := req.StreamOptions != nil && req.StreamOptions.ContinuousUsageStats
	fields["stream_options"] = json.RawMessage(fmt.Sprintf(`{"include_usage":true,"continuous_usage_stats":%v}`, cont))
	if s.cfg.Model != "" {
		m, _ := json.Marshal(s.cfg.Model)
		fields["model"] = m
	}
	return json.Marshal(fields)
}

// streamEndGrace is how long the app waits, after the upstream's [DONE],
// for the rest of its body (the Server-Timing trailer): an upstream that
// keeps its connection open after its answer never holds the client.
const streamEndGrace = 500 * time.Millisecond

// endGrace is streamEndGrace, or what a test set instead.
func (s *Server) endGrace() time.Duration {
	if s.endGraceTest > 0 {
		return s.endGraceTest
	}
	return streamEndGrace
}

// call sends the request upstream and relays the answer.
func (x *exchange) call(ctx context.Context, body []byte, req *openai.ChatCompletionRequest) {
	s := x.s
	// uctx is the upstream request's: cancel closes its connection (the
	// answer's end, or an answer too large); ctx goes on for the checks
	// and the writes after it.
	uctx, cancel := context.WithTimeout(ctx, s.cfg.UpstreamTimeout)
	defer cancel()
	ureq, err := x.upstreamRequest(uctx, body)
	if err != nil {
		x.fail(http.StatusInternalServerError, openai.NewError(openai.TypeServer, redact.Text(err.Error()), "", ""))
		return
	}
	t0 := s.clock.Now()
	resp, err := s.hc.Do(ureq)
	x.tl.upstream += s.clock.Now().Sub(t0)
	if err != nil {
		x.unreachable(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		x.relayError(resp)
		return
	}
	x.out = newOutput(x, req)
	rd := sse.NewReader(waitReader{r: resp.Body, now: s.clock.Now, waited: &x.tl.upstream}, func() int64 { return 0 }, 0)
	rd.KeepComment = latency.FinalTimingComment
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		x.streamError("the model's server did not stream its answer", "upstream_protocol_error")
		return
	}
	if !x.out.begin() {
		return
	}
	if !x.events(ctx, rd, cancel) {
		return
	}
	timing := latency.TimingValues{Header: resp.Header.Values("Server-Timing")}
	if len(rd.Kept) > 0 {
		timing.Final = []string{string(rd.Kept)}
	}
	x.forward = latency.ForwardTiming(latency.HopApp, timing)
	x.end(ctx)
	if x.final == nil || x.errKind != "" {
		return
	}
	x.trailerTiming(resp, timing, cancel)
}

// upstreamRequest is the chat request to the model's server: the body as
// the client sent it, with the request's id, key and trace context.
func (x *exchange) upstreamRequest(uctx context.Context, body []byte) (*http.Request, error) {
	s := x.s
	ureq, err := http.NewRequestWithContext(uctx, http.MethodPost, s.chatURL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := ureq.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	h.Set("X-Request-Id", x.id)
	if s.cfg.APIKey != "" {
		h.Set("Authorization", "Bearer "+s.cfg.APIKey)
	}
	if x.span != nil {
		tracing.Inject(trace.ContextWithSpan(context.Background(), x.span), h)
	} else if tp := x.r.Header.Get("Traceparent"); tp != "" {
		h.Set("Traceparent", tp)
		if ts := x.r.Header.Get("Tracestate"); ts != "" {
			h.Set("Tracestate", ts)
		}
	}
	return ureq, nil
}

// unreachable answers a call that reached no answer: nothing when the
// client left, else 502 upstream_unreachable.
func (x *exchange) unreachable(err error) {
	if x.r.Context().Err() != nil {
		x.errKind = "client_closed"
		return
	}
	x.errKind = "upstream_unreachable"
	x.status = http.StatusBadGateway
	x.w.Header().Set("Server-Timing", x.stages().headerTiming())
	x.s.upstreamUnreachable(x.w, err)
	x.trailer()
}

// trailerTiming reads the rest of the upstream's body after the answer's
// end, endGrace at most (then cancel closes its connection), and puts its
// Server-Timing trailer into the app's trailer, which supersedes the final
// comment; the stages stay those of the answer's end.
func (x *exchange) trailerTiming(resp *http.Response, timing latency.TimingValues, cancel context.CancelFunc) {
	stop := time.AfterFunc(x.s.endGrace(), cancel)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	stop.Stop()
	if tr := resp.Trailer.Values("Server-Timing"); len(tr) > 0 {
		timing.Trailer = tr
		x.forward = latency.ForwardTiming(latency.HopApp, timing)
		x.w.Header().Set(http.TrailerPrefix+"Server-Timing", x.final.finalTiming(x.forward))
	}
}

// events reads the upstream's stream to its [DONE], checking and passing
// on the answer as the guardrail mode says; false when the answer cannot
// be completed (the stream broke, the client left). After the final usage
// chunk (usage, no choices) the answer is whole: [DONE] is waited for
// streamEndGrace at most (cancel closes the upstream's connection), and
// that wait is no upstream time.
func (x *exchange) events(ctx context.Context, rd *sse.Reader, cancel context.CancelFunc) bool {
	var ending *time.Timer
	var upstreamAtEnd time.Duration // app.upstream when the final usage chunk came
	defer func() {
		if ending != nil {
			ending.Stop()
		}
	}()
	for {
		ev, err := rd.Next()
		if err != nil {
			if x.r.Context().Err() != nil {
				x.errKind = "client_closed"
				return false
			}
			if ending != nil {
				// The answer was whole at its final usage chunk; no [DONE]
				// came. Waiting for it is the app's own time
				// (post_process), not the upstream's.
				x.tl.upstream = upstreamAtEnd
				return true
			}
			x.streamError("the model's stream ended before [DONE]", "upstream_stream_broken")
			return false
		}
		if string(ev.Data) == "[DONE]" {
			return true
		}
		if ending != nil {
			continue // nothing but [DONE] belongs after the final usage chunk
		}
		if string(ev.Name) == "error" || x.scan(ev.Data) != nil {
			x.streamError("the model's server sent an error or an event that is not a chunk", "upstream_stream_error")
			return false
		}
		if !x.chunk(ctx) {
			return false
		}
		if x.ch.HasUsage && x.ch.Choices == 0 {
			ending = time.AfterFunc(x.s.endGrace(), cancel)
			upstreamAtEnd = x.tl.upstream
		}
	}
}

// scan reads one upstream chunk with the project's one chunk classifier
// (exact keys): an error when it is no chunk or carries an error. The
// first choice's content, unescaped, is left in x.text.
func (x *exchange) scan(data []byte) error {
	ch := &x.ch
	if err := openai.ScanChunk(data, ch); err != nil {
		return err
	}
	if len(ch.Error) > 0 {
		return errors.New("error event")
	}
	text, err := jsonscan.AppendUnquote(x.text[:0], ch.Content)
	x.text = text
	return err
}

// chunk handles the upstream chunk that scan read.
func (x *exchange) chunk(ctx context.Context) bool {
	ch := &x.ch
	if ch.HasUsage {
		u := openai.Usage{PromptTokens: ch.PromptTokens, CompletionTokens: ch.CompletionTokens, TotalTokens: ch.PromptTokens + ch.CompletionTokens}
		if ch.CachedTokens > 0 {
			u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: ch.CachedTokens}
		}
		x.usage = &u
	}
	if ch.Choices == 0 {
		return true
	}
	if ch.HasFinish && len(ch.Finish) > 0 {
		if f, err := jsonscan.Unquote(ch.Finish); err == nil {
			x.finish = f
		}
	}
	text := x.text
	k := 0
	switch {
	case ch.HasUsage: // continuous usage: the tokens this chunk added
		k = ch.CompletionTokens - x.prevCompl
		x.prevCompl = ch.CompletionTokens
	case len(text) > 0:
		k = 1
	}
	x.tokens += max(k, 0)
	s := x.s
	if held := int64(len(x.held) + len(x.out.whole) + len(text)); held > s.cfg.MaxResponseBytes {
		// What the app holds (a whole answer, or one the blocking
		// guardrail has not checked) is bounded; the caller's cancel
		// closes the upstream's connection.
		x.streamError(fmt.Sprintf("the model's answer exceeds %d bytes (max_response_bytes)", s.cfg.MaxResponseBytes), "upstream_response_too_large")
		return false
	}
	switch s.cfg.Guardrail {
	case GuardrailOff:
		if len(text) > 0 {
			return x.out.text(text, "")
		}
	case GuardrailStreaming:
		t0 := s.clock.Now()
		rel := x.sf.push(nil, text)
		err := s.clock.Sleep(ctx, time.Duration(max(k, 0))*s.cfg.GuardrailCost)
		x.tl.guardrail += s.clock.Now().Sub(t0)
		if err != nil {
			x.errKind = "client_closed"
			return false
		}
		if len(rel) > 0 {
			return x.out.text(rel, "")
		}
	case GuardrailBlocking:
		x.held = append(x.held, text...)
	}
	return true
}

// end checks what is left of the answer, sends it with the finish reason
// and the usage, then the final event with every stage.
func (x *exchange) end(ctx context.Context) {
	s := x.s
	var rest []byte
	switch s.cfg.Guardrail {
	case GuardrailStreaming:
		t0 := s.clock.Now()
		rest = x.sf.flush(nil)
		x.tl.guardrail += s.clock.Now().Sub(t0)
	case GuardrailBlocking:
		t0 := s.clock.Now()
		rest = s.filter.apply(nil, x.held)
		err := s.clock.Sleep(ctx, time.Duration(x.tokens)*s.cfg.GuardrailCost)
		x.tl.guardrail += s.clock.Now().Sub(t0)
		if err != nil {
			x.errKind = "client_closed"
			return
		}
	}
	if !x.out.text(rest, x.finish) {
		return
	}
	x.out.finishAnswer(x.usage)
}

// stages is the partition so far, ended now.
func (x *exchange) stages() stages {
	x.tl.end = x.s.clock.Now()
	return x.tl.stages()
}

// trailer sets the Server-Timing trailer: the stages after the prompt, the
// total and the upstream's stages.
func (x *exchange) trailer() {
	st := x.stages()
	x.final = &st
	x.w.Header().Set(http.TrailerPrefix+"Server-Timing", st.finalTiming(x.forward))
}

// fail answers an error before anything was sent, with the stages so far
// in the Server-Timing header.
func (x *exchange) fail(status int, e openai.Error) {
	x.status = status
	if e.Code != nil {
		x.errKind = *e.Code
	} else {
		x.errKind = e.Type
	}
	x.w.Header().Set("Server-Timing", x.stages().headerTiming())
	openai.WriteError(x.w, status, e, 0)
	x.trailer()
}

// relayError passes on the upstream's error status and body. A 413 is
// not: the body the upstream found too large is the app's (the client's
// question with the retrieved passages), so the client gets 502; nor is a
// redirect (3xx), which is not followed: 502.
func (x *exchange) relayError(resp *http.Response) {
	x.status, x.errKind = resp.StatusCode, "upstream_status"
	b, _ := io.ReadAll(io.LimitReader(waitReader{r: resp.Body, now: x.s.clock.Now, waited: &x.tl.upstream}, 64<<10))
	if resp.StatusCode == http.StatusRequestEntityTooLarge {
		x.forward = latency.ForwardTiming(latency.HopApp, latency.TimingValues{Header: resp.Header.Values("Server-Timing")})
		x.s.log.Warn("upstream refused the app's request body as too large", "request_id", x.id, "upstream_status", resp.StatusCode)
		x.fail(http.StatusBadGateway, openai.NewError(openai.TypeServer,
			"the model's server refused the app's request (the question with the retrieved passages) as too large (413); fewer passages (--top-k) or a larger limit upstream would fit",
			"", "upstream_request_too_large"))
		return
	}
	if e, ok := redirectError(resp.StatusCode); ok {
		x.fail(http.StatusBadGateway, e)
		return
	}
	h := x.w.Header()
	h.Set("Content-Type", resp.Header.Get("Content-Type"))
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		h.Set("Retry-After", ra)
	}
	h.Set("Server-Timing", x.stages().headerTiming())
	x.w.WriteHeader(resp.StatusCode)
	_, _ = x.w.Write([]byte(redact.Values(string(b), x.s.cfg.APIKey)))
	x.forward = latency.ForwardTiming(latency.HopApp, latency.TimingValues{Header: resp.Header.Values("Server-Timing"), Trailer: resp.Trailer.Values("Server-Timing")})
	x.trailer()
}

// streamError ends the answer with an error: an error event when the
// stream has begun, else a 502.
func (x *exchange) streamError(msg, code string) {
	x.errKind, x.status = code, http.StatusBadGateway
	x.s.log.Warn("upstream stream", "request_id", x.id, "err", msg)
	if x.out == nil || !x.out.started {
		x.fail(http.StatusBadGateway, openai.NewError(openai.TypeServer, msg, "", code))
		return
	}
	x.out.error(openai.NewError(openai.TypeServer, msg, "", code))
}

// endSpan ends the request's span with a child span per stage (laid end to
// end from the handler's start) and one per retrieval call (at its own
// instants).
func (x *exchange) endSpan(ctx context.Context) {
	if x.final == nil { // ended without a trailer (the client left)
		st := x.stages()
		x.final = &st
	}
	st := *x.final
	tr := x.s.cfg.Tracer
	tracing.StageSpans(ctx, tr, x.tl.start, st.spans())
	for _, c := range x.calls {
		if c.start.IsZero() {
			continue
		}
		_, sp := tr.Start(ctx, "app retrieval call", trace.WithTimestamp(c.start), trace.WithAttributes(
			attribute.Int("tokentrace.app.source", c.source), attribute.Float64("tokentrace.app.added_latency", c.delay.Seconds()),
			attribute.Int("tokentrace.app.hits", c.hits)))
		sp.End(trace.WithTimestamp(c.end))
	}
	x.span.SetAttributes(attribute.Int("gen_ai.usage.output_tokens", x.tokens), attribute.String("tokentrace.app.guardrail", x.s.cfg.Guardrail))
	if x.usage != nil {
		x.span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", x.usage.PromptTokens))
	}
	if x.errKind != "" {
		x.span.SetStatus(codes.Error, x.errKind)
	}
	x.span.End(trace.WithTimestamp(x.tl.end))
}

// redirectError is the 502's error for an upstream's 3xx status, an
// answer the app neither follows nor passes on; ok is false for another.
func redirectError(status int) (e openai.Error, ok bool) {
	if status < 300 || status >= 400 {
		return e, false
	}
	return openai.NewError(openai.TypeServer,
		fmt.Sprintf("the model's server answered %d, a redirect (not followed)", status), "", "upstream_redirect"), true
}
