package workload

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// DelayDist is a distribution of durations written in the length
// vocabulary (ParseDist) with durations where lengths go: "20ms",
// "uniform:10ms-30ms", "normal:mean=20ms,sd=5ms",
// "lognormal:mean=20ms,sigma=0.5", "exponential:mean=5ms"; "0" is no
// delay. Draws are whole microseconds. The zero value draws 0.
type DelayDist struct {
	d    Dist // over microseconds
	spec string
}

// DelaySyntax is the vocabulary ParseDelay reads, for help texts.
const DelaySyntax = "0, D, uniform:D-D, normal:mean=D,sd=D, lognormal:mean=D,sigma=S or exponential:mean=D (D a duration such as 20ms)"

// ParseDelay reads a delay distribution: ParseDist's spelling with each
// duration converted to microseconds (lognormal's sigma stays a number).
func ParseDelay(spec string) (DelayDist, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "0" {
		return DelayDist{spec: "0"}, nil
	}
	kind, args, hasArgs := strings.Cut(spec, ":")
	if !hasArgs {
		us, err := micros(spec)
		if err != nil {
			return DelayDist{}, fmt.Errorf("delay %q: %w; want %s", spec, err, DelaySyntax)
		}
		return DelayDist{d: Fixed(max(us, 1)), spec: spec}, nil
	}
	kind = strings.ToLower(strings.TrimSpace(kind))
	var conv []string
	switch kind {
	case "uniform":
		a, b, ok := strings.Cut(args, "-")
		if !ok {
			return DelayDist{}, fmt.Errorf("delay %q: want uniform:D-D", spec)
		}
		for _, v := range []string{a, b} {
			us, err := micros(v)
			if err != nil {
				return DelayDist{}, fmt.Errorf("delay %q: %w", spec, err)
			}
			conv = append(conv, strconv.FormatInt(us, 10))
		}
		args = strings.Join(conv, "-")
	case "normal", "lognormal", "exponential":
		for _, p := range strings.Split(args, ",") {
			name, v, named := strings.Cut(p, "=")
			if !named {
				return DelayDist{}, fmt.Errorf("delay %q: want named parameters (mean=D, …)", spec)
			}
			if strings.TrimSpace(name) != "sigma" {
				us, err := micros(v)
				if err != nil {
					return DelayDist{}, fmt.Errorf("delay %q: %s: %w", spec, strings.TrimSpace(name), err)
				}
				v = strconv.FormatInt(us, 10)
			}
			conv = append(conv, strings.TrimSpace(name)+"="+strings.TrimSpace(v))
		}
		args = strings.Join(conv, ",")
	default:
		return DelayDist{}, fmt.Errorf("delay %q: unknown distribution %q (known: uniform, normal, lognormal, exponential)", spec, kind)
	}
	d, err := ParseDist(kind+":"+args, "")
	if err != nil {
		return DelayDist{}, fmt.Errorf("delay %q: %w", spec, err)
	}
	return DelayDist{d: d, spec: spec}, nil
}

// micros reads a non-negative duration ("20ms", "1.5s") in microseconds.
func micros(s string) (int64, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 20ms", strings.TrimSpace(s))
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", strings.TrimSpace(s))
	}
	return d.Microseconds(), nil
}

// Sample draws one delay.
func (d DelayDist) Sample(r *rand.Rand) time.Duration {
	if d.d == nil {
		return 0
	}
	return time.Duration(d.d.Sample(r)) * time.Microsecond
}

// Mean is the expected delay.
func (d DelayDist) Mean() time.Duration {
	if d.d == nil {
		return 0
	}
	return time.Duration(d.d.Mean() * float64(time.Microsecond))
}

// String is the spec as given.
func (d DelayDist) String() string {
	if d.spec == "" {
		return "0"
	}
	return d.spec
}
