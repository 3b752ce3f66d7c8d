package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// MaxLen bounds every drawn length (2^30: tokens, or microseconds for a
// delay), so a long tail never overflows an int.
const MaxLen = 1 << 30

// MaxTokens bounds a prompt or output length given as a number (a flag's
// fixed or uniform length, a trace row): 10,000,000 tokens, the
// estimator's bound (perfmodel.MaxLength), so a prompt is never built
// larger than about 50 MB of text. Longer lengths are refused, naming the
// flag or the trace's row, before anything is allocated.
const MaxTokens = 10_000_000

// statedTop is the largest length a distribution states: a fixed
// length, a uniform range's top, else its mean.
func statedTop(d Dist) float64 {
	switch x := d.(type) {
	case Fixed:
		return float64(x)
	case Uniform:
		return float64(x.Hi)
	}
	return d.Mean()
}

// checkTokens refuses a token length distribution whose stated lengths
// exceed MaxTokens (a fixed length, a uniform range's top, a mean).
func checkTokens(d Dist) error {
	if top := statedTop(d); top > MaxTokens {
		return fmt.Errorf("%s: over the %d tokens a request may hold", d, MaxTokens)
	}
	return nil
}

// Dist is a distribution of token lengths: prompt lengths and max_tokens
// of a workload (bench --input-tokens/--output-tokens), and the engine's
// natural output length (serve --natural-output-tokens). ParseDist reads
// every one of them from the same spelling.
type Dist interface {
	// Sample draws one length in [1, MaxLen].
	Sample(r *rand.Rand) int
	// Mean is the distribution's expected value (before the floor of 1).
	Mean() float64
	// String is the spec ParseDist reads back.
	String() string
	// Validate says why the parameters describe no distribution of
	// lengths, or returns nil.
	Validate() error
}

// DistSyntax is the vocabulary ParseDist reads, for help texts.
const DistSyntax = "N, uniform:A-B, normal:mean=M,sd=S, lognormal:mean=M,sigma=S, exponential:mean=M or trace:FILE"

// ParseDist reads a length distribution:
//
//	N                           every request has N tokens
//	uniform:A-B                 uniform over the integers A..B inclusive
//	normal:mean=M,sd=S          normal, rounded, at least 1 (also normal:M,S)
//	lognormal:mean=M,sigma=S    log-normal with mean M and shape S: exp(μ + S·Z)
//	                            with μ = ln M − S²/2, rounded, at least 1
//	exponential:mean=M          exponential with mean M, rounded, at least 1
//	                            (also exponential:M)
//	trace:FILE                  the lengths of an Azure LLM trace file, drawn
//	                            uniformly; column picks "input" (ContextTokens)
//	                            or "output" (GeneratedTokens)
//
// lognormal:MU,SIGMA (two bare numbers) is read too: MU is the log of the
// median length, so its mean is e^(MU + SIGMA²/2).
func ParseDist(spec, column string) (Dist, error) {
	spec = strings.TrimSpace(spec)
	kind, args, hasArgs := strings.Cut(spec, ":")
	if !hasArgs {
		n, err := strconv.Atoi(spec)
		if err != nil {
			return nil, fmt.Errorf("length %q: want %s", spec, DistSyntax)
		}
		if err := Fixed(n).Validate(); err != nil {
			return nil, err
		}
		return Fixed(n), nil
	}
	var d Dist
	var err error
	switch kind = strings.ToLower(strings.TrimSpace(kind)); kind {
	case "uniform":
		d, err = parseUniform(args)
	case "normal":
		var p params
		if p, err = parseParams(args, []string{"mean", "sd"}); err == nil {
			d = Normal{p["mean"], p["sd"]}
		}
	case "lognormal":
		d, err = parseLogNormal(args)
	case "exponential":
		var p params
		if p, err = parseParams(args, []string{"mean"}); err == nil {
			d = Exponential{p["mean"]}
		}
	case "trace":
		return parseTrace(spec, args, column)
	default:
		return nil, fmt.Errorf("length %q: unknown distribution %q (known: uniform, normal, lognormal, exponential, trace)", spec, kind)
	}
	if err == nil {
		err = d.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("length %q: %w", spec, err)
	}
	return d, nil
}

