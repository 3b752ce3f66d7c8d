package field

import "strings"

// FoldName folds case and drops separators, so that "h100 sxm",
// "H100-SXM" and "h100_sxm" compare equal.
func FoldName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r == '-' || r == '_' || r == ' ' || r == '.' || r == '/' {
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Nearest returns the known name closest to name, compared folded
// (FoldName): one containing it (or contained in it) first, else the
// smallest edit distance; "" when known is empty.
func Nearest(name string, known []string) string {
	best, _ := nearest(name, known)
	return best
}

// Suggest returns the known name a mistyped name most likely meant: the
// nearest within an edit distance of a third of its length (at least 2),
// or one it is a part of; "" when none is that close.
func Suggest(name string, known []string) string {
	best, d := nearest(name, known)
	if best == "" || d > max(2, len([]rune(FoldName(name)))/3) {
		return ""
	}
	return best
}

func nearest(name string, known []string) (string, int) {
	n := FoldName(name)
	best, bestD := "", 1<<30
	for _, k := range known {
		kn := FoldName(k)
		d := editDistance(n, kn)
		if n != "" && (strings.Contains(kn, n) || strings.Contains(n, kn)) {
			d = absInt(len(kn)-len(n)) / 4 // a substring match beats any edit
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	return best, bestD
}

func absInt(x int) int {
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
