package report

import (
	"maps"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// partKey names a part of the decomposition along the path: a hop and
// one of its stages, a link "a→b" and "network", or no hop and
// "unattributed" (latency.Record.Path).
type partKey struct{ hop, stage string }

// label is the part's name in compare rows and CSV columns: "hop.stage",
// or the stage alone for time no hop claims.
func (k partKey) label() string {
	if k.hop == "" {
		return k.stage
	}
	return k.hop + "." + k.stage
}

// clientKeys are the client's stages, measured for every request: keys
// 0, 1 and 2 of every table, shown whatever their values.
var clientKeys = []partKey{
	{string(latency.HopClient), string(latency.StageClientQueue)},
	{string(latency.HopClient), string(latency.StageConnect)},
	{string(latency.HopClient), string(latency.StageSend)},
}

// stageName is how the report names a hop's stage: tokentrace's own
// vocabulary where the hop reports it under its wire name (the server's
// server_decode is its decode), else the name as it came.
func stageName(hop latency.Hop, name string) string {
	if hop == latency.HopServer && name == string(latency.TimingServerDecode) {
		return string(latency.StageDecode)
	}
	return name
}

// Part classes, in a stored key's top two bits: what the part's value in
// the TTFT split is.
const (
	ttftSame  uint16 = 0 << 14 // the same as in E2E
	ttftZero  uint16 = 1 << 14 // none: the part comes after the first token
	ttftOwn   uint16 = 2 << 14 // its own value, the next in the TTFT list
	keyMask   uint16 = 1<<14 - 1
	classMask        = ^keyMask
	maxKeys          = int(keyMask) // the parts tables hold at most this many keys
)

// partTable is a table of part keys and the parts of rows: each row's
// parts are keys[poff:poff+plen] with E2E values e2e[poff:…], and the
// TTFT values of the parts whose class is ttftOwn in order from
// ttft[toff]. Only the parts with a value are stored.
type partTable struct {
	keys  []partKey
	index map[partKey]uint16
	pk    []uint16
	e2e   []int64
	ttft  []int64
	// scratch is the storage each record's decomposition reuses.
	scratch latency.PathScratch
}

// key returns k's index, adding it; past maxKeys, keys share "other".
func (t *partTable) key(k partKey) uint16 {
	if i, ok := t.index[k]; ok {
		return i
	}
	if t.index == nil {
		t.index = map[partKey]uint16{}
		for _, c := range clientKeys {
			t.index[c] = uint16(len(t.keys))
			t.keys = append(t.keys, c)
		}
		if i, ok := t.index[k]; ok {
			return i
		}
	}
	if len(t.keys) >= maxKeys-1 {
		k = partKey{stage: "other"}
		if i, ok := t.index[k]; ok {
			return i
		}
	}
	i := uint16(len(t.keys))
	t.keys = append(t.keys, k)
	t.index[k] = i
	return i
}

// addPath stores a successful record's parts for w.
func (t *partTable) addPath(w *row, r *latency.Record) {
	p, ttft, ok := t.scratch.PathWithTTFT(r)
	if !ok {
		return
	}
	start, tstart := len(t.pk), len(t.ttft)
	w.poff, w.toff = uint32(start), uint32(tstart)
	type entry struct {
		k         uint16
		e2e, ttft int64
	}
	var buf [24]entry
	ents := buf[:0]
	find := func(k uint16) int {
		for i := range ents {
			if ents[i].k == k {
				return i
			}
		}
		ents = append(ents, entry{k: k})
		return len(ents) - 1
	}
	for _, x := range p.Parts {
		i := find(t.key(partKey{string(x.Hop), stageName(x.Hop, x.Name)}))
		ents[i].e2e += x.NS
	}
	for _, x := range ttft {
		i := find(t.key(partKey{string(x.Hop), stageName(x.Hop, x.Name)}))
		ents[i].ttft += x.NS
	}
	// A link's network after the first token is the stream's tail: the
	// delivery of the rest of the answer beyond what the hops account for.
	for _, x := range p.Parts {
		if x.Name != latency.PartNetwork || !strings.Contains(string(x.Hop), "→") {
			continue
		}
		i := find(t.key(partKey{string(x.Hop), latency.PartNetwork}))
		tail := ents[i].e2e - ents[i].ttft
		if tail == 0 {
			continue
		}
		ents[i].e2e = ents[i].ttft
		j := find(t.key(partKey{string(x.Hop), string(latency.StageStreamTail)}))
		ents[j].e2e += tail
	}
	for _, e := range ents {
		if e.e2e == 0 && e.ttft == 0 {
			continue
		}
		cls := ttftOwn
		switch e.ttft {
		case e.e2e:
			cls = ttftSame
		case 0:
			cls = ttftZero
		default:
			t.ttft = append(t.ttft, e.ttft)
		}
		t.pk = append(t.pk, e.k|cls)
		t.e2e = append(t.e2e, e.e2e)
	}
	w.plen = uint8(min(len(t.pk)-start, 255))
}

// parts calls f with each part of row w: its key, E2E and TTFT values.
func (t *partTable) parts(w *row, f func(k uint16, e2e, ttft int64)) {
	to := w.toff
	for i := w.poff; i < w.poff+uint32(w.plen); i++ {
		c, e := t.pk[i], t.e2e[i]
		var v int64
		switch c & classMask {
		case ttftSame:
			v = e
		case ttftOwn:
			v = t.ttft[to]
			to++
		}
		f(c&keyMask, e, v)
	}
}

// reset empties the table, keeping its storage.
func (t *partTable) reset() {
	*t = partTable{keys: t.keys[:0], pk: t.pk[:0], e2e: t.e2e[:0], ttft: t.ttft[:0], scratch: t.scratch}
}

// pathParts are the collector's parts: the table, and for each key its
// place in path order and whether any request had it in E2E or TTFT.
type pathParts struct {
	partTable
	order      []uint16 // keys in path order
	ordered    []bool
	seenE2E    []bool
	seenTTFT   []bool
	remap      []uint16 // scratch: a digest's keys → the collector's
	anyOrdered bool
	// q, when set, re-attributes the requests whose server reports no
	// queue wait (analysis.inferQueue).
	q *queueParts
}

// queueParts are the keys inferQueue moves a request's gap between: the
// link into the server (its network before the first token) becomes the
// server's queue wait and, for what every request pays, unattributed.
type queueParts struct {
	link          map[uint16]bool
	queue, unattr uint16
}

// parts is partTable.parts with the inferred queue wait of flagged rows:
// the link into the server's value becomes the row's queue wait (row.sq)
// and the rest of it unattributed — never network.
func (pp *pathParts) parts(w *row, f func(k uint16, e2e, ttft int64)) {
	q := pp.q
	if q == nil || w.flags&flagQueueInferred == 0 {
		pp.partTable.parts(w, f)
		return
	}
	pp.partTable.parts(w, func(k uint16, e2e, ttft int64) {
		if !q.link[k] {
			f(k, e2e, ttft)
			return
		}
		sq := min(w.sq, e2e)
		f(q.queue, sq, min(sq, ttft))
		f(q.unattr, e2e-sq, ttft-min(sq, ttft))
	})
}

// inferredKeys sets up q: the server's queue and unattributed keys (added
// to the table, in path order, before the server's prefill), and the
// links into the server.
func (pp *pathParts) inferredKeys() {
	// The analysis's copy shares its tables with the collector, which goes
	// on adding: clone what this changes.
	pp.index = maps.Clone(pp.index)
	pp.keys, pp.order = slices.Clone(pp.keys), slices.Clone(pp.order)
	pp.ordered, pp.seenE2E, pp.seenTTFT = slices.Clone(pp.ordered), slices.Clone(pp.seenE2E), slices.Clone(pp.seenTTFT)
	q := &queueParts{link: map[uint16]bool{}}
	for i, k := range pp.keys {
		if k.stage == latency.PartNetwork && strings.HasSuffix(k.hop, "→"+string(latency.HopServer)) {
			q.link[uint16(i)] = true
		}
	}
	add := func(k partKey) uint16 {
		i := pp.key(k)
		for len(pp.ordered) < len(pp.keys) {
			pp.ordered = append(pp.ordered, false)
			pp.seenE2E = append(pp.seenE2E, false)
			pp.seenTTFT = append(pp.seenTTFT, false)
		}
		pp.seenE2E[i], pp.seenTTFT[i] = true, true
		return i
	}
	q.unattr = add(partKey{stage: latency.PartUnattributed})
	q.queue = add(partKey{string(latency.HopServer), string(latency.TimingServerQueue)})
	for _, k := range []uint16{q.unattr, q.queue} {
		if pp.ordered[k] {
			continue
		}
		at := len(pp.order)
		for j, o := range pp.order {
			if q.link[o] {
				at = j + 1
			}
		}
		pp.order = slices.Insert(pp.order, at, k)
		pp.ordered[k] = true
	}
	pp.q = q
}

// absorb appends a digest's parts, setting the offsets of its rows (in
// place, before they are copied) to the collector's.
func (pp *pathParts) absorb(d *partTable, rows []row) {
	pp.remap = pp.remap[:0]
	for _, k := range d.keys {
		pp.remap = append(pp.remap, pp.key(k))
	}
	for len(pp.ordered) < len(pp.keys) {
		pp.ordered = append(pp.ordered, false)
		pp.seenE2E = append(pp.seenE2E, false)
		pp.seenTTFT = append(pp.seenTTFT, false)
	}
	base, tbase := uint32(len(pp.pk)), uint32(len(pp.ttft))
	for i, c := range d.pk {
		k := pp.remap[c&keyMask]
		pp.pk = append(pp.pk, k|c&classMask)
		if d.e2e[i] != 0 {
			pp.seenE2E[k] = true
		}
		if c&classMask != ttftZero {
			pp.seenTTFT[k] = true
		}
	}
	pp.e2e = append(pp.e2e, d.e2e...)
	pp.ttft = append(pp.ttft, d.ttft...)
	for i := range rows {
		w := &rows[i]
		if w.plen == 0 {
			continue
		}
		w.poff += base
		w.toff += tbase
		pp.order1(w)
	}
}

// order1 places the keys of a row not yet in the path order after the
// part that precedes them in the row.
func (pp *pathParts) order1(w *row) {
	if !pp.anyOrdered {
		for i := range clientKeys {
			pp.order = append(pp.order, uint16(i))
			pp.ordered[i] = true
		}
		pp.anyOrdered = true
	}
	fresh := false
	for i := w.poff; i < w.poff+uint32(w.plen); i++ {
		if !pp.ordered[pp.pk[i]&keyMask] {
			fresh = true
			break
		}
	}
	if !fresh {
		return
	}
	prev := -1 // place in order of the row's previous part
	for i := w.poff; i < w.poff+uint32(w.plen); i++ {
		k := pp.pk[i] & keyMask
		if pp.ordered[k] {
			for j, o := range pp.order {
				if o == k {
					prev = j
				}
			}
			continue
		}
		pp.order = append(pp.order, 0)
		copy(pp.order[prev+2:], pp.order[prev+1:])
		pp.order[prev+1] = k
		pp.ordered[k] = true
		prev++
	}
}

// shown are the keys the decomposition shows in E2E, in path order: the
// client's, and those some successful request has.
func (pp *pathParts) shown() []uint16 {
	var out []uint16
	for _, k := range pp.order {
		if int(k) < len(clientKeys) || pp.seenE2E[k] {
			out = append(out, k)
		}
	}
	return out
}

// partSamples are the sorted E2E values of each part of the path the run
// has (the client's always), over its successful requests (0 for one
// without it), by label ("app.retrieval", "client→server.network"), and
// the labels in path order.
type partSamples struct {
	labels  []string
	byLabel map[string][]int64
}

func (a *analysis) partSamples() partSamples {
	out := partSamples{byLabel: map[string][]int64{}}
	if len(a.ok) == 0 {
		return out
	}
	vals := make([][]int64, len(a.paths.keys))
	for _, k := range a.paths.shown() {
		vals[k] = make([]int64, len(a.ok))
	}
	for j, i := range a.ok {
		a.paths.parts(&a.rows[i], func(k uint16, e2e, _ int64) {
			if vals[k] != nil {
				vals[k][j] = e2e
			}
		})
	}
	for _, k := range a.paths.order {
		if vals[k] == nil {
			continue
		}
		slices.Sort(vals[k])
		l := a.paths.keys[k].label()
		out.labels = append(out.labels, l)
		out.byLabel[l] = vals[k]
	}
	return out
}

// unionLabels is a's labels, then those only b has, each after the label
// that precedes it in b.
func unionLabels(a, b partSamples) []string {
	out := slices.Clone(a.labels)
	prev := -1
	for _, l := range b.labels {
		if i := slices.Index(out, l); i >= 0 {
			prev = i
			continue
		}
		out = slices.Insert(out, prev+1, l)
		prev++
	}
	return out
}

// inputSample is the successful requests' prompt lengths, sorted.
func (a *analysis) inputSample() []int64 {
	s := make([]int64, 0, len(a.ok))
	for _, i := range a.ok {
		s = append(s, int64(a.rows[i].input))
	}
	slices.Sort(s)
	return s
}
