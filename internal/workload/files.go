package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// Prompt is one entry of a prompt file.
type Prompt struct {
	Messages  []tokenizer.Message
	Prompt    string
	MaxTokens int // 0: use the workload's output length distribution
}

// scanJSONL calls fn with each non-blank line of r (trimmed) and its
// 1-based number, lines of at most maxLine bytes; it stops at fn's first
// error, and a line it cannot read is an error naming its number.
func scanJSONL(r io.Reader, maxLine int, fn func(line int, b []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := fn(line, b); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %w", line+1, err)
	}
	return nil
}

// ReadJSONL reads a prompt file with one JSON object per line, either
// {"prompt": "..."} or {"messages": [{"role": "...", "content": "..."}]},
// each with an optional "max_tokens". Blank lines are skipped.
func ReadJSONL(r io.Reader) ([]Prompt, error) {
	var out []Prompt
	err := scanJSONL(r, 64<<20, func(line int, b []byte) error {
		var e struct {
			Prompt   *string `json:"prompt"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
			MaxTokens int `json:"max_tokens"`
		}
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		p := Prompt{MaxTokens: e.MaxTokens}
		switch {
		case e.Prompt != nil && len(e.Messages) > 0:
			return fmt.Errorf("line %d: has both prompt and messages", line)
		case e.Prompt != nil:
			p.Prompt = *e.Prompt
		case len(e.Messages) > 0:
			for _, m := range e.Messages {
				if m.Role == "" {
					return fmt.Errorf("line %d: a message has no role", line)
				}
				p.Messages = append(p.Messages, tokenizer.Message{Role: m.Role, Content: m.Content})
			}
		default:
			return fmt.Errorf(`line %d: want {"prompt": ...} or {"messages": [...]}`, line)
		}
		if e.MaxTokens < 0 {
			return fmt.Errorf("line %d: max_tokens %d is negative", line, e.MaxTokens)
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("prompt file has no entries")
	}
	return out, nil
}

// ReadShareGPT reads a ShareGPT-format JSON file: an array of
// {"conversations": [{"from": "human"|"gpt"|..., "value": "..."}]}. Each
// conversation gives one prompt, its first human message, with max_tokens
// the length of the reply that followed it (as the common serving
// benchmarks use it). Conversations without a human message followed by a
// reply are skipped.
func ReadShareGPT(r io.Reader) ([]Prompt, error) {
	var convs []struct {
		Conversations []struct {
			From  string `json:"from"`
			Value string `json:"value"`
		} `json:"conversations"`
	}
	if err := json.NewDecoder(r).Decode(&convs); err != nil {
		return nil, fmt.Errorf("sharegpt: %w", err)
	}
	var out []Prompt
	for _, c := range convs {
		for i := 0; i+1 < len(c.Conversations); i++ {
			if c.Conversations[i].From == "human" && c.Conversations[i+1].From != "human" {
				out = append(out, Prompt{
					Messages:  []tokenizer.Message{{Role: "user", Content: c.Conversations[i].Value}},
					MaxTokens: max(1, tokenizer.Count(c.Conversations[i+1].Value)),
				})
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("sharegpt: no conversation with a human message and a reply")
	}
	return out, nil
}

// ReadPromptFile reads a JSONL prompt file or, when the file starts with
// '[', a ShareGPT JSON file.
func ReadPromptFile(path string) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("prompts: %w", err)
	}
	defer func() { _ = f.Close() }() // opened for reading: a failed Close loses nothing
	br := bufio.NewReader(f)
	var first byte
	for {
		b, err := br.ReadByte()
		if err == io.EOF {
			return nil, fmt.Errorf("prompts %s: empty file", path)
		}
		if err != nil {
			return nil, fmt.Errorf("prompts %s: %w", path, err)
		}
		if !strings.ContainsRune(" \t\r\n", rune(b)) {
			first = b
			_ = br.UnreadByte()
			break
		}
	}
	var ps []Prompt
	if first == '[' {
		ps, err = ReadShareGPT(br)
	} else {
		ps, err = ReadJSONL(br)
	}
	if err != nil {
		return nil, fmt.Errorf("prompts %s: %w", path, err)
	}
	return ps, nil
}

// Prompts is a Source that sends a file's prompts, one per session, in an
// order shuffled by Seed, cycling when there are more sessions than prompts.
// Entries without max_tokens draw it from Output.
type Prompts struct {
	List   []Prompt
	Chat   bool
	Output Dist
	Seed   uint64

	once   sync.Once // closed-loop workers ask for sessions concurrently
	perm   []int
	shared []int // per entry: the longest token prefix shared with another entry
}

// Prepare shuffles the entries and finds the prefixes they share (a pass
// over every prompt's tokens), so that the first session does not wait for
// it. Session calls it when it was not called.
func (p *Prompts) Prepare() {
	p.once.Do(func() {
		p.perm = rand.New(rand.NewPCG(p.Seed, 0xF11E)).Perm(len(p.List))
		p.shared = p.sharedPrefixes()
	})
}

// Session returns session i.
func (p *Prompts) Session(i int64) Session {
	p.Prepare()
	k := p.perm[int(i%int64(len(p.List)))]
	e := p.List[k]
	req := Request{Session: i, MaxTokens: e.MaxTokens}
	if req.MaxTokens == 0 {
		req.MaxTokens = p.Output.Sample(rand.New(rand.NewPCG(p.Seed, uint64(i))))
	}
	msgs := e.Messages
	if msgs == nil {
		msgs = []tokenizer.Message{{Role: "user", Content: e.Prompt}}
	}
	if !p.Chat && e.Messages == nil {
		req.Prompt = e.Prompt
		req.InputTokens = tokenizer.Count(e.Prompt)
	} else {
		setContent(&req, msgs, p.Chat)
	}
	req.SharedPrefixTokens = p.shared[k]
	if i >= int64(len(p.List)) {
		req.SharedPrefixTokens = req.InputTokens // sent before: all of it
	}
	return &single{req: req}
}

// tokens is entry k's prompt as the server sees it, in token ids.
func (p *Prompts) tokens(k int) []int32 {
	e := p.List[k]
	if !p.Chat && e.Messages == nil {
		return tokenizer.Encode(nil, e.Prompt)
	}
	msgs := e.Messages
	if msgs == nil {
		msgs = []tokenizer.Message{{Role: "user", Content: e.Prompt}}
	}
	if !p.Chat {
		ids := make([]int32, 0, 64)
		for _, m := range msgs {
			ids = tokenizer.Encode(ids, m.Content)
		}
		return ids
	}
	return tokenizer.EncodeChat(nil, msgs)
}

// sharedPrefixes returns, per entry, the length of the longest token
// prefix it has in common with any other entry: sorted, an entry's
// longest common prefix is with one of its neighbours.
func (p *Prompts) sharedPrefixes() []int {
	n := len(p.List)
	toks := make([][]int32, n)
	for k := range toks {
		toks[k] = p.tokens(k)
	}
	order := make([]int, n)
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int { return slices.Compare(toks[a], toks[b]) })
	shared := make([]int, n)
	for j := 1; j < n; j++ {
		a, b := order[j-1], order[j]
		l := commonPrefix(toks[a], toks[b])
		shared[a], shared[b] = max(shared[a], l), max(shared[b], l)
	}
	return shared
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
