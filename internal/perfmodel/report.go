package perfmodel

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText prints the header and one table row per batch size.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	r.writeHeader(&b)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if err := r.writeTable(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", strings.Join(r.notes(), "\n"))
	return err
}

// writeHeader says what was estimated: model, GPUs, memory, KV cache, the
// profile, efficiency, workload and cost.
func (r *Result) writeHeader(b *strings.Builder) {
	e := r.Est
	c := e.Config()
	tpNote := ""
	if r.TPAuto {
		tpNote = ", chosen: the smallest that fits"
	}
	fmt.Fprintf(b, "%s on %d × %s (TP %d%s); weights %s, KV cache %s\n", r.Model.Name, c.TP, r.GPU.Name, c.TP, tpNote, c.WeightDType, c.KVDType)
	if r.FitNote != "" {
		fmt.Fprintf(b, "  %s\n", r.FitNote)
	}
	fmt.Fprintf(b, "  parameters %s (active per token %s); weights %s, %s per GPU; usable %s per GPU (%.0f%% of %s − %s reserve)\n",
		count(float64(r.Model.TotalParams())), count(float64(r.Model.ActiveParams())),
		gb(float64(e.WeightBytes())), gb(float64(e.WeightBytes())/float64(c.TP)),
		gb(float64(e.UsableBytesPerGPU())), 100*c.MemUtil, gb(float64(r.GPU.MemoryBytes)), gb(float64(c.ReserveBytes)))
	fmt.Fprintf(b, "  KV cache %s per token (all GPUs); capacity %s tokens\n", kib(float64(e.KVBytesPerToken())), group(e.KVCapacityTokens()))
	if r.Profile != nil {
		fmt.Fprintf(b, "  profile: fitted on %s (%d requests)\n", orDefault(r.Profile.Source, "a calibration run"), r.Profile.Requests)
		for _, n := range r.OutOfRange {
			fmt.Fprintf(b, "  warning: %s: outside the profile's range, the prediction is an extrapolation\n", n)
		}
	}
	var perSeq string
	if c.Eff.SeqOverhead > 0 {
		perSeq = fmt.Sprintf(" + %v per sequence", c.Eff.SeqOverhead)
	}
	if c.Eff.ContextOverheadNS > 0 {
		perSeq += fmt.Sprintf(" + %.3g ns per context token", c.Eff.ContextOverheadNS)
	}
	var ring string
	if c.TP > 1 {
		ring = fmt.Sprintf(" + %v per ring step", ringStep(c.Eff, c.GPU))
	}
	fmt.Fprintf(b, "  efficiency: compute %.0f%%, memory %.0f%%, interconnect %.0f%%; overheads %v per step + %v per layer%s, %v per all-reduce%s\n",
		100*c.Eff.Compute, 100*c.Eff.Memory, 100*c.Eff.Interconnect, c.Eff.StepOverhead, c.Eff.LayerOverhead, perSeq, c.Eff.AllReduceLatency, ring)
	fmt.Fprintf(b, "  workload: %d input + %d output tokens per request", r.Work.Input, r.Work.Output)
	if r.Work.SpecK > 0 {
		draft := "no draft model (n-gram proposals, free)"
		if r.Draft != nil {
			draft = "draft " + r.Draft.Name
		}
		fmt.Fprintf(b, "; speculative k = %d, α = %g (%.2f tokens per step), %s", r.Work.SpecK, r.Work.SpecAlpha, ExpectedTokens(r.Work.SpecK, r.Work.SpecAlpha), draft)
	}
	b.WriteString("\n")
	r.writeCostLine(b)
	b.WriteString("\n")
}

