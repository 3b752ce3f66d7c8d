package bench

import (
	"bytes"
	"strconv"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// The Responses, Messages and Ollama APIs (docs/metrics.md, "The APIs"):
// each request in the API's own shape, each answer read with the same
// classifier as a chat chunk (openai.ScanChunk) into records of the same
// meaning: the first token is the first output text, reasoning kept apart,
// usage from the API's own fields.

// appendAPIBody appends the rest of a Responses, Messages or Ollama
// request after its model: the prompt as messages (Messages' system
// prompt apart), the output cap in the API's field (max_output_tokens,
// max_tokens, options.num_predict) and the stream flag.
func (c *Client) appendAPIBody(b []byte, api openai.API, req *workload.Request) []byte {
	t := &c.target
	msgs := req.Messages
	if msgs == nil {
		msgs = []tokenizer.Message{{Role: "user", Content: req.Prompt}}
	}
	maxTokens := int64(max(req.MaxTokens, 1))
	key := `,"messages":[`
	if api == openai.APIResponses {
		key = `,"input":[`
	}
	if api == openai.APIMessages {
		system := ""
		for _, m := range msgs {
			if m.Role == "system" {
				if system != "" {
					system += "\n"
				}
				system += m.Content
			}
		}
		if system != "" {
			b = append(b, `,"system":`...)
			b = openai.AppendString(b, system)
		}
	}
	b = append(b, key...)
	n := 0
	for _, m := range msgs {
		if api == openai.APIMessages && m.Role == "system" {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"role":`...)
		b = openai.AppendString(b, m.Role)
		b = append(b, `,"content":`...)
		b = openai.AppendString(b, m.Content)
		b = append(b, '}')
	}
	b = append(b, ']')
	switch api {
	case openai.APIResponses:
		b = append(b, `,"max_output_tokens":`...)
		b = strconv.AppendInt(b, maxTokens, 10)
	case openai.APIMessages:
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, maxTokens, 10)
	case openai.APIOllama:
		b = append(b, `,"options":{"num_predict":`...)
		b = strconv.AppendInt(b, maxTokens, 10)
		b = append(b, '}')
	}
	if api != openai.APIOllama {
		b = t.appendExtensions(b, maxTokens)
	}
	if t.Stream {
		b = append(b, `,"stream":true`...)
	} else {
		b = append(b, `,"stream":false`...) // Ollama streams unless told not to
	}
	return append(b, '}')
}

// apiEvent folds one event of the Responses, Messages or Ollama stream,
// read by ScanChunk into ch (data is its payload): its text, reasoning,
// finish reason, usage (merged: Messages gives the prompt in
// message_start and the output in message_delta) and end; Ollama's last
// object is also the engine's evidence (its durations).
func (s *streamState) apiEvent(rec *latency.Record, ch *openai.ChunkInfo, data []byte, at int64) {
	if ch.HasFinish && len(ch.Finish) > 0 && rec.FinishReason != string(ch.Finish) {
		rec.FinishReason = string(ch.Finish)
	}
	if ch.HasUsage {
		s.mergeUsage(ch)
	}
	if ch.Native {
		s.native = true
		if ch.End && bytes.Contains(data, []byte(`"eval_duration"`)) {
			s.metrics, s.ollama = append(s.metrics[:0], data...), true
		}
	}
	switch {
	case len(ch.Content) > 0:
		s.choices++
		if rec.FirstTokenNS == 0 {
			rec.FirstTokenNS = at
			s.allOnes = true
		}
		rec.ChunkNS = append(rec.ChunkNS, at)
		rec.ChunkTokens = append(rec.ChunkTokens, 1)
		s.chunkTokens++
	case len(ch.Reasoning) > 0:
		s.choices++
		if rec.FirstReasonNS == 0 {
			rec.FirstReasonNS = at
		}
		rec.OtherNS = append(rec.OtherNS, at)
		s.reasonChunks++
	case ch.Output, ch.End:
		s.choices++ // a tool call, or the end: an answer without text is still one
		rec.OtherNS = append(rec.OtherNS, at)
	}
	s.ended = s.ended || ch.End
}

// mergeUsage folds a usage into the final one, each count given
// replacing the one before.
func (s *streamState) mergeUsage(ch *openai.ChunkInfo) {
	u := chunkUsage(ch)
	if s.finalUsage == nil {
		s.finalUsage = u
		return
	}
	f := s.finalUsage
	if u.PromptTokens != nil {
		f.PromptTokens = u.PromptTokens
	}
	if u.CompletionTokens != nil {
		f.CompletionTokens = u.CompletionTokens
	}
	if u.PromptTokensDetails != nil {
		f.PromptTokensDetails = u.PromptTokensDetails
	}
	if u.CompletionTokensDetails != nil {
		f.CompletionTokensDetails = u.CompletionTokensDetails
	}
}
