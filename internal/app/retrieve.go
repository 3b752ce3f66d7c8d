package app

import (
	"context"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// call is one retrieval call as it ran, for its span.
type call struct {
	source     int
	start, end time.Time
	delay      time.Duration
	hits       int
}

// retrieve asks every source for the query's nearest passages, one call
// per source, one after another or all at once; each call waits its drawn
// latency (a remote store's) and then searches its shard. The candidates
// come back in source order.
func (s *Server) retrieve(ctx context.Context, query string) ([]Hit, []call, error) {
	q := embed(query)
	n := s.index.Shards()
	found := make([][]Hit, n)
	calls := make([]call, n)
	one := func(ctx context.Context, i int) error {
		c := call{source: i, start: s.clock.Now(), delay: s.draw()}
		if err := s.clock.Sleep(ctx, c.delay); err != nil {
			return err
		}
		found[i] = s.index.Search(i, q, s.cfg.Candidates)
		c.end, c.hits = s.clock.Now(), len(found[i])
		calls[i] = c
		return nil
	}
	if s.cfg.Retrieval == RetrievalParallel {
		g, gctx := errgroup.WithContext(ctx)
		for i := range n {
			g.Go(func() error { return one(gctx, i) })
		}
		if err := g.Wait(); err != nil {
			return nil, nil, err
		}
	} else {
		for i := range n {
			if err := one(ctx, i); err != nil {
				return nil, nil, err
			}
		}
	}
	var all []Hit
	for _, f := range found {
		all = append(all, f...)
	}
	return all, calls, nil
}

// instructions open every prompt: fixed, so a prefix cache can keep them.
const instructions = "You answer questions about serving large language models. " +
	"Use the numbered passages below and cite them by number; say so when they do not hold the answer."

// prompt puts the instructions and the passages first, as a system
// message, then the client's messages: the retrieved text lengthens the
// prompt the model prefills.
func prompt(msgs []openai.ChatMessage, passages []Hit) []openai.ChatMessage {
	var b strings.Builder
	b.WriteString(instructions)
	for i, h := range passages {
		b.WriteString("\n\n[")
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString("] ")
		b.WriteString(h.P.Text)
	}
	out := make([]openai.ChatMessage, 0, len(msgs)+1)
	out = append(out, openai.ChatMessage{Role: "system", Content: openai.Content(b.String())})
	return append(out, msgs...)
}

// question is the text retrieval searches for: the last user message.
func question(msgs []openai.ChatMessage) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return string(msgs[i].Content)
		}
	}
	return string(msgs[len(msgs)-1].Content)
}
