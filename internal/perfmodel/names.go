package perfmodel

import (
	"fmt"
	"strings"
)

// UnknownNameError is returned by LookupGPU and LookupModel for a name the
// catalog lacks. It lists the known names and the nearest one.
type UnknownNameError struct {
	Kind    string // "GPU" or "model"
	Name    string
	Known   []string
	Nearest string
}

func (e *UnknownNameError) Error() string {
	return fmt.Sprintf("unknown %s %q; did you mean %q? known: %s",
		e.Kind, e.Name, e.Nearest, strings.Join(e.Known, ", "))
}

// normName folds case and drops separators so "h100 sxm", "H100-SXM" and
// "h100_sxm" compare equal.
func normName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r == '-' || r == '_' || r == ' ' || r == '.' || r == '/' {
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// nearest returns the known name closest to name: one containing it (or
// contained in it) first, else the smallest edit distance.
func nearest(name string, known []string) string {
	n := normName(name)
	best, bestD := "", 1<<30
	for _, k := range known {
		kn := normName(k)
		d := editDistance(n, kn)
		if n != "" && (strings.Contains(kn, n) || strings.Contains(n, kn)) {
			d = abs(len(kn)-len(n)) / 4 // a substring match beats any edit
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