// writeTable writes one row per batch size.
func (r *Result) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "batch\tTTFT\tTPOT\tE2E\ttok/s/user\ttok/s total\tKV/seq\tmax seqs\tbound (share of step)\t"
	if r.Work.SpecK > 0 {
		head += "spec TPOT\tspeed-up\tbreak-even α\t"
	}
	if len(r.Costs) > 0 {
		head += "$/1M in\t$/1M out\t"
	}
	fmt.Fprintln(tw, head)
	for i, row := range r.Rows {
		fits := ""
		if !row.FitsKV {
			fits = "!"
		}
		share := row.Shares.Memory
		if row.Bound == "compute" {
			share = row.Shares.Compute
		}
		line := fmt.Sprintf("%d%s\t%s\t%s\t%s\t%.1f\t%.0f\t%s\t%s\t%s %.0f%%\t",
			row.Batch, fits, ms(row.TTFT), ms(row.TPOT), ms(row.E2E), row.UserTokPerSec, row.TotalTokPerSec,
			mib(float64(row.KVBytesPerSeq)), group(row.MaxConcurrentSeqs), row.Bound, 100*share)
		if s := row.Spec; s != nil {
			be := fmt.Sprintf("%.2f", s.BreakEvenAlpha)
			switch {
			case s.BreakEvenAlpha < 0:
				be = "never"
			case s.BreakEvenAlpha == 0:
				be = "any"
			}
			verdict := "helps"
			if s.Speedup < 1 {
				verdict = "HURTS"
			}
			line += fmt.Sprintf("%s\t%.2f× %s\t%s\t", ms(s.TPOT), s.Speedup, verdict, be)
		}
		if i < len(r.Costs) {
			line += fmt.Sprintf("%s\t%s\t", usd(r.Costs[i].USDPer1MInput), usd(r.Costs[i].USDPer1MOutput))
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// notes explain the table's columns and flag a batch the KV cache cannot hold.
func (r *Result) notes() []string {
	e := r.Est
	var notes []string
	for _, row := range r.Rows {
		if !row.FitsKV {
			notes = append(notes, fmt.Sprintf("! batch %d needs %s of KV cache, more than the %s that fit: at most %d such requests run at once", row.Batch,
				gb(float64(row.KVBytesPerSeq)*float64(row.Batch)), gb(float64(e.KVCapacityTokens())*float64(e.KVBytesPerToken())), row.MaxConcurrentSeqs))
			break
		}
	}
	notes = append(notes, "TTFT at batch B: one prompt prefilled beside B−1 decoding requests; TPOT: mean decode step over the output; bound: what rules the decode step at the mean context.")
	if len(r.Costs) > 0 {
		notes = append(notes, "$/1M in, $/1M out: the deployment's cost per request (price × E2E / batch), split between its prefill (TTFT) and its decode (E2E − TTFT) by time, per token of each (docs/metrics.md, \"Cost\").")
	}
	if r.Work.SpecK > 0 {
		notes = append(notes, "speculation helps while the verify step of k+1 tokens per sequence stays memory-bound; at large batches it turns compute-bound and each rejected token is paid for. break-even α: the acceptance rate above which it helps.")
	}
	return notes
}

// writeCostLine says what the deployment costs an hour, and from which price.
func (r *Result) writeCostLine(b *strings.Builder) {
	tp := r.Est.Config().TP
	if r.Price == nil {
		fmt.Fprintf(b, "  cost: the price table has no price for %s (add one with --prices FILE)\n", r.GPU.Name)
		return
	}
	p := r.Price
	fmt.Fprintf(b, "  cost: $%.2f per hour (%d × $%.3g per GPU-hour: %s, %s; --prices FILE to change)\n",
		p.PerHour(tp), tp, p.USDPerGPUHour, p.Basis, p.AsOf)
}

// usd formats a price in dollars: whole dollars from $100, cents from
// $0.10, else 2 significant figures.
func usd(v float64) string {
	switch {
	case math.IsInf(v, 0) || math.IsNaN(v):
		return "-"
	case v >= 100:
		return fmt.Sprintf("$%.0f", v)
	case v >= 0.1:
		return fmt.Sprintf("$%.2f", v)
	case v <= 0:
		return "$0"
	}
	return fmt.Sprintf("$%.*f", min(9, 1-int(math.Floor(math.Log10(v)))), v) // 2 significant figures
}

// WriteExplain prints the arithmetic behind the first row, step by step.
func (r *Result) WriteExplain(w io.Writer) error {
	e := r.Est
	c := e.Config()
	row := r.Rows[0]
	m := r.Model
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("How batch %d is estimated (%s, %d × %s, weights %s, KV %s). Per GPU unless said.", row.Batch, m.Name, c.TP, r.GPU.Name, c.WeightDType, c.KVDType)
	if r.FitNote != "" {
		p("TP %d was chosen: %s.", c.TP, r.FitNote)
	}
	p("")
	p("Model: %d layers, hidden %d, %d query heads, %d KV heads × %d dims (%s), MLP %d, vocab %d.", m.Layers, m.Hidden, m.Heads, m.KVHeads, m.HeadDim, strings.ToUpper(m.Attention), m.Intermediate, m.Vocab)
	p("  parameters: %s total; %s multiplied per token (input embedding excluded%s).", count(float64(m.TotalParams())), count(float64(m.ActiveParams())), moeNote(m))
	p("  weights: %s (linear layers at %g B/param, embeddings/head/norms at 2 B) / TP %d = %s per GPU.", gb(float64(e.WeightBytes())), c.WeightDType.Bytes(), c.TP, gb(float64(e.WeightBytes())/float64(c.TP)))
	p("  KV per token: %s across the TP group; %s per GPU.", kvFormula(m, c), kib(e.kvTokenRank))
	p("  usable memory: %.2f × %s − %s reserve = %s; KV capacity = (%s − %s weights) / %s = %s tokens.",
		c.MemUtil, gb(float64(r.GPU.MemoryBytes)), gb(float64(c.ReserveBytes)), gb(float64(e.UsableBytesPerGPU())),
		gb(float64(e.UsableBytesPerGPU())), gb(float64(e.WeightBytes())/float64(c.TP)), kib(e.kvTokenRank), group(e.KVCapacityTokens()))
	p("  achieved rates: linear %s (peak %s × %.2f), attention %s, memory %s (peak %s × %.2f).",
		flops(e.linPeak), flops(r.GPU.PeakFLOPS[r.GPU.ComputeDType(c.WeightDType)]), c.Eff.Compute, flops(e.attnPeak), bps(e.bw), bps(r.GPU.HBMBandwidth), c.Eff.Memory)
	if e.cacheBW > 0 {
		p("  cache: a step whose bytes per pass fit in the %.0f MiB last-level cache reads them at %s (peak %s × %.2f).",
			e.cacheBytes/(1<<20), bps(e.cacheBW), bps(r.GPU.CacheBandwidth), c.Eff.Memory)
	}
	p("")
	p("1. TTFT: prefill of %d prompt tokens%s.", r.Work.Input, ifs(row.Batch > 1, fmt.Sprintf(" beside %d decoding requests at context %d", row.Batch-1, r.Work.Input+r.Work.Output/2)))
	e.explainStep(&b, row.Prefill)
	p("   TTFT = %s", ms(row.TTFT))
	p("")
	mid := r.Work.Input + r.Work.Output/2
	p("2. TPOT: a decode step of %d sequence(s), one new token each, at the mean context %d.", row.Batch, mid)
	e.explainStep(&b, row.Decode)
	p("   arithmetic intensity = %s / %s = %.1f FLOP/B; ridge point (achieved FLOP/s ÷ B/s) = %.0f FLOP/B → %s-bound.", flopsN(row.Decode.FLOPs), bytesN(row.Decode.Bytes), row.Intensity, row.Ridge, row.Bound)
	p("   TPOT = mean of the %d decode steps (context %d … %d) = %s", max(r.Work.Output-1, 1), r.Work.Input, r.Work.Input+r.Work.Output-2, ms(row.TPOT))
	p("")
	p("3. E2E = TTFT + (output − 1) × TPOT = %s + %d × %s = %s", ms(row.TTFT), r.Work.Output-1, ms(row.TPOT), ms(row.E2E))
	p("   tokens/s per user = 1 / TPOT = %.1f; total = batch × output / E2E = %d × %d / %s = %.0f", row.UserTokPerSec, row.Batch, r.Work.Output, ms(row.E2E), row.TotalTokPerSec)
	p("   KV per request = (%d + %d) × %s = %s; max concurrent requests = %s / %d = %s",
		r.Work.Input, r.Work.Output, kib(float64(e.KVBytesPerToken())), mib(float64(row.KVBytesPerSeq)), group(e.KVCapacityTokens()), r.Work.Input+r.Work.Output, group(row.MaxConcurrentSeqs))
	if s := row.Spec; s != nil {
		p("")
		p("4. Speculative decoding, k = %d, α = %g:", s.K, s.Alpha)
		p("   expected tokens per step = (1 − α^(k+1)) / (1 − α) = (1 − %g^%d) / (1 − %g) = %.3f", s.Alpha, s.K+1, s.Alpha, s.ExpectedTokens)
		p("   verify step: %d sequence(s) × %d tokens at context %d:", row.Batch, s.K+1, mid)
		e.explainStep(&b, s.Step)
		p("   spec TPOT = mean (verify + draft) / expected tokens = %s; speed-up = %s / %s = %.2f×", ms(s.TPOT), ms(row.TPOT), ms(s.TPOT), s.Speedup)
		switch {
		case s.BreakEvenAlpha < 0:
			p("   it never pays at this batch: the step costs more than k+1 plain steps.")
		case s.BreakEvenAlpha == 0:
			p("   it pays at any acceptance rate here.")
		default:
			p("   break-even α = %.2f: below it speculation hurts.", s.BreakEvenAlpha)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (e *Estimator) explainStep(b *strings.Builder, s Step) {
	c := e.cfg
	p := func(format string, a ...any) { fmt.Fprintf(b, "   "+format+"\n", a...) }
	p("tokens %d in %d sequence(s)", s.Tokens, s.Seqs)
	p("linear FLOPs = 2 × active params (w/o output head) / TP × tokens + 2 × vocab × hidden / TP × logit rows = %s", flopsN(s.LinearFLOPs))
	p("attention FLOPs = %d layers × %.0f FLOP per (query, key) pair / TP × Σ n·(context + (n+1)/2) = %s", c.Model.Layers, c.Model.attnFLOPsPerPair(), flopsN(s.AttentionFLOPs))
	p("compute time = %s / %s + %s / %s = %s", flopsN(s.LinearFLOPs), flops(e.linPeak), flopsN(s.AttentionFLOPs), flops(e.attnPeak), ms(s.Compute))
	w := fmt.Sprintf("weights %s", bytesN(s.WeightBytes))
	if s.ExpertsTouched > 0 {
		w += fmt.Sprintf(" (%.1f of %d experts touched per MoE layer: E × (1 − (1 − k/E)^tokens))", s.ExpertsTouched, c.Model.Experts)
	}
	p("bytes = %s + KV read %s + KV write %s = %s", w, bytesN(s.KVReadBytes), bytesN(s.KVWriteBytes), bytesN(s.Bytes))
	if s.Cached {
		p("memory time = %s / %s (they fit in the %.0f MiB cache) = %s", bytesN(s.Bytes), bps(e.cacheBW), e.cacheBytes/(1<<20), ms(s.Memory))
	} else {
		p("memory time = %s / %s = %s", bytesN(s.Bytes), bps(e.bw), ms(s.Memory))
	}
	if c.TP > 1 {
		p("communication = 2 × %d layers × (%v + 2(TP−1) × %v ring step + 2(TP−1)/TP × %s / (%s × %.2f)) = %s", c.Model.Layers, c.Eff.AllReduceLatency,
			ringStep(c.Eff, e.cfg.GPU), bytesN(s.CommBytes/e.allReduces), bps(e.cfg.GPU.InterconnectBW), c.Eff.Interconnect, ms(s.Comm))
	} else {
		p("communication = 0 (TP 1)")
	}
	switch {
	case c.Eff.ContextOverheadNS > 0:
		p("overhead = %v + %d layers × %v + %d sequences × %v + %d context tokens × %.3g ns = %s", c.Eff.StepOverhead, c.Model.Layers, c.Eff.LayerOverhead,
			s.Seqs, c.Eff.SeqOverhead, int64(math.Round(s.KVReadBytes/e.kvTokenRank)), c.Eff.ContextOverheadNS, ms(s.Overhead))
	case c.Eff.SeqOverhead > 0:
		p("overhead = %v + %d layers × %v + %d sequences × %v = %s", c.Eff.StepOverhead, c.Model.Layers, c.Eff.LayerOverhead, s.Seqs, c.Eff.SeqOverhead, ms(s.Overhead))
	default:
		p("overhead = %v + %d layers × %v = %s", c.Eff.StepOverhead, c.Model.Layers, c.Eff.LayerOverhead, ms(s.Overhead))
	}
	if s.Draft > 0 {
		p("draft model = %s", ms(s.Draft))
	}
	p("step = max(compute %s, memory %s) + comm %s + overhead %s%s = %s (%s-bound)", ms(s.Compute), ms(s.Memory), ms(s.Comm), ms(s.Overhead),
		ifs(s.Draft > 0, " + draft "+ms(s.Draft)), ms(s.Total), s.Bound)
}

func moeNote(m ModelSpec) string {
	if m.Experts == 0 {
		return ""
	}
	return fmt.Sprintf("; %d of %d routed experts per token", m.ExpertsPerToken, m.Experts)
}

func kvFormula(m ModelSpec, c Config) string {
	if m.Attention == AttnMLA {
		return fmt.Sprintf("%d layers × (%d latent + %d rope) × %g B × TP %d (latent replicated) = %s", m.Layers, m.KVLoraRank, m.QKRopeHeadDim, c.KVDType.Bytes(), c.TP,
			kib(float64(m.Layers*(m.KVLoraRank+m.QKRopeHeadDim))*c.KVDType.Bytes()*float64(c.TP)))
	}
	heads := max(1, m.KVHeads/c.TP) * c.TP
	rep := ""
	if heads > m.KVHeads {
		rep = fmt.Sprintf(" (%d KV heads replicated to %d for TP %d)", m.KVHeads, heads, c.TP)
	}
	return fmt.Sprintf("2 × %d layers × %d KV heads × %d dims × %g B%s = %s", m.Layers, heads, m.HeadDim, c.KVDType.Bytes(), rep,
		kib(2*float64(m.Layers*heads*m.HeadDim)*c.KVDType.Bytes()))
}

func ifs(ok bool, s string) string {
	if ok {
		return s
	}
	return ""
}

func ms(d time.Duration) string {
	v := float64(d) / 1e6
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

func count(n float64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f B", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f M", n/1e6)
	}
	return fmt.Sprintf("%.0f", n)
}

// Memory is in binary units throughout (GiB, MiB, KiB), as the GPU
// catalog's memory_gib; bandwidths stay in GB/s, as vendors state them.
func gb(n float64) string { return fmt.Sprintf("%.1f GiB", n/(1<<30)) }
func mib(n float64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", n/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", n/(1<<20))
}
func kib(n float64) string { return fmt.Sprintf("%.1f KiB", n/1024) }

func bytesN(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0f B", n)
}

func flopsN(n float64) string {
	switch {
	case n >= 1e12:
		return fmt.Sprintf("%.3f TFLOP", n/1e12)
	case n >= 1e9:
		return fmt.Sprintf("%.2f GFLOP", n/1e9)
	}
	return fmt.Sprintf("%.2f MFLOP", n/1e6)
}

func flops(r float64) string { return fmt.Sprintf("%.1f TFLOP/s", r/1e12) }
func bps(r float64) string {
	if r >= 1e12 {
		return fmt.Sprintf("%.2f TB/s", r/1e12)
	}
	return fmt.Sprintf("%.0f GB/s", r/1e9)
}

func group(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// JSON shapes: durations in milliseconds.
type jsonStep struct {
	Seqs           int     `json:"seqs"`
	Tokens         int     `json:"tokens"`
	FLOPs          float64 `json:"flops"`
	LinearFLOPs    float64 `json:"linear_flops"`
	AttentionFLOPs float64 `json:"attention_flops"`
	Bytes          float64 `json:"bytes"`
	WeightBytes    float64 `json:"weight_bytes"`
	KVReadBytes    float64 `json:"kv_read_bytes"`
	KVWriteBytes   float64 `json:"kv_write_bytes"`
	ExpertsTouched float64 `json:"experts_touched,omitempty"`
	CommBytes      float64 `json:"comm_bytes"`
	ComputeMS      float64 `json:"compute_ms"`
	MemoryMS       float64 `json:"memory_ms"`
	CommMS         float64 `json:"comm_ms"`
	OverheadMS     float64 `json:"overhead_ms"`
	DraftMS        float64 `json:"draft_ms,omitempty"`
	TotalMS        float64 `json:"total_ms"`
	Bound          string  `json:"bound"`
}

func toJSONStep(s Step) jsonStep {
	return jsonStep{s.Seqs, s.Tokens, s.FLOPs, s.LinearFLOPs, s.AttentionFLOPs, s.Bytes, s.WeightBytes, s.KVReadBytes, s.KVWriteBytes,
		s.ExpertsTouched, s.CommBytes, durationMS(s.Compute), durationMS(s.Memory), durationMS(s.Comm), durationMS(s.Overhead),
		durationMS(s.Draft), durationMS(s.Total), s.Bound}
}

type jsonSpec struct {
	K              int      `json:"k"`
	Alpha          float64  `json:"alpha"`
	ExpectedTokens float64  `json:"expected_tokens"`
	TPOTMS         float64  `json:"tpot_ms"`
	Speedup        float64  `json:"speedup"`
	BreakEvenAlpha float64  `json:"break_even_alpha"`
	Step           jsonStep `json:"verify_step"`
}

type jsonRow struct {
	Batch             int       `json:"batch"`
	TTFTMS            float64   `json:"ttft_ms"`
	TPOTMS            float64   `json:"tpot_ms"`
	E2EMS             float64   `json:"e2e_ms"`
	UserTokPerSec     float64   `json:"tok_per_s_per_user"`
	TotalTokPerSec    float64   `json:"tok_per_s_total"`
	KVBytesPerSeq     int64     `json:"kv_bytes_per_seq"`
	MaxConcurrentSeqs int64     `json:"max_concurrent_seqs"`
	FitsKV            bool      `json:"fits_kv"`
	Bound             string    `json:"bound"`
	Shares            Shares    `json:"shares"`
	Intensity         float64   `json:"arithmetic_intensity"`
	Ridge             float64   `json:"ridge_point"`
	Prefill           jsonStep  `json:"prefill_step"`
	Decode            jsonStep  `json:"decode_step"`
	Spec              *jsonSpec `json:"speculative,omitempty"`
	Cost              *Cost     `json:"cost,omitempty"`
}

type jsonResult struct {
	Model             ModelSpec `json:"model"`
	GPU               string    `json:"gpu"`
	TP                int       `json:"tp"`
	TPAuto            bool      `json:"tp_auto"`
	WeightDType       DType     `json:"weight_dtype"`
	KVDType           DType     `json:"kv_dtype"`
	MemUtil           float64   `json:"mem_util"`
	Efficiency        jsonEff   `json:"efficiency"`
	TotalParams       int64     `json:"total_params"`
	ActiveParams      int64     `json:"active_params"`
	WeightBytes       int64     `json:"weight_bytes"`
	UsableBytesPerGPU int64     `json:"usable_bytes_per_gpu"`
	ReserveBytes      int64     `json:"reserve_bytes_per_gpu"`
	KVBytesPerToken   int64     `json:"kv_bytes_per_token"`
	KVCapacityTokens  int64     `json:"kv_capacity_tokens"`
	Input             int       `json:"input"`
	Output            int       `json:"output"`
	DraftModel        string    `json:"draft_model,omitempty"`
	Rows              []jsonRow `json:"rows"`
	// OutOfRange lists where the workload lies outside a --profile's fitted range.
	OutOfRange []string `json:"out_of_profile_range,omitempty"`
	// Price is the GPU's price and USDPerHour the deployment's, when the
	// price table has one.
	Price      *Price  `json:"price,omitempty"`
	USDPerHour float64 `json:"usd_per_hour,omitempty"`
}

type jsonEff struct {
	Compute            float64 `json:"compute"`
	Memory             float64 `json:"memory"`
	Interconnect       float64 `json:"interconnect"`
	AllReduceLatencyUS float64 `json:"all_reduce_latency_us"`
	StepOverheadUS     float64 `json:"step_overhead_us"`
	LayerOverheadUS    float64 `json:"layer_overhead_us"`
	SeqOverheadUS      float64 `json:"seq_overhead_us"`
	ContextOverheadNS  float64 `json:"context_overhead_ns,omitempty"`
	RingStepUS         float64 `json:"ring_step_us,omitempty"`
}

// WriteJSON prints the result as one indented JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	e := r.Est
	c := e.Config()
	out := jsonResult{
		Model: r.Model, GPU: r.GPU.Name, TP: c.TP, TPAuto: r.TPAuto, WeightDType: c.WeightDType, KVDType: c.KVDType, MemUtil: c.MemUtil,
		Efficiency: jsonEff{c.Eff.Compute, c.Eff.Memory, c.Eff.Interconnect, float64(c.Eff.AllReduceLatency) / 1e3,
			float64(c.Eff.StepOverhead) / 1e3, float64(c.Eff.LayerOverhead) / 1e3, float64(c.Eff.SeqOverhead) / 1e3, c.Eff.ContextOverheadNS,
			float64(c.Eff.RingStep) / 1e3},
		TotalParams: r.Model.TotalParams(), ActiveParams: r.Model.ActiveParams(), WeightBytes: e.WeightBytes(),
		UsableBytesPerGPU: e.UsableBytesPerGPU(), ReserveBytes: c.ReserveBytes, KVBytesPerToken: e.KVBytesPerToken(),
		KVCapacityTokens: e.KVCapacityTokens(), Input: r.Work.Input, Output: r.Work.Output, OutOfRange: r.OutOfRange,
	}
	if r.Draft != nil {
		out.DraftModel = r.Draft.Name
	}
	if r.Price != nil {
		out.Price, out.USDPerHour = r.Price, r.Price.PerHour(c.TP)
	}
	for i, row := range r.Rows {
		jr := jsonRow{row.Batch, durationMS(row.TTFT), durationMS(row.TPOT), durationMS(row.E2E), row.UserTokPerSec, row.TotalTokPerSec,
			row.KVBytesPerSeq, row.MaxConcurrentSeqs, row.FitsKV, row.Bound, row.Shares, row.Intensity, row.Ridge,
			toJSONStep(row.Prefill), toJSONStep(row.Decode), nil, nil}
		if i < len(r.Costs) {
			jr.Cost = &r.Costs[i]
		}
		if s := row.Spec; s != nil {
			jr.Spec = &jsonSpec{s.K, s.Alpha, s.ExpectedTokens, durationMS(s.TPOT), s.Speedup, s.BreakEvenAlpha, toJSONStep(s.Step)}
		}
		out.Rows = append(out.Rows, jr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteList prints the catalogs: models and GPUs with their key figures.
func WriteList(w io.Writer, gpus *GPUCatalog) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tPARAMS\tACTIVE\tLAYERS\tHIDDEN\tHEADS/KV\tATTENTION\tEXPERTS\tKV/TOKEN (bf16)")
	for _, m := range Models() {
		experts := "-"
		if m.Experts > 0 {
			experts = fmt.Sprintf("%d of %d", m.ExpertsPerToken, m.Experts)
		}
		kv := float64(m.kvElemsPerTokenLayer()) * float64(m.Layers) * 2
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d/%d\t%s\t%s\t%s\n", m.Name, count(float64(m.TotalParams())), count(float64(m.ActiveParams())),
			m.Layers, m.Hidden, m.Heads, m.KVHeads, m.Attention, experts, kib(kv))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GPU\tMEMORY\tHBM\tBF16 (dense)\tFP8 (dense)\tINT8 (dense)\tTP LINK\tFAMILY")
	for _, g := range gpus.GPUs() {
		opt := func(d DType) string {
			switch v := g.PeakFLOPS[d]; {
			case v >= 1e12:
				return fmt.Sprintf("%.0f T", v/1e12)
			case v > 0:
				return fmt.Sprintf("%.0f G", v/1e9) // a CPU thread
			}
			return "-"
		}
		fmt.Fprintf(tw, "%s\t%.0f GiB\t%s\t%s\t%s\t%s\t%s %s\t%s\n", g.Name, float64(g.MemoryBytes)/(1<<30), bps(g.HBMBandwidth),
			opt(BF16), opt(FP8), opt(INT8), g.Interconnect, bps(g.InterconnectBW), g.Family)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "\nAny Hugging Face config.json works too: --model path/to/config.json. GPU sources: gpus.yaml (--gpu-file adds or overrides).")
	return err
}
