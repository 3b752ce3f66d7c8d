package openai

import (
	"errors"
	"fmt"

	"github.com/tokentrace/tokentrace/internal/jsonscan"
)

// ChunkInfo is what tokentrace reads from one streamed chunk of an
// OpenAI-compatible answer (chat.completion.chunk or text_completion, and
// the conventions of vLLM, SGLang, TGI, llama.cpp and Ollama): bench to
// time it and count its tokens, the gateway to classify the event it
// relays. ScanChunk fills it without reflection or allocation. Keys are
// matched exactly, the rule of the whole project: a key that differs from
// one of these in case is another key, and is skipped.
type ChunkInfo struct {
	// Choices is the length of "choices".
	Choices int
	// Content, Reasoning and Text are the first choice's delta (or
	// message) "content", its "reasoning_content" (else its "reasoning"),
	// and its "text": raw, still escaped (only their emptiness matters to
	// a classifier). Finish is its "finish_reason"; HasFinish is false
	// when that is null or absent. A key given twice counts as its last
	// occurrence, as in encoding/json.
	Content, Reasoning, Text, Finish []byte
	HasFinish                        bool
	// Output reports whether any choice carries output: a non-empty
	// content, reasoning or text, or tool calls (a non-empty
	// "tool_calls" array in its delta). A role-only or finish-only chunk
	// carries none.
	Output bool
	// HasUsage reports a non-null "usage"; the counts are its
	// prompt_tokens and completion_tokens (HasPrompt and HasCompletion
	// when given as numbers), prompt_tokens_details.cached_tokens and
	// completion_tokens_details.reasoning_tokens.
	HasUsage                       bool
	PromptTokens, CompletionTokens int
	HasPrompt, HasCompletion       bool
	// Typed reports an event of the Responses or Messages API, or a whole
	// Messages answer: a string "type". Native reports an
	// object of Ollama's native API (a "done" member). Their output,
	// finish reason and usage are read into the fields above as a chat
	// chunk's: text deltas as Content, reasoning and thinking deltas as
	// Reasoning, Messages' stop_reason and Responses' status as Finish
	// ("stop", "length", "tool_calls"), each API's usage as prompt,
	// completion, cached and reasoning tokens (docs/metrics.md, "The
	// APIs").
	Typed, Native bool
	// End reports the answer's last event: Responses' response.completed,
	// response.incomplete or response.failed, Messages' message_stop,
	// Ollama's object with "done": true.
	End                           bool
	CachedTokens, ReasoningTokens int
	// Error and Metrics are the raw "error" and "metrics" values (the
	// latter a per-request timing object, vLLM-style); Timings the raw
	// "timings" value (llama.cpp's per-request object, on an answer or its
	// last chunk); nil when absent or null.
	Error, Metrics, Timings []byte
}

// ErrChunkShape is wrapped by ScanChunk's error for a chunk that is valid
// JSON of another shape (a field of the wrong type, an object that is not
// one); any other error means the chunk is not valid JSON.
var ErrChunkShape = errors.New("chunk of an unexpected shape")

// errNotObject is ScanChunk's error for data that is not a JSON object
// (valid JSON or not): no chunk at all.
var errNotObject = errors.New("a chunk must be a JSON object")

// chunkDepth is how deeply ScanChunk lets a chunk nest (the top-level
// object is depth 0).
const chunkDepth = 64

// chunkScan is one ScanChunk call's state.
type chunkScan struct {
	s     jsonscan.Scanner
	c     *ChunkInfo
	shape error // the first shape error; scanning goes on to check the syntax
	key   [32]byte
	api   apiFields
}

// apiFields are the members of the Responses, Messages and Ollama
// objects, read in any order and resolved into ChunkInfo once the
// object is read (resolve).
type apiFields struct {
	typ                            []byte // "type"
	delta                          []byte // a string "delta" (Responses)
	dType, dText, dThinking        []byte // an object "delta" (Messages)
	stopReason, status, incomplete []byte
	doneReason                     []byte
	text, reasoning                []byte // of a whole answer, or Ollama's message
	errMessage                     []byte // Responses' error event: its "message" string
	respError                      []byte // a Response's "error"
	tools, done, hasDone           bool
	// Usage as Responses and Messages name it (input_tokens …) and as
	// Ollama does (prompt_eval_count, eval_count).
	in, out, cacheRead, cacheCreate int
	hasIn, hasOut                   bool
}

// ScanChunk reads one chunk's JSON into c, validating all of it. A chunk
// that is a JSON object of another shape gives an error wrapping
// ErrChunkShape (c then holds what could be read); any other error means
// the data is no chunk: not a JSON object (a *jsonscan.SyntaxError when
// it is not JSON at all).
func ScanChunk(b []byte, c *ChunkInfo) error {
	*c = ChunkInfo{}
	cs := chunkScan{s: jsonscan.New(b), c: c}
	if cs.s.Peek() != '{' {
		return errNotObject
	}
	if err := cs.top(); err != nil {
		return err
	}
	if err := cs.s.End(); err != nil { // no trailing data
		return err
	}
	cs.resolve(b)
	return cs.shape
}

