package bench

import (
	"bytes"
	"encoding/json"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// usage is a response's final token counts. Counts are pointers: nil when
// the server did not give them.
type usage struct {
	PromptTokens        *int `json:"prompt_tokens"`
	CompletionTokens    *int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

type eventError struct {
	kind latency.ErrorKind
	msg  string
}

// streamState accumulates one response's token accounting.
type streamState struct {
	choices       int
	contUsage     bool // a chunk with choices carried usage
	prevCompl     int  // cumulative completion tokens so far (continuous usage)
	contPrompt    int
	finalUsage    *usage
	chunkTokens   int // content tokens counted per chunk
	reasonChunks  int
	reasonByUsage int
	allOnes       bool
	metrics       json.RawMessage
	timings       json.RawMessage // llama.cpp's per-request timings
	ollama        bool            // a whole answer that may hold Ollama's durations
	scratch       openai.ChunkInfo
	// api is the target's; native: an Ollama answer; ended: the typed or
	// native API's end event was read (apiEvent).
	api           openai.API
	native, ended bool
	// answerID: keep the answer's id as the record's ServerID
	// (Target.AnswerID).
	answerID bool
	// sglang is the split of SGLang's meta_info, textLen the length of
	// its answer's text so far (sglangEvent).
	sglang  *latency.ServerSplit
	textLen int
}

// noteID keeps the id of the answer (or of its first event) as rec's
// ServerID when asked and none is set.
func (s *streamState) noteID(rec *latency.Record, data []byte) {
	if !s.answerID || rec.ServerID != "" {
		return
	}
	var a struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(data, &a) == nil && len(a.ID) <= 128 {
		rec.ServerID = a.ID
	}
}

// event folds one SSE data payload that arrived at instant at.
func (s *streamState) event(rec *latency.Record, data []byte, at int64) *eventError {
	if s.api == openai.APISGLang {
		return s.sglangEvent(rec, data, at, false)
	}
	ch := &s.scratch
	if err := openai.ScanChunk(data, ch); err != nil {
		return &eventError{latency.FailInvalidEvent, "event is not valid JSON of the expected shape: " + truncate(string(data))}
	}
	if len(ch.Error) > 0 {
		return &eventError{latency.FailServer, "error in stream: " + truncate(openai.ErrorText(ch.Error))}
	}
	rec.LastEventNS = at
	s.noteID(rec, data)
	if len(ch.Metrics) > 0 {
		s.metrics = append(s.metrics[:0], ch.Metrics...)
	}
	if len(ch.Timings) > 0 {
		s.timings = append(s.timings[:0], ch.Timings...)
	}
	if s.api != openai.APIChat && s.api != openai.APICompletions {
		s.apiEvent(rec, ch, data, at)
		return nil
	}
	if ch.Choices == 0 {
		if ch.HasUsage {
			s.finalUsage = chunkUsage(ch)
		}
		return nil
	}
	s.choices++
	content, reasoning := ch.Content, ch.Reasoning
	if len(content) == 0 {
		content = ch.Text
	}
	if ch.HasFinish && len(ch.Finish) > 0 {
		if rec.FinishReason != string(ch.Finish) {
			rec.FinishReason = string(ch.Finish)
		}
	}
	s.place(rec, content, reasoning, s.usageDelta(ch), at)
	return nil
}

// usageDelta is the tokens a chunk with a choice adds: one, or the growth
// of continuous usage; usage first seen on a later chunk is the final one.
func (s *streamState) usageDelta(ch *openai.ChunkInfo) int32 {
	delta := int32(1)
	if ch.HasUsage && ch.HasCompletion {
		if !s.contUsage && s.choices > 1 {
			// Usage first seen on a later chunk that also carries a choice
			// (TGI and llama.cpp put the totals on the last chunk): the
			// final usage, not a per-chunk count.
			s.finalUsage = chunkUsage(ch)
		} else {
			s.contUsage = true
			delta = int32(ch.CompletionTokens - s.prevCompl)
			s.prevCompl = ch.CompletionTokens
			if ch.HasPrompt {
				s.contPrompt = ch.PromptTokens
			}
		}
	}
	return delta
}

// place records a chunk received at at as content (delta tokens),
// reasoning, or neither.
func (s *streamState) place(rec *latency.Record, content, reasoning []byte, delta int32, at int64) {
	switch {
	case len(content) > 0:
		if rec.FirstTokenNS == 0 {
			rec.FirstTokenNS = at
			s.allOnes = true
		}
		rec.ChunkNS = append(rec.ChunkNS, at)
		rec.ChunkTokens = append(rec.ChunkTokens, delta)
		s.allOnes = s.allOnes && delta == 1
		s.chunkTokens += int(delta)
	case len(reasoning) > 0:
		if rec.FirstReasonNS == 0 {
			rec.FirstReasonNS = at
		}
		rec.OtherNS = append(rec.OtherNS, at)
		s.reasonChunks++
		if s.contUsage {
			s.reasonByUsage += int(delta)
		}
	default: // role-only, empty or finish-only: never a token
		rec.OtherNS = append(rec.OtherNS, at)
		if s.contUsage && delta > 0 && len(rec.ChunkTokens) > 0 {
			// Tokens reported on an empty chunk (e.g. a special token)
			// belong to the content already received.
			rec.ChunkTokens[len(rec.ChunkTokens)-1] += delta
			s.chunkTokens += int(delta)
			s.allOnes = false
		}
	}
}

// whole folds a non-streaming response body, read with the same
// classifier (and the same exact keys) as a stream's chunks: the first
// choice's message or text, its finish reason, usage, error and metrics.
func (s *streamState) whole(rec *latency.Record, b []byte) *eventError {
	if s.api == openai.APISGLang {
		return s.sglangEvent(rec, b, rec.EndNS, true)
	}
	ch := &s.scratch
	if err := openai.ScanChunk(b, ch); err != nil {
		return &eventError{latency.FailInvalidEvent, "response is not valid JSON of the expected shape: " + truncate(err.Error())}
	}
	if len(ch.Error) > 0 {
		return &eventError{latency.FailServer, "error in response: " + truncate(openai.ErrorText(ch.Error))}
	}
	chat := s.api == openai.APIChat || s.api == openai.APICompletions
	if chat && ch.Choices == 0 {
		return &eventError{latency.FailInvalidEvent, "response has no choices"}
	}
	s.choices = 1
	s.noteID(rec, b)
	if ch.HasFinish {
		rec.FinishReason = string(ch.Finish)
	}
	if ch.HasUsage {
		s.finalUsage = chunkUsage(ch)
	}
	s.metrics = append(s.metrics[:0], ch.Metrics...)
	s.timings = append(s.timings[:0], ch.Timings...)
	if len(s.metrics) == 0 && len(s.timings) == 0 && bytes.Contains(b, []byte(`"eval_duration"`)) {
		s.metrics, s.ollama = append(s.metrics[:0], b...), true
	}
	if s.finalUsage == nil && ch.Output {
		// No usage: one chunk, counted as one token (the only honest
		// per-chunk count without a tokenizer of the server's model); an
		// answer without output has none, and so no first token.
		s.chunkTokens = 1
	}
	return nil
}

// finish sets token counts and their sources, and the server split from a
// metrics object.
func (s *streamState) finish(rec *latency.Record, req *workload.Request) {
	rec.InputTokens, rec.InputSource = req.InputTokens, latency.SourceRequest
	if s.contPrompt > 0 {
		rec.InputTokens, rec.InputSource = s.contPrompt, latency.SourceContinuousUsage
	}
	rec.OutputTokens, rec.OutputSource = s.chunkTokens, latency.SourceChunks
	if s.contUsage {
		rec.OutputSource = latency.SourceContinuousUsage
	}
	rec.ReasoningTokens = s.reasonChunks
	if s.contUsage {
		rec.ReasoningTokens = s.reasonByUsage
	}
	if u := s.finalUsage; u != nil {
		if u.PromptTokens != nil {
			rec.InputTokens, rec.InputSource = *u.PromptTokens, latency.SourceUsage
		}
		if u.PromptTokensDetails != nil {
			rec.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
		if u.CompletionTokens != nil {
			out := *u.CompletionTokens
			switch {
			case u.CompletionTokensDetails != nil && u.CompletionTokensDetails.ReasoningTokens > 0:
				rec.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
				out -= rec.ReasoningTokens
			case s.contUsage:
				out -= s.reasonByUsage
			case s.native && s.reasonChunks > 0:
				// Ollama counts thinking in eval_count and reports it no
				// apart: one token a line.
				rec.ReasoningTokens = s.reasonChunks
				out -= s.reasonChunks
			}
			rec.OutputTokens, rec.OutputSource = max(out, 0), latency.SourceUsage
		}
	}
	if s.allOnes && !s.contUsage {
		// One token per chunk is the default Record.ITLs assumes.
		rec.ChunkTokens = nil
	}
	if rec.OK() {
		s.engineSplit(rec)
	}
}

// engineSplit sets rec's server split from the engine's own per-request
// evidence, when the answer held some: a metrics object (vLLM's,
// tokentrace's), else llama.cpp's timings (whose cache_n also gives the
// prompt tokens cached when usage did not), else Ollama's durations. A
// Server-Timing trailer, read after, takes precedence for the durations
// (serverTiming).
func (s *streamState) engineSplit(rec *latency.Record) {
	switch {
	case s.sglang != nil:
		rec.Server = s.sglang
	case s.ollama:
		rec.Server = latency.SplitFromOllama(s.metrics)
	case len(s.metrics) > 0:
		metricsSplit(rec, s.metrics)
	}
	if rec.Server != nil || len(s.timings) == 0 {
		return
	}
	if t, ok := latency.ParseLlamaCppTimings(s.timings); ok {
		rec.Server = t.Split()
		if rec.CachedTokens == 0 && t.CacheN > 0 {
			rec.CachedTokens = t.CacheN
		}
	}
}

// metricsSplit sets rec's server split from a per-request metrics object
// (latency.SplitFromMetrics), when it holds one. A Server-Timing trailer,
// when present, takes precedence for the durations.
func metricsSplit(rec *latency.Record, raw json.RawMessage) {
	if sp := latency.SplitFromMetrics(raw); sp != nil {
		rec.Server = sp
	}
}

// serverTiming reads the Server-Timing values of the header, the final
// event and the trailer ("server_queue;dur=1.2, prefill;dur=30.5" in
// milliseconds, the W3C Server-Timing syntax; the names are latency's,
// former ones included): every hop's stages into Timing, with notes on
// what was set aside (latency.ParseTiming, and a hop claiming more time
// than the request took, latency.Record.Path); and the server's split and
// a tokentrace gateway's own time into Server and GatewayNS.
func serverTiming(rec *latency.Record, v latency.TimingValues) {
	if v.Empty() {
		return
	}
	sp, gateway, ok := latency.SplitServerTiming(v.All())
	rec.GatewayNS = int64(gateway)
	if ok {
		if rec.Server != nil {
			// What Server-Timing does not carry: the metrics object's
			// instant, and the engine its evidence named (a gateway passes
			// on llama.cpp's timings in the stream and their split in
			// Server-Timing).
			sp.FirstScheduledUnixNS = rec.Server.FirstScheduledUnixNS
			sp.Engine = rec.Server.Engine
		}
		rec.Server = &sp
	}
	rec.Timing, rec.TimingNotes = latency.ParseTiming(v)
	if len(rec.Timing) == 0 {
		return
	}
	p, ok := rec.Path()
	if !ok {
		return
	}
	for _, n := range p.Notes {
		if len(rec.TimingNotes) < latency.MaxTimingNotes {
			rec.TimingNotes = append(rec.TimingNotes, n)
		}
	}
}

// chunkUsage copies a chunk's usage counts.
func chunkUsage(c *openai.ChunkInfo) *usage {
	u := &usage{}
	if c.HasPrompt {
		p := c.PromptTokens
		u.PromptTokens = &p
	}
	if c.HasCompletion {
		n := c.CompletionTokens
		u.CompletionTokens = &n
	}
	if c.CachedTokens > 0 {
		u.PromptTokensDetails = &struct {
			CachedTokens int `json:"cached_tokens"`
		}{c.CachedTokens}
	}
	if c.ReasoningTokens > 0 {
		u.CompletionTokensDetails = &struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		}{c.ReasoningTokens}
	}
	return u
}
