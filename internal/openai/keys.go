package openai

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/tokentrace/tokentrace/internal/jsonscan"
)

// Keys are matched exactly, as OpenAI's API matches them. encoding/json,
// which decodes the request types, would also take a key that differs
// from a field's name only in case ("MAX_TOKENS" for max_tokens, under
// Unicode simple folding, so "ſtream" for stream too), and the last of
// duplicated keys; a proxy reading the exact key would then see another
// value than the one acted on. So before decoding, checkKeys walks the
// objects the request types read and rejects, with a 400:
//
//   - a key that equals a known key under folding but not exactly:
//     "Unrecognized request argument supplied: KEY", as OpenAI answers for
//     any unknown argument;
//   - a key given twice in one object (after unescaping): "duplicate key".
//
// Other unknown keys are ignored, as vLLM does, so that clients sending
// other servers' extensions keep working.

// shape lists the keys of an object the decoder reads (at most 64); a key
// whose value is an object, or an array of objects, the decoder also
// reads has that object's shape as its child.
type shape struct {
	index    map[string]int // key → position
	children []*shape       // by position; nil: the value is not walked
}

var (
	streamOptionsShape = keysOf(reflect.TypeFor[StreamOptions]())
	contentPartShape   = keysOf(reflect.TypeFor[contentPart]())
	messageShape       = keysOf(reflect.TypeFor[ChatMessage]()).with("content", contentPartShape)
	kvTransferShape    = keysOf(reflect.TypeFor[KVTransferParams]())
	chatShape          = keysOf(reflect.TypeFor[ChatCompletionRequest]()).
				with("messages", messageShape).with("stream_options", streamOptionsShape).with("kv_transfer_params", kvTransferShape)
	completionShape = keysOf(reflect.TypeFor[CompletionRequest]()).with("stream_options", streamOptionsShape).
			with("kv_transfer_params", kvTransferShape)
)

// keysOf returns the shape of a struct: the JSON names of its fields,
// those of embedded structs included, as encoding/json names them.
func keysOf(t reflect.Type) *shape {
	sh := &shape{index: map[string]int{}}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
			case f.Anonymous && name == "":
				add(f.Type)
			case f.IsExported():
				if name == "" {
					name = f.Name
				}
				sh.index[name] = len(sh.children)
				sh.children = append(sh.children, nil)
			}
		}
	}
	add(t)
	if len(sh.children) > 64 {
		panic("openai: more than 64 keys in " + t.Name())
	}
	return sh
}

// with returns sh with key's value read as an object (or array of
// objects) of the given shape.
func (sh *shape) with(key string, child *shape) *shape {
	i, ok := sh.index[key]
	if !ok {
		panic("openai: shape has no key " + key)
	}
	sh.children[i] = child
	return sh
}

// keyPath is where a key is in the body, built into a string only for an
// error: messages[2].content.
type keyPath struct {
	parent *keyPath
	key    string
	elem   int // ≥ 0: the key's value is an array and this is its element
}

func (p *keyPath) String() string {
	if p == nil {
		return ""
	}
	s := p.parent.String()
	if s != "" && p.key != "" {
		s += "."
	}
	s += p.key
	if p.elem >= 0 {
		s += "[" + strconv.Itoa(p.elem) + "]"
	}
	return s
}

// keyError is a key checkKeys rejects.
type keyError struct {
	param, msg string
}

func (e *keyError) Error() string { return e.msg }

// checkKeys walks body's objects of shape sh. It returns a keyError for a
// key that is a case variant of a known one or a duplicate, a
// jsonscan.SyntaxError where the body cannot be scanned, or nil.
func checkKeys(body []byte, sh *shape) error {
	s := jsonscan.New(body)
	if s.Peek() != '{' {
		return nil // not an object: encoding/json says so
	}
	if err := walkObject(&s, sh, nil); err != nil {
		return err
	}
	return s.End()
}

func walkObject(s *jsonscan.Scanner, sh *shape, at *keyPath) error {
	var seen uint64               // known keys seen, by position
	var seenOther map[string]bool // other keys seen, made on the first
	return s.Object(func(k jsonscan.Str) error {
		var key string // made only when a known key is not enough
		var i int
		var known bool
		if k.Escaped || k.NonASCII {
			u, err := jsonscan.Unquote(k.Raw)
			if err != nil {
				return err
			}
			key = u
			i, known = sh.index[key]
		} else {
			i, known = sh.index[string(k.Raw)] // looked up without a copy
		}
		dup := false
		switch {
		case known:
			dup = seen&(1<<i) != 0
			seen |= 1 << i
			if (dup || sh.children[i] != nil) && key == "" {
				key = string(k.Raw) // the error's or the child's path
			}
		default:
			if key == "" {
				key = string(k.Raw)
			}
			for name := range sh.index {
				if strings.EqualFold(key, name) {
					p := (&keyPath{parent: at, key: key, elem: -1}).String()
					return &keyError{param: p, msg: "Unrecognized request argument supplied: " + p}
				}
			}
			if seenOther == nil {
				seenOther = map[string]bool{}
			}
			dup = seenOther[key]
			seenOther[key] = true
		}
		if dup {
			p := (&keyPath{parent: at, key: key, elem: -1}).String()
			return &keyError{param: p, msg: fmt.Sprintf("duplicate key %q in the request body", p)}
		}
		if !known || sh.children[i] == nil {
			return s.Skip()
		}
		return walkValue(s, sh.children[i], &keyPath{parent: at, key: key, elem: -1})
	})
}

// walkValue walks a value of shape sh: an object, or each object of an
// array; anything else is skipped.
func walkValue(s *jsonscan.Scanner, sh *shape, at *keyPath) error {
	switch s.Peek() {
	case '{':
		return walkObject(s, sh, at)
	case '[':
		return s.Array(func(i int) error {
			if s.Peek() != '{' {
				return s.Skip()
			}
			return walkObject(s, sh, &keyPath{parent: at, elem: i})
		})
	}
	return s.Skip()
}
