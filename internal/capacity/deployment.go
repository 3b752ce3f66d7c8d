package capacity

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Deployment is one configuration a plan weighs: the engine every replica
// runs (GPU, TP, precisions, batch limits, chunked prefill, prefix caching,
// speculative decoding, as serve names them), how many replicas, how the
// router places requests, and the gateway's cap on max_tokens.
type Deployment struct {
	Engine   engine.Options
	Replicas int
	// Balancer is one of route.Names (default least_outstanding).
	Balancer string
	// MaxMaxTokens clamps every request's max_tokens, as a gateway's
	// max_max_tokens with on_exceed clamp does; 0: no cap.
	MaxMaxTokens int
	// ShortestFirst gives each request the priority of its length
	// (prompt + max_tokens), so that under Engine.SchedulingPolicy
	// priority the engine serves the shortest waiting request first.
	ShortestFirst bool
	// PrefillReplicas, when positive, disaggregates the deployment: that
	// many prefill replicas of the same engine in front of Replicas decode
	// replicas, each request's KV cache pulled over KVLink
	// (perfmodel.LookupLink; empty: perfmodel.DefaultLink), as simulate's
	// --prefill-replicas (docs/simulate.md, "Disaggregated prefill and
	// decode"). 0: aggregated, every replica prefills and decodes.
	PrefillReplicas int
	KVLink          string
	// PrefillGPU, when set on a disaggregated deployment, runs the
	// prefill pool on another GPU than Engine's (Splitwise's
	// heterogeneous machines): the same engine settings and TP, its own
	// performance model and price. "": Engine.GPU.
	PrefillGPU string
	// PrefillTP, when set on a disaggregated deployment, runs the prefill
	// pool at another tensor-parallel size than Engine's: each prefill
	// replica then takes PrefillTP GPUs, and a KV transfer moves
	// min(PrefillTP, the decode TP) shards at once. 0: Engine's TP.
	PrefillTP int
	// FrontEnd, when set, is each replica's front end per request
	// (simulate.Config.FrontEnd; 0: none); nil: the engine family's
	// release's (engine.Options.FrontEnd), as simulate --engine adds it.
	// A disaggregated deployment adds none.
	FrontEnd *time.Duration
}

// frontEnd is each replica's front end per request: FrontEnd when set,
// else the engine family's release's; none when disaggregated.
func (d Deployment) frontEnd() (time.Duration, error) {
	switch {
	case d.Disaggregated():
		return 0, nil
	case d.FrontEnd != nil:
		return *d.FrontEnd, nil
	}
	return d.Engine.FrontEnd()
}

// Disaggregated reports whether d runs prefill and decode on separate
// pools.
func (d Deployment) Disaggregated() bool { return d.PrefillReplicas > 0 }

// gpusAt is every GPU d runs on at tp: tp × (replicas + prefill replicas).
func (d Deployment) gpusAt(tp int) int { return tp * (d.Replicas + d.PrefillReplicas) }

// link is d's KV link preset: KVLink, or perfmodel.DefaultLink.
func (d Deployment) link() (perfmodel.Link, error) {
	name := d.KVLink
	if name == "" {
		name = perfmodel.DefaultLink
	}
	l, err := perfmodel.LookupLink(name)
	if err != nil {
		return l, field.Invalid("kv_link", d.KVLink, "%w", err)
	}
	return l, nil
}

// Ratio is a disaggregated deployment's pools as "P:D" ("1:3"), ""
// when aggregated.
func (d Deployment) Ratio() string {
	if !d.Disaggregated() {
		return ""
	}
	return fmt.Sprintf("%d:%d", d.PrefillReplicas, d.Replicas)
}

// shortestFirst is the priority of a request under ShortestFirst.
func shortestFirst(in, maxTokens int) int { return in + maxTokens }

// resolved is a deployment with its engine resolved by the performance
// model.
type resolved struct {
	Deployment
	ec   engine.Config
	est  *perfmodel.Estimator
	tp   int
	gpus int // TP × (replicas + prefill replicas)
	gpu  string
	// pre is the prefill pool's engine where Deployment.PrefillGPU sets
	// another GPU (withPrefill); nil: the decode pool's.
	pre *resolved
	e2e time.Duration // mean unloaded E2E on the workload (unloadedE2E)
}

