package capacity

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// Space is the configurations a plan weighs: each dimension lists the
// values tried, and an empty one keeps the base deployment's setting. The
// keys (VaryKeys) are the flags that set each one elsewhere.
type Space struct {
	GPUs                []string
	TensorParallelSizes []int // 0: the smallest power of two that fits
	// Replicas lists replica counts; empty with a target rate: from the
	// roofline's minimum for the target up to two more (AutoReplicas).
	Replicas            []int
	DTypes              []string
	KVCacheDTypes       []string
	MaxNumSeqs          []int
	MaxNumBatchedTokens []int
	ChunkedPrefill      []bool
	PrefixCaching       []bool
	SpeculativeK        []int
	Balancers           []string
	MaxMaxTokens        []int // 0: no cap
	// PrefillReplicas lists prefill pools to try, 0 for aggregated
	// serving (Deployment.PrefillReplicas): with Replicas, the P:D
	// ratios. KVLinks are the links a disaggregated candidate pulls its
	// KV cache over (perfmodel.LinkNames).
	PrefillReplicas []int
	KVLinks         []string
	// PrefillGPUs are the GPUs a disaggregated candidate's prefill pool
	// runs on (Deployment.PrefillGPU; "same" for the decode pool's).
	PrefillGPUs []string
	// PrefillTPs are the TPs a disaggregated candidate's prefill pool
	// runs at (Deployment.PrefillTP; 0 or "same" for the decode pool's).
	PrefillTPs []int
}

// AutoReplicas is how many replica counts above the roofline's minimum a
// target-rate plan tries when Space.Replicas is empty.
const AutoReplicas = 3

// VaryKeys are the dimensions ParseVary reads, named as the flags of
// serve, simulate and the gateway's max_max_tokens.
var VaryKeys = []string{"gpu", "tensor-parallel-size", "replicas", "dtype", "kv-cache-dtype", "max-num-seqs",
	"max-num-batched-tokens", "enable-chunked-prefill", "enable-prefix-caching", "speculative-k", "balancer", "max-max-tokens",
	"prefill-replicas", "kv-link", "prefill-gpu", "prefill-tensor-parallel-size"}

