package bench

import (
	"bytes"
	"errors"
	"strconv"
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

var errSyntax = errors.New("invalid JSON")

type scan struct {
	b []byte
	i int
}

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scan) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// str reads a string and returns its raw (escaped) content.
func (s *scan) str() ([]byte, error) {
	if s.peek() != '"' {
		return nil, errSyntax
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			return raw, nil
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return nil, errSyntax
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return nil, errSyntax
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return nil, errSyntax
					}
				}
				s.i += 6
			default:
				return nil, errSyntax
			}
		case c < 0x20:
			return nil, errSyntax
		default:
			s.i++
		}
	}
	return nil, errSyntax
}

// num reads a number and returns its text.
func (s *scan) num() ([]byte, error) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return nil, errSyntax
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return nil, errSyntax
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return nil, errSyntax
		}
	}
	return s.b[start:s.i], nil
}

func (s *scan) lit(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return errSyntax
	}
	s.i += len(word)
	return nil
}

// skip reads any value and returns its raw text.
func (s *scan) skip(depth int) ([]byte, error) {
	if depth > 64 {
		return nil, errSyntax
	}
	c := s.peek()
	start := s.i
	var err error
	switch {
	case c == '"':
		_, err = s.str()
	case c == '{':
		err = s.object(func(string) error { _, err := s.skip(depth + 1); return err })
	case c == '[':
		err = s.array(func(int) error { _, err := s.skip(depth + 1); return err })
	case c == 't':
		err = s.lit("true")
	case c == 'f':
		err = s.lit("false")
	case c == 'n':
		err = s.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		_, err = s.num()
	default:
		err = errSyntax
	}
	if err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

// keys are the field names the client reads.
var keys = []string{"choices", "usage", "error", "metrics", "prompt_tokens", "completion_tokens",
	"prompt_tokens_details", "completion_tokens_details", "cached_tokens", "reasoning_tokens",
	"delta", "message", "content", "reasoning_content", "reasoning", "text", "finish_reason"}

// canon returns the known field name k matches case-insensitively (as
// encoding/json matches names), or "".
func canon(k []byte) string {
	for _, name := range keys {
		if len(name) == len(k) && bytes.EqualFold(k, []byte(name)) {
			return name
		}
	}
	return ""
}

// object calls fn with each key's canonical name ("" for fields the client
// does not read); fn must read the value.
func (s *scan) object(fn func(key string) error) error {
	if s.peek() != '{' {
		return errSyntax
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return errSyntax
		}
		s.i++
		if err := fn(canon(k)); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errSyntax
		}
	}
}

// array calls fn for each element; fn must read it.
func (s *scan) array(fn func(i int) error) error {
	if s.peek() != '[' {
		return errSyntax
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for n := 0; ; n++ {
		if err := fn(n); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return errSyntax
		}
	}
}

// strOrNull reads a string (raw) or null (nil, false).
func (s *scan) strOrNull() ([]byte, bool, error) {
	if s.peek() == 'n' {
		return nil, false, s.lit("null")
	}
	r, err := s.str()
	return r, err == nil, err
}

// intOrNull reads a whole number (or null).
func (s *scan) intOrNull() (int, bool, error) {
	if s.peek() == 'n' {
		return 0, false, s.lit("null")
	}
	t, err := s.num()
	if err != nil {
		return 0, false, err
	}
	v, err := strconv.Atoi(string(t))
	if err != nil {
		return 0, false, errSyntax // a fraction, or out of range
	}
	return v, true, nil
}

// scanChunk reads one event's JSON into c, validating all of it.
func scanChunk(b []byte, c *fastChunk) error {
	*c = fastChunk{}
	s := scan{b: b}
	err := s.object(func(k string) error {
		var err error
		switch k {
		case "choices":
			if s.peek() == 'n' {
				return s.lit("null")
			}
			err = s.array(func(i int) error {
				c.choices++
				if i > 0 {
					_, err := s.skip(1)
					return err
				}
				return s.choice(c)
			})
		case "usage":
			if s.peek() == 'n' {
				return s.lit("null")
			}
			c.hasUsage = true
			err = s.object(func(k string) error {
				var err error
				switch k {
				case "prompt_tokens":
					c.prompt, c.hasPrompt, err = s.intOrNull()
				case "completion_tokens":
					c.completion, c.hasCompletion, err = s.intOrNull()
				case "prompt_tokens_details":
					err = s.details("cached_tokens", &c.cached)
				case "completion_tokens_details":
					err = s.details("reasoning_tokens", &c.reasoningTokens)
				default:
					_, err = s.skip(1)
				}
				return err
			})
		case "error":
			c.errorRaw, err = s.skip(1)
			if string(c.errorRaw) == "null" {
				c.errorRaw = nil
			}
		case "metrics":
			c.metricsRaw, err = s.skip(1)
			if string(c.metricsRaw) == "null" {
				c.metricsRaw = nil
			}
		default:
			_, err = s.skip(1)
		}
		return err
	})
	if err != nil {
		return err
	}
	if s.ws(); s.i != len(s.b) {
		return errSyntax // trailing data
	}
	return nil
}

func (s *scan) details(key string, dst *int) error {
	if s.peek() == 'n' {
		return s.lit("null")
	}
	return s.object(func(k string) error {
		if k == key {
			v, _, err := s.intOrNull()
			*dst = v
			return err
		}
		_, err := s.skip(2)
		return err
	})
}

func (s *scan) choice(c *fastChunk) error {
	return s.object(func(k string) error {
		var err error
		switch k {
		case "delta", "message":
			if s.peek() == 'n' {
				return s.lit("null")
			}
			err = s.object(func(k string) error {
				var err error
				var v []byte
				switch k {
				case "content":
					v, _, err = s.strOrNull()
					c.content = v
				case "reasoning_content", "reasoning":
					if v, _, err = s.strOrNull(); len(v) > 0 {
						c.reasoning = v
					}
				default:
					_, err = s.skip(2)
				}
				return err
			})
		case "text":
			c.text, _, err = s.strOrNull()
		case "finish_reason":
			c.finish, c.hasFinish, err = s.strOrNull()
		default:
			_, err = s.skip(2)
		}
		return err
	})
}
