package report

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// How numbers are written in every format.

func ms(ns int64) float64        { return float64(ns) / 1e6 }
func msf(ns float64) float64     { return ns / 1e6 }
func dur(d time.Duration) string { return fmtMS(ms(int64(d))) }

// fmtMS formats milliseconds compactly: 0.42ms, 12.3ms, 1.52s.
func fmtMS(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) >= 10000:
		return fmt.Sprintf("%.1fs", v/1000)
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0fms", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.2fms", v)
	}
}

// num formats a rate: 3 significant figures, thousands as 12.3k.
func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// pct formats a percentile rank: 99, 99.9.
func pct(p float64) string { return strings.TrimSuffix(fmt.Sprintf("%g", p), ".0") }

// count formats a sample size in at most 7 columns: 1234567 or 151.5M.
func count(n int64) string {
	switch {
	case n < 10_000_000:
		return fmt.Sprint(n)
	case n < 1_000_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	default:
		return fmt.Sprintf("%.2fG", float64(n)/1e9)
	}
}

func errorList(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// wrap breaks s into lines of at most n runes at spaces.
func wrap(s string, n int) []string {
	var lines []string
	var cur []rune
	for _, word := range strings.Fields(s) {
		w := []rune(word)
		if len(cur) > 0 && len(cur)+1+len(w) > n {
			lines = append(lines, string(cur))
			cur = nil
		}
		if len(cur) > 0 {
			cur = append(cur, ' ')
		}
		cur = append(cur, w...)
		for len(cur) > n {
			lines = append(lines, string(cur[:n]))
			cur = cur[n:]
		}
	}
	if len(cur) > 0 {
		lines = append(lines, string(cur))
	}
	return lines
}

// writeTrimmed writes text with trailing spaces removed from every line.
func writeTrimmed(w io.Writer, text []byte) error {
	lines := bytes.Split(text, []byte("\n"))
	for i := range lines {
		lines[i] = bytes.TrimRight(lines[i], " ")
	}
	_, err := w.Write(bytes.Join(lines, []byte("\n")))
	return err
}
