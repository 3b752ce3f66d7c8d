package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// Request is what the gateway reads from a completion request body: only
// the fields its policies need. The body itself is forwarded unchanged
// unless a policy rewrites a field.
type Request struct {
	Model  string
	Stream bool
	// MaxTokens is the requested output limit (max_tokens, or
	// max_completion_tokens when that is the one set); 0 when absent.
	MaxTokens int
	// MaxTokensField names the field MaxTokens came from.
	MaxTokensField string
	// InputTokens is the fast estimate of the prompt's length: for chat, one
	// token per message for its role plus its content's tokens (the
	// tokenizer's chat rule); for completions, the prompt's tokens.
	InputTokens int
	// PrefixHash hashes the first prefixBytes bytes of the prompt text, the
	// key of prefix-affinity routing.
	PrefixHash uint64
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
}

// wireRequest holds the fields ScanRequest decodes; encoding/json skips the
// others without building them.
type wireRequest struct {
	Model               *string         `json:"model"`
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Messages            []wireMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// errScan is wrapped by every error ScanRequest returns; its message is
// meant for the client.
var errScan = errors.New("invalid request")

// ScanRequest reads the fields the gateway needs from a request body for
// path (chatPath or completionsPath). prefixBytes bounds the text hashed
// for prefix affinity.
func ScanRequest(body []byte, chat bool, prefixBytes int) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("%w: body is not valid JSON: %v", errScan, err)
	}
	if w.Model == nil || *w.Model == "" {
		return Request{}, fmt.Errorf("%w: missing required parameter 'model'", errScan)
	}
	r := Request{Model: *w.Model, Stream: w.Stream}
	switch {
	case w.MaxCompletionTokens != nil:
		r.MaxTokens, r.MaxTokensField = *w.MaxCompletionTokens, "max_completion_tokens"
	case w.MaxTokens != nil:
		r.MaxTokens, r.MaxTokensField = *w.MaxTokens, "max_tokens"
	}
	if r.MaxTokens < 0 {
		return Request{}, fmt.Errorf("%w: %s must be positive, got %d", errScan, r.MaxTokensField, r.MaxTokens)
	}
	if w.StreamOptions != nil {
		r.IncludeUsage = w.StreamOptions.IncludeUsage
	}
	h := prefixHasher{left: prefixBytes, h: fnv.New64a()}
	if chat {
		if len(w.Messages) == 0 {
			return Request{}, fmt.Errorf("%w: 'messages' must be a non-empty array", errScan)
		}
		for i, m := range w.Messages {
			n, err := contentTokens(m.Content, &h)
			if err != nil {
				return Request{}, fmt.Errorf("%w: messages[%d].content: %v", errScan, i, err)
			}
			h.add(m.Role)
			r.InputTokens += 1 + n
		}
	} else {
		n, err := promptTokens(w.Prompt, &h)
		if err != nil {
			return Request{}, fmt.Errorf("%w: prompt: %v", errScan, err)
		}
		r.InputTokens = n
	}
	r.PrefixHash = h.h.Sum64()
	return r, nil
}

// contentTokens counts a chat message's content: a string, an array of
// parts (text parts counted, others ignored) or null.
func contentTokens(raw json.RawMessage, h *prefixHasher) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
		h.add(s)
		return tokenizer.Count(s), nil
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return 0, err
		}
		n := 0
		for _, p := range parts {
			h.add(p.Text)
			n += tokenizer.Count(p.Text)
		}
		return n, nil
	}
	return 0, errors.New("must be a string, an array of parts or null")
}

// promptTokens counts a completion prompt: a string, an array of strings,
// an array of token ids or an array of such arrays.
func promptTokens(raw json.RawMessage, h *prefixHasher) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errors.New("missing required parameter")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
		h.add(s)
		return tokenizer.Count(s), nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return 0, err
		}
		n := 0
		for _, it := range items {
			it = bytes.TrimSpace(it)
			if len(it) == 0 {
				continue
			}
			switch it[0] {
			case '"', '[':
				k, err := promptTokens(it, h)
				if err != nil {
					return 0, err
				}
				n += k
			default: // a token id
				var id int64
				if err := json.Unmarshal(it, &id); err != nil {
					return 0, fmt.Errorf("array items must be strings or token ids: %v", err)
				}
				h.add(string(it))
				n++
			}
		}
		return n, nil
	}
	return 0, errors.New("must be a string or an array")
}

// prefixHasher hashes at most left bytes of prompt text.
type prefixHasher struct {
	left int
	h    interface {
		Write([]byte) (int, error)
		Sum64() uint64
	}
}

func (p *prefixHasher) add(s string) {
	if p.left <= 0 {
		return
	}
	if len(s) > p.left {
		s = s[:p.left]
	}
	p.left -= len(s)
	_, _ = p.h.Write([]byte(s))
	_, _ = p.h.Write([]byte{0})
}

// rewriteFields returns body with the given top-level fields replaced (or
// added), other fields kept byte for byte. It is used only when a policy
// changes the request (clamped max_tokens, fallback model).
func rewriteFields(body []byte, set map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("rewrite request: %w", err)
	}
	for k, v := range set {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("rewrite request field %s: %w", k, err)
		}
		m[k] = b
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("rewrite request: %w", err)
	}
	return out, nil
}