// name is a key's text: its raw bytes, unescaped when it holds escapes
// (into a buffer of the scan's, so that "\u0063ontent" is content and
// nothing is allocated for a key of up to 32 bytes).
func (cs *chunkScan) name(raw []byte, escaped bool) []byte {
	if escaped {
		return cs.unescape(raw)
	}
	return raw
}

// member reads the next member's key of an object whose '{' is read
// (Scanner.Member), as name gives it; more is false after the last.
func (cs *chunkScan) member(first bool) (key []byte, more bool, err error) {
	k, esc, more, err := cs.s.Member(first)
	return cs.name(k, esc), more, err
}

func (cs *chunkScan) unescape(raw []byte) []byte {
	b, err := jsonscan.AppendUnquote(cs.key[:0], raw)
	if err != nil {
		return raw
	}
	return b
}

// skip reads any value at nesting depth depth.
func (cs *chunkScan) skip(depth int) error {
	cs.s.MaxDepth = chunkDepth - depth
	return cs.s.Skip()
}

// mismatch notes a value of the wrong type for a field and skips it (it
// must still be valid JSON).
func (cs *chunkScan) mismatch(depth int) error {
	if cs.shape == nil {
		cs.shape = fmt.Errorf("%w at offset %d", ErrChunkShape, cs.s.Pos())
	}
	return cs.skip(depth)
}

// object reads the '{' of an object at depth (a shape error for another
// value, skipped; null is no object and no error); ok tells whether the
// caller is to read its members.
func (cs *chunkScan) object(depth int) (ok bool, err error) {
	switch cs.s.Peek() {
	case '{':
		_ = cs.s.Expect('{') // Peek saw it
		return true, nil
	case 'n':
		if cs.s.Null() {
			return false, nil
		}
	}
	return false, cs.mismatch(depth)
}

func (cs *chunkScan) top() error {
	s, c := &cs.s, cs.c
	if err := s.Expect('{'); err != nil {
		return err
	}
	for first := true; ; first = false {
		k, esc, more, err := s.Member(first)
		if !more || err != nil {
			return err
		}
		// A key given twice counts as its last occurrence, as in
		// encoding/json: each resets what the earlier one set.
		switch string(cs.name(k, esc)) {
		case "choices":
			c.Choices, c.Content, c.Reasoning, c.Text, c.Finish, c.HasFinish, c.Output = 0, nil, nil, nil, nil, false, false
			err = cs.choices()
		case "usage":
			c.HasUsage, c.PromptTokens, c.CompletionTokens, c.HasPrompt, c.HasCompletion, c.CachedTokens, c.ReasoningTokens = false, 0, 0, false, false, 0, 0
			err = cs.usage()
		case "error":
			c.Error, err = cs.value(1)
		case "type":
			cs.api.typ, err = cs.str(1)
			c.Typed = cs.api.typ != nil
		case "delta":
			err = cs.apiDelta()
		case "message":
			err = cs.apiMessage()
		case "response":
			err = cs.apiResponse()
		case "content":
			err = cs.blocks(1, &cs.api)
		case "output":
			err = cs.outputItems()
		case "stop_reason":
			cs.api.stopReason, err = cs.str(1)
		case "status":
			cs.api.status, err = cs.str(1)
		case "incomplete_details":
			err = cs.incomplete(1)
		case "done":
			err = cs.flag(&cs.api.done, 1)
			cs.api.hasDone = true
		case "done_reason":
			cs.api.doneReason, err = cs.str(1)
		case "prompt_eval_count":
			err = cs.count(&cs.api.in, &cs.api.hasIn, 1)
		case "eval_count":
			err = cs.count(&cs.api.out, &cs.api.hasOut, 1)
		case "metrics":
			c.Metrics, err = cs.value(1)
		case "timings":
			c.Timings, err = cs.value(1)
		default:
			err = cs.skip(1)
		}
		if err != nil {
			return err
		}
	}
}

// value reads any value at depth and returns its text; nil for null.
func (cs *chunkScan) value(depth int) ([]byte, error) {
	if cs.s.Null() {
		return nil, nil
	}
	cs.s.MaxDepth = chunkDepth - depth
	return cs.s.Value()
}

func (cs *chunkScan) choices() error {
	return cs.elements(1, func() error {
		cs.c.Choices++
		return cs.choice(cs.c.Choices == 1)
	})
}

func (cs *chunkScan) usage() error { return cs.usageAt(1) }