// resolve checks the deployment and resolves its engine; the error names
// the setting (weights that do not fit, a TP that does not divide the
// heads, an unknown GPU).
func (d Deployment) resolve() (*resolved, error) {
	if d.Replicas < 1 {
		return nil, field.Invalid("replicas", d.Replicas, "must be at least 1")
	}
	if d.MaxMaxTokens < 0 {
		return nil, field.Invalid("max_max_tokens", d.MaxMaxTokens, "must not be negative")
	}
	if d.PrefillReplicas < 0 {
		return nil, field.Invalid("prefill_replicas", d.PrefillReplicas, "must not be negative")
	}
	if d.Disaggregated() {
		if _, err := d.link(); err != nil {
			return nil, err
		}
	}
	if d.Balancer == "" {
		d.Balancer = route.NameLeastOutstanding
	}
	ec, est, err := d.Engine.Config()
	if err != nil {
		return nil, err
	}
	tp := est.Config().TP
	r := &resolved{Deployment: d, ec: ec, est: est, tp: tp, gpus: d.gpusAt(tp), gpu: est.Config().GPU.Name}
	if err := r.withPrefill(); err != nil {
		return nil, err
	}
	return r, nil
}

// withPrefill resolves the prefill pool's engine where PrefillGPU names
// another GPU or PrefillTP another TP: the decode engine's settings on
// that GPU at that TP (a profile, fitted on one GPU and TP, is left out),
// and counts the pools' GPUs; the error names prefill_gpu or prefill_tp.
func (r *resolved) withPrefill() error {
	r.pre = nil
	r.gpus = r.gpusAt(r.tp)
	if !r.Disaggregated() || r.PrefillGPU == "" && r.PrefillTP == 0 {
		return nil
	}
	if r.PrefillTP < 0 {
		return field.Invalid("prefill_tp", r.PrefillTP, "must not be negative")
	}
	o := r.Engine
	o.GPU, o.TensorParallelSize, o.Profile = cmp.Or(r.PrefillGPU, r.gpu), cmp.Or(r.PrefillTP, r.tp), ""
	ec, est, err := o.Config()
	if err != nil {
		if r.PrefillGPU == "" {
			return field.Invalid("prefill_tp", r.PrefillTP, "%w", err)
		}
		return field.Invalid("prefill_gpu", r.PrefillGPU, "%w", err)
	}
	g, tp := est.Config().GPU.Name, est.Config().TP
	if g != r.gpu || tp != r.tp {
		r.pre = &resolved{Deployment: Deployment{Engine: o, Replicas: 1}, ec: ec, est: est, tp: tp, gpus: tp, gpu: g}
		r.gpus = r.tp*r.Replicas + tp*r.PrefillReplicas
	}
	return nil
}

// prefillGPU is the prefill pool's GPU ("" when it is the decode pool's).
func (r *resolved) prefillGPU() string {
	if r.pre == nil || r.pre.gpu == r.gpu {
		return ""
	}
	return r.pre.gpu
}

// prefillTP is the prefill pool's TP (0 when it is the decode pool's).
func (r *resolved) prefillTP() int {
	if r.pre == nil || r.pre.tp == r.tp {
		return 0
	}
	return r.pre.tp
}

