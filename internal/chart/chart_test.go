package chart

import (
	"strings"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	var labels []string
	for _, tk := range (niceTicks{}).Ticks(0, 27000) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0 5000 10k 15k 20k 25k" {
		t.Errorf("0..27000: %s", got)
	}
	labels = nil
	for _, tk := range (niceTicks{}).Ticks(0.2, 1.05) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0.2 0.4 0.6 0.8 1.0" {
		t.Errorf("0.2..1.05: %s", got)
	}
}
