package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tokens returns n token ids: the shared prefix ids 1.. then id base+i.
func tokens(shared, n int, base int32) []int32 {
	p := make([]int32, n)
	for i := range p {
		if i < shared {
			p[i] = int32(i + 1)
		} else {
			p[i] = base + int32(i)
		}
	}
	return p
}

func submitPrompt(s *scheduler, id string, prompt []int32, out int, now int64) *request {
	r := s.newRequest(&Request{ID: id, Prompt: prompt, MaxTokens: out, IgnoreEOS: true}, now)
	s.add(r)
	return r
}

func TestPrefixCacheHits(t *testing.T) {
	cfg := testConfig()
	cfg.EnablePrefixCaching = true
	s := newTestScheduler(t, cfg)
	// 70-token prompts sharing their first 50 tokens: 3 full shared blocks.
	a := submitPrompt(s, "a", tokens(50, 70, 1000), 3, 0)
	plan, now := step(t, s, 0)
	if diff := cmp.Diff([]string{"a:p70"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	b := submitPrompt(s, "b", tokens(50, 70, 2000), 3, now)
	plan, now = step(t, s, now)
	// b reuses 48 tokens (3 blocks) and computes only 22.
	if diff := cmp.Diff([]string{"a:d1", "b:p22"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if b.cachedTokens != 48 || s.prefixQueries != 140 || s.prefixHits != 48 {
		t.Fatalf("cached %d, queries %d, hits %d; want 48, 140, 48", b.cachedTokens, s.prefixQueries, s.prefixHits)
	}
	// The shared blocks are held by both.
	for i := range 3 {
		if a.blocks[i] != b.blocks[i] || s.kv.ref[a.blocks[i]] != 2 {
			t.Fatalf("block %d not shared: a %d b %d ref %d", i, a.blocks[i], b.blocks[i], s.kv.ref[a.blocks[i]])
		}
	}
	// Both finish; their blocks are free but keep their hashes, so a third
	// request with a's whole prompt hits 4 blocks (64 of 70 tokens).
	for a.state != stDone || b.state != stDone {
		_, now = step(t, s, now)
	}
	if s.kv.used() != 0 {
		t.Fatalf("%d blocks still used", s.kv.used())
	}
	c := submitPrompt(s, "c", tokens(50, 70, 1000), 2, now)
	plan, _ = step(t, s, now)
	if diff := cmp.Diff([]string{"c:p6"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if c.cachedTokens != 64 {
		t.Fatalf("c cached %d tokens, want 64", c.cachedTokens)
	}
}

func TestPrefixCacheFullHitRecomputesLastToken(t *testing.T) {
	cfg := testConfig()
	cfg.EnablePrefixCaching = true
	s := newTestScheduler(t, cfg)
	a := submitPrompt(s, "a", tokens(64, 64, 0), 1, 0)
	_, now := step(t, s, 0)
	if a.state != stDone {
		t.Fatal("a not done")
	}
	b := submitPrompt(s, "b", tokens(64, 64, 0), 1, now)
	plan, _ := step(t, s, now)
	// All 4 blocks are cached, but the last token must be computed to
	// produce logits: 3 blocks are reused and 16 tokens computed.
	if diff := cmp.Diff([]string{"b:p16"}, plan); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if b.cachedTokens != 48 {
		t.Fatalf("cached %d, want 48", b.cachedTokens)
	}
}

func TestPrefixCacheLRUEviction(t *testing.T) {
	cfg := testConfig()
	cfg.EnablePrefixCaching = true
	cfg.NumBlocks = 8
	cfg.MaxModelLen = 128
	s := newTestScheduler(t, cfg)
	var now int64
	run := func(id string, prompt []int32) *request {
		r := submitPrompt(s, id, prompt, 1, now)
		for r.state != stDone {
			_, now = step(t, s, now)
		}
		return r
	}
	// Three distinct 32-token prompts (2 blocks each, 6 of 8 blocks), run
	// one after another: all stay cached.
	p1, p2, p3 := tokens(0, 32, 100), tokens(0, 32, 200), tokens(0, 32, 300)
	run("p1", p1)
	run("p2", p2)
	run("p3", p3)
	if len(s.kv.cached) != 6 {
		t.Fatalf("%d cached blocks, want 6", len(s.kv.cached))
	}
	// Touch p1 again (p1 plus one token: both blocks hit, which makes
	// them recently used), then a 64-token prompt needs 4 blocks: the 2
	// never-hashed free blocks go first, then the least recently used
	// cached blocks, which are p2's.
	if r := run("p1again", append(append([]int32(nil), p1...), 7777)); r.cachedTokens != 32 {
		t.Fatalf("p1 again cached %d, want 32", r.cachedTokens)
	}
	run("big", tokens(0, 64, 900))
	hit := func(p []int32) int {
		h, _ := s.kv.lookup(blockHashes(p, 16), 2)
		return h
	}
	if got := []int{hit(p1), hit(p2), hit(p3)}; !cmp.Equal(got, []int{2, 0, 2}) {
		t.Fatalf("cached blocks of p1, p2, p3 = %v, want [2 0 2]", got)
	}
}

func TestBlockHashesChain(t *testing.T) {
	a := blockHashes(tokens(0, 48, 10), 16)
	b := blockHashes(tokens(0, 48, 10), 16)
	if !cmp.Equal(a, b) || len(a) != 3 {
		t.Fatalf("hashes not deterministic: %v %v", a, b)
	}
	// Same second block, different first: the second hash differs too.
	p := tokens(0, 48, 10)
	p[0] = 99999
	c := blockHashes(p, 16)
	if c[0] == a[0] || c[1] == a[1] || c[2] == a[2] {
		t.Fatalf("hash chain does not propagate: %v vs %v", c, a)
	}
	if len(blockHashes(tokens(0, 15, 0), 16)) != 0 {
		t.Fatal("a partial block was hashed")
	}
}

func TestResetPrefixDropsFreeBlocksKeepsHeld(t *testing.T) {
	cfg := testConfig()
	cfg.EnablePrefixCaching = true
	s := newTestScheduler(t, cfg)
	a := submitPrompt(s, "a", tokens(50, 70, 1000), 1, 0)
	_, now := step(t, s, 0)
	if a.state != stDone {
		t.Fatal("a not done")
	}
	// b holds its 4 full blocks (64 tokens) while the reset runs; a's
	// blocks, freed, are dropped: a's hashes are b's for the shared 3.
	b := submitPrompt(s, "b", tokens(50, 70, 2000), 5, now)
	_, now = step(t, s, now)
	dropped, held := s.kv.resetPrefix()
	if dropped != 1 || held != 4 {
		t.Fatalf("dropped %d held %d; want 1 (a's 4th block) and 4 (b's)", dropped, held)
	}
	for b.state != stDone {
		_, now = step(t, s, now)
	}
	if dropped, held = s.kv.resetPrefix(); dropped != 4 || held != 0 {
		t.Fatalf("after b: dropped %d held %d; want 4, 0", dropped, held)
	}
	c := submitPrompt(s, "c", tokens(50, 70, 1000), 1, now)
	step(t, s, now)
	if c.cachedTokens != 0 || len(s.kv.cached) != 4 {
		t.Fatalf("c cached %d tokens, %d hashes cached; want 0 and c's own 4", c.cachedTokens, len(s.kv.cached))
	}
}
