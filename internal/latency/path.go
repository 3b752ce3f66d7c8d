package latency

import (
	"fmt"
	"time"
)

// Names of the parts of a path that no hop reports as its own stage.
const (
	// PartNetwork is the time between two hops that neither claims, where
	// the outer one measured it as waiting on the inner one: transit both
	// ways and the inner one's HTTP server before and after its handler.
	PartNetwork = "network"
	// PartUnattributed is time no hop accounts for: inside a hop's total
	// but outside its stages, between hops where the outer one did not say
	// it was waiting, or the whole of a server's time when it gave no split.
	PartUnattributed = "unattributed"
)

// PathTolerance is how much more time a hop may claim than the client
// measured around it before its report is set aside: milliseconds rounded
// to three decimals and the instants two processes read a little apart
// stay within it.
const PathTolerance = time.Millisecond

// PathPart is one leaf of a request's decomposition along its path.
type PathPart struct {
	// Hop claims the part: a hop, a link "a→b" (Link) for the time between
	// two hops, or "" for time no hop claims at all.
	Hop Hop `json:"hop"`
	// Name is the hop's stage, or PartNetwork / PartUnattributed.
	Name string `json:"name"`
	NS   int64  `json:"ns"`
}

// Path is a successful request's E2E from the intended send split into
// non-overlapping parts along its path (docs/metrics.md, "Decomposition
// along the path"). The parts sum exactly to EndNS − IntendedNS.
type Path struct {
	Parts []PathPart `json:"parts"`
	// Hops are the hops whose stages are used, in path order (the client
	// first); a hop whose report was set aside is not among them.
	Hops []Hop `json:"hops"`
	// HiddenNS is hops' time left out because nobody waited for it: an
	// inner hop's work while the hop around it did its own (a streaming
	// guardrail checking one token while the server generates the next),
	// or a hop's last stages after its client had the answer.
	HiddenNS int64 `json:"hidden_ns,omitempty"`
	// Notes say which hop's report was set aside and why.
	Notes []string `json:"notes,omitempty"`
}

// Link names the connection between hops a and b: "a→b".
func Link(a, b Hop) Hop { return a + "→" + b }

// Sum is the total of the parts.
func (p *Path) Sum() int64 {
	var s int64
	for _, x := range p.Parts {
		s += x.NS
	}
	return s
}

// Path decomposes a successful request's E2E from the intended send along
// its path: the client's queue, connect and send, then each hop's stages
// nested by their roles (RoleOf), the network between hops, and whatever
// no hop accounts for as unattributed. ok is false for a failed request.
//
// A version 1 record (no Timing) is read through its Server split and
// GatewayNS: a gateway's own time, then the server's queue, prefill and
// decode.
func (r *Record) Path() (p Path, ok bool) {
	if !r.OK() || r.EndNS == 0 {
		return Path{}, false
	}
	r.walkPath(&pathWalker{p: &p, s: &PathScratch{}})
	return p, true
}

// walkPath decomposes a successful request's E2E into w.
func (r *Record) walkPath(w *pathWalker) {
	wrote := r.WroteNS
	if wrote == 0 {
		wrote = r.SentNS + r.ConnectNS
	}
	w.p.Hops = append(w.p.Hops, HopClient)
	w.add(HopClient, string(StageClientQueue), r.SentNS-r.IntendedNS, beforeFirst)
	w.add(HopClient, string(StageConnect), r.ConnectNS, beforeFirst)
	w.add(HopClient, string(StageSend), wrote-r.SentNS-r.ConnectNS, beforeFirst)
	// A hop's handler starts once the request's headers are read, so it
	// may claim up to end − sent.
	stages := r.Timing
	if len(stages) == 0 {
		w.s.v1 = r.reportedStages(w.s.v1[:0])
		stages = w.s.v1
	}
	w.walk(w.s.groupHops(stages), HopClient, r.EndNS-wrote, r.EndNS-r.SentNS, availWait, nil)
}

// reportedStages appends a version 1 record's split (no Timing) to s as
// stages.
func (r *Record) reportedStages(s []HopStage) []HopStage {
	if r.GatewayNS > 0 {
		s = append(s, HopStage{HopGateway, string(StageGateway), r.GatewayNS})
	}
	if sp := r.Server; sp != nil {
		// A stage the server does not report (llama.cpp's and Ollama's
		// queue wait) is left out, not given as 0: the time is then
		// unattributed rather than the network's.
		for _, st := range [...]struct {
			split, name string
			ns          int64
		}{{SplitQueue, string(TimingServerQueue), sp.QueueNS}, {SplitPrefill, string(TimingPrefill), sp.PrefillNS},
			{SplitDecode, string(TimingServerDecode), sp.DecodeNS}} {
			if sp.Reports(st.split) {
				s = append(s, HopStage{HopServer, st.name, st.ns})
			}
		}
	}
	return s
}

