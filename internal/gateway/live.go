package gateway

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/live"
)

// LivePath is where the admin listener serves the live view (gateway
// /live): the page at LivePath+"/", its events and snapshot under it.
const LivePath = "/live"

// NewLiveBoard makes the gateway's live view (live.Config.Gateway) and
// sets it as g.Live: every finished request is offered to it, without
// waiting; the board reads the pools' admission at each tick. Run it with
// RunLive.
func (g *Gateway) NewLiveBoard(window time.Duration) *live.Board {
	b := live.New(live.Config{Gateway: true, Window: window, Pools: g.livePools})
	g.Live = b
	return b
}

// RunLive computes the live view's snapshots on the gateway's clock until
// ctx ends, then ends its streams.
func (g *Gateway) RunLive(ctx context.Context) {
	if g.Live != nil {
		g.Live.Run(ctx, func() int64 { return int64(g.sinceBase()) })
	}
}

// livePools is each pool's admission now (its queue, in flight, limit).
func (g *Gateway) livePools() []live.PoolState {
	rt := g.rt.Load()
	if rt == nil {
		return nil
	}
	out := make([]live.PoolState, 0, len(rt.pools))
	for name, p := range rt.pools {
		d, f, l := p.adm.snapshot()
		out = append(out, live.PoolState{Pool: name, Queued: d, InFlight: f, Limit: l})
	}
	return out
}

// offerLive hands the finished request to the live view as a record on
// the gateway's clock (ns since Gateway.base), its Timing the gateway's
// stages: a full hand-off drops it, before the record is built when it
// was full already (live.Board.Full).
func (x *exchange) offerLive(st stageDurations, ttft time.Duration, pool string) {
	if x.g.Live.Full() { // not worth a record
		x.g.Live.Skip()
		return
	}
	start := int64(x.tl.start.Sub(x.g.base))
	rec := &latency.Record{Stream: x.req.Stream, IntendedNS: start, SentNS: start, WroteNS: start,
		OutputTokens: x.tokens, InputTokens: x.req.InputTokens()}
	if route := x.route; route != nil {
		rec.Model = route.Model
	}
	lab := live.Labels{Pool: pool, Status: x.status, Admitted: !x.tl.admitted.IsZero()}
	if n := len(x.att.tried); n > 0 {
		lab.Upstream = x.att.tried[n-1].cfg.URL
	}
	if x.status != http.StatusOK {
		kind := x.errKind
		if kind == "" {
			kind = "http_" + strconv.Itoa(x.status)
		}
		rec.ErrorKind = latency.ErrorKind(kind)
		rec.Status = x.status
		x.g.Live.Offer(rec, lab)
		return
	}
	if ttft > 0 && !x.noContent {
		rec.FirstTokenNS = start + int64(ttft)
	}
	rec.EndNS = start + int64(st.sum())
	if len(x.chunkNS) > 0 {
		rec.ChunkNS = make([]int64, len(x.chunkNS))
		for i, t := range x.chunkNS {
			rec.ChunkNS[i] = start + t
		}
		rec.ChunkTokens = append([]int32(nil), x.chunkTokens...)
	}
	rec.Timing = []latency.HopStage{
		{Hop: latency.HopGateway, Name: string(latency.TimingGatewayIn), NS: int64(st.In)},
		{Hop: latency.HopGateway, Name: string(latency.TimingGatewayQueue), NS: int64(st.Queue)},
		{Hop: latency.HopGateway, Name: string(latency.TimingUpstreamPrefill), NS: int64(st.UpstreamPrefill)},
		{Hop: latency.HopGateway, Name: string(latency.TimingConnect), NS: int64(st.Connect)},
		{Hop: latency.HopGateway, Name: string(latency.TimingUpstreamTTFT), NS: int64(st.UpstreamTTFT)},
		{Hop: latency.HopGateway, Name: string(latency.TimingDecode), NS: int64(st.Decode)},
		{Hop: latency.HopGateway, Name: string(latency.TimingPostProcess), NS: int64(st.Post)},
		{Hop: latency.HopGateway, Name: string(latency.TimingBackpressure), NS: int64(st.Backpressure)},
	}
	x.g.Live.Offer(rec, lab)
}
