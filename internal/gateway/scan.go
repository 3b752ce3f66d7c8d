package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/tokentrace/tokentrace/internal/jsonscan"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// Request is what the gateway reads from a completion request body: only
// the fields its policies need. The body itself is forwarded unchanged
// unless a policy rewrites a field.
type Request struct {
	Model  string
	Stream bool
	// Choices is how many answers the request asks for (chat's and
	// completions' n, or completions' best_of when larger): each may run
	// to MaxTokens. 1 when absent. (int32: it shares Stream's word.)
	Choices int32
	// MaxTokens is the requested output limit (max_tokens, or
	// max_completion_tokens when that is the one set); 0 when absent.
	MaxTokens int
	// MaxTokensField names the field MaxTokens came from.
	MaxTokensField string

	// PrefixHash hashes the first prefixBytes bytes of the prompt text, the
	// key of prefix-affinity routing.
	PrefixHash uint64
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	// AskedMetrics is "include_metrics" (vLLM's) or "return_metrics"
	// (tokentrace's) given as true: the client asked the engine for its
	// per-request metrics object.
	AskedMetrics bool

	body     []byte
	texts    []textSpan // prompt text, as raw JSON string contents
	messages int        // chat messages (one role token each)
	ids      int        // token ids given directly in a completion prompt
	input    int        // cached InputTokens; -1 until counted
}

// textSpan is the raw content of a JSON string in the body (between the
// quotes); escaped tells whether it holds backslash escapes.
type textSpan struct {
	start, end int
	escaped    bool
	role       bool // a chat role: hashed for affinity, counted as one token
}

// InputTokens is the fast estimate of the prompt's length with tokentrace's
// tokenizer: for chat, one token per message for its role plus its
// content's tokens (the tokenizer's chat rule); for completions, the
// prompt's tokens (a token id counts one). It is counted on first use, so
// that a request no policy measures never pays for counting.
func (r *Request) InputTokens() int {
	if r.input >= 0 {
		return r.input
	}
	n := r.messages + r.ids
	for _, t := range r.texts {
		if t.role {
			continue
		}
		raw := r.body[t.start:t.end]
		if !t.escaped {
			n += tokenizer.Count(string(raw))
			continue
		}
		if s, err := jsonscan.Unquote(raw); err == nil {
			n += tokenizer.Count(s)
		}
	}
	r.input = n
	return n
}

// errScan is wrapped by every error ScanRequest returns; its message is
// meant for the client.
var errScan = errors.New("invalid request")

// The keys ScanRequest reads, per object. The upstream acts on them, so
// each must be spelled exactly and given at most once: a duplicate, or a
// key equal to one of them under Unicode case folding (which encoding/json
// servers, serve among them, would also take), is refused with 400, the
// rule internal/openai applies. Other keys are not looked at.
var (
	chatKeys          = []string{"model", "stream", "max_tokens", "max_completion_tokens", "stream_options", "messages", "include_metrics", "return_metrics", "n"}
	completionKeys    = []string{"model", "stream", "max_tokens", "stream_options", "prompt", "include_metrics", "return_metrics", "n", "best_of"}
	responsesKeys     = []string{"model", "stream", "max_output_tokens", "input", "instructions"}
	messagesKeys      = []string{"model", "stream", "max_tokens", "messages", "system"}
	ollamaKeys        = []string{"model", "stream", "options", "messages"}
	ollamaOptionKeys  = []string{"num_predict"}
	streamOptionsKeys = []string{"include_usage"}
	messageKeys       = []string{"role", "content"}
	contentPartKeys   = []string{"text"}
)

// keyError is a key refused by the rule above.
type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }

