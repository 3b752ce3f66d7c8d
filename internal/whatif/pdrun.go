package whatif

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
)

// pdRun is what a measured run's records show of disaggregated serving:
// whether a prefill hop served its requests, and the link preset whose
// transfers come nearest the records' kv_transfer stages.
type pdRun struct {
	requests int    // successful requests with a prefill hop
	link     string // the nearest preset ("" when no transfer was timed)
	medianMS float64
	tokens   int // the median transfer's full-block prompt tokens
	// prefill and decode are the pools' sizes the gateway's evidence
	// shows (poolsOf); 0 when it shows none.
	prefill, decode int
}

// poolsOf is the P:D split a tokentrace gateway's configuration evidence
// shows (tokentrace_gateway_config_info's prefill_replicas and replicas
// in run.json's server config): 0, 0 when it shows no prefill pool.
func poolsOf(server map[string]string) (prefill, decode int) {
	p, err := strconv.Atoi(server["prefill_replicas"])
	if err != nil || p <= 0 {
		return 0, 0
	}
	d, err := strconv.Atoi(server["replicas"])
	if err != nil || d <= 0 {
		return 0, 0
	}
	return p, d
}

// pdOfRecords reads the run's records for a prefill hop and its KV
// transfers. ec is the twin's engine (its KV bytes per token and block
// size price each transfer).
func pdOfRecords(dir string, ec engine.Config) (pdRun, error) {
	recs, err := results.ReadRecords(filepath.Join(dir, results.RequestsFile))
	if err != nil {
		return pdRun{}, err
	}
	type xfer struct {
		tokens int
		ns     int64
	}
	var xs []xfer
	var out pdRun
	for i := range recs {
		r := &recs[i]
		if !r.OK() || !slices.ContainsFunc(r.Timing, func(s latency.HopStage) bool { return s.Hop == latency.HopPrefill }) {
			continue
		}
		out.requests++
		for _, s := range r.Timing {
			if s.Hop == latency.HopServer && s.Name == string(latency.TimingKVTransfer) && s.NS > 0 && ec.BlockSize > 0 {
				xs = append(xs, xfer{tokens: r.InputTokens / ec.BlockSize * ec.BlockSize, ns: s.NS})
			}
		}
	}
	if len(xs) == 0 || ec.KVBytesPerToken <= 0 {
		return out, nil
	}
	best := math.Inf(1)
	for _, name := range perfmodel.LinkNames() {
		l := linkOf(name)
		var miss float64 // mean relative miss of the preset's transfer time
		for _, x := range xs {
			want := float64(l.TransferSharded(int64(x.tokens)*ec.KVBytesPerToken, ec.TP))
			miss += math.Abs(want-float64(x.ns)) / float64(x.ns)
		}
		if miss < best {
			best, out.link = miss, name
		}
	}
	slices.SortFunc(xs, func(a, b xfer) int { return int(a.ns - b.ns) })
	m := xs[len(xs)/2]
	out.medianMS, out.tokens = float64(m.ns)/float64(time.Millisecond), m.tokens
	return out, nil
}

// note says what the twin takes of a disaggregated run.
func (p pdRun) note() string {
	s := fmt.Sprintf("the run's records show disaggregated serving (a prefill hop on %d requests): the twin runs 1 prefill and 1 decode instance (the pools' sizes are not in the records)", p.requests)
	if p.prefill > 0 {
		s = fmt.Sprintf("the run's records show disaggregated serving (a prefill hop on %d requests): the twin runs %d prefill and %d decode instance(s), the pools the gateway's configuration evidence shows", p.requests, p.prefill, p.decode)
	}
	if p.link != "" {
		s += fmt.Sprintf(", the KV cache over %s, the preset nearest the records' transfers (median %.3g ms for %d tokens)", linkOf(p.link), p.medianMS, p.tokens)
	} else {
		s += ", the KV cache over " + linkOf(perfmodel.DefaultLink).String() + " (no transfer timed in the records)"
	}
	return s
}
