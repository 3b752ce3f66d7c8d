package simulate

import (
	"errors"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/route"
)

// buildPrefill makes a disaggregated deployment's prefill replicas (after
// the decode replicas, so a step end names either by its index) and their
// pool.
func (s *sim) buildPrefill() error {
	n := s.cfg.PrefillReplicas
	if n == 0 {
		return nil
	}
	now := func() time.Time { return engine.SimEpoch.Add(time.Duration(s.now)) }
	b, err := route.New[*call, *replica](s.cfg.Balancer, route.Options{MaxAge: 3 * s.cfg.ScrapeInterval, Now: now, Slack: s.cfg.Slack})
	if err != nil {
		return err
	}
	p := &pool{index: -1, balancer: b}
	ec := s.cfg.Engine
	if s.cfg.PrefillEngine != nil {
		ec = *s.cfg.PrefillEngine
		s.prefillTP = ec.TP
	}
	for k := range n {
		i := len(s.replicas)
		pc := ec
		pc.Seed += uint64(i)
		v, err := engine.NewVirtual(pc)
		if err != nil {
			return err
		}
		r := &replica{index: i, name: "prefill-" + itoa(int64(k)), pool: p, v: v, prefill: true, wakeAt: -1}
		s.replicas = append(s.replicas, r)
		p.replicas = append(p.replicas, r)
		s.res.Replicas = append(s.res.Replicas, ReplicaResult{Name: r.name, Pool: -1})
	}
	s.prefill = p
	return nil
}

// dispatchPrefill sends a request's prefill half to a prefill replica:
// one output token, as the gateway's prefill request asks.
func (s *sim) dispatchPrefill(id int32) {
	c := &s.calls[id]
	r := s.prefill.balancer.Pick(c, s.prefill.replicas)
	c.pre = r
	s.res.Replicas[r.index].Requests++
	q := c.req
	q.MaxTokens, q.MinTokens, q.IgnoreEOS, q.RemotePrefill = 1, 0, true, false
	if _, err := r.v.Submit(time.Duration(s.now), int(id), &q); err != nil {
		if adm := c.pool.adm; adm != nil {
			adm.Release(time.Duration(s.now - c.admitAt))
		}
		if errors.Is(err, engine.ErrQueueFull) {
			s.refuse(id, s.cfg.QueueFullStatus, latency.FailRateLimited, err)
		} else {
			s.refuse(id, 400, latency.FailHTTP4xx, err)
		}
		return
	}
	r.outstanding++
	if !s.startStep(r) {
		s.touch(r)
	}
}

// prefillEnd applies a prefill replica's step: each request whose one
// token it produced goes on to its decode half at once (the gateway's
// exchange between the halves is not modelled).
func (s *sim) prefillEnd(r *replica) {
	outs := r.v.Finish()
	for i := range outs {
		o := &outs[i]
		if o.Finish == "" {
			continue
		}
		id := int32(o.ID())
		c := &s.calls[id]
		c.preTL, c.prefilled = o.Timeline(), true
		r.outstanding--
		s.dispatch(id)
	}
	if !s.startStep(r) {
		s.touch(r)
	}
}

// pdTiming is a disaggregated record's stages as the gateway passes them
// on from the two instances: the prefill instance's queue and prefill,
// then the decode instance's transfer, wait, first step and decode.
func pdTiming(dst []latency.HopStage, pre, dec engine.Timeline) []latency.HopStage {
	return append(dst[:0],
		latency.HopStage{Hop: latency.HopPrefill, Name: latency.PrefillQueue, NS: int64(pre.Queue())},
		latency.HopStage{Hop: latency.HopPrefill, Name: string(latency.TimingPrefill), NS: int64(pre.Prefill())},
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingKVTransfer), NS: int64(dec.KVTransfer())},
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingDecodeQueue), NS: int64(dec.Queue())},
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingFirstDecode), NS: int64(dec.Prefill())},
		latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingServerDecode), NS: int64(dec.Decode())},
	)
}