// ScanRequest reads the fields the gateway needs from a request body of
// api in one pass without building the body's values: it validates the
// JSON's structure, decodes model, stream, the output cap (max_tokens,
// chat's max_completion_tokens, Responses' max_output_tokens, Ollama's
// options.num_predict), the answers asked for (n, best_of) and
// stream_options.include_usage, and notes where
// the prompt's text is (messages[].content as a string or text parts,
// prompt, Responses' input and instructions, Messages' system) for
// InputTokens and prefix affinity. Those keys must be exact and unique
// (chatKeys …). prefixBytes bounds the text hashed for prefix affinity.
func ScanRequest(body []byte, api openai.API, prefixBytes int) (Request, error) {
	r := Request{body: body, input: -1, Stream: api == openai.APIOllama}
	s := newScanner(body)
	var f scannedFields
	err := s.exactObject(apiKeys[api], func(key []byte) error { return s.requestField(key, api, &r, &f) })
	if err == nil {
		if s.SkipSpace(); s.Pos() != len(body) {
			err = s.Errorf("unexpected data after the request object")
		}
	}
	if err != nil {
		return Request{}, scanError(err)
	}
	if err := f.apply(&r, api); err != nil {
		return Request{}, err
	}
	r.PrefixHash = prefixHash(body, r.texts, prefixBytes)
	return r, nil
}

// scannedFields holds what ScanRequest's pass saw before it checks it.
type scannedFields struct {
	model                             string
	haveModel, sawMessages, sawPrompt bool
	maxTokens, maxCompletion          *int
	choices                           *int // n or best_of, the larger
}

// requestField decodes the request's top-level key into r and f.
func (s *scanner) requestField(key []byte, api openai.API, r *Request, f *scannedFields) error {
	chat := api != openai.APICompletions
	switch string(key) {
	case "model":
		v, err := s.stringValue()
		if err != nil {
			return fmt.Errorf("model: %w", err)
		}
		f.model, f.haveModel = v, true
	case "stream":
		v, err := s.boolValue()
		if err != nil {
			return fmt.Errorf("stream: %w", err)
		}
		r.Stream = v
	case "max_output_tokens", "options":
		if string(key) == "options" {
			return s.options(&f.maxTokens)
		}
		v, err := s.intValue()
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		f.maxTokens = v
	case "input":
		f.sawMessages = true
		return s.input(r)
	case "instructions", "system":
		return s.systemPrompt(key, r)
	case "max_tokens", "max_completion_tokens":
		return s.maxTokensField(key, api, f)
	case "n", "best_of":
		if api != openai.APIChat && api != openai.APICompletions {
			return s.skip()
		}
		v, err := s.intValue()
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if v != nil && (f.choices == nil || *v > *f.choices) {
			f.choices = v
		}
	case "stream_options":
		return s.streamOptions(r)
	case "include_metrics", "return_metrics":
		if api != openai.APIChat && api != openai.APICompletions {
			return s.skip()
		}
		v, err := s.boolValue()
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		r.AskedMetrics = r.AskedMetrics || v
	case "messages":
		if !chat {
			return s.skip()
		}
		f.sawMessages = true
		return s.messages(r)
	case "prompt":
		if chat {
			return s.skip()
		}
		f.sawPrompt = true
		return s.prompt(r, 0)
	default:
		return s.skip()
	}
	return nil
}

// maxTokensField decodes max_tokens or chat's max_completion_tokens.
func (s *scanner) maxTokensField(key []byte, api openai.API, f *scannedFields) error {
	if api != openai.APIChat && string(key) == "max_completion_tokens" {
		return s.skip() // not a completions parameter: the upstream ignores it
	}
	v, err := s.intValue()
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if string(key) == "max_tokens" {
		f.maxTokens = v
	} else {
		f.maxCompletion = v
	}
	return nil
}

// streamOptions decodes stream_options.include_usage.
func (s *scanner) streamOptions(r *Request) error {
	if s.Peek() != '{' {
		return s.skip()
	}
	return s.exactObject(streamOptionsKeys, func(k []byte) error {
		if string(k) != "include_usage" {
			return s.skip()
		}
		v, err := s.boolValue()
		r.IncludeUsage = v
		return err
	})
}

// scanError words a failed pass as the gateway's scan error.
func scanError(err error) error {
	if ke := (*keyError)(nil); errors.As(err, &ke) { // declared here: no allocation without an error
		return fmt.Errorf("%w: %s", errScan, ke.msg)
	}
	return fmt.Errorf("%w: body is not valid JSON: %v", errScan, err)
}