// key identifies what a simulation of the deployment depends on, so that
// candidates that differ only in names (kv_cache_dtype auto and bf16 for
// bf16 weights; a balancer of one replica; a cap no request reaches;
// prefix caching where no request shares a prefix — cacheable is false)
// share their results.
func (r *resolved) key(maxOut int, cacheable bool) string {
	c := r.ec.WithDefaults()
	pc := r.est.Config()
	bal := r.Balancer
	if r.Replicas == 1 && r.PrefillReplicas <= 1 {
		bal = "-"
	}
	pd := "agg"
	if r.Disaggregated() {
		l, _ := r.link()
		pd = fmt.Sprintf("pd%d:%s@%s/tp%d", r.PrefillReplicas, l.Name, r.prefillGPU(), r.prefillTP())
	}
	capTokens := r.MaxMaxTokens
	if capTokens >= maxOut {
		capTokens = 0
	}
	prefixCaching := c.EnablePrefixCaching && cacheable
	draft := ""
	if pc.DraftModel != nil {
		draft = pc.DraftModel.Name
	}
	return fmt.Sprintf("%s|%s|tp%d|%s/%s|blk%d×%d|len%d|seqs%d|tok%d|chunk%v|pc%v|spec%d:%g:%s|%s|sf%v|wait%d|r%d|%s|cap%d|%v|%s",
		c.Model, r.gpu, r.tp, pc.WeightDType, pc.KVDType, c.NumBlocks, c.BlockSize, c.MaxModelLen, c.MaxNumSeqs,
		c.MaxNumBatchedTokens, !c.DisableChunkedPrefill, prefixCaching, c.Speculative.K, c.Speculative.Alpha,
		draft, c.Policy, r.ShortestFirst, c.MaxWaiting, r.Replicas, bal, capTokens, pc.Eff, pd)
}

// Name describes the deployment in one line, e.g. "2 × H100-SXM TP1 fp8,
// kv bf16, seqs 1024, budget 8192, prefix caching, least_outstanding".
func (r *resolved) Name() string {
	c := r.ec.WithDefaults()
	pc := r.est.Config()
	var b strings.Builder
	if r.Disaggregated() {
		l, _ := r.link()
		fmt.Fprintf(&b, "%dP:%dD over %s, each", r.PrefillReplicas, r.Replicas, l.Name)
		if r.pre != nil {
			fmt.Fprintf(&b, " prefill on %s TP%d, each decode on", r.pre.gpu, r.pre.tp)
		}
		fmt.Fprintf(&b, " %s TP%d %s, kv %s, seqs %d, budget %d", r.gpu, r.tp, pc.WeightDType, pc.KVDType,
			c.MaxNumSeqs, c.MaxNumBatchedTokens)
	} else {
		fmt.Fprintf(&b, "%d × %s TP%d %s, kv %s, seqs %d, budget %d", r.Replicas, r.gpu, r.tp, pc.WeightDType, pc.KVDType,
			c.MaxNumSeqs, c.MaxNumBatchedTokens)
	}
	if c.DisableChunkedPrefill {
		b.WriteString(", no chunked prefill")
	}
	if c.EnablePrefixCaching {
		b.WriteString(", prefix caching")
	}
	if k := c.Speculative.K; k > 0 {
		fmt.Fprintf(&b, ", spec k=%d α=%g", k, c.Speculative.Alpha)
	}
	if r.Replicas > 1 || r.PrefillReplicas > 1 {
		b.WriteString(", " + r.Balancer)
	}
	if r.MaxMaxTokens > 0 {
		fmt.Fprintf(&b, ", max_tokens ≤ %d", r.MaxMaxTokens)
	}
	if r.Engine.Profile != "" {
		b.WriteString(", profiled")
	}
	return b.String()
}

// capSource clamps every request's max_tokens.
type capSource struct {
	inner workload.Source
	limit int
}

func (c capSource) Session(i int64) workload.Session {
	return &capSession{s: c.inner.Session(i), limit: c.limit}
}

type capSession struct {
	s     workload.Session
	limit int
}

func (c *capSession) Next(prev int) (workload.Request, bool) {
	r, ok := c.s.Next(prev)
	r.MaxTokens = min(r.MaxTokens, c.limit)
	return r, ok
}

// capLengthSource is capSource over a workload known by its lengths, which
// the simulator then runs without building prompts.
type capLengthSource struct {
	capSource
	ls workload.LengthSource
}

func (c capLengthSource) Lengths(i int64) (int, int) {
	in, out := c.ls.Lengths(i)
	return in, min(out, c.limit)
}

// SharesPrefixes and SharedPrefixTokens pass on what the workload's
// requests share (workload.Replay), which the simulator reads.
func (c capLengthSource) SharesPrefixes() bool {
	sp, ok := c.ls.(workload.SharedPrefixSource)
	return ok && sp.SharesPrefixes()
}

