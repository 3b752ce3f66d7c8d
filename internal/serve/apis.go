package serve

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/sse"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// The Responses, Messages and Ollama chat APIs over the same engine
// (docs/serve.md, "The APIs"): the request's messages are tokenized as a
// chat's, a simulated reasoning phase becomes a reasoning item
// (Responses), a thinking block (Messages) or "thinking" text (Ollama).

// parseAPI decodes a Responses, Messages or Ollama request into x's
// parameters and prompt.
func (s *Server) parseAPI(x *exchange, body []byte) *openai.APIError {
	var msgs []openai.ChatMessage
	switch x.api {
	case openai.APIResponses:
		req, apiErr := openai.DecodeResponses(body)
		if apiErr != nil {
			return apiErr
		}
		x.p, msgs = req.Params(), req.Messages()
	case openai.APIMessages:
		req, apiErr := openai.DecodeMessages(body)
		if apiErr != nil {
			return apiErr
		}
		x.p, msgs = req.Params(), req.ChatMessages()
	default:
		req, apiErr := openai.DecodeOllamaChat(body)
		if apiErr != nil {
			return apiErr
		}
		x.p, msgs = req.Params(), req.ChatMessages()
	}
	tm := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		tm[i] = tokenizer.Message{Role: m.Role, Content: string(m.Content)}
	}
	x.prompt = tokenizer.EncodeChat(make([]int32, 0, tokenizer.CountChat(tm)), tm)
	return nil
}

// apiAnswer is one Responses, Messages or Ollama answer as it is written:
// its texts so far, the blocks open, and the stream's writer.
type apiAnswer struct {
	s         *Server
	x         *exchange
	st        *engine.Stream
	sw        *sse.Writer
	text      textWriter
	reasoning []byte // the reasoning text so far
	content   []byte // the answer text so far
	txt       []byte
	seq       int  // Responses' sequence_number
	thinking  bool // a reasoning item or thinking block is open
	answering bool // the message item or text block is open
	reasoned  bool // a reasoning item or thinking block was written
	created   string
}

func (s *Server) newAPIAnswer(w http.ResponseWriter, st *engine.Stream, x *exchange) *apiAnswer {
	return &apiAnswer{s: s, x: x, st: st, sw: sse.NewWriter(w), text: newTextWriter(idSeed(x.rid)),
		created: x.received.UTC().Format(time.RFC3339Nano)}
}

// answerAPI answers a Responses, Messages or Ollama request, streamed or
// whole.
func (s *Server) answerAPI(ctx context.Context, w http.ResponseWriter, st *engine.Stream, x *exchange) {
	a := s.newAPIAnswer(w, st, x)
	if !x.p.Stream {
		sent, ok := s.events(ctx, w, st, x, nil)
		if !ok {
			return
		}
		think := min(x.tl.ReasoningTokens, sent)
		if s.cfg.Engine.Reasoning == nil {
			think = 0
		}
		a.reasoning = a.text.append(nil, think)
		a.content = a.text.append(nil, sent-think)
		a.reasoned = think > 0
		timing := x.serverTiming()
		w.Header().Set(ServerTimingHeader, timing)
		writeJSON(w, http.StatusOK, a.whole(sent))
		w.Header().Set(ServerTimingHeader, timing)
		return
	}
	h := w.Header()
	if x.api == openai.APIOllama {
		h.Set("Content-Type", "application/x-ndjson")
	} else {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
	}
	w.WriteHeader(http.StatusOK)
	if a.open() != nil {
		return
	}
	sent, ok := s.events(ctx, w, st, x, a.emit)
	if !ok {
		return
	}
	if a.end(sent) != nil {
		return
	}
	s.finishTiming(w, x)
}

// whole is the answer's body once the request finished with sent tokens.
func (a *apiAnswer) whole(sent int) any {
	x := a.x
	var m *openai.RequestMetrics
	if x.p.ReturnMetrics {
		rm := x.requestMetrics()
		m = &rm
	}
	switch x.api {
	case openai.APIResponses:
		r := a.response(sent)
		r.Metrics = m
		return r
	case openai.APIMessages:
		msg := a.message(sent)
		msg.Metrics = m
		return msg
	}
	o := a.ollamaFinal(sent)
	o.Message.Content, o.Message.Thinking = string(a.content), string(a.reasoning)
	return o
}