// apply checks the fields f saw and sets r's model and output cap.
func (f *scannedFields) apply(r *Request, api openai.API) error {
	if !f.haveModel || f.model == "" {
		return fmt.Errorf("%w: missing required parameter 'model'", errScan)
	}
	r.Model = f.model
	switch {
	case f.maxCompletion != nil:
		r.MaxTokens, r.MaxTokensField = *f.maxCompletion, "max_completion_tokens"
	case f.maxTokens != nil:
		r.MaxTokens, r.MaxTokensField = *f.maxTokens, maxTokensField[api]
	}
	if api == openai.APIOllama && r.MaxTokens < 0 {
		r.MaxTokens = 0 // num_predict -1 or -2: no cap
	}
	if r.MaxTokens < 0 {
		return fmt.Errorf("%w: %s must be positive, got %d", errScan, r.MaxTokensField, r.MaxTokens)
	}
	r.Choices = 1
	if f.choices != nil {
		if *f.choices < 1 {
			return fmt.Errorf("%w: n must be at least 1, got %d", errScan, *f.choices)
		}
		r.Choices = int32(min(*f.choices, math.MaxInt32))
	}
	chat := api != openai.APICompletions
	if chat && (!f.sawMessages || r.messages == 0) {
		if api == openai.APIResponses {
			return fmt.Errorf("%w: 'input' must be a non-empty string or array", errScan)
		}
		return fmt.Errorf("%w: 'messages' must be a non-empty array", errScan)
	}
	if !chat && !f.sawPrompt {
		return fmt.Errorf("%w: missing required parameter 'prompt'", errScan)
	}
	return nil
}

// apiKeys are the keys ScanRequest reads of each API's body.
var apiKeys = [...][]string{
	openai.APIChat: chatKeys, openai.APICompletions: completionKeys, openai.APIResponses: responsesKeys,
	openai.APIMessages: messagesKeys, openai.APIOllama: ollamaKeys,
}

// maxTokensField names each API's output cap, as Request.MaxTokensField
// and the policies that set it (ollamaNumPredict is nested).
var maxTokensField = [...]string{
	openai.APIChat: "max_tokens", openai.APICompletions: "max_tokens", openai.APIResponses: "max_output_tokens",
	openai.APIMessages: "max_tokens", openai.APIOllama: ollamaNumPredict,
}

// ollamaNumPredict is Ollama's output cap, options.num_predict.
const ollamaNumPredict = "options.num_predict"

// options reads Ollama's options object: its num_predict.
func (s *scanner) options(dst **int) error {
	if s.Peek() != '{' {
		return s.skip()
	}
	return s.exactObject(ollamaOptionKeys, func(k []byte) error {
		if string(k) != "num_predict" {
			return s.skip()
		}
		v, err := s.intValue()
		if err != nil {
			return fmt.Errorf("options.num_predict: %w", err)
		}
		*dst = v
		return nil
	})
}

// input reads a Responses input: a string (one user message) or an
// array of message items (role, content).
func (s *scanner) input(r *Request) error {
	if s.Peek() == '"' {
		r.messages++
		t, err := s.str()
		if err == nil {
			r.texts = append(r.texts, t)
		}
		return err
	}
	return s.messages(r)
}

// scanner is a jsonscan.Scanner with the readers ScanRequest needs.
type scanner struct{ jsonscan.Scanner }

func newScanner(b []byte) *scanner { return &scanner{jsonscan.New(b)} }

// str scans a string and returns its raw content span.
func (s *scanner) str() (textSpan, error) {
	t, err := s.String()
	return textSpan{start: t.Start, end: t.End(), escaped: t.Escaped}, err
}

// stringValue reads a string's value as encoding/json does (escapes
// resolved, invalid UTF-8 replaced by U+FFFD).
func (s *scanner) stringValue() (string, error) {
	t, err := s.String()
	if err != nil || !t.Escaped && !t.NonASCII {
		return string(t.Raw), err
	}
	return jsonscan.Unquote(t.Raw)
}

// boolValue reads true, false or null (false).
func (s *scanner) boolValue() (bool, error) {
	switch s.Peek() {
	case 't', 'f':
		return s.Bool()
	case 'n':
		if s.Null() {
			return false, nil
		}
		return false, s.Errorf("invalid literal")
	}
	return false, s.Errorf("want true or false")
}

