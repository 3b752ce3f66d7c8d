package report

import (
	"fmt"
	"math/rand/v2"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// synth builds deterministic synthetic runs for tests: each request's
// stages are given directly, in milliseconds, and the record's instants are
// derived from them so that the decomposition can be checked exactly.
type synthReq struct {
	at                     float64 // intended send, ms since start
	cq, connect, send, net float64 // client queue, connect, send, network (ms)
	sq, prefill            float64 // server queue and prefill (ms); server split when sq+prefill > 0 or split
	tpot                   float64 // ms per output token after the first
	tail                   float64 // stream tail (ms)
	input, output          int
	split                  bool // carry a server split
	err                    latency.ErrorKind
	phase                  string
	stallAt                int     // index of a chunk gap to stretch (0: none)
	stall                  float64 // extra ms on that gap
	session                int64
	turn                   int
	cached                 int
	shared                 int // prompt tokens shared with other requests
	reasoning              int // the first output tokens that are reasoning
}

const msNS = 1e6

func (s synthReq) record(id int) *latency.Record {
	ns := func(v float64) int64 { return int64(v * msNS) }
	r := &latency.Record{
		Schema: latency.RecordSchema, ID: fmt.Sprintf("r%06d", id), Stream: true, Phase: s.phase,
		IntendedNS: ns(s.at), InputTokens: s.input, OutputTokens: s.output,
		Session: s.session, Turn: s.turn, CachedTokens: s.cached, SharedPrefixTokens: s.shared,
	}
	r.SentNS = ns(s.at + s.cq)
	r.ConnectNS = ns(s.connect)
	r.WroteNS = ns(s.at + s.cq + s.connect + s.send)
	if s.err != "" {
		r.ErrorKind = s.err
		r.Error = "synthetic " + string(s.err)
		return r
	}
	first := s.at + s.cq + s.connect + s.send + s.net + s.sq + s.prefill
	r.FirstTokenNS = ns(first)
	t := first
	for i := 0; i < s.output; i++ {
		if i > 0 {
			t += s.tpot
			if i == s.stallAt {
				t += s.stall
			}
		}
		r.ChunkNS = append(r.ChunkNS, ns(t))
		r.ChunkTokens = append(r.ChunkTokens, 1)
	}
	r.EndNS = ns(t + s.tail)
	if s.reasoning > 0 && s.reasoning < s.output {
		r.FirstReasonNS, r.OtherNS = r.FirstTokenNS, r.ChunkNS[:s.reasoning]
		r.ChunkNS, r.ChunkTokens = r.ChunkNS[s.reasoning:], r.ChunkTokens[s.reasoning:]
		r.FirstTokenNS, r.ReasoningTokens, r.OutputTokens = r.ChunkNS[0], s.reasoning, s.output-s.reasoning
	}
	if s.split {
		r.Server = &latency.ServerSplit{QueueNS: ns(s.sq), PrefillNS: ns(s.prefill),
			DecodeNS: ns(t - first), Source: "server-timing"}
	}
	return r
}

// collect feeds requests to a collector and reports.
func collect(opts Options, reqs []synthReq) *Report {
	c := NewCollector(opts)
	for i, s := range reqs {
		c.Add(s.record(i))
	}
	return c.Report()
}

// baseline is a healthy run: n requests at rate req/s, modest jitter.
func baseline(n int, rate float64, seed uint64) []synthReq {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]synthReq, n)
	for i := range out {
		out[i] = synthReq{
			at: float64(i) * 1000 / rate, cq: 0.05, connect: 0, send: 0.1, net: 1 + rng.Float64(),
			sq: 2 + 3*rng.Float64(), prefill: 20 + 10*rng.Float64(), tpot: 10 + 2*rng.Float64(),
			tail: 0.5, input: 500 + rng.IntN(200), output: 50 + rng.IntN(100), split: true,
		}
	}
	return out
}
