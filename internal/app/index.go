package app

import (
	"cmp"
	_ "embed"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"unicode"
)

// The bundled corpus: short passages about LLM serving, one per paragraph.
//
//go:embed corpus/passages.txt
var corpusText string

// Passage is one retrievable text.
type Passage struct {
	ID   int
	Text string
	vec  []float32
	// terms are its distinct content words, for reranking.
	terms map[string]bool
}

// embedDim is the dimension of the hashed bag-of-words vectors.
const embedDim = 512

// stopWords are left out of embeddings and term sets.
var stopWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an and are as at be by for from has in is it its of on or that the
		this to was were which with so than then each when what how can one per more less into their there
		they these those not no but also only such often after before while about over under most`) {
		stopWords[w] = true
	}
}

// words splits text into lower-cased words of letters and digits, without
// stop words.
func words(text string) []string {
	f := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-' })
	out := f[:0]
	for _, w := range f {
		w = strings.Trim(w, "-")
		if w != "" && !stopWords[w] {
			out = append(out, w)
		}
	}
	return out
}

// embed is a hashed bag-of-words vector: each word adds ±1 at the index its
// FNV-1a hash picks (the sign from another bit of the hash), counts are
// damped as 1 + ln(count), and the vector is normalised to length 1, so
// the dot product of two vectors is their cosine similarity. Deterministic
// and fast; similar texts share words and so point the same way.
func embed(text string) []float32 {
	counts := map[string]int{}
	for _, w := range words(text) {
		counts[w]++
	}
	v := make([]float32, embedDim)
	for w, c := range counts {
		h := fnv.New64a()
		h.Write([]byte(w))
		x := h.Sum64()
		s := float32(1)
		if x>>63 == 1 {
			s = -1
		}
		v[x%embedDim] += s * float32(1+math.Log(float64(c)))
	}
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n > 0 {
		inv := float32(1 / math.Sqrt(n))
		for i := range v {
			v[i] *= inv
		}
	}
	return v
}

func dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// Index is an in-memory vector index split into shards, one per retrieval
// source: passage i belongs to shard i mod shards.
type Index struct {
	shards [][]*Passage
}

// NewIndex embeds the passages (paragraphs of text) into shards.
func NewIndex(text string, shards int) *Index {
	var ps []*Passage
	for _, para := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		para = strings.Join(strings.Fields(para), " ")
		if para == "" {
			continue
		}
		p := &Passage{ID: len(ps), Text: para, vec: embed(para), terms: map[string]bool{}}
		for _, w := range words(para) {
			p.terms[w] = true
		}
		ps = append(ps, p)
	}
	ix := &Index{shards: make([][]*Passage, shards)}
	for i, p := range ps {
		ix.shards[i%shards] = append(ix.shards[i%shards], p)
	}
	return ix
}

// Shards is the number of shards.
func (ix *Index) Shards() int { return len(ix.shards) }

// Len is the number of passages.
func (ix *Index) Len() int {
	n := 0
	for _, s := range ix.shards {
		n += len(s)
	}
	return n
}

// Hit is a passage found by a search, with its score.
type Hit struct {
	P     *Passage
	Score float32
}

// Search returns shard's n passages most similar to the query vector, best
// first (exact search: every passage of the shard is scored; ties by id).
func (ix *Index) Search(shard int, q []float32, n int) []Hit {
	ps := ix.shards[shard]
	hits := make([]Hit, len(ps))
	for i, p := range ps {
		hits[i] = Hit{p, dot(q, p.vec)}
	}
	sortHits(hits)
	return hits[:min(n, len(hits))]
}

func sortHits(h []Hit) {
	slices.SortFunc(h, func(a, b Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.P.ID, b.P.ID)
	})
}

// Rerank scores each candidate again — its cosine similarity plus the share
// of the query's distinct words it contains — and returns the k best,
// without duplicates, best first.
func Rerank(query string, cands []Hit, k int) []Hit {
	qt := map[string]bool{}
	for _, w := range words(query) {
		qt[w] = true
	}
	seen := map[int]bool{}
	var out []Hit
	for _, c := range cands {
		if seen[c.P.ID] {
			continue
		}
		seen[c.P.ID] = true
		var shared int
		for w := range qt {
			if c.P.terms[w] {
				shared++
			}
		}
		s := c.Score
		if len(qt) > 0 {
			s += float32(shared) / float32(len(qt))
		}
		out = append(out, Hit{c.P, s})
	}
	sortHits(out)
	return out[:min(k, len(out))]
}
