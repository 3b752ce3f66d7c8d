package app

import (
	"encoding/json"
	"net/http"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/sse"
)

// output writes the answer to the client: a stream of chat chunks, or one
// body when the client did not ask for a stream. Time blocked writing is
// backpressure.
type output struct {
	x            *exchange
	stream       bool
	continuous   bool // usage on every chunk
	includeUsage bool
	model        string
	enc          *openai.ChunkEncoder
	sw           *sse.Writer
	started      bool
	buf          []byte // one chunk's JSON
	whole        []byte // the answer, when not streamed
}

func newOutput(x *exchange, req *openai.ChatCompletionRequest) *output {
	o := &output{x: x, stream: req.Stream, model: req.Model, sw: sse.NewWriter(x.w)}
	if so := req.StreamOptions; so != nil {
		o.continuous, o.includeUsage = so.ContinuousUsageStats, so.IncludeUsage || so.ContinuousUsageStats
	}
	o.enc = openai.NewChunkEncoder(true, "chatcmpl-"+x.id, req.Model, x.tl.start.Unix())
	return o
}

// begin starts a stream: the headers (with the stages so far in
// Server-Timing) and the role chunk.
func (o *output) begin() bool {
	if !o.stream {
		return true
	}
	h := o.x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Server-Timing", o.x.stages().headerTiming())
	o.x.w.WriteHeader(http.StatusOK)
	o.started = true
	o.buf = o.enc.AppendRole(o.buf[:0], o.usage())
	return o.write(func() error { return o.sw.Data(o.buf) })
}

// usage is the running usage for a chunk, when the client asked for it on
// every chunk.
func (o *output) usage() *openai.Usage {
	u := o.x.usage
	if !o.continuous || u == nil {
		return nil
	}
	return &openai.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
}

// text sends checked text (and the finish reason with the last of it).
func (o *output) text(t []byte, finish string) bool {
	if !o.stream {
		o.whole = append(o.whole, t...)
		return true
	}
	if len(t) == 0 && finish == "" {
		return true
	}
	o.buf = o.enc.AppendText(o.buf[:0], t, finish, o.usage())
	return o.write(func() error { return o.sw.Data(o.buf) })
}

// finishAnswer sends the usage chunk (when asked) and the final event (an
// SSE comment with every stage, then [DONE]), or the whole body; then the
// Server-Timing trailer.
func (o *output) finishAnswer(u *openai.Usage) {
	x := o.x
	if u == nil {
		u = &openai.Usage{CompletionTokens: x.tokens}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if !o.stream {
		finish := x.finish
		if finish == "" {
			finish = openai.FinishStop
		}
		body, _ := json.Marshal(openai.ChatCompletion{ID: "chatcmpl-" + x.id, Object: openai.ObjectChatCompletion,
			Created: x.tl.start.Unix(), Model: o.model, Usage: *u,
			Choices: []openai.ChatChoice{{Message: openai.ChatMessage{Role: "assistant", Content: openai.Content(o.whole)},
				Logprobs: json.RawMessage("null"), FinishReason: finish}}})
		h := x.w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Server-Timing", x.stages().headerTiming())
		x.w.WriteHeader(http.StatusOK)
		o.started = true
		body = append(body, '\n')
		if o.write(func() error {
			if _, err := x.w.Write(body); err != nil {
				return err
			}
			return o.sw.Flush()
		}) {
			x.trailer()
		}
		return
	}
	if o.includeUsage {
		o.buf = o.enc.AppendUsage(o.buf[:0], *u, nil)
		if !o.write(func() error { return o.sw.Data(o.buf) }) {
			return
		}
	}
	// The comment with every stage shares the [DONE] event (sse.Writer's
	// final form).
	timing := x.stages().finalTiming(x.forward)
	if o.write(func() error { return o.sw.Final(nil, latency.FinalTimingComment, timing) }) {
		x.trailer()
	}
}

// error ends a started stream with an error event (OpenAI's shape), no
// [DONE].
func (o *output) error(e openai.Error) {
	b, _ := json.Marshal(openai.ErrorBody{Error: e})
	if o.write(func() error { return o.sw.Data(b) }) {
		o.x.trailer()
	}
}

// write runs send (a write and its flush), counting the time as
// backpressure; false when the client is gone.
func (o *output) write(send func() error) bool {
	x := o.x
	t0 := x.s.clock.Now()
	err := send()
	x.tl.backpressure += x.s.clock.Now().Sub(t0)
	if err != nil {
		x.errKind = "client_closed"
		return false
	}
	return true
}