// usageAt reads a usage object at depth: chat's names, and Responses'
// and Messages' (input_tokens, output_tokens, cache_read_input_tokens,
// cache_creation_input_tokens, their details).
func (cs *chunkScan) usageAt(depth int) error {
	s, c, a := &cs.s, cs.c, &cs.api
	if ok, err := cs.object(depth); !ok {
		return err
	}
	c.HasUsage = true
	d := depth + 1
	for first := true; ; first = false {
		k, esc, more, err := s.Member(first)
		if !more || err != nil {
			return err
		}
		switch string(cs.name(k, esc)) {
		case "prompt_tokens":
			err = cs.count(&c.PromptTokens, &c.HasPrompt, d)
		case "completion_tokens":
			err = cs.count(&c.CompletionTokens, &c.HasCompletion, d)
		case "prompt_tokens_details", "input_tokens_details":
			c.CachedTokens = 0
			err = cs.details(d, &c.CachedTokens, "cached_tokens")
		case "completion_tokens_details", "output_tokens_details":
			c.ReasoningTokens = 0
			err = cs.details(d, &c.ReasoningTokens, "reasoning_tokens", "thinking_tokens")
		case "input_tokens":
			err = cs.count(&a.in, &a.hasIn, d)
		case "output_tokens":
			err = cs.count(&a.out, &a.hasOut, d)
		case "cache_read_input_tokens":
			var has bool
			err = cs.count(&a.cacheRead, &has, d)
		case "cache_creation_input_tokens":
			var has bool
			err = cs.count(&a.cacheCreate, &has, d)
		default:
			err = cs.skip(d)
		}
		if err != nil {
			return err
		}
	}
}

// count reads a whole number, or null (0, not given).
func (cs *chunkScan) count(dst *int, has *bool, depth int) error {
	s := &cs.s
	*dst, *has = 0, false
	switch c := s.Peek(); {
	case c == 'n' && s.Null():
		return nil
	case c == '-' || c >= '0' && c <= '9':
		if v, err := s.Int64(); err == nil {
			*dst, *has = int(v), true
			return nil
		}
		// Not read: a fraction or a number out of range is JSON of
		// another shape (skip checks the number's syntax).
	}
	return cs.mismatch(depth)
}

func (cs *chunkScan) details(depth int, dst *int, keys ...string) error {
	s := &cs.s
	if ok, err := cs.object(depth); !ok {
		return err
	}
	for first := true; ; first = false {
		k, esc, more, err := s.Member(first)
		if !more || err != nil {
			return err
		}
		if name := string(cs.name(k, esc)); name == keys[0] || len(keys) > 1 && name == keys[1] {
			var has bool
			err = cs.count(dst, &has, depth+1)
		} else {
			err = cs.skip(depth + 1)
		}
		if err != nil {
			return err
		}
	}
}

// choiceOut is one choice's output fields, the last occurrence of each key.
type choiceOut struct {
	content, reasoningContent, reasoning, text, finish []byte
	tools                                              bool
}

// choice reads one element of choices; first tells whether it is the
// first, whose fields ChunkInfo keeps.
func (cs *chunkScan) choice(first bool) error {
	s, c := &cs.s, cs.c
	if s.Peek() != '{' {
		return cs.mismatch(2)
	}
	_ = s.Expect('{') // Peek saw it
	var o choiceOut
	var err error
	for firstKey := true; ; firstKey = false {
		var k []byte
		var esc, more bool
		if k, esc, more, err = s.Member(firstKey); !more || err != nil {
			break
		}
		switch string(cs.name(k, esc)) {
		case "delta", "message":
			o.content, o.reasoningContent, o.reasoning, o.tools = nil, nil, nil, false
			err = cs.delta(&o)
		case "text":
			o.text, err = cs.str(3)
		case "finish_reason":
			o.finish, err = cs.str(3)
		default:
			err = cs.skip(3)
		}
		if err != nil {
			break
		}
	}
	if len(o.content) > 0 || len(o.reasoningContent) > 0 || len(o.reasoning) > 0 || len(o.text) > 0 || o.tools {
		c.Output = true
	}
	if first {
		c.Content, c.Text, c.Finish, c.HasFinish = o.content, o.text, o.finish, o.finish != nil
		c.Reasoning = o.reasoningContent
		if len(c.Reasoning) == 0 {
			c.Reasoning = o.reasoning
		}
	}
	return err
}

func (cs *chunkScan) delta(o *choiceOut) error {
	s := &cs.s
	if ok, err := cs.object(3); !ok {
		return err
	}
	for first := true; ; first = false {
		k, esc, more, err := s.Member(first)
		if !more || err != nil {
			return err
		}
		switch string(cs.name(k, esc)) {
		case "content":
			o.content, err = cs.str(4)
		case "reasoning_content":
			o.reasoningContent, err = cs.str(4)
		case "reasoning":
			o.reasoning, err = cs.str(4)
		case "tool_calls":
			o.tools, err = cs.toolCalls()
		default:
			err = cs.skip(4)
		}
		if err != nil {
			return err
		}
	}
}

// toolCalls reads a delta's tool_calls: whether it is a non-empty array.
func (cs *chunkScan) toolCalls() (bool, error) {
	n := 0
	err := cs.elements(4, func() error {
		n++
		return cs.skip(5)
	})
	return n > 0, err
}

// str reads a string (raw: a non-nil slice of the input, also for "") or
// null (nil).
func (cs *chunkScan) str(depth int) ([]byte, error) {
	s := &cs.s
	switch s.Peek() {
	case 'n':
		if s.Null() {
			return nil, nil
		}
	case '"':
		t, err := s.String()
		return t.Raw, err
	}
	return nil, cs.mismatch(depth)
}
