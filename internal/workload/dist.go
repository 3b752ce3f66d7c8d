package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Dist is a distribution of token lengths.
type Dist interface {
	// Sample draws one length, at least 1.
	Sample(r *rand.Rand) int
	// Mean is the distribution's expected value (before the floor of 1).
	Mean() float64
	// String is the spec ParseDist reads back.
	String() string
}

// ParseDist reads a length distribution:
//
//	N                 every request has N tokens
//	uniform:A-B       uniform over the integers A..B inclusive
//	normal:MEAN,SD    normal, rounded, at least 1
//	lognormal:MU,SIGMA  exp(MU + SIGMA·Z) for standard normal Z, rounded, at least 1
//	trace:FILE        the lengths of an Azure LLM trace file, drawn uniformly;
//	                  column picks "input" (ContextTokens) or "output" (GeneratedTokens)
func ParseDist(spec, column string) (Dist, error) {
	spec = strings.TrimSpace(spec)
	kind, args, hasArgs := strings.Cut(spec, ":")
	if !hasArgs {
		n, err := strconv.Atoi(spec)
		if err != nil {
			return nil, fmt.Errorf("length %q: want N, uniform:A-B, normal:MEAN,SD, lognormal:MU,SIGMA or trace:FILE", spec)
		}
		if n < 1 {
			return nil, fmt.Errorf("length %d: must be at least 1", n)
		}
		return Fixed(n), nil
	}
	switch strings.ToLower(kind) {
	case "uniform":
		a, b, ok := strings.Cut(args, "-")
		lo, err1 := strconv.Atoi(strings.TrimSpace(a))
		hi, err2 := strconv.Atoi(strings.TrimSpace(b))
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("length %q: want uniform:A-B with whole numbers", spec)
		}
		if lo < 1 || hi < lo {
			return nil, fmt.Errorf("length %q: want 1 <= A <= B", spec)
		}
		return Uniform{lo, hi}, nil
	case "normal", "lognormal":
		a, b, ok := strings.Cut(args, ",")
		x, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
		y, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
		if !ok || err1 != nil || err2 != nil || math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
			return nil, fmt.Errorf("length %q: want %s:X,Y with two numbers", spec, kind)
		}
		if y < 0 {
			return nil, fmt.Errorf("length %q: the spread must not be negative", spec)
		}
		if strings.ToLower(kind) == "normal" {
			if x < 1 {
				return nil, fmt.Errorf("length %q: the mean must be at least 1", spec)
			}
			return Normal{x, y}, nil
		}
		if x > 20 {
			return nil, fmt.Errorf("length %q: mu is the log of the median length (e^%g tokens is too many)", spec, x)
		}
		return LogNormal{x, y}, nil
	case "trace":
		rows, err := ReadAzureTraceFile(args)
		if err != nil {
			return nil, err
		}
		vals := make([]int, len(rows))
		for i, r := range rows {
			if column == "output" {
				vals[i] = r.Output
			} else {
				vals[i] = r.Input
			}
		}
		return Empirical{vals: vals, spec: spec}, nil
	}
	return nil, fmt.Errorf("length %q: unknown distribution %q (known: uniform, normal, lognormal, trace)", spec, kind)
}

// Fixed is a constant length.
type Fixed int

// Sample returns the constant.
func (f Fixed) Sample(*rand.Rand) int { return max(int(f), 1) }

// Mean returns the constant.
func (f Fixed) Mean() float64 { return float64(f) }

// String is the spec ParseDist reads back.
func (f Fixed) String() string { return strconv.Itoa(int(f)) }

// Uniform is uniform over Lo..Hi inclusive.
type Uniform struct{ Lo, Hi int }

// Sample draws a length.
func (u Uniform) Sample(r *rand.Rand) int { return u.Lo + r.IntN(u.Hi-u.Lo+1) }

// Mean is (Lo+Hi)/2.
func (u Uniform) Mean() float64 { return float64(u.Lo+u.Hi) / 2 }

// String is the spec ParseDist reads back.
func (u Uniform) String() string { return fmt.Sprintf("uniform:%d-%d", u.Lo, u.Hi) }

// Normal is a rounded normal distribution, floored at 1.
type Normal struct{ MeanLen, SD float64 }

// Sample draws a length.
func (n Normal) Sample(r *rand.Rand) int {
	return max(1, int(math.Round(n.MeanLen+n.SD*r.NormFloat64())))
}

// Mean returns the mean.
func (n Normal) Mean() float64 { return n.MeanLen }

// String is the spec ParseDist reads back.
func (n Normal) String() string { return fmt.Sprintf("normal:%g,%g", n.MeanLen, n.SD) }

// LogNormal is exp(Mu + Sigma·Z), rounded, floored at 1: its median is e^Mu.
type LogNormal struct{ Mu, Sigma float64 }

// Sample draws a length.
func (l LogNormal) Sample(r *rand.Rand) int {
	return max(1, int(math.Round(math.Exp(l.Mu+l.Sigma*r.NormFloat64()))))
}

// Mean is e^(Mu + Sigma²/2).
func (l LogNormal) Mean() float64 { return math.Exp(l.Mu + l.Sigma*l.Sigma/2) }

// String is the spec ParseDist reads back.
func (l LogNormal) String() string { return fmt.Sprintf("lognormal:%g,%g", l.Mu, l.Sigma) }

// Empirical draws uniformly from a list of observed lengths.
type Empirical struct {
	vals []int
	spec string
}

// Sample draws one of the lengths, at least 1.
func (e Empirical) Sample(r *rand.Rand) int { return max(1, e.vals[r.IntN(len(e.vals))]) }

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