// intValue reads an integer or null (nil). A number with a fraction or
// exponent is accepted when its value is a whole number within ±2⁴⁰.
func (s *scanner) intValue() (*int, error) {
	if s.Null() {
		return nil, nil
	}
	num, err := s.Number()
	if err != nil {
		return nil, err
	}
	v64, err := jsonscan.ParseInt(num)
	v := int(v64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(num), 64)
		if ferr != nil || f != float64(int(f)) || f > 1<<40 || f < -(1<<40) {
			return nil, fmt.Errorf("must be an integer, got %s", num)
		}
		v = int(f)
	}
	return &v, nil
}

// object scans an object, calling field with each key (its value as
// encoding/json reads it); field must consume the value.
func (s *scanner) object(field func(key []byte) error) error {
	return s.Object(func(k jsonscan.Str) error {
		key := k.Raw
		if k.Escaped || k.NonASCII {
			if v, err := jsonscan.Unquote(k.Raw); err == nil {
				key = []byte(v)
			}
		}
		return field(key)
	})
}

// exactObject is object for an object whose keys among known the gateway
// reads: field is called for the known keys only (any other member is
// skipped, so a key of another API's body — Ollama's options in a chat
// request — is never read as this one's); a known key given twice, or a
// key equal to a known one under case folding but not exactly, is a
// keyError.
func (s *scanner) exactObject(known []string, field func(key []byte) error) error {
	var seen uint64 // bit i: known[i] was seen
	return s.object(func(key []byte) error {
		for i, k := range known {
			switch {
			case string(key) == k:
				if seen&(1<<i) != 0 {
					return &keyError{msg: fmt.Sprintf("duplicate key %q in the request body", k)}
				}
				seen |= 1 << i
				return field(key)
			case bytes.EqualFold(key, []byte(k)):
				return &keyError{msg: "Unrecognized request argument supplied: " + string(key)}
			}
		}
		return s.skip()
	})
}

// array scans an array, calling elem for each element (which must consume it).
func (s *scanner) array(elem func() error) error {
	return s.Array(func(int) error { return elem() })
}

// skip passes over one value of any kind; jsonscan's default depth limit
// (128 levels) keeps a hostile body from exhausting the stack.
func (s *scanner) skip() error { return s.Skip() }

// messages scans a chat messages array.
func (s *scanner) messages(r *Request) error {
	if s.Peek() != '[' {
		return s.Errorf("'messages' must be an array")
	}
	if r.texts == nil {
		r.texts = make([]textSpan, 0, 4) // a system and a user message: no regrowth
	}
	return s.array(func() error {
		if s.Peek() != '{' {
			return s.Errorf("each message must be an object")
		}
		r.messages++
		return s.exactObject(messageKeys, func(key []byte) error {
			switch string(key) {
			case "role":
				t, err := s.str()
				if err == nil {
					t.role = true
					r.texts = append(r.texts, t)
				}
				return err
			case "content":
				return s.content(r)
			}
			return s.skip()
		})
	})
}

// systemPrompt scans Responses' instructions or Messages' system: a
// system message before the others (one role token, as the tokenizer's
// chat rule counts it and serve reads it) unless null, or for
// instructions, empty.
func (s *scanner) systemPrompt(key []byte, r *Request) error {
	if s.Peek() == 'n' && s.Null() {
		return nil
	}
	n := len(r.texts)
	if err := s.content(r); err != nil {
		return err
	}
	if string(key) == "system" || len(r.texts) != n+1 || r.texts[n].end > r.texts[n].start {
		r.messages++
	}
	return nil
}

// content scans a message's content: a string, an array of parts (text
// parts counted) or null.
func (s *scanner) content(r *Request) error {
	switch s.Peek() {
	case '"':
		t, err := s.str()
		if err == nil {
			r.texts = append(r.texts, t)
		}
		return err
	case 'n':
		if s.Null() {
			return nil
		}
	case '[':
		return s.array(func() error {
			if s.Peek() != '{' {
				return s.Errorf("content parts must be objects")
			}
			return s.exactObject(contentPartKeys, func(key []byte) error {
				if string(key) != "text" || s.Peek() != '"' {
					return s.skip()
				}
				t, err := s.str()
				if err == nil {
					r.texts = append(r.texts, t)
				}
				return err
			})
		})
	}
	return s.Errorf("content must be a string, an array of parts or null")
}