// hopReport is one hop's stages by role.
type hopReport struct {
	hop             Hop
	items           []pathItem // own and upstream stages, in order
	own, up, total  int64
	hasUp, hasTotal bool
}

type pathItem struct {
	name string
	ns   int64
	up   bool
}

// groupHops groups stages by hop, hops in order of first appearance. The
// hops and their items reuse the scratch's storage.
func (sc *PathScratch) groupHops(stages []HopStage) []hopReport {
	hops := sc.hops[:0]
	for _, s := range stages {
		i := 0
		for i < len(hops) && hops[i].hop != s.Hop {
			i++
		}
		if i == len(hops) {
			if i < cap(hops) { // reuse the slot and its items' storage
				hops = hops[:i+1]
				hops[i] = hopReport{hop: s.Hop, items: hops[i].items[:0]}
			} else {
				hops = append(hops, hopReport{hop: s.Hop})
			}
		}
		h := &hops[i]
		switch RoleOf(s.Hop, s.Name) {
		case RoleOwn:
			h.items = append(h.items, pathItem{name: s.Name, ns: s.NS})
			h.own += s.NS
		case RoleUpstream:
			h.items = append(h.items, pathItem{name: s.Name, ns: s.NS, up: true})
			h.up += s.NS
			h.hasUp = true
		case RoleTotal:
			h.total, h.hasTotal = s.NS, true
		}
	}
	sc.hops = hops
	return hops
}

// claim is the hop's whole time: its total, or the sum of its stages.
func (h *hopReport) claim() int64 {
	if h.hasTotal {
		return h.total
	}
	return h.own + h.up
}

// pathWalker builds a Path; when is set, it also records when each part
// lies against the first token (parallel to Parts).
type pathWalker struct {
	p    *Path
	when *[]partWhen
	s    *PathScratch
}

// PathScratch is storage that PathWithTTFT reuses from one record to the
// next, so that decomposing many records allocates nothing per record in
// steady state. The zero value is ready to use. What its PathWithTTFT
// returns is valid until its next call; it is not safe for concurrent use.
type PathScratch struct {
	path  Path
	when  []partWhen
	v1    []HopStage
	hops  []hopReport
	arena []pathItem // copies of hops' items for one record
	vals  []int64
	out   []PathPart
	links map[[2]Hop]Hop
}

// link is Link(a, b), made once per pair.
func (sc *PathScratch) link(a, b Hop) Hop {
	k := [2]Hop{a, b}
	if l, ok := sc.links[k]; ok {
		return l
	}
	if sc.links == nil || len(sc.links) >= 64 {
		sc.links = make(map[[2]Hop]Hop, 8)
	}
	l := Link(a, b)
	sc.links[k] = l
	return l
}

func (w *pathWalker) add(hop Hop, name string, ns int64, when partWhen) {
	w.p.Parts = append(w.p.Parts, PathPart{Hop: hop, Name: name, NS: ns})
	if w.when != nil {
		*w.when = append(*w.when, when)
	}
}

func (w *pathWalker) note(format string, args ...any) {
	if len(w.p.Notes) < MaxTimingNotes {
		w.p.Notes = append(w.p.Notes, fmt.Sprintf(format, args...))
	}
}

// trailing is the sum of the hop's own stages after its last upstream
// stage: its work once the next hop had answered (checks, writing the end
// of the answer), some of which may come after its client had the answer.
func (h *hopReport) trailing() int64 {
	var t int64
	for i := len(h.items) - 1; i >= 0 && !h.items[i].up; i-- {
		t += h.items[i].ns
	}
	if t == h.own { // no upstream stage
		return 0
	}
	return t
}

// usable returns hops from the first whose report can be used, noting
// each one set aside: one claiming more than limit (at the client's
// level, more than limit and its trailing stages: a hop's last write ends
// after the client has read it), or whose stages sum to more than its
// total.
func (w *pathWalker) usable(hops []hopReport, limit int64, kind availKind) []hopReport {
	for len(hops) > 0 {
		h := &hops[0]
		allowed := limit
		if kind == availWait {
			allowed += h.trailing()
		}
		switch {
		case h.hasTotal && h.own+h.up > h.total+int64(PathTolerance):
			w.note("%s: its stages sum to %s ms, more than its total of %s ms; set aside", h.hop, fmtMS(h.own+h.up), fmtMS(h.total))
		case h.claim() > allowed+int64(PathTolerance):
			w.note("%s claims %s ms, more than the %s ms it can have taken; set aside", h.hop, fmtMS(h.claim()), fmtMS(limit))
		default:
			return hops
		}
		hops = hops[1:]
	}
	return nil
}