// emit writes the events of one engine event: its reasoning tokens, then
// its answer tokens (an event may hold the last of the one and the first
// of the other).
func (a *apiAnswer) emit(ev engine.Event, _ bool, sent int) bool {
	s := a.s
	think := 0
	if s.cfg.Engine.Reasoning != nil {
		think = min(max(a.st.Timeline().ReasoningTokens-sent, 0), ev.Tokens)
	}
	// Ollama writes one line per token, whatever the engine merged.
	per := 0
	if a.x.api == openai.APIOllama {
		per = 1
	}
	if think > 0 {
		if !a.thinking && a.startReasoning() != nil {
			return false
		}
		for left := think; left > 0; {
			n := cmp.Or(per, left)
			a.txt = a.text.append(a.txt[:0], n)
			a.reasoning = append(a.reasoning, a.txt...)
			if a.reasoningDelta(a.txt) != nil {
				return false
			}
			left -= n
		}
	}
	if rest := ev.Tokens - think; rest > 0 {
		if a.thinking && a.endReasoning() != nil {
			return false
		}
		if !a.answering && a.startText() != nil {
			return false
		}
		for left := rest; left > 0; {
			n := cmp.Or(per, left)
			a.txt = a.text.append(a.txt[:0], n)
			a.content = append(a.content, a.txt...)
			if a.textDelta(a.txt) != nil {
				return false
			}
			left -= n
		}
	}
	late := s.clock.Since(ev.At)
	s.late.Observe(late)
	s.metrics.lateness(late)
	return true
}

// event writes one named event (Responses' and Messages') whose JSON
// payload append makes; Responses' events get their sequence_number
// first.
func (a *apiAnswer) event(name string, payload func([]byte) []byte) error {
	b := a.sw.BeginEvent(name)
	b = append(b, `{"type":`...)
	b = openai.AppendString(b, name)
	if a.x.api == openai.APIResponses {
		b = append(b, `,"sequence_number":`...)
		b = strconv.AppendInt(b, int64(a.seq), 10)
		a.seq++
	}
	b = payload(b)
	return a.sw.EndData(append(b, '}'))
}

// object appends ,"key":<v as JSON>.
func object(b []byte, key string, v any) []byte {
	j, _ := json.Marshal(v)
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return append(b, j...)
}

// ollamaLine writes one line of an Ollama stream.
func (a *apiAnswer) ollamaLine(o openai.OllamaChatResponse) error {
	j, _ := json.Marshal(o)
	return a.sw.EndLine(append(a.sw.BeginLine(), j...))
}

func (a *apiAnswer) ids() (resp, reasoning, msg string) {
	return "resp_" + a.x.rid, "rs_" + a.x.rid, "msg_" + a.x.rid
}

// open writes the stream's first events: response.created and
// response.in_progress; message_start.
func (a *apiAnswer) open() error {
	x := a.x
	switch x.api {
	case openai.APIResponses:
		r := a.responseHead()
		if err := a.event("response.created", func(b []byte) []byte { return object(b, "response", r) }); err != nil {
			return err
		}
		return a.event("response.in_progress", func(b []byte) []byte { return object(b, "response", r) })
	case openai.APIMessages:
		m := a.messageHead()
		return a.event("message_start", func(b []byte) []byte { return object(b, "message", m) })
	}
	return a.sw.Flush()
}

func (a *apiAnswer) startReasoning() error {
	a.thinking, a.reasoned = true, true
	switch a.x.api {
	case openai.APIResponses:
		_, rs, _ := a.ids()
		item := openai.ResponseItem{ID: rs, Type: "reasoning", Summary: &[]openai.ResponsePart{}, Content: []openai.ResponsePart{}}
		if err := a.event("response.output_item.added", func(b []byte) []byte {
			return object(append(b, `,"output_index":0`...), "item", item)
		}); err != nil {
			return err
		}
		// The reasoning_text part is added before its deltas, as the
		// message's output_text part is (clients' accumulators need it).
		return a.event("response.content_part.added", func(b []byte) []byte {
			return append(a.reasoningHead(b), `,"part":{"type":"reasoning_text","text":""}`...)
		})
	case openai.APIMessages:
		return a.event("content_block_start", func(b []byte) []byte {
			return append(b, `,"index":0,"content_block":{"type":"thinking","thinking":"","signature":""}`...)
		})
	}
	return nil
}

