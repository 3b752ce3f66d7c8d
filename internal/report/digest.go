package report

import (
	"math"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/window"
)

// digest is a batch of records reduced to rows and gaps without touching
// the collector, so that batches can be reduced in parallel and merged in
// order. Its rows' errKind and phase index its own kinds and phases
// (kind 0 is success, phase 0 is none).
type digest struct {
	rows     []row
	ids      []byte    // the rows' IDs (row.idOff)
	steps    []stepRow // requests of sessions (Record.Turn > 0)
	kinds    []string
	phases   []string
	itl, icl []int64
	// itlHist and iclHist hold the same gaps when the batch was built with
	// histograms (large inputs), so a collector past its exact cap merges
	// bucket counts instead of adding values one by one.
	itlHist, iclHist stats.Histogram
	// bothHist holds the gaps of the records whose every chunk is one
	// token, counted once for both (mergeBoth).
	bothHist stats.Histogram
	hists    bool
	// noExact skips the exact gap lists: the collector has left exact mode.
	noExact bool
	scratch []int64 // the record's gaps when noExact
	// gapsOf is the record whose inter-token gaps are itl[gapsAt:] (the
	// last one added, when it had them), for Collector.LastITLs.
	gapsOf *latency.Record
	gapsAt int
	warmup int
	paths  partTable // the rows' parts along their paths
	// evidence counts the successful records' server splits by their
	// evidence (Collector.evidence).
	evidence map[string]int
	compat   compatBatch // the compatibility views' values
	errs     errTally    // the failed records' messages
	// series is the batch's time windows; shift moves its records onto
	// the collector's clock (a shard's), through shifted and chunks.
	series  *window.Series
	shift   int64
	shifted latency.Record
	chunks  []int64

	// Reading state, for Load.
	lines     int    // lines in the batch
	bad       []int  // batch-relative numbers of malformed lines
	badWhy    string // why the first of them could not be read
	oldSchema int
	truncated int // bytes of an incomplete last line that was dropped (0: none)
	newer     int // batch-relative line of a record from a newer schema (0: none)
	newerV    int
}

func (d *digest) reset() {
	*d = digest{rows: d.rows[:0], ids: d.ids[:0], steps: d.steps[:0], kinds: append(d.kinds[:0], ""), phases: append(d.phases[:0], ""),
		itl: d.itl[:0], icl: d.icl[:0], scratch: d.scratch, itlHist: d.itlHist, iclHist: d.iclHist, bothHist: d.bothHist, bad: d.bad[:0], paths: d.paths,
		evidence: d.evidence, compat: d.compat, errs: d.errs, chunks: d.chunks, series: d.series}
	d.compat.reset()
	d.errs.reset()
	d.paths.reset()
	clear(d.evidence)
	d.itlHist.Reset()
	d.iclHist.Reset()
	d.bothHist.Reset()
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
	d.compat.add(r) // it leaves warm-up requests out, whatever includeWarmup says
	d.addWindow(r)  // so does the series
	if r.Warmup && !includeWarmup {
		d.warmup++
		return
	}
	w := row{
		idOff: uint32(min(len(d.ids), math.MaxUint32)), idLen: uint32(min(len(r.ID), math.MaxUint32)), intended: r.IntendedNS, sent: r.SentNS, wrote: r.WroteNS,
		firstTok: r.FirstTokenNS, end: r.EndNS, connect: r.ConnectNS, gateway: r.GatewayNS,
		input: int32(r.InputTokens), output: int32(r.OutputTokens), cached: int32(r.CachedTokens),
		turn: int32(r.Turn), session: r.Session, nchunks: int32(len(r.ChunkNS)), shared: int32(r.SharedPrefixTokens),
		reasoning: int32(r.ReasoningTokens), firstReason: r.FirstReasonNS,
	}
	if r.Server != nil {
		w.flags |= flagServer
		w.sq, w.prefill, w.decode, w.load = r.Server.QueueNS, r.Server.PrefillNS, r.Server.DecodeNS, r.Server.LoadNS
		if !r.Server.Reports(latency.SplitQueue) {
			w.flags |= flagQueueInferred
			w.sq = 0
		}
		if r.OK() && r.EndNS != 0 {
			if d.evidence == nil {
				d.evidence = map[string]int{}
			}
			d.evidence[evidenceName(r.Server)]++
		}
	}
	if r.Stream {
		w.flags |= flagStream
	}
	if r.FinishReason == "length" {
		w.flags |= flagTruncated
	}
	if r.Resent > 0 {
		w.flags |= flagResent
	}
	switch {
	case !r.OK():
		w.errKind = uint8(min(d.index(&d.kinds, string(r.ErrorKind)), 255))
		d.errs.add(string(r.ErrorKind), r.Error, 1)
	case r.EndNS == 0:
		// A success with no end instant cannot be measured: count it as an error.
		w.errKind = uint8(min(d.index(&d.kinds, "no_end"), 255))
		d.errs.add("no_end", "a success with no end instant (end_ns)", 1)
	}
	if r.Phase != "" {
		w.phase = uint16(min(d.index(&d.phases, r.Phase), 65535))
	}
	for i := 1; i < len(r.ChunkNS); i++ {
		if g := r.ChunkNS[i] - r.ChunkNS[i-1]; g > w.stall {
			w.stall, w.stallAt = g, r.ChunkNS[i-1]
		}
	}
	if w.ok() {
		n := len(d.itl)
		if len(r.ChunkTokens) == 0 {
			w.itlMax = d.addBothGaps(r)
		} else {
			w.itlMax = d.addGaps(&d.itl, &d.itlHist, r.ITLs)
			d.addGaps(&d.icl, &d.iclHist, r.ICLs)
		}
		if !d.noExact {
			d.gapsOf, d.gapsAt = r, n
		}
		d.paths.addPath(&w, r)
	}
	d.rows = append(d.rows, w)
	d.ids = append(d.ids, r.ID[:w.idLen]...)
	if r.Turn > 0 {
		d.steps = append(d.steps, newStepRow(r))
	}
}

// addGaps appends a record's gaps, as gen (latency.Record.ITLs or ICLs)
// computes them, to the exact list and the histogram the batch keeps, and
// returns the largest.
func (d *digest) addGaps(exact *[]int64, hist *stats.Histogram, gen func([]int64) []int64) (largest int64) {
	buf := *exact
	if d.noExact {
		buf = d.scratch[:0]
	}
	n := len(buf)
	buf = gen(buf)
	for _, v := range buf[n:] {
		largest = max(largest, v)
	}
	if d.hists {
		hist.AddAll(buf[n:])
	}
	if d.noExact {
		d.scratch = buf
	} else {
		*exact = buf
	}
	return largest
}

// addBothGaps is addGaps for a record whose every chunk is one token: its
// inter-token gaps are its inter-chunk gaps, computed and counted once.
func (d *digest) addBothGaps(r *latency.Record) (largest int64) {
	n := len(d.icl)
	largest = d.addGaps(&d.icl, &d.bothHist, r.ICLs)
	if !d.noExact {
		d.itl = append(d.itl, d.icl[n:]...)
	}
	return largest
}

// mergeBoth adds the gaps counted once for both (addBothGaps) to the ITL
// and ICL histograms; a reducer calls it when its batch is complete.
func (d *digest) mergeBoth() {
	d.itlHist.Merge(&d.bothHist)
	d.iclHist.Merge(&d.bothHist)
	d.bothHist.Reset()
}
