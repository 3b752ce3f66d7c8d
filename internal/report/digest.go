package report

import (
	"github.com/tokentrace/tokentrace/internal/latency"
)

// digest is a batch of records reduced to rows and gaps without touching
// the collector, so that batches can be reduced in parallel and merged in
// order. Its rows' errKind and phase index its own kinds and phases
// (kind 0 is success, phase 0 is none).
type digest struct {
	rows     []row
	kinds    []string
	phases   []string
	itl, icl []int64
	// itlHist and iclHist hold the same gaps when the batch was built with
	// histograms (large inputs), so a collector past its exact cap merges
	// bucket counts instead of adding values one by one.
	itlHist, iclHist logHist
	hists            bool
	// noExact skips the exact gap lists: the collector has left exact mode.
	noExact bool
	warmup  int

	// Reading state, for Load.
	lines     int   // lines in the batch
	bad       []int // batch-relative numbers of malformed lines
	oldSchema int
	truncated int // bytes of an incomplete last line that was dropped (0: none)
	newer     int // batch-relative line of a record from a newer schema (0: none)
	newerV    int
}

func (d *digest) reset() {
	*d = digest{rows: d.rows[:0], kinds: append(d.kinds[:0], ""), phases: append(d.phases[:0], ""),
		itl: d.itl[:0], icl: d.icl[:0], itlHist: d.itlHist, iclHist: d.iclHist, bad: d.bad[:0]}
	d.itlHist.clear()
	d.iclHist.clear()
}

func (d *digest) index(tab *[]string, s string) int {
	for i, x := range *tab {
		if x == s {
			return i
		}
	}
	*tab = append(*tab, s)
	return len(*tab) - 1
}

// add reduces one record.
func (d *digest) add(r *latency.Record, includeWarmup bool) {
	if r.Warmup && !includeWarmup {
		d.warmup++
		return
	}
	w := row{
		id: r.ID, intended: r.IntendedNS, sent: r.SentNS, wrote: r.WroteNS,
		firstTok: r.FirstTokenNS, end: r.EndNS, connect: r.ConnectNS, gateway: r.GatewayNS,
		input: int32(r.InputTokens), output: int32(r.OutputTokens), cached: int32(r.CachedTokens),
		turn: int32(r.Turn), session: r.Session, nchunks: int32(len(r.ChunkNS)),
	}
	if r.Server != nil {
		w.flags |= flagServer
		w.sq, w.prefill, w.decode = r.Server.QueueNS, r.Server.PrefillNS, r.Server.DecodeNS
	}
	if r.Stream {
		w.flags |= flagStream
	}
	if r.FinishReason == "length" {
		w.flags |= flagTruncated
	}
	switch {
	case !r.OK():
		w.errKind = uint8(min(d.index(&d.kinds, r.ErrorKind), 255))
	case r.EndNS == 0:
		// A success with no end instant cannot be measured: count it as an error.
		w.errKind = uint8(min(d.index(&d.kinds, "no_end"), 255))
	}
	if r.Phase != "" {
		w.phase = uint16(min(d.index(&d.phases, r.Phase), 65535))
	}
	ok := w.ok()
	for i := range r.ChunkNS {
		k := int64(1)
		if i < len(r.ChunkTokens) {
			k = int64(r.ChunkTokens[i])
		}
		if i == 0 {
			if ok {
				for j := int64(1); j < k; j++ { // tokens that came with the first
					d.addITL(0)
				}
			}
			continue
		}
		g := r.ChunkNS[i] - r.ChunkNS[i-1]
		if g > w.stall {
			w.stall, w.stallAt = g, r.ChunkNS[i-1]
		}
		if !ok {
			continue
		}
		if !d.noExact {
			d.icl = append(d.icl, g)
		}
		if d.hists {
			d.iclHist.add(g)
		}
		if k <= 0 {
			continue
		}
		// The same split as latency.Record.ITLs: k gaps of g/k, the
		// remainder spread one nanosecond at a time.
		q, rem := g/k, g%k
		w.itlMax = max(w.itlMax, q+min(rem, 1))
		for j := int64(0); j < k; j++ {
			v := q
			if j < rem {
				v++
			}
			d.addITL(v)
		}
	}
	d.rows = append(d.rows, w)
}

func (d *digest) addITL(v int64) {
	if !d.noExact {
		d.itl = append(d.itl, v)
	}
	if d.hists {
		d.itlHist.add(v)
	}
}
