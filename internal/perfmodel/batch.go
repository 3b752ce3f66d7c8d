package perfmodel

// Seq is one sequence's share of an engine step.
type Seq struct {
	// NewTokens is how many tokens this step computes for the sequence: a
	// prefill chunk's length, 1 for a decode, k+1 for a speculative verify.
	NewTokens int
	// Context is how many of the sequence's tokens are already in the KV
	// cache before this step (prompt tokens computed earlier or reused from
	// the prefix cache, plus tokens generated so far).
	Context int
	// Decode marks a decoding sequence: its NewTokens are its last token
	// plus, in a speculative step (DraftK > 0), the drafts to verify.
	Decode bool
}

// Batch is one engine step: the sequences it computes. The engine reuses one
// Batch across steps, so StepTime must not retain it.
type Batch struct {
	Seqs []Seq
	// DraftK is the speculative draft length for the decoding sequences in
	// this step, 0 when speculative decoding is off. When set, each decoding
	// sequence computes logits for all its NewTokens and the draft model's
	// cost for k proposals per decoding sequence is added.
	DraftK int
}

// Reset empties b for reuse, keeping its storage.
func (b *Batch) Reset() { b.Seqs = b.Seqs[:0]; b.DraftK = 0 }

// Add appends one sequence's prompt work (a prefill or a chunk of one).
func (b *Batch) Add(newTokens, context int) {
	b.Seqs = append(b.Seqs, Seq{NewTokens: newTokens, Context: context})
}

// AddDecode appends one decoding sequence's work: 1 token, or the last
// token plus the drafts to verify in a speculative step.
func (b *Batch) AddDecode(newTokens, context int) {
	b.Seqs = append(b.Seqs, Seq{NewTokens: newTokens, Context: context, Decode: true})
}
