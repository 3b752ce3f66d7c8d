package workload

import (
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// Request is one request's content. Exactly one of Messages (chat endpoint)
// and Prompt (completions endpoint) is set.
type Request struct {
	Messages []tokenizer.Message
	Prompt   string
	// InputTokens is the prompt's length by tokentrace's tokenizer: the
	// exact length tokentrace's embedded engine sees.
	InputTokens int
	// Requested is the prompt length the workload asked for, set when a
	// load generator resized the prompt to a server's count (InputTokens
	// is then the server's); 0: InputTokens is what was asked for.
	Requested int
	// Filler says the content is tokentrace's filler words made for a
	// length (a generated single-turn prompt or a trace row's), so a load
	// generator may lengthen or shorten it at its end to the length a
	// server's tokenizer counts; its first SharedPrefixTokens stay.
	Filler bool
	// MaxTokens is the output length asked for (always sent).
	MaxTokens int
	// Session and Turn place the request in a multi-turn session; Turn is
	// 1-based, 0 for single-turn workloads.
	Session int64
	Turn    int
	// Think is the pause after the previous turn's answer ends before this
	// turn is sent; 0 for first turns.
	Think time.Duration
	// SharedPrefixTokens is how many of the prompt's first tokens the
	// workload shares with other requests (docs/metrics.md, "Prompt tokens
	// shared and cached"): a prefix group's prefix, the history a later
	// turn resends, or the longest prefix a prompt file's entry has in
	// common with another entry. It is what prefix caching could reuse.
	SharedPrefixTokens int
	// PrefixBlocks are the ids of the prompt's leading blocks of
	// PrefixBlockTokens tokens each (a Mooncake row's hash_ids that its
	// prompt covers): prompts whose blocks begin with the same ids begin
	// with the same tokens. Written into the records
	// (latency.Record.PrefixBlocks) so that a replay of them shares what
	// this workload shared.
	PrefixBlocks      []int64
	PrefixBlockTokens int
	// Steps is the number of steps of the request's agent session (0: not
	// an agent session); Turn is then the step. Tools are the tool calls
	// the step asks for once its answer ends, made at once when Parallel,
	// else one after another.
	Steps    int
	Tools    []ToolCall
	Parallel bool
}

// Session is one conversation: a sequence of turns, each resending the
// whole history. Single-turn workloads have sessions of one turn.
type Session interface {
	// Next returns the next turn, given the output token count of the
	// previous turn's answer (ignored for the first); ok is false when the
	// session is over.
	Next(prevOutput int) (req Request, ok bool)
}

// Source makes the sessions of a workload. Session i is the same for the
// same seed whatever order sessions are asked for in. Session may be called
// from several goroutines at once (closed-loop workers do).
type Source interface {
	Session(i int64) Session
}

// LengthSource is a Source whose requests are known by their lengths alone
// (Replay): a simulator that needs no prompt text asks Lengths and skips
// building it.
type LengthSource interface {
	Lengths(i int64) (inputTokens, maxTokens int)
}

// SharedPrefixSource is a LengthSource that knows what its requests share
// (Replay of a trace with hash_ids): SharesPrefixes says whether a prefix
// cache needs the prompts' text, SharedPrefixTokens how many of request
// i's first tokens earlier requests sent.
type SharedPrefixSource interface {
	SharesPrefixes() bool
	SharedPrefixTokens(i int64) int
}

// Synthetic describes a generated workload.
type Synthetic struct {
	Chat   bool // build chat messages (else a completions prompt)
	Input  Dist // new prompt tokens per turn, including the shared prefix
	Output Dist // max_tokens per turn
	// PrefixTokens of every prompt's first turn are shared by all sessions
	// of the same group; sessions are spread round-robin over PrefixGroups.
	PrefixTokens int
	PrefixGroups int
	// Turns per session (at least 1), and the think time between them.
	Turns int
	Think time.Duration
	Seed  uint64
}

// Validate checks the description.
func (s *Synthetic) Validate() error {
	if s.Input == nil {
		return field.Errorf("input_tokens", "a prompt length distribution is required")
	}
	if s.Output == nil {
		return field.Errorf("output_tokens", "an output length distribution is required")
	}
	if s.PrefixTokens < 0 {
		return field.Invalid("prefix_tokens", s.PrefixTokens, "must not be negative")
	}
	if s.PrefixTokens > 0 && s.PrefixGroups < 1 {
		return field.Invalid("prefix_groups", s.PrefixGroups, "must be at least 1")
	}
	if s.Turns < 1 {
		return field.Invalid("turns", s.Turns, "must be at least 1")
	}
	if s.Think < 0 {
		return field.Invalid("think_time", s.Think, "must not be negative")
	}
	return nil
}

// Session returns session i.
func (s *Synthetic) Session(i int64) Session {
	return &synthSession{spec: s, id: i, r: rand.New(rand.NewPCG(s.Seed, uint64(i)))}
}

type synthSession struct {
	spec    *Synthetic
	id      int64
	r       *rand.Rand
	turn    int
	history []tokenizer.Message
}

// seeds for Filler: disjoint streams for prefixes, prompts and answers.
func prefixSeed(seed uint64, group int) uint64 { return seed ^ 0x5EED0000_00000000 ^ uint64(group) }
func turnSeed(seed uint64, session int64, turn int, kind uint64) uint64 {
	return seed*0x100000001B3 ^ uint64(session)<<20 ^ uint64(turn)<<4 ^ kind
}

func (ss *synthSession) Next(prevOutput int) (Request, bool) {
	sp := ss.spec
	if ss.turn >= sp.Turns {
		return Request{}, false
	}
	ss.turn++
	in := sp.Input.Sample(ss.r)
	out := sp.Output.Sample(ss.r)
	role := 0
	if sp.Chat {
		role = 1 // the user message's role token
	}
	var content string
	if ss.turn == 1 && sp.PrefixTokens > 0 {
		in = max(in, sp.PrefixTokens+role+1)
		group := int(ss.id % int64(sp.PrefixGroups))
		content = tokenizer.Filler(sp.PrefixTokens, prefixSeed(sp.Seed, group)) + " " +
			tokenizer.Filler(in-role-sp.PrefixTokens, turnSeed(sp.Seed, ss.id, ss.turn, 1))
	} else {
		in = max(in, role+1)
		content = tokenizer.Filler(in-role, turnSeed(sp.Seed, ss.id, ss.turn, 1))
	}
	req := Request{MaxTokens: out, Session: ss.id}
	if sp.Turns > 1 {
		req.Turn = ss.turn
		if ss.turn > 1 {
			req.Think = sp.Think
			// The previous answer joins the history, as the tokens the
			// server said it produced.
			ss.history = append(ss.history, tokenizer.Message{Role: "assistant",
				Content: tokenizer.Filler(max(prevOutput, 1), turnSeed(sp.Seed, ss.id, ss.turn-1, 2))})
		}
	}
	switch {
	case len(ss.history) > 0:
		req.SharedPrefixTokens = promptTokens(ss.history, sp.Chat)
	case ss.turn == 1 && sp.PrefixTokens > 0:
		req.SharedPrefixTokens = role + sp.PrefixTokens
	}
	msgs := []tokenizer.Message{{Role: "user", Content: content}}
	req.Filler = sp.Turns == 1 // a history's turns must stay as they were sent
	if sp.Turns > 1 {          // (only then is there a history)
		ss.history = append(ss.history, msgs[0])
		msgs = ss.history
	}
	setContent(&req, msgs, sp.Chat)
	return req, true
}

// promptTokens is the length of msgs as a prompt: with their role tokens
// for chat, their contents alone for a completions prompt (joined by
// newlines, which are no tokens).
func promptTokens(msgs []tokenizer.Message, chat bool) int {
	if chat {
		return tokenizer.CountChat(msgs)
	}
	n := 0
	for _, m := range msgs {
		n += tokenizer.Count(m.Content)
	}
	return n
}

// setContent fills Messages or Prompt and InputTokens.
func setContent(req *Request, msgs []tokenizer.Message, chat bool) {
	if chat {
		req.Messages = append([]tokenizer.Message(nil), msgs...)
		req.InputTokens = tokenizer.CountChat(msgs)
		return
	}
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = m.Content
	}
	req.Prompt = strings.Join(parts, "\n")
	req.InputTokens = tokenizer.Count(req.Prompt)
}

// single is a session of one fixed request.
type single struct {
	req  Request
	done bool
}

func (s *single) Next(int) (Request, bool) {
	if s.done {
		return Request{}, false
	}
	s.done = true
	return s.req, true
}