// prompt scans a completion prompt: a string, or an array of strings,
// token ids, or arrays of token ids.
func (s *scanner) prompt(r *Request, depth int) error {
	switch c := s.Peek(); {
	case c == '"':
		t, err := s.str()
		if err == nil {
			r.texts = append(r.texts, t)
		}
		return err
	case c == '[' && depth < 2:
		return s.array(func() error { return s.prompt(r, depth+1) })
	case (c >= '0' && c <= '9') || c == '-':
		if depth == 0 {
			return s.Errorf("prompt must be a string or an array")
		}
		num, err := s.Number()
		if err == nil {
			if _, perr := jsonscan.ParseInt(num); perr != nil {
				return s.Errorf("token ids must be integers")
			}
			r.ids++
		}
		return err
	}
	return s.Errorf("prompt must be a string, an array of strings or token ids")
}

// rewriteFields returns body with the given top-level fields replaced (or
// added), every other byte kept. It is used only when a policy changes the
// request (default or clamped max_tokens, alias or fallback model).
func rewriteFields(body []byte, set map[string]any) ([]byte, error) {
	if v, ok := set[ollamaNumPredict]; ok {
		// Nested: the options object is rewritten with its num_predict.
		opts, err := withOption(body, "num_predict", v)
		if err != nil {
			return nil, err
		}
		set = maps.Clone(set)
		delete(set, ollamaNumPredict)
		set["options"] = opts
	}
	type edit struct {
		start, end int
		val        []byte
	}
	s := newScanner(body)
	found := map[string]edit{}
	if err := s.object(func(key []byte) error {
		start := s.Pos()
		if err := s.skip(); err != nil {
			return err
		}
		if _, ok := set[string(key)]; ok {
			found[string(key)] = edit{start: start, end: s.Pos()}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("rewrite request: %w", err)
	}
	closeAt := bytes.LastIndexByte(body, '}')
	nonEmpty := len(bytes.TrimSpace(body[bytes.IndexByte(body, '{')+1:closeAt])) > 0
	var edits []edit
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, err := json.Marshal(set[k])
		if err != nil {
			return nil, fmt.Errorf("rewrite request field %s: %w", k, err)
		}
		if e, ok := found[k]; ok {
			edits = append(edits, edit{start: e.start, end: e.end, val: append([]byte(" "), v...)})
			continue
		}
		kb, _ := json.Marshal(k)
		ins := append(append(append([]byte{}, kb...), ':'), v...)
		if nonEmpty {
			ins = append([]byte{','}, ins...)
		}
		nonEmpty = true
		edits = append(edits, edit{start: closeAt, end: closeAt, val: ins})
	}
	slices.SortStableFunc(edits, func(a, b edit) int { return a.start - b.start })
	out := make([]byte, 0, len(body)+64)
	at := 0
	for _, e := range edits {
		out = append(out, body[at:e.start]...)
		out = append(out, e.val...)
		at = e.end
	}
	return append(out, body[at:]...), nil
}

// withOption is body's top-level "options" object (or a new one) with
// key set to v, the other members kept.
func withOption(body []byte, key string, v any) (json.RawMessage, error) {
	var top struct {
		Options map[string]json.RawMessage `json:"options"`
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("rewrite request options: %w", err)
	}
	if top.Options == nil {
		top.Options = map[string]json.RawMessage{}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	top.Options[key] = b
	out, err := json.Marshal(top.Options)
	return out, err
}

// prefixHash hashes the first prefixBytes of the prompt's texts in body for
// prefix affinity.
func prefixHash(body []byte, texts []textSpan, prefixBytes int) uint64 {
	key := route.NewPrefixKey(prefixBytes)
	for _, t := range texts {
		if key.Full() {
			break
		}
		key.Add(body[t.start:t.end])
	}
	return key.Sum()
}