func parseUniform(args string) (Dist, error) {
	a, b, ok := strings.Cut(args, "-")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return nil, errors.New("want uniform:A-B with whole numbers")
	}
	return Uniform{lo, hi}, nil
}

// parseLogNormal reads mean=M,sigma=S, or the bare MU,SIGMA of the log.
func parseLogNormal(args string) (Dist, error) {
	if strings.Contains(args, "=") {
		p, err := parseParams(args, []string{"mean", "sigma"})
		if err != nil {
			return nil, err
		}
		return LogNormal{p["mean"], p["sigma"]}, nil
	}
	p, err := parseParams(args, []string{"mu", "sigma"})
	if err != nil {
		return nil, err
	}
	mu, sigma := p["mu"], p["sigma"]
	if mu > 20 {
		return nil, fmt.Errorf("mu is the log of the median length (e^%g tokens is too many); lognormal:mean=M,sigma=S takes the mean", mu)
	}
	if sigma < 0 {
		return nil, errors.New("the spread must not be negative")
	}
	return LogNormal{math.Exp(mu + sigma*sigma/2), sigma}, nil
}

func parseTrace(spec, file, column string) (Dist, error) {
	t, err := ReadTraceFile(file, TraceFilter{})
	if err != nil {
		return nil, err
	}
	vals := make([]int, len(t.Rows))
	for i, r := range t.Rows {
		if column == "output" {
			vals[i] = r.Output
		} else {
			vals[i] = r.Input
		}
	}
	return Empirical{vals: vals, spec: spec}, nil
}

type params map[string]float64

// parseParams reads "name=x,name=y" or, in the order of names, "x,y": every
// name exactly once, each a finite number.
func parseParams(args string, names []string) (params, error) {
	parts := strings.Split(args, ",")
	want := strings.Join(names, ",")
	if len(parts) != len(names) {
		return nil, fmt.Errorf("want %s numbers (%s)", [...]string{"no", "one", "two"}[min(len(names), 2)], want)
	}
	p := params{}
	for i, part := range parts {
		name := names[i]
		val := part
		if k, v, ok := strings.Cut(part, "="); ok {
			name, val = strings.ToLower(strings.TrimSpace(k)), v
			if !containsName(names, name) {
				return nil, fmt.Errorf("unknown parameter %q (want %s)", name, want)
			}
		}
		if _, dup := p[name]; dup {
			return nil, fmt.Errorf("parameter %q given twice", name)
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%s %q is not a number", name, strings.TrimSpace(val))
		}
		p[name] = x
	}
	return p, nil
}

func containsName(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}

// lengthOf rounds a drawn real length into [1, MaxLen].
func lengthOf(x float64) int {
	if !(x < MaxLen) {
		return MaxLen
	}
	return max(1, int(math.Round(x)))
}

// Fixed is a constant length.
type Fixed int

// Sample returns the constant.
func (f Fixed) Sample(*rand.Rand) int { return min(max(int(f), 1), MaxLen) }

// Mean returns the constant.
func (f Fixed) Mean() float64 { return float64(f) }

// String is the spec ParseDist reads back.
func (f Fixed) String() string { return strconv.Itoa(int(f)) }

// Validate checks 1 ≤ f ≤ MaxLen.
func (f Fixed) Validate() error {
	switch {
	case f < 1:
		return fmt.Errorf("length %d: must be at least 1", int(f))
	case f > MaxLen:
		return fmt.Errorf("length %d: must be at most %d", int(f), MaxLen)
	}
	return nil
}

// Uniform is uniform over Lo..Hi inclusive.
type Uniform struct{ Lo, Hi int }

// Sample draws a length.
func (u Uniform) Sample(r *rand.Rand) int { return u.Lo + r.IntN(u.Hi-u.Lo+1) }

// Mean is (Lo+Hi)/2.
func (u Uniform) Mean() float64 { return float64(u.Lo+u.Hi) / 2 }

// String is the spec ParseDist reads back.
func (u Uniform) String() string { return fmt.Sprintf("uniform:%d-%d", u.Lo, u.Hi) }

// Validate checks 1 ≤ Lo ≤ Hi ≤ MaxLen.
func (u Uniform) Validate() error {
	if u.Lo < 1 || u.Hi < u.Lo || u.Hi > MaxLen {
		return fmt.Errorf("uniform:%d-%d: want 1 <= A <= B <= %d", u.Lo, u.Hi, MaxLen)
	}
	return nil
}

