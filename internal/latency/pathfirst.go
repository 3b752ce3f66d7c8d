package latency

import (
	"math"
	"slices"
)

// partWhen says where a part of a path lies against the first token.
type partWhen uint8

const (
	// beforeFirst: work done before the first token could exist (the
	// client's send, a hop's stages before it called the next hop, the
	// server's queue and prefill).
	beforeFirst partWhen = iota
	// afterFirst: work on the answer once it had begun (decode, a hop's
	// stages after its wait on the next hop, post-processing).
	afterFirst
	// spansFirst: time that lies on both sides and that no hop splits —
	// the network between hops both ways, what no hop accounts for.
	spansFirst
)

// afterFirstNames are the stages any hop names for work on an answer
// already begun.
var afterFirstNames = map[string]bool{
	string(TimingServerDecode): true, string(TimingDecode): true, string(StageStreamTail): true,
	string(TimingPostProcess): true, string(TimingBackpressure): true,
}

// leafWhen places a stage of a hop that has no upstream slot (the
// innermost hop, or a hop whose upstream stages stand as leaves): the
// gateway's upstream_ttft is its wait for the first token; any other
// upstream wait spans it; the names of work on a begun answer come after.
func leafWhen(hop Hop, name string) partWhen {
	switch {
	case hop == HopGateway && name == string(TimingUpstreamTTFT):
		return beforeFirst
	case afterFirstNames[name]:
		return afterFirst
	case RoleOf(hop, name) == RoleUpstream:
		return spansFirst
	}
	return beforeFirst
}

// itemWhen places a hop's own stage: before its wait on the next hop, or
// after it; a hop without such a wait as a leaf; its unattributed time
// spans the first token.
func itemWhen(h *hopReport, name string, afterSlot bool) partWhen {
	switch {
	case name == PartUnattributed:
		return spansFirst
	case !h.hasUp:
		return leafWhen(h.hop, name)
	case afterSlot:
		return afterFirst
	}
	return beforeFirst
}

// whole says whether a hop's report covers its whole time, so that what
// lies between it and the hop outside is the network: it gave its total,
// its wait on the next hop, or (the inference server) its prefill or
// decode. A hop that gave only some stages of its own (a third-party
// server naming its retrieval) leaves the rest of its time in that gap.
func (h *hopReport) whole() bool {
	if h.hasTotal || h.hasUp {
		return true
	}
	for _, it := range h.items {
		switch TimingName(it.name) {
		case TimingPrefill, TimingServerDecode:
			return true
		}
	}
	return false
}

// PathWithTTFT is Path and the split of TTFT from the intended send
// (first − intended, first being the first token or, for an answer that
// came whole, the end) along the same path: the parts before the first
// token as they are, the parts after it left out, and the rest of TTFT
// spread over the parts that lie on both sides — the network between
// hops and unattributed time — in proportion to their E2E values, none
// beyond its own, the rest unattributed (docs/metrics.md, "TTFT along the
// path"). Where the parts before the
// first token claim more than TTFT, the excess is cut from the last of
// the hops' (never the client's) parts. The TTFT parts sum exactly to
// first − intended; a part whose TTFT value is 0 is left out.
func (r *Record) PathWithTTFT() (p Path, ttft []PathPart, ok bool) {
	var s PathScratch
	return s.PathWithTTFT(r)
}

// PathWithTTFT is r.PathWithTTFT in the scratch's storage: the Path's
// slices and ttft are overwritten by the next call.
func (sc *PathScratch) PathWithTTFT(r *Record) (p Path, ttft []PathPart, ok bool) {
	if !r.OK() || r.EndNS == 0 {
		return Path{}, nil, false
	}
	if sc.path.Parts == nil {
		// Room for a whole chain's parts: one allocation each, not a growth.
		sc.path.Parts, sc.path.Hops, sc.when = make([]PathPart, 0, 24), make([]Hop, 0, 4), make([]partWhen, 0, 24)
	}
	sc.path = Path{Parts: sc.path.Parts[:0], Hops: sc.path.Hops[:0], Notes: sc.path.Notes[:0]}
	sc.when, sc.arena = sc.when[:0], sc.arena[:0]
	r.walkPath(&pathWalker{p: &sc.path, when: &sc.when, s: sc})
	first := r.FirstTokenNS
	if first == 0 {
		first = r.EndNS
	}
	return sc.path, sc.untilFirst(sc.path.Parts, sc.when, first-r.IntendedNS), true
}

// Path is r.Path in the scratch's storage: the Path's slices are
// overwritten by the next call.
func (sc *PathScratch) Path(r *Record) (p Path, ok bool) {
	if !r.OK() || r.EndNS == 0 {
		return Path{}, false
	}
	if sc.path.Parts == nil {
		sc.path.Parts, sc.path.Hops = make([]PathPart, 0, 24), make([]Hop, 0, 4)
	}
	sc.path = Path{Parts: sc.path.Parts[:0], Hops: sc.path.Hops[:0], Notes: sc.path.Notes[:0]}
	sc.arena = sc.arena[:0]
	r.walkPath(&pathWalker{p: &sc.path, s: sc})
	return sc.path, true
}

// untilFirst splits total (TTFT from the intended send) over the parts
// (see PathWithTTFT).
func (sc *PathScratch) untilFirst(parts []PathPart, when []partWhen, total int64) []PathPart {
	vals := slices.Grow(sc.vals[:0], len(parts))[:len(parts)]
	clear(vals)
	sc.vals = vals
	var pre int64
	for i, x := range parts {
		if when[i] == beforeFirst {
			vals[i] = x.NS
			pre += x.NS
		}
	}
	// Parts said to come before the first token cannot add up to more
	// than it: the excess is the hops' stages that ran on after it.
	for i := len(parts) - 1; i >= 0 && pre > total; i-- {
		if when[i] != beforeFirst || parts[i].Hop == HopClient || vals[i] <= 0 {
			continue
		}
		c := min(pre-total, vals[i])
		vals[i] -= c
		pre -= c
	}
	rest := total - pre
	var flex float64
	last := -1
	for i, x := range parts {
		if when[i] == spansFirst && x.NS > 0 {
			flex += float64(x.NS)
			last = i
		}
	}
	// A part on both sides takes no more of TTFT than its whole length:
	// what is left beyond them (the hops' work on the first piece of the
	// answer, which their stages count after it) is unattributed.
	spread, over := rest, int64(0)
	if float64(rest) > flex {
		spread, over = int64(flex), rest-int64(flex)
	}
	out := slices.Grow(sc.out[:0], len(parts)+1)
	var given int64
	for i, x := range parts {
		v := vals[i]
		if when[i] == spansFirst && x.NS > 0 {
			if i == last {
				v = spread - given
			} else {
				v = int64(math.Round(float64(spread) * float64(x.NS) / flex))
				given += v
			}
		}
		if v != 0 {
			out = append(out, PathPart{Hop: x.Hop, Name: x.Name, NS: v})
		}
	}
	if last < 0 {
		over = rest
	}
	if over != 0 {
		i := slices.IndexFunc(out, func(x PathPart) bool { return x.Hop == "" && x.Name == PartUnattributed })
		if i < 0 {
			out = append(out, PathPart{Hop: "", Name: PartUnattributed})
			i = len(out) - 1
		}
		out[i].NS += over
	}
	sc.out = out
	return out
}