func (a *apiAnswer) reasoningDelta(t []byte) error {
	switch a.x.api {
	case openai.APIResponses:
		return a.event("response.reasoning_text.delta", func(b []byte) []byte {
			return openai.AppendString(append(a.reasoningHead(b), `,"delta":`...), string(t))
		})
	case openai.APIMessages:
		return a.event("content_block_delta", func(b []byte) []byte {
			b = append(b, `,"index":0,"delta":{"type":"thinking_delta","thinking":`...)
			return append(openai.AppendString(b, string(t)), '}')
		})
	}
	return a.ollamaLine(openai.OllamaChatResponse{Model: a.s.cfg.ServedModelName, CreatedAt: a.created,
		Message: openai.OllamaMessage{Role: "assistant", Thinking: string(t)}})
}

// reasoningHead appends a Responses reasoning event's item_id,
// output_index and content_index.
func (a *apiAnswer) reasoningHead(b []byte) []byte {
	_, rs, _ := a.ids()
	b = append(b, `,"item_id":`...)
	b = openai.AppendString(b, rs)
	return append(b, `,"output_index":0,"content_index":0`...)
}

// signature is the thinking block's signature: the simulated engine signs
// nothing; clients only pass it back.
func (a *apiAnswer) signature() string { return "tokentrace-" + a.x.rid }

func (a *apiAnswer) endReasoning() error {
	a.thinking = false
	switch a.x.api {
	case openai.APIResponses:
		if err := a.event("response.reasoning_text.done", func(b []byte) []byte {
			return openai.AppendString(append(a.reasoningHead(b), `,"text":`...), string(a.reasoning))
		}); err != nil {
			return err
		}
		if err := a.event("response.content_part.done", func(b []byte) []byte {
			b = append(a.reasoningHead(b), `,"part":{"type":"reasoning_text","text":`...)
			return append(openai.AppendString(b, string(a.reasoning)), '}')
		}); err != nil {
			return err
		}
		item := a.reasoningItem()
		return a.event("response.output_item.done", func(b []byte) []byte {
			return object(append(b, `,"output_index":0`...), "item", item)
		})
	case openai.APIMessages:
		if err := a.event("content_block_delta", func(b []byte) []byte {
			b = append(b, `,"index":0,"delta":{"type":"signature_delta","signature":`...)
			return append(openai.AppendString(b, a.signature()), '}')
		}); err != nil {
			return err
		}
		return a.event("content_block_stop", func(b []byte) []byte { return append(b, `,"index":0`...) })
	}
	return nil
}

// index is the answer's output item or content block: after the
// reasoning one, if any.
func (a *apiAnswer) index() int {
	if a.reasoned {
		return 1
	}
	return 0
}