// Normal is a rounded normal distribution, floored at 1.
type Normal struct{ MeanLen, SD float64 }

// Sample draws a length.
func (n Normal) Sample(r *rand.Rand) int { return lengthOf(n.MeanLen + n.SD*r.NormFloat64()) }

// Mean returns the mean.
func (n Normal) Mean() float64 { return n.MeanLen }

// String is the spec ParseDist reads back.
func (n Normal) String() string { return fmt.Sprintf("normal:mean=%g,sd=%g", n.MeanLen, n.SD) }

// Validate checks 1 ≤ mean ≤ MaxLen and sd ≥ 0.
func (n Normal) Validate() error {
	switch {
	case !(n.MeanLen >= 1 && n.MeanLen <= MaxLen):
		return fmt.Errorf("normal: the mean must be in [1, %d] (got %g)", MaxLen, n.MeanLen)
	case !(n.SD >= 0) || math.IsInf(n.SD, 0):
		return fmt.Errorf("normal: the spread must not be negative (got sd %g)", n.SD)
	}
	return nil
}

// LogNormal is exp(μ + Sigma·Z) with μ = ln MeanLen − Sigma²/2, so that
// its mean is MeanLen (its median is e^μ), rounded, floored at 1.
type LogNormal struct{ MeanLen, Sigma float64 }

// Sample draws a length.
func (l LogNormal) Sample(r *rand.Rand) int {
	mu := math.Log(l.MeanLen) - l.Sigma*l.Sigma/2
	return lengthOf(math.Exp(mu + l.Sigma*r.NormFloat64()))
}

// Mean is MeanLen.
func (l LogNormal) Mean() float64 { return l.MeanLen }

// String is the spec ParseDist reads back.
func (l LogNormal) String() string {
	return fmt.Sprintf("lognormal:mean=%g,sigma=%g", l.MeanLen, l.Sigma)
}

// Validate checks 1 ≤ mean ≤ MaxLen and sigma ≥ 0.
func (l LogNormal) Validate() error {
	switch {
	case !(l.MeanLen >= 1 && l.MeanLen <= MaxLen):
		return fmt.Errorf("lognormal: the mean must be in [1, %d] (got %g)", MaxLen, l.MeanLen)
	case !(l.Sigma >= 0) || math.IsInf(l.Sigma, 0):
		return fmt.Errorf("lognormal: the spread must not be negative (got sigma %g)", l.Sigma)
	}
	return nil
}

// Exponential is exponential with mean MeanLen, rounded, floored at 1.
type Exponential struct{ MeanLen float64 }

// Sample draws a length.
func (e Exponential) Sample(r *rand.Rand) int { return lengthOf(r.ExpFloat64() * e.MeanLen) }

// Mean is MeanLen.
func (e Exponential) Mean() float64 { return e.MeanLen }

// String is the spec ParseDist reads back.
func (e Exponential) String() string { return fmt.Sprintf("exponential:mean=%g", e.MeanLen) }

// Validate checks 1 ≤ mean ≤ MaxLen.
func (e Exponential) Validate() error {
	if !(e.MeanLen >= 1 && e.MeanLen <= MaxLen) {
		return fmt.Errorf("exponential: the mean must be in [1, %d] (got %g)", MaxLen, e.MeanLen)
	}
	return nil
}

// Empirical draws uniformly from a list of observed lengths.
type Empirical struct {
	vals []int
	spec string
}

// Sample draws one of the lengths, in [1, MaxLen].
func (e Empirical) Sample(r *rand.Rand) int {
	return min(max(1, e.vals[r.IntN(len(e.vals))]), MaxLen)
}

// Mean is the lengths' mean.
func (e Empirical) Mean() float64 {
	s := 0.0
	for _, v := range e.vals {
		s += float64(v)
	}
	return s / float64(len(e.vals))
}

// String is the spec ParseDist reads back.
func (e Empirical) String() string { return e.spec }

// Validate checks there is at least one length.
func (e Empirical) Validate() error {
	if len(e.vals) == 0 {
		return errors.New("trace: no lengths")
	}
	return nil
}