func (c capLengthSource) SharedPrefixTokens(i int64) int {
	if sp, ok := c.ls.(workload.SharedPrefixSource); ok {
		return sp.SharedPrefixTokens(i)
	}
	return 0
}

// withCap clamps src's max_tokens to limit (0: src unchanged).
func withCap(src workload.Source, limit int) workload.Source {
	if limit <= 0 {
		return src
	}
	c := capSource{inner: src, limit: limit}
	if ls, ok := src.(workload.LengthSource); ok {
		return capLengthSource{capSource: c, ls: ls}
	}
	return c
}

// unwrapSynthetic finds a synthetic workload under cap wrappers.
func unwrapSynthetic(src workload.Source) (*workload.Synthetic, bool) {
	switch s := src.(type) {
	case *workload.Synthetic:
		return s, true
	case capSource:
		return unwrapSynthetic(s.inner)
	case capLengthSource:
		return unwrapSynthetic(s.inner)
	case synthLengths:
		return s.Synthetic, true
	}
	return nil, false
}

// synthLengths is a single-turn synthetic workload seen by its lengths
// alone, drawn exactly as workload.Synthetic draws them (the prompt's
// filler text is built to the drawn length): the simulator then skips
// building and tokenizing prompts, which is most of its cost on long
// ones. It is exact whenever no engine could share KV blocks between the
// prompts (no shared prefix, or prefix caching off), since filler text of
// distinct seeds shares no block-sized prefix.
type synthLengths struct {
	*workload.Synthetic
}

// Lengths returns request i's input tokens and max_tokens.
func (s synthLengths) Lengths(i int64) (int, int) {
	r := rand.New(rand.NewPCG(s.Seed, uint64(i)))
	in, out := s.Input.Sample(r), s.Output.Sample(r)
	role := 0
	if s.Chat {
		role = 1
	}
	if s.PrefixTokens > 0 {
		return max(in, s.PrefixTokens+role+1), out
	}
	return max(in, role+1), out
}

// lengthsOnly returns the workload's source as lengths alone when that
// loses nothing for a deployment (prefixCaching: whether it caches
// prefixes), else the source itself.
func lengthsOnly(src workload.Source, prefixCaching bool) workload.Source {
	s, ok := src.(*workload.Synthetic)
	if !ok || s.Turns > 1 || (s.PrefixTokens > 0 && prefixCaching) {
		return src
	}
	return synthLengths{s}
}

// OutsideEnvelope lists where p, a point of d, lies outside what d's
// engine constants were fitted on (engine.Envelope.Check, the source's
// own flag apart: Envelope.Unfitted): its mean prompt and output lengths,
// its peak batch, its preemptions, and a deployment that does not keep up
// (its backlog grows without bound).
func (d Deployment) OutsideEnvelope(p Point) ([]string, error) {
	env, err := d.Engine.Envelope()
	if err != nil {
		return nil, err
	}
	return env.Check(envelopeCase(p)), nil
}

// Interval80 is the twin's 80 % interval for p, a point of d
// (engine.Envelope.Interval80: the constants' own inside their envelope,
// the cross-source one outside it or on unfitted defaults), and the
// source's own flag (engine.Envelope.Unfitted; empty for fitted ones).
func (d Deployment) Interval80(p Point) (iv engine.Interval, unfitted string, err error) {
	env, err := d.Engine.Envelope()
	if err != nil {
		return engine.Interval{}, "", err
	}
	return env.Interval80(envelopeCase(p)), env.Unfitted(), nil
}

// envelopeCase is what p covered, for the envelope's check.
func envelopeCase(p Point) engine.EnvelopeCase {
	n := int64(p.Measured - p.Failed)
	mean := func(tok int64) [2]int {
		if n <= 0 {
			return [2]int{}
		}
		m := int(tok / n)
		return [2]int{m, m}
	}
	return engine.EnvelopeCase{Input: mean(p.InputTokens), Output: mean(p.OutputTokens), Concurrency: p.PeakBatch,
		Preemptions: p.Preemptions, QueueGrowing: !p.Stopped && !p.KeepsUp}
}
