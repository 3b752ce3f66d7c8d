package openai

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// ChunkEncoder appends one request's stream chunks as JSON without
// reflection: the fixed head ({"id":…,"object":…,"created":…,"model":…) is
// built once, so a content chunk costs one append of its text. The output
// decodes into ChatCompletionChunk or CompletionChunk. A ChunkEncoder is not
// safe for concurrent use; each stream has its own.
type ChunkEncoder struct {
	chat bool
	head []byte
}

// NewChunkEncoder returns the encoder of one stream: chat chunks
// ("chat.completion.chunk") when chat is set, text completion chunks
// otherwise.
func NewChunkEncoder(chat bool, id, model string, created int64) *ChunkEncoder {
	e := &ChunkEncoder{}
	e.Reset(chat, id, model, created)
	return e
}

// Reset makes e the encoder NewChunkEncoder would return for these
// arguments, keeping its buffer: an encoder reused stream after stream
// allocates nothing once its buffer holds the longest head.
func (e *ChunkEncoder) Reset(chat bool, id, model string, created int64) {
	obj := ObjectTextCompletion
	if chat {
		obj = ObjectChatCompletionChunk
	}
	h := e.head[:0]
	if e.head == nil {
		h = make([]byte, 0, 64+len(id)+len(model))
	}
	h = append(h, `{"id":`...)
	h = AppendString(h, id)
	h = append(h, `,"object":"`...)
	h = append(h, obj...)
	h = append(h, `","created":`...)
	h = strconv.AppendInt(h, created, 10)
	h = append(h, `,"model":`...)
	h = AppendString(h, model)
	e.chat, e.head = chat, h
}

// AppendRole appends the chat stream's first chunk, which carries only the
// role (delta {"role":"assistant","content":""}), as OpenAI and vLLM send
// it. usage, when not nil, is added (continuous usage stats).
func (e *ChunkEncoder) AppendRole(dst []byte, usage *Usage) []byte {
	dst = append(dst, e.head...)
	dst = append(dst, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
	return e.tail(dst, usage)
}

// AppendText appends a content chunk carrying text; finish is the finish
// reason of the stream's last content chunk and "" before it. usage, when
// not nil, is added (continuous usage stats).
func (e *ChunkEncoder) AppendText(dst, text []byte, finish string, usage *Usage) []byte {
	dst = append(dst, e.head...)
	if e.chat {
		dst = append(dst, `,"choices":[{"index":0,"delta":{"content":`...)
		dst = appendString(dst, text)
		dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	} else {
		dst = append(dst, `,"choices":[{"index":0,"text":`...)
		dst = appendString(dst, text)
		dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	}
	if finish == "" {
		dst = append(dst, "null"...)
	} else {
		dst = AppendString(dst, finish)
	}
	dst = append(dst, "}]"...)
	return e.tail(dst, usage)
}

// AppendReasoning appends a chat chunk whose delta carries reasoning text
// under field (ReasoningField or ReasoningContentField) and nothing else,
// as vLLM and DeepSeek send it. usage, when not nil, is added.
func (e *ChunkEncoder) AppendReasoning(dst []byte, field string, text []byte, usage *Usage) []byte {
	dst = append(dst, e.head...)
	dst = append(dst, `,"choices":[{"index":0,"delta":{`...)
	dst = AppendString(dst, field)
	dst = append(dst, ':')
	dst = appendString(dst, text)
	dst = append(dst, `},"logprobs":null,"finish_reason":null}]`...)
	return e.tail(dst, usage)
}

// AppendUsage appends the final usage chunk: empty choices, the usage, and
// the per-request metrics when m is not nil.
func (e *ChunkEncoder) AppendUsage(dst []byte, usage Usage, m *RequestMetrics) []byte {
	dst = append(dst, e.head...)
	dst = append(dst, `,"choices":[],"usage":`...)
	b, _ := json.Marshal(usage)
	dst = append(dst, b...)
	if m != nil {
		dst = append(dst, `,"metrics":`...)
		b, _ = json.Marshal(m)
		dst = append(dst, b...)
	}
	return append(dst, '}')
}

func (e *ChunkEncoder) tail(dst []byte, usage *Usage) []byte {
	if usage != nil {
		dst = append(dst, `,"usage":{"prompt_tokens":`...)
		dst = strconv.AppendInt(dst, int64(usage.PromptTokens), 10)
		dst = append(dst, `,"completion_tokens":`...)
		dst = strconv.AppendInt(dst, int64(usage.CompletionTokens), 10)
		dst = append(dst, `,"total_tokens":`...)
		dst = strconv.AppendInt(dst, int64(usage.TotalTokens), 10)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// AppendString appends s as a JSON string, escaped as encoding/json does
// (invalid UTF-8 becomes U+FFFD).
func AppendString(dst []byte, s string) []byte {
	return appendString(dst, s)
}

const hexDigits = "0123456789abcdef"

func appendString[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := decodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func decodeRune[T string | []byte](s T) (rune, int) {
	switch v := any(s).(type) {
	case string:
		return utf8.DecodeRuneInString(v)
	case []byte:
		return utf8.DecodeRune(v)
	}
	return utf8.RuneError, 1
}
