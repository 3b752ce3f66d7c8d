package bench

import (
	"strconv"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// SGLang's native API (--endpoint sglang): POST /generate with
// {"text", "sampling_params": {"max_new_tokens", "min_new_tokens",
// "ignore_eos"}, "stream"}, answered by one object {"text", "output_ids",
// "meta_info"} or, streamed, by one such object per data event and
// "[DONE]" (docs/engines.md cites SGLang's source). meta_info counts the
// tokens so far and, on the finished request of a server run with
// --enable-metrics, times it: the record's server split
// (latency.ParseSGLangOutput).

// appendSGLangBody appends the /generate body of req: the prompt as one
// text (a chat's messages joined, as for completions: /generate applies
// no chat template), the output cap in sampling_params, which also carry
// min_new_tokens and ignore_eos when the target asks for them.
func (c *Client) appendSGLangBody(b []byte, req *workload.Request) []byte {
	t := &c.target
	maxTokens := int64(max(req.MaxTokens, 1))
	b = append(b, `{"text":`...)
	b = openai.AppendString(b, promptText(req))
	b = append(b, `,"sampling_params":{"max_new_tokens":`...)
	b = strconv.AppendInt(b, maxTokens, 10)
	if t.MinTokens {
		b = append(b, `,"min_new_tokens":`...)
		b = strconv.AppendInt(b, maxTokens, 10)
	}
	if t.IgnoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	b = append(b, '}')
	if t.Stream {
		b = append(b, `,"stream":true`...)
	}
	return append(b, '}')
}

// sglangEvent folds one object of a /generate answer that arrived at at
// (whole: the answer was not streamed): its tokens (meta_info's
// completion_tokens counts them so far; without it, an event whose text
// grew is one), finish reason, counts and timing split.
func (s *streamState) sglangEvent(rec *latency.Record, data []byte, at int64, whole bool) *eventError {
	o, err := latency.ParseSGLangOutput(data)
	if err != nil {
		return &eventError{latency.FailInvalidEvent, truncate(err.Error())}
	}
	if o.Error != "" {
		return &eventError{latency.FailServer, "error in answer: " + truncate(o.Error)}
	}
	if !whole {
		rec.LastEventNS = at
	}
	if o.Finish != "" {
		rec.FinishReason = o.Finish
	}
	if o.Split != nil {
		s.sglang = o.Split
	}
	u := s.finalUsage
	if u == nil {
		u = &usage{}
		s.finalUsage = u
	}
	setCount := func(dst **int, v int) {
		if v >= 0 {
			*dst = &v
		}
	}
	setCount(&u.PromptTokens, o.PromptTokens)
	setCount(&u.CompletionTokens, o.CompletionTokens)
	if o.CachedTokens >= 0 {
		u.PromptTokensDetails = &struct {
			CachedTokens int `json:"cached_tokens"`
		}{o.CachedTokens}
	}
	s.choices++
	if whole {
		if u.CompletionTokens == nil && o.Text != "" {
			s.chunkTokens = 1
		}
		return nil
	}
	delta := 0
	switch {
	case o.CompletionTokens >= 0:
		delta = o.CompletionTokens - s.prevCompl
		s.prevCompl = o.CompletionTokens
	case len(o.Text) > s.textLen:
		delta = 1
	}
	s.textLen = max(s.textLen, len(o.Text))
	var content []byte
	if delta > 0 {
		content = sglangToken
	}
	s.contUsage = o.CompletionTokens >= 0
	s.place(rec, content, nil, int32(max(delta, 0)), at)
	return nil
}

// sglangToken marks an event that brought tokens for place.
var sglangToken = []byte{1}
