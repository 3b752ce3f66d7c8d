package bench

import (
	"bytes"

	"github.com/tokentrace/tokentrace/internal/jsonscan"
)

// fastChunk is what the client needs from one streamed event, read by
// scanChunk without reflection or allocation: the first choice's content,
// reasoning and text (raw, still escaped: only their emptiness matters),
// its finish reason, the usage counts, and the raw error and metrics
// values.
type fastChunk struct {
	choices                          int // length of "choices"
	content, reasoning, text, finish []byte
	hasFinish                        bool
	hasUsage                         bool
	prompt, completion               int
	hasPrompt, hasCompletion         bool
	cached, reasoningTokens          int
	errorRaw, metricsRaw             []byte
}

// maxDepth is how deeply scanChunk lets a chunk nest (the top-level
// object is depth 0).
const maxDepth = 64

// skip reads any value at nesting depth depth.
func skip(s *jsonscan.Scanner, depth int) error {
	s.MaxDepth = maxDepth - depth
	return s.Skip()
}

// value reads any value at nesting depth depth and returns its text.
func value(s *jsonscan.Scanner, depth int) ([]byte, error) {
	s.MaxDepth = maxDepth - depth
	return s.Value()
}

// keys are the field names the client reads.
var keys = []string{"choices", "usage", "error", "metrics", "prompt_tokens", "completion_tokens",
	"prompt_tokens_details", "completion_tokens_details", "cached_tokens", "reasoning_tokens",
	"delta", "message", "content", "reasoning_content", "reasoning", "text", "finish_reason"}

// keysByLen are the keys indexed by length (the longest has 25 bytes).
var keysByLen = func() (t [26][]string) {
	for _, k := range keys {
		t[len(k)] = append(t[len(k)], k)
	}
	return t
}()

// canon returns the known field name k matches case-insensitively (as
// encoding/json matches names), or "". It runs for every key of every
// event, so it folds only against the names of k's length: the names are
// ASCII, and the non-ASCII runes that fold to ASCII letters are longer
// than them, so no key of another length can match.
func canon(k []byte) string {
	if len(k) >= len(keysByLen) {
		return ""
	}
	for _, name := range keysByLen[len(k)] {
		if bytes.EqualFold(k, []byte(name)) {
			return name
		}
	}
	return ""
}

// object calls fn with each key's canonical name ("" for fields the client
// does not read); fn must read the value.
func object(s *jsonscan.Scanner, fn func(key string) error) error {
	return s.Object(func(k jsonscan.Str) error { return fn(canon(k.Raw)) })
}

// strOrNull reads a string (raw) or null (nil, false).
func strOrNull(s *jsonscan.Scanner) ([]byte, bool, error) {
	if s.Null() {
		return nil, false, nil
	}
	t, err := s.String()
	return t.Raw, err == nil, err
}

// intOrNull reads a whole number (or null).
func intOrNull(s *jsonscan.Scanner) (int, bool, error) {
	if s.Null() {
		return 0, false, nil
	}
	v, err := s.Int64() // refuses a fraction, or a number out of range
	if err != nil {
		return 0, false, err
	}
	return int(v), true, nil
}

// scanChunk reads one event's JSON into c, validating all of it.
func scanChunk(b []byte, c *fastChunk) error {
	*c = fastChunk{}
	s := jsonscan.New(b)
	err := object(&s, func(k string) error {
		var err error
		switch k {
		case "choices":
			if s.Null() {
				return nil
			}
			err = s.Array(func(i int) error {
				c.choices++
				if i > 0 {
					return skip(&s, 1)
				}
				return choice(&s, c)
			})
		case "usage":
			if s.Null() {
				return nil
			}
			c.hasUsage = true
			err = object(&s, func(k string) error {
				var err error
				switch k {
				case "prompt_tokens":
					c.prompt, c.hasPrompt, err = intOrNull(&s)
				case "completion_tokens":
					c.completion, c.hasCompletion, err = intOrNull(&s)
				case "prompt_tokens_details":
					err = details(&s, "cached_tokens", &c.cached)
				case "completion_tokens_details":
					err = details(&s, "reasoning_tokens", &c.reasoningTokens)
				default:
					err = skip(&s, 1)
				}
				return err
			})
		case "error":
			c.errorRaw, err = value(&s, 1)
			if string(c.errorRaw) == "null" {
				c.errorRaw = nil
			}
		case "metrics":
			c.metricsRaw, err = value(&s, 1)
			if string(c.metricsRaw) == "null" {
				c.metricsRaw = nil
			}
		default:
			err = skip(&s, 1)
		}
		return err
	})
	if err != nil {
		return err
	}
	return s.End() // no trailing data
}

func details(s *jsonscan.Scanner, key string, dst *int) error {
	if s.Null() {
		return nil
	}
	return object(s, func(k string) error {
		if k == key {
			v, _, err := intOrNull(s)
			*dst = v
			return err
		}
		return skip(s, 2)
	})
}

func choice(s *jsonscan.Scanner, c *fastChunk) error {
	return object(s, func(k string) error {
		var err error
		switch k {
		case "delta", "message":
			if s.Null() {
				return nil
			}
			err = object(s, func(k string) error {
				var err error
				var v []byte
				switch k {
				case "content":
					v, _, err = strOrNull(s)
					c.content = v
				case "reasoning_content", "reasoning":
					if v, _, err = strOrNull(s); len(v) > 0 {
						c.reasoning = v
					}
				default:
					err = skip(s, 2)
				}
				return err
			})
		case "text":
			c.text, _, err = strOrNull(s)
		case "finish_reason":
			c.finish, c.hasFinish, err = strOrNull(s)
		default:
			err = skip(s, 2)
		}
		return err
	})
}