// What the time handed to the hops inside a hop is.
type availKind int

const (
	// availWait: the client's wait for the answer; the time between it and
	// the first hop is network, and a hop claiming a little more (clocks,
	// rounding) makes it negative.
	availWait availKind = iota
	// availUpstream: a hop's upstream stages, its measured wait on the
	// next hop; the time between is network, and what the next hop claims
	// beyond it ran while this hop did its own work (hidden).
	availUpstream
	// availRest: what is left of a hop's total beyond its stages, not
	// said to be waiting; the time between is unattributed.
	availRest
)

// walk decomposes avail, the time outer gave the hops inside it, into
// those hops' parts. limit bounds what a hop may claim. With no usable
// hop, avail is leaves (outer's upstream stages) or, without them,
// unattributed.
func (w *pathWalker) walk(hops []hopReport, outer Hop, avail, limit int64, kind availKind, leaves []pathItem) {
	hops = w.usable(hops, limit, kind)
	if len(hops) == 0 {
		if leaves == nil {
			if avail != 0 {
				w.add("", PartUnattributed, avail, spansFirst)
			}
			return
		}
		for _, l := range leaves {
			w.add(outer, l.name, l.ns, leafWhen(outer, l.name))
		}
		return
	}
	h := &hops[0]
	w.p.Hops = append(w.p.Hops, h.hop)
	inner := hops[1:]
	if !h.hasUp && !h.hasTotal && len(inner) > 0 {
		// The hop says only what it did itself: the rest of avail is the
		// inner hops' and the links'.
		for _, it := range h.items {
			w.add(h.hop, it.name, it.ns, beforeFirst)
		}
		w.walk(inner, h.hop, avail-h.own, limit-h.own, kind, nil)
		return
	}
	T := h.claim()
	// The hop's items, copied into the record's arena (cut below); the
	// copy stays valid whatever is added after it.
	n := len(w.s.arena)
	w.s.arena = append(w.s.arena, h.items...)
	if h.hasTotal {
		// Time inside the total that no stage covers: the hop's own
		// unattributed time, or (no upstream stage) the inner hops'.
		w.s.arena = append(w.s.arena, pathItem{name: PartUnattributed, ns: T - h.own - h.up, up: !h.hasUp && len(inner) > 0})
	}
	items := w.s.arena[n:len(w.s.arena):len(w.s.arena)]
	shown := T // what the hop's parts add up to once cut
	switch {
	case kind == availUpstream && 0 <= avail && avail < T:
		// Pipelined: the hop went on working while outer did its own
		// work; what did not keep outer waiting is cut from its last
		// stages.
		shown = avail
	case kind == availWait && T > limit:
		// The hop's last stages went on after the client had the answer
		// (its final write returns after the bytes left): that part is cut
		// from them.
		shown = limit
	}
	if shown < T {
		cutFromEnd(items, T-shown)
		w.p.HiddenNS += T - shown
	}
	if gap := avail - shown; gap != 0 {
		switch {
		case kind == availRest:
			w.add(w.s.link(outer, h.hop), PartUnattributed, gap, spansFirst)
		case !h.whole():
			// The hop gave only some of its stages: the rest of its time
			// is in the gap with the network's, and no one can say how
			// much of it is either.
			w.add("", PartUnattributed, gap, spansFirst)
		default:
			w.add(w.s.link(outer, h.hop), PartNetwork, gap, spansFirst)
		}
	}
	w.emit(h, items, inner, T)
}

// emit adds a hop's items in order, the upstream ones at the first's
// place as one slot holding the inner hops.
func (w *pathWalker) emit(h *hopReport, items []pathItem, inner []hopReport, T int64) {
	slotDone := false
	for _, it := range items {
		if !it.up {
			if it.name != PartUnattributed || it.ns != 0 {
				w.add(h.hop, it.name, it.ns, itemWhen(h, it.name, slotDone))
			}
			continue
		}
		if slotDone {
			continue
		}
		slotDone = true
		var slot int64
		n := len(w.s.arena)
		for _, m := range items {
			if m.up {
				slot += m.ns
				w.s.arena = append(w.s.arena, m)
			}
		}
		members := w.s.arena[n:len(w.s.arena):len(w.s.arena)]
		kind := availRest
		if h.hasUp {
			kind = availUpstream
		}
		w.walk(inner, h.hop, slot, T, kind, members)
	}
}

// cutFromEnd takes excess from the items' positive lengths, last first.
func cutFromEnd(items []pathItem, excess int64) {
	for k := len(items) - 1; k >= 0 && excess > 0; k-- {
		if items[k].ns <= 0 {
			continue
		}
		c := min(excess, items[k].ns)
		items[k].ns -= c
		excess -= c
	}
}
