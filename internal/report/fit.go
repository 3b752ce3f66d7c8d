package report

import "math/rand/v2"

// fit is an ordinary least-squares line y = Intercept + Slope·x.
type fit struct {
	Slope, Intercept float64
	R2               float64 // coefficient of determination
	N                int
}

// linearFit fits y on x by least squares; ok is false with fewer than three
// points or no spread in x.
func linearFit(xs, ys []float64) (f fit, ok bool) {
	n := len(xs)
	if n < 3 || len(ys) != n {
		return fit{}, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(n)
	my /= float64(n)
	var sxx, sxy, syy float64
	for i := range xs {
		dx, dy := xs[i]-mx, ys[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return fit{}, false
	}
	f = fit{Slope: sxy / sxx, N: n}
	f.Intercept = my - f.Slope*mx
	if syy > 0 {
		f.R2 = sxy * sxy / (sxx * syy)
	}
	return f, true
}

// newRand returns the report's deterministic random source.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x746f6b656e)) }