func (a *apiAnswer) startText() error {
	a.answering = true
	i := a.index()
	switch a.x.api {
	case openai.APIResponses:
		_, _, msg := a.ids()
		item := openai.ResponseItem{ID: msg, Type: "message", Status: openai.ResponseInProgress, Role: "assistant", Content: []openai.ResponsePart{}}
		if err := a.event("response.output_item.added", func(b []byte) []byte {
			b = append(b, `,"output_index":`...)
			return object(strconv.AppendInt(b, int64(i), 10), "item", item)
		}); err != nil {
			return err
		}
		return a.event("response.content_part.added", func(b []byte) []byte {
			return append(a.textHead(b, i), `,"part":{"type":"output_text","text":"","annotations":[]}`...)
		})
	case openai.APIMessages:
		return a.event("content_block_start", func(b []byte) []byte {
			b = append(b, `,"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			return append(b, `,"content_block":{"type":"text","text":""}`...)
		})
	}
	return nil
}

// textHead appends a Responses text event's item_id, output_index and
// content_index.
func (a *apiAnswer) textHead(b []byte, i int) []byte {
	_, _, msg := a.ids()
	b = append(b, `,"item_id":`...)
	b = openai.AppendString(b, msg)
	b = append(b, `,"output_index":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	return append(b, `,"content_index":0`...)
}

func (a *apiAnswer) textDelta(t []byte) error {
	i := a.index()
	switch a.x.api {
	case openai.APIResponses:
		return a.event("response.output_text.delta", func(b []byte) []byte {
			b = append(a.textHead(b, i), `,"delta":`...)
			return append(openai.AppendString(b, string(t)), `,"logprobs":[]`...)
		})
	case openai.APIMessages:
		return a.event("content_block_delta", func(b []byte) []byte {
			b = append(b, `,"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"delta":{"type":"text_delta","text":`...)
			return append(openai.AppendString(b, string(t)), '}')
		})
	}
	return a.ollamaLine(openai.OllamaChatResponse{Model: a.s.cfg.ServedModelName, CreatedAt: a.created,
		Message: openai.OllamaMessage{Role: "assistant", Content: string(t)}})
}

func (a *apiAnswer) endText() error {
	a.answering = false
	i := a.index()
	switch a.x.api {
	case openai.APIResponses:
		text := string(a.content)
		if err := a.event("response.output_text.done", func(b []byte) []byte {
			b = append(a.textHead(b, i), `,"text":`...)
			return append(openai.AppendString(b, text), `,"logprobs":[]`...)
		}); err != nil {
			return err
		}
		if err := a.event("response.content_part.done", func(b []byte) []byte {
			b = append(a.textHead(b, i), `,"part":{"type":"output_text","text":`...)
			return append(openai.AppendString(b, text), `,"annotations":[]}`...)
		}); err != nil {
			return err
		}
		item := a.messageItem()
		return a.event("response.output_item.done", func(b []byte) []byte {
			b = append(b, `,"output_index":`...)
			return object(strconv.AppendInt(b, int64(i), 10), "item", item)
		})
	case openai.APIMessages:
		return a.event("content_block_stop", func(b []byte) []byte {
			b = append(b, `,"index":`...)
			return strconv.AppendInt(b, int64(i), 10)
		})
	}
	return nil
}

// end closes what is open and writes the stream's last events:
// response.completed (or response.incomplete at the token limit) with
// the whole response; message_delta and message_stop; Ollama's done line
// with its durations.
func (a *apiAnswer) end(sent int) error {
	x := a.x
	if x.api == openai.APIOllama {
		return a.ollamaLine(a.ollamaFinal(sent))
	}
	if a.thinking {
		if err := a.endReasoning(); err != nil {
			return err
		}
	}
	if !a.answering {
		if err := a.startText(); err != nil { // an answer of reasoning only still has its (empty) text
			return err
		}
	}
	if err := a.endText(); err != nil {
		return err
	}
	var m *openai.RequestMetrics
	if x.p.ReturnMetrics {
		rm := x.requestMetrics()
		m = &rm
	}
	if x.api == openai.APIResponses {
		r := a.response(sent)
		r.Metrics = m
		name := "response.completed"
		if r.Status == openai.ResponseIncomplete {
			name = "response.incomplete"
		}
		return a.event(name, func(b []byte) []byte { return object(b, "response", r) })
	}
	msg := a.message(sent)
	if err := a.event("message_delta", func(b []byte) []byte {
		b = object(b, "delta", struct {
			StopReason   *string `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		}{msg.StopReason, nil})
		b = object(b, "usage", msg.Usage)
		if m != nil {
			b = object(b, "metrics", m)
		}
		return b
	}); err != nil {
		return err
	}
	return a.event("message_stop", func(b []byte) []byte { return b })
}

// thinkTokens is how many of the sent tokens were reasoning.
func (a *apiAnswer) thinkTokens(sent int) int {
	if a.s.cfg.Engine.Reasoning == nil {
		return 0
	}
	return min(a.x.tl.ReasoningTokens, sent)
}

func (a *apiAnswer) responseHead() openai.Response {
	resp, _, _ := a.ids()
	return openai.Response{ID: resp, Object: "response", CreatedAt: a.x.received.Unix(), Status: openai.ResponseInProgress,
		Model: a.s.cfg.ServedModelName, Output: []openai.ResponseItem{}}
}

func (a *apiAnswer) reasoningItem() openai.ResponseItem {
	_, rs, _ := a.ids()
	return openai.ResponseItem{ID: rs, Type: "reasoning", Summary: &[]openai.ResponsePart{},
		Content: []openai.ResponsePart{{Type: "reasoning_text", Text: string(a.reasoning)}}}
}

func (a *apiAnswer) messageItem() openai.ResponseItem {
	_, _, msg := a.ids()
	return openai.ResponseItem{ID: msg, Type: "message", Status: openai.ResponseCompleted, Role: "assistant",
		Content: []openai.ResponsePart{{Type: "output_text", Text: string(a.content), Annotations: &[]any{}}}}
}

// response is the whole Response once the request finished.
func (a *apiAnswer) response(sent int) openai.Response {
	x := a.x
	r := a.responseHead()
	r.Status = openai.ResponseCompleted
	if x.tl.Finish == engine.FinishLength {
		r.Status = openai.ResponseIncomplete
		r.IncompleteDetails = &openai.IncompleteDetails{Reason: "max_output_tokens"}
	}
	if a.reasoned {
		r.Output = append(r.Output, a.reasoningItem())
	}
	r.Output = append(r.Output, a.messageItem())
	u := &openai.ResponseUsage{InputTokens: len(x.prompt), OutputTokens: sent, TotalTokens: len(x.prompt) + sent}
	u.InputTokensDetails.CachedTokens = x.tl.CachedTokens
	u.OutputTokensDetails.ReasoningTokens = a.thinkTokens(sent)
	r.Usage = u
	return r
}

func (a *apiAnswer) messageHead() openai.Message {
	_, _, msg := a.ids()
	x := a.x
	return openai.Message{ID: msg, Type: "message", Role: "assistant", Model: a.s.cfg.ServedModelName, Content: []openai.MessageBlock{},
		Usage: openai.MessagesUsage{InputTokens: len(x.prompt) - x.tl.CachedTokens, CacheReadInputTokens: x.tl.CachedTokens}}
}

// message is the whole Message once the request finished.
func (a *apiAnswer) message(sent int) openai.Message {
	x := a.x
	m := a.messageHead()
	stop := openai.StopEndTurn
	if x.tl.Finish == engine.FinishLength {
		stop = openai.StopMaxTokens
	}
	m.StopReason = &stop
	if a.reasoned {
		th, sig := string(a.reasoning), a.signature()
		m.Content = append(m.Content, openai.MessageBlock{Type: "thinking", Thinking: &th, Signature: &sig})
	}
	text := string(a.content)
	m.Content = append(m.Content, openai.MessageBlock{Type: "text", Text: &text})
	m.Usage.OutputTokens = sent
	if think := a.thinkTokens(sent); think > 0 {
		m.Usage.OutputTokensDetails = &openai.ThinkingDetails{ThinkingTokens: think}
	}
	return m
}

// ollamaFinal is Ollama's last object: done, its reason, and the
// engine's durations as Ollama names them (nanoseconds): prompt
// evaluation is prefill, evaluation decode, total from arrival to the
// last token; the simulated engine loads nothing.
func (a *apiAnswer) ollamaFinal(sent int) openai.OllamaChatResponse {
	x := a.x
	reason := "stop"
	if x.tl.Finish == engine.FinishLength {
		reason = "length"
	}
	o := openai.OllamaChatResponse{Model: a.s.cfg.ServedModelName, CreatedAt: a.s.clock.Now().UTC().Format(time.RFC3339Nano),
		Message: openai.OllamaMessage{Role: "assistant"}, Done: true, DoneReason: reason,
		PromptEvalCount: len(x.prompt), EvalCount: sent}
	_, prefill, decode := x.split()
	o.PromptEvalDuration, o.EvalDuration = int64(prefill), int64(decode)
	if !x.tl.Finished.IsZero() {
		o.TotalDuration = int64(x.tl.Finished.Sub(x.received))
	}
	return o
}
