package capacity

import (
	"testing"

	"github.com/tokentrace/tokentrace/internal/workload"
)

// TestSynthLengthsDrawAsSynthetic: the lengths-only view of a single-turn
// synthetic workload gives every request the lengths the workload's own
// prompt has, chat or completions, with or without a shared prefix.
func TestSynthLengthsDrawAsSynthetic(t *testing.T) {
	in, _ := workload.ParseDist("lognormal:mean=600,sigma=1", "input")
	out, _ := workload.ParseDist("uniform:1-300", "output")
	for _, s := range []*workload.Synthetic{
		{Chat: true, Input: in, Output: out, Turns: 1, PrefixGroups: 1, Seed: 3},
		{Chat: false, Input: in, Output: out, Turns: 1, PrefixGroups: 1, Seed: 4},
		{Chat: true, Input: workload.Fixed(1), Output: out, Turns: 1, PrefixGroups: 1, Seed: 5},
		{Chat: true, Input: in, Output: out, Turns: 1, PrefixTokens: 700, PrefixGroups: 3, Seed: 6},
	} {
		l := synthLengths{s}
		for i := range int64(300) {
			req, ok := s.Session(i).Next(0)
			gotIn, gotOut := l.Lengths(i)
			if !ok || gotIn != req.InputTokens || gotOut != req.MaxTokens {
				t.Fatalf("chat %v prefix %d, request %d: lengths %d/%d, the prompt has %d/%d", s.Chat, s.PrefixTokens, i, gotIn, gotOut, req.InputTokens, req.MaxTokens)
			}
		}
	}
	multi := &workload.Synthetic{Chat: true, Input: in, Output: out, Turns: 2, PrefixGroups: 1}
	if _, ok := lengthsOnly(multi, false).(synthLengths); ok {
		t.Error("sessions of two turns were reduced to lengths")
	}
	shared := &workload.Synthetic{Chat: true, Input: in, Output: out, Turns: 1, PrefixTokens: 10, PrefixGroups: 1}
	if _, ok := lengthsOnly(shared, true).(synthLengths); ok {
		t.Error("a shared prefix under prefix caching was reduced to lengths")
	}
	if _, ok := lengthsOnly(shared, false).(synthLengths); !ok {
		t.Error("a shared prefix without prefix caching kept its text")
	}
}
