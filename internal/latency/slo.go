package latency

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SLO is a latency objective: the Percentile of Metric over a run must be at
// most Max. A single request meets the SLO when its own value of Metric is at
// most Max; goodput counts the requests that meet every SLO of a set.
type SLO struct {
	Metric Metric
	// Percentile is in (0, 100]; 100 means the maximum.
	Percentile float64
	Max        time.Duration
}

// String formats s in the syntax ParseSLOs reads.
func (s SLO) String() string {
	p := "max"
	if s.Percentile < 100 {
		p = "p" + strconv.FormatFloat(s.Percentile, 'f', -1, 64)
	}
	return fmt.Sprintf("%s:%s<=%s", s.Metric, p, s.Max)
}

// Met reports whether one request's value v meets the objective's threshold.
func (s SLO) Met(v time.Duration) bool { return v <= s.Max }

// ParseSLOs reads a comma-separated list of objectives such as
// "ttft:p99<=1.5s,tpot:p99<=50ms,e2e:p95<=10s". The percentile part may be
// pNN, pNN.N, or max; when left out ("ttft<=2s") it is p99. Durations use Go
// syntax (500ms, 1.5s). An empty string gives no objectives.
func ParseSLOs(spec string) ([]SLO, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	var out []SLO
	for _, part := range strings.Split(spec, ",") {
		s, err := parseSLO(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("slo %q: %w", part, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSLO(s string) (SLO, error) {
	lhs, rhs, ok := strings.Cut(s, "<=")
	if !ok {
		if strings.ContainsAny(s, "<>=") {
			return SLO{}, errors.New("only <= is supported, as in ttft:p99<=1.5s")
		}
		return SLO{}, errors.New("want METRIC[:pNN]<=DURATION, as in ttft:p99<=1.5s")
	}
	name, pct, hasPct := strings.Cut(lhs, ":")
	m, err := ParseMetric(name)
	if err != nil {
		return SLO{}, err
	}
	out := SLO{Metric: m, Percentile: 99}
	if hasPct {
		pct = strings.ToLower(strings.TrimSpace(pct))
		switch {
		case pct == "max":
			out.Percentile = 100
		case strings.HasPrefix(pct, "p"):
			v, err := strconv.ParseFloat(pct[1:], 64)
			if err != nil || !(v > 0 && v <= 100) {
				return SLO{}, fmt.Errorf("percentile %q: want p followed by a number in (0, 100], or max", pct)
			}
			out.Percentile = v
		default:
			return SLO{}, fmt.Errorf("percentile %q: want pNN or max", pct)
		}
	}
	d, err := time.ParseDuration(strings.TrimSpace(rhs))
	if err != nil {
		return SLO{}, fmt.Errorf("threshold: %w", err)
	}
	if d <= 0 {
		return SLO{}, fmt.Errorf("threshold %s must be positive", d)
	}
	out.Max = d
	return out, nil
}