// ParseVary reads dimensions "KEY=V1,V2,…" (one per string; a key given
// twice is an error). Whole numbers may be ranges ("replicas=1-8"),
// booleans true/false (or on/off), max-max-tokens "none" for no cap.
func ParseVary(specs []string) (Space, error) {
	var s Space
	seen := map[string]bool{}
	for _, spec := range specs {
		key, vals, ok := strings.Cut(strings.TrimSpace(spec), "=")
		key = strings.ToLower(strings.TrimSpace(key))
		if !ok || strings.TrimSpace(vals) == "" {
			return s, field.Invalid("vary", spec, "want KEY=V1,V2,… with KEY one of %s", strings.Join(VaryKeys, ", "))
		}
		if seen[key] {
			return s, field.Invalid("vary", spec, "%s is given twice", key)
		}
		seen[key] = true
		if err := s.set(key, splitList(vals)); err != nil {
			return s, field.Invalid("vary", spec, "%w", err)
		}
	}
	return s, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// set fills the dimension key from vals.
func (s *Space) set(key string, vals []string) error {
	var err error
	switch key {
	case "gpu":
		s.GPUs = vals
	case "dtype":
		s.DTypes = vals
	case "kv-cache-dtype":
		s.KVCacheDTypes = vals
	case "balancer":
		s.Balancers = vals
	case "tensor-parallel-size":
		s.TensorParallelSizes, err = parseInts(vals, 0)
	case "replicas":
		s.Replicas, err = parseInts(vals, 1)
	case "max-num-seqs":
		s.MaxNumSeqs, err = parseInts(vals, 1)
	case "max-num-batched-tokens":
		s.MaxNumBatchedTokens, err = parseInts(vals, 1)
	case "speculative-k":
		s.SpeculativeK, err = parseInts(vals, 0)
	case "prefill-replicas":
		s.PrefillReplicas, err = parseInts(vals, 0)
	case "kv-link":
		for _, v := range vals {
			if _, err := perfmodel.LookupLink(v); err != nil {
				return err
			}
		}
		s.KVLinks = vals
	case "prefill-gpu":
		for i, v := range vals {
			if strings.EqualFold(v, "same") {
				vals[i] = ""
			}
		}
		s.PrefillGPUs = vals
	case "prefill-tensor-parallel-size":
		for i, v := range vals {
			if strings.EqualFold(v, "same") {
				vals[i] = "0"
			}
		}
		s.PrefillTPs, err = parseInts(vals, 0)
	case "max-max-tokens":
		for i, v := range vals {
			if strings.EqualFold(v, "none") {
				vals[i] = "0"
			}
		}
		s.MaxMaxTokens, err = parseInts(vals, 0)
	case "enable-chunked-prefill":
		s.ChunkedPrefill, err = parseBools(vals)
	case "enable-prefix-caching":
		s.PrefixCaching, err = parseBools(vals)
	default:
		return fmt.Errorf("unknown dimension %q (known: %s)", key, strings.Join(VaryKeys, ", "))
	}
	return err
}

// parseInts reads whole numbers ≥ least and ranges A-B.
func parseInts(vals []string, least int) ([]int, error) {
	var out []int
	for _, v := range vals {
		a, b, isRange := strings.Cut(v, "-")
		lo, err1 := strconv.Atoi(strings.TrimSpace(a))
		hi, err2 := lo, error(nil)
		if isRange {
			hi, err2 = strconv.Atoi(strings.TrimSpace(b))
		}
		if err1 != nil || err2 != nil || lo < least || hi < lo || hi-lo > 1024 {
			return nil, fmt.Errorf("%q: want whole numbers ≥ %d or ranges A-B", v, least)
		}
		for n := lo; n <= hi; n++ {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func parseBools(vals []string) ([]bool, error) {
	var out []bool
	for _, v := range vals {
		var b bool
		switch strings.ToLower(v) {
		case "true", "on", "yes":
			b = true
		case "false", "off", "no":
		default:
			return nil, fmt.Errorf("%q: want true or false", v)
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// engines lists the engine configurations of the space (every dimension
// but replicas, balancer and the max_tokens cap), base's settings where a
// dimension is empty, in a fixed order.
func (s Space) engines(base Deployment) []Deployment {
	out := []Deployment{base}
	expand := func(n int, apply func(d *Deployment, i int)) {
		if n == 0 {
			return
		}
		var next []Deployment
		for _, d := range out {
			for i := range n {
				c := d
				apply(&c, i)
				next = append(next, c)
			}
		}
		out = next
	}
	expand(len(s.GPUs), func(d *Deployment, i int) { d.Engine.GPU = s.GPUs[i] })
	expand(len(s.TensorParallelSizes), func(d *Deployment, i int) { d.Engine.TensorParallelSize = s.TensorParallelSizes[i] })
	expand(len(s.DTypes), func(d *Deployment, i int) { d.Engine.DType = s.DTypes[i] })
	expand(len(s.KVCacheDTypes), func(d *Deployment, i int) { d.Engine.KVCacheDType = s.KVCacheDTypes[i] })
	expand(len(s.MaxNumSeqs), func(d *Deployment, i int) { d.Engine.MaxNumSeqs = s.MaxNumSeqs[i] })
	expand(len(s.MaxNumBatchedTokens), func(d *Deployment, i int) { d.Engine.MaxNumBatchedTokens = s.MaxNumBatchedTokens[i] })
	expand(len(s.ChunkedPrefill), func(d *Deployment, i int) { d.Engine.EnableChunkedPrefill = s.ChunkedPrefill[i] })
	expand(len(s.PrefixCaching), func(d *Deployment, i int) { d.Engine.EnablePrefixCaching = s.PrefixCaching[i] })
	expand(len(s.SpeculativeK), func(d *Deployment, i int) { d.Engine.SpeculativeK = s.SpeculativeK[i] })
	return out
}

// around lists the deployments of one engine: its replica counts times the
// prefill pools (each disaggregated one over each link), balancers and
// caps of the space.
func (s Space) around(d Deployment, replicas []int) []Deployment {
	bals := s.Balancers
	if len(bals) == 0 {
		bals = []string{d.Balancer}
	}
	caps := s.MaxMaxTokens
	if len(caps) == 0 {
		caps = []int{d.MaxMaxTokens}
	}
	pools := s.PrefillReplicas
	if len(pools) == 0 {
		pools = []int{d.PrefillReplicas}
	}
	links := s.KVLinks
	if len(links) == 0 {
		links = []string{d.KVLink}
	}
	pres := s.prefillEngines(d)
	var out []Deployment
	for _, n := range replicas {
		for _, p := range pools {
			for i, l := range links {
				for j, pe := range pres {
					if p == 0 && (i > 0 || j > 0) {
						break // aggregated: no link, no prefill engine
					}
					for _, b := range bals {
						for _, c := range caps {
							x := d
							x.Replicas, x.PrefillReplicas, x.KVLink, x.Balancer, x.MaxMaxTokens = n, p, l, b, c
							x.PrefillGPU, x.PrefillTP = pe.gpu, pe.tp
							if p == 0 {
								x.KVLink, x.PrefillGPU, x.PrefillTP = "", "", 0
							}
							out = append(out, x)
						}
					}
				}
			}
		}
	}
	return out
}

// prefillEngine is a prefill pool's GPU and TP ("" and 0: the decode
// pool's).
type prefillEngine struct {
	gpu string
	tp  int
}

// prefillEngines crosses the space's prefill GPUs and TPs (d's where the
// space names none).
func (s Space) prefillEngines(d Deployment) []prefillEngine {
	gpus, tps := s.PrefillGPUs, s.PrefillTPs
	if len(gpus) == 0 {
		gpus = []string{d.PrefillGPU}
	}
	if len(tps) == 0 {
		tps = []int{d.PrefillTP}
	}
	var out []prefillEngine
	for _, g := range gpus {
		for _, tp := range tps {
			out = append(out, prefillEngine{g, tp})
		}
	}
	return out
}
