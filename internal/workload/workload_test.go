package workload

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

func TestParseDist(t *testing.T) {
	for spec, want := range map[string]Dist{
		"128":                           Fixed(128),
		"uniform:10-20":                 Uniform{10, 20},
		"normal:100,10":                 Normal{100, 10},
		"normal:sd=10,mean=100":         Normal{100, 10},
		"lognormal:mean=256,sigma=1":    LogNormal{256, 1},
		"LogNormal: sigma=0 , mean=40 ": LogNormal{40, 0},
		"lognormal:5,0.5":               LogNormal{math.Exp(5 + 0.5*0.5/2), 0.5}, // MU, SIGMA: the mean is e^(MU+SIGMA²/2)
		"exponential:mean=40":           Exponential{40},
		"exponential:40":                Exponential{40},
		" uniform: 1 - 1 ":              Uniform{1, 1},
	} {
		got, err := ParseDist(spec, "input")
		if err != nil {
			t.Errorf("%q: %v", spec, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", spec, diff)
		}
	}
	for spec, want := range map[string]string{
		"0": "at least 1", "x": "want N", "uniform:5-1": "A <= B", "zipf:1": "unknown distribution",
		"normal:1": "two numbers", "normal:10,-1": "negative", "trace:/nonexistent": "no such file",
		"lognormal:50,1": "mu is the log", "lognormal:mean=0.5,sigma=1": "mean must be in",
		"lognormal:mean=10": "two numbers", "lognormal:mean=10,sd=1": "unknown parameter",
		"lognormal:mean=10,mean=1": "given twice", "lognormal:mean=x,sigma=1": "not a number",
		"lognormal:mean=10,sigma=-1": "negative", "exponential:mean=0": "mean must be in",
		"1073741825": "at most", "max": "want N",
	} {
		if _, err := ParseDist(spec, "input"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want it to mention %q", spec, err, want)
		}
	}
}

func TestDistSamples(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	u := Uniform{3, 5}
	seen := map[int]bool{}
	for range 1000 {
		v := u.Sample(r)
		if v < 3 || v > 5 {
			t.Fatalf("uniform sample %d outside 3..5", v)
		}
		seen[v] = true
	}
	if len(seen) != 3 {
		t.Errorf("uniform:3-5 drew %v, want all of 3, 4, 5", seen)
	}
	for _, d := range []Dist{Normal{200, 30}, LogNormal{160, 0.4}, LogNormal{256, 1}, Exponential{100}} {
		s := 0.0
		const n = 20000
		for range n {
			s += float64(d.Sample(r))
		}
		if m := s / n; math.Abs(m-d.Mean())/d.Mean() > 0.02 {
			t.Errorf("%s: sample mean %.1f, want %.1f ± 2%%", d, m, d.Mean())
		}
	}
}

// Every distribution's String is a spec ParseDist reads back as the same
// distribution.
func TestDistStringRoundTrip(t *testing.T) {
	for _, d := range []Dist{Fixed(7), Uniform{3, 9}, Normal{200, 30.5}, LogNormal{256, 1}, LogNormal{1000.25, 0.5}, Exponential{42}} {
		got, err := ParseDist(d.String(), "input")
		if err != nil {
			t.Errorf("%s: %v", d, err)
			continue
		}
		if diff := cmp.Diff(d, got); diff != "" {
			t.Errorf("%s read back (-want +got):\n%s", d, diff)
		}
	}
}

// A long tail never overflows: draws are capped at MaxLen.
func TestDistSamplesCapped(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, d := range []Dist{LogNormal{1e9, 20}, Exponential{MaxLen}, Normal{MaxLen, 1e12}} {
		for range 1000 {
			if v := d.Sample(r); v < 1 || v > MaxLen {
				t.Fatalf("%s sampled %d", d, v)
			}
		}
	}
}

func TestTraceDist(t *testing.T) {
	path := "../../../shared/data/azure-llm-2023/conv.csv"
	d, err := ParseDist("trace:"+path, "output")
	if err != nil {
		t.Skipf("Azure trace (Patel et al., Splitwise, ISCA 2024, CC-BY 4.0) not available: %v", err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		if v := d.Sample(r); v < 1 {
			t.Fatalf("sample %d < 1", v)
		}
	}
}

func TestConstantArrivalsExact(t *testing.T) {
	a, err := NewArrivals(Constant, 3, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for range 4 {
		at, _ := a.Next()
		got = append(got, at)
	}
	want := []time.Duration{0, 333333333, 666666666, time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestRandomArrivalsRateAndBurstiness(t *testing.T) {
	const rate, n = 50.0, 40000
	cv := func(p Process, burst float64) (gotRate, gotCV float64) {
		a, err := NewArrivals(p, rate, burst, 7)
		if err != nil {
			t.Fatal(err)
		}
		var prev time.Duration
		var s, s2 float64
		for range n {
			at, _ := a.Next()
			g := (at - prev).Seconds()
			if at < prev {
				t.Fatal("offsets went back")
			}
			prev = at
			s += g
			s2 += g * g
		}
		m := s / n
		return 1 / m, math.Sqrt(s2/n-m*m) / m
	}
	for _, tt := range []struct {
		p     Process
		burst float64
		cv    float64 // 1/sqrt(shape)
	}{{Poisson, 0, 1}, {Gamma, 1, 1}, {Gamma, 0.25, 2}, {Gamma, 4, 0.5}} {
		r, c := cv(tt.p, tt.burst)
		if math.Abs(r-rate)/rate > 0.03 || math.Abs(c-tt.cv)/tt.cv > 0.05 {
			t.Errorf("%s(%g): rate %.2f cv %.3f, want %.0f and %.2f", tt.p, tt.burst, r, c, rate, tt.cv)
		}
	}
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := NewArrivals(Poisson, bad, 1, 1); err == nil {
			t.Errorf("rate %g accepted", bad)
		}
	}
	if _, err := NewArrivals(Gamma, 1, 0, 1); err == nil {
		t.Error("burstiness 0 accepted")
	}
	if _, err := ParseProcess("weibull"); err == nil {
		t.Error("unknown process accepted")
	}
}

func TestSyntheticExactLengths(t *testing.T) {
	for _, chat := range []bool{true, false} {
		s := &Synthetic{Chat: chat, Input: Uniform{50, 300}, Output: Fixed(16), Turns: 1, Seed: 9}
		for i := range int64(50) {
			ss := s.Session(i)
			req, ok := ss.Next(0)
			if !ok {
				t.Fatal("no first turn")
			}
			if req.InputTokens < 50 || req.InputTokens > 300 || req.MaxTokens != 16 {
				t.Fatalf("chat=%v: input %d, max %d", chat, req.InputTokens, req.MaxTokens)
			}
			n := tokenizer.Count(req.Prompt)
			if chat {
				n = tokenizer.CountChat(req.Messages)
			}
			if n != req.InputTokens {
				t.Fatalf("chat=%v: tokenizer counts %d, request says %d", chat, n, req.InputTokens)
			}
			if _, ok := ss.Next(5); ok {
				t.Fatal("single-turn session gave a second turn")
			}
		}
	}
	// Same seed, same session, whatever the order.
	s := &Synthetic{Chat: true, Input: Uniform{1, 500}, Output: Uniform{1, 500}, Turns: 1, Seed: 9}
	a, _ := s.Session(7).Next(0)
	s.Session(3).Next(0)
	b, _ := s.Session(7).Next(0)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("session 7 differs between draws:\n%s", diff)
	}
}

func TestSharedPrefixGroups(t *testing.T) {
	s := &Synthetic{Chat: true, Input: Fixed(100), Output: Fixed(8), PrefixTokens: 60, PrefixGroups: 2, Turns: 1, Seed: 1}
	first := func(i int64) string {
		r, _ := s.Session(i).Next(0)
		if r.InputTokens != 100 {
			t.Fatalf("input %d, want 100", r.InputTokens)
		}
		return r.Messages[0].Content
	}
	words := func(s string, n int) string { return strings.Join(strings.Fields(s)[:n], " ") }
	p0, p1, p2 := first(0), first(1), first(2)
	if words(p0, 60) != words(p2, 60) {
		t.Error("sessions 0 and 2 (same group) do not share the 60-token prefix")
	}
	if words(p0, 60) == words(p1, 60) {
		t.Error("sessions 0 and 1 (different groups) share a prefix")
	}
	if words(p0, 61) == words(p2, 61) {
		t.Error("the shared part is longer than the prefix")
	}
}

func TestMultiTurnResendsHistory(t *testing.T) {
	s := &Synthetic{Chat: true, Input: Fixed(10), Output: Fixed(5), Turns: 3, Think: time.Second, Seed: 2}
	ss := s.Session(4)
	r1, _ := ss.Next(0)
	r2, _ := ss.Next(7) // the first answer had 7 tokens
	r3, _ := ss.Next(3)
	_, more := ss.Next(3)
	if more {
		t.Fatal("a fourth turn")
	}
	got := []int{r1.InputTokens, r2.InputTokens, r3.InputTokens, r1.Turn, r3.Turn, len(r3.Messages)}
	// turn 2: 10 + (1 + 7) + 10; turn 3: 28 + (1 + 3) + 10.
	want := []int{10, 28, 42, 1, 3, 5}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if r1.Think != 0 || r2.Think != time.Second {
		t.Errorf("think times %s, %s", r1.Think, r2.Think)
	}
	if r3.Messages[0] != r1.Messages[0] || r3.Messages[2] != r2.Messages[2] {
		t.Error("turn 3 does not resend the earlier turns")
	}
}

func TestReadJSONL(t *testing.T) {
	in := `{"prompt": "hello world", "max_tokens": 5}

{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
`
	got, err := ReadJSONL(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Prompt{
		{Prompt: "hello world", MaxTokens: 5},
		{Messages: []tokenizer.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for in, want := range map[string]string{
		"":             "no entries",
		"{\"x\": 1}\n": "line 1: want",
		"{}\n{bad\n":   "line 1",
		`{"prompt":"a","messages":[{"role":"user","content":"b"}]}`: "both",
		`{"prompt":"a","max_tokens":-1}`:                            "negative",
	} {
		if _, err := ReadJSONL(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", in, err, want)
		}
	}
	p := &Prompts{List: got, Chat: true, Output: Fixed(9), Seed: 1}
	for i := range int64(4) {
		r, _ := p.Session(i).Next(0)
		if r.InputTokens != tokenizer.CountChat(r.Messages) || (r.MaxTokens != 5 && r.MaxTokens != 9) {
			t.Errorf("session %d: %+v", i, r)
		}
	}
}

func TestReadShareGPT(t *testing.T) {
	in := `[{"conversations": [{"from": "human", "value": "what is a token"}, {"from": "gpt", "value": "a piece of text ."}]},
	        {"conversations": [{"from": "gpt", "value": "orphan"}]}]`
	got, err := ReadShareGPT(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Prompt{{Messages: []tokenizer.Message{{Role: "user", Content: "what is a token"}}, MaxTokens: 5}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestReplayWindowAndScale(t *testing.T) {
	rows := []TraceRow{{At: 0, Input: 10, Output: 2}, {At: time.Second, Input: 20}, {At: 3 * time.Second, Input: 30, Output: 4}, {At: 9 * time.Second, Input: 40, Output: 5}}
	w, err := ParseWindow("1s+5s")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReplay(rows, ReplayConfig{Window: w, Scale: 0.5, Chat: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := r.Arrivals()
	var at []time.Duration
	for {
		x, ok := a.Next()
		if !ok {
			break
		}
		at = append(at, x)
	}
	if diff := cmp.Diff([]time.Duration{0, time.Second}, at); diff != "" {
		t.Errorf("offsets (-want +got):\n%s", diff)
	}
	q0, _ := r.Session(0).Next(0)
	q1, _ := r.Session(1).Next(0)
	if q0.InputTokens != 20 || q0.MaxTokens != 1 || q1.InputTokens != 30 || q1.MaxTokens != 4 {
		t.Errorf("requests %d/%d, %d/%d", q0.InputTokens, q0.MaxTokens, q1.InputTokens, q1.MaxTokens)
	}
	for i, q := range []Request{q0, q1} {
		if in, out := r.Lengths(int64(i)); in != q.InputTokens || out != q.MaxTokens {
			t.Errorf("Lengths(%d) = %d, %d; the session sends %d, %d", i, in, out, q.InputTokens, q.MaxTokens)
		}
	}
	for _, bad := range []string{"5s-1s", "x", "1s"} {
		if _, err := ParseWindow(bad); err == nil {
			t.Errorf("window %q accepted", bad)
		}
	}
	if _, err := NewReplay(rows, ReplayConfig{Window: Window{100 * time.Second, 200 * time.Second}, Chat: true, Seed: 1}); err == nil {
		t.Error("empty window accepted")
	}
	if _, err := NewReplay(rows, ReplayConfig{Scale: -1, Chat: true, Seed: 1}); err == nil {
		t.Error("time scale 0 accepted")
	}
}

func FuzzParseDist(f *testing.F) {
	for _, s := range []string{"5", "uniform:1-9", "normal:5,1", "lognormal:2,1", "lognormal:mean=300,sigma=1.5", "exponential:mean=9", "x:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.HasPrefix(strings.TrimSpace(s), "trace") {
			return
		}
		d, err := ParseDist(s, "input")
		if err != nil {
			return
		}
		r := rand.New(rand.NewPCG(1, 1))
		if v := d.Sample(r); v < 1 || v > MaxLen {
			t.Fatalf("%q sampled %d", s, v)
		}
		if back, err := ParseDist(d.String(), "input"); err != nil || back.String() != d.String() {
			t.Fatalf("%q: String %q reads back as %v, %v", s, d.String(), back, err)
		}
	})
}

func FuzzReadJSONL(f *testing.F) {
	f.Add(`{"prompt":"a"}` + "\n" + `{"messages":[{"role":"user","content":"b"}],"max_tokens":3}`)
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ReadJSONL(strings.NewReader(s))
		if err == nil && len(ps) == 0 {
			t.Fatal("no error and no prompts")
		}
	})
}

// Closed-loop workers ask a source for sessions from several goroutines at
// once; a prompt file's sessions are the same as when asked one by one.
func TestPromptsConcurrentSessions(t *testing.T) {
	list := []Prompt{{Prompt: "a b", MaxTokens: 3}, {Prompt: "c d e", MaxTokens: 4}, {Prompt: "f", MaxTokens: 5}}
	want := make([]Request, 8)
	seq := &Prompts{List: list, Seed: 7}
	for i := range want {
		want[i], _ = seq.Session(int64(i)).Next(0)
	}
	p := &Prompts{List: list, Seed: 7}
	got := make([]Request, len(want))
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = p.Session(int64(i)).Next(0)
		}()
	}
	wg.Wait()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-one by one +concurrent):\n%s", diff)
	}
}

// ReadPromptFile tells an empty file from one it could not read.
func TestReadPromptFileErrors(t *testing.T) {
	dir := t.TempDir()
	blank := filepath.Join(dir, "blank.jsonl")
	if err := os.WriteFile(blank, []byte(" \n\t\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPromptFile(blank); err == nil || !strings.Contains(err.Error(), "empty file") {
		t.Errorf("blank file: err %v, want empty file", err)
	}
	// A folder opens but cannot be read: that is not an empty file.
	if _, err := ReadPromptFile(dir); err == nil || strings.Contains(err.Error(), "empty file") {
		t.Errorf("folder: err %v, want the read error", err)
	}
	ok := filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(ok, []byte("\n"+`{"prompt":"a b","max_tokens":2}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ps, err := ReadPromptFile(ok); err != nil || len(ps) != 1 || ps[0].Prompt != "a b" {
		t.Errorf("jsonl file: %+v, %v", ps, err)
	}
}

// Random arrivals are a function of the seed alone.
func TestArrivalsSeeded(t *testing.T) {
	offsets := func(p Process, seed uint64) []time.Duration {
		a, err := NewArrivals(p, 50, 0.5, seed)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]time.Duration, 200)
		for i := range out {
			out[i], _ = a.Next()
		}
		return out
	}
	for _, p := range []Process{Poisson, Gamma} {
		if diff := cmp.Diff(offsets(p, 3), offsets(p, 3)); diff != "" {
			t.Errorf("%s: same seed, different arrivals:\n%s", p, diff)
		}
		if cmp.Equal(offsets(p, 3), offsets(p, 4)) {
			t.Errorf("%s: seeds 3 and 4 gave the same arrivals", p)
		}
	}
}

// BenchmarkArrivals is the cost of one scheduled arrival (docs/performance.md).
func BenchmarkArrivals(b *testing.B) {
	for _, p := range []Process{Poisson, Gamma} {
		b.Run(string(p), func(b *testing.B) {
			a, err := NewArrivals(p, 1000, 0.5, 1)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				a.Next()
			}
		})
	}
}

// The prompt tokens a request shares with others, by hand (docs/metrics.md,
// "Prompt tokens shared and cached").
func TestSharedPrefixTokens(t *testing.T) {
	// Chat, a 60-token group prefix in 100-token prompts: the role token
	// and the prefix, 61; without a prefix, none.
	s := &Synthetic{Chat: true, Input: Fixed(100), Output: Fixed(8), PrefixTokens: 60, PrefixGroups: 2, Turns: 1, Seed: 1}
	r, _ := s.Session(3).Next(0)
	c := &Synthetic{Input: Fixed(100), Output: Fixed(8), PrefixTokens: 60, PrefixGroups: 2, Turns: 1, Seed: 1}
	rc, _ := c.Session(3).Next(0)
	n := &Synthetic{Chat: true, Input: Fixed(100), Output: Fixed(8), Turns: 1, Seed: 1}
	rn, _ := n.Session(3).Next(0)
	// Three turns of 10 new tokens: turn 2 resends turn 1 (10) and its
	// 7-token answer with its role token (8): 18; turn 3 resends 28 and a
	// 3-token answer (4): 32.
	m := &Synthetic{Chat: true, Input: Fixed(10), Output: Fixed(5), Turns: 3, Seed: 2}
	ss := m.Session(4)
	r1, _ := ss.Next(0)
	r2, _ := ss.Next(7)
	r3, _ := ss.Next(3)
	got := []int{r.SharedPrefixTokens, rc.SharedPrefixTokens, rn.SharedPrefixTokens,
		r1.SharedPrefixTokens, r2.SharedPrefixTokens, r3.SharedPrefixTokens}
	if diff := cmp.Diff([]int{61, 60, 0, 0, 18, 32}, got); diff != "" {
		t.Errorf("shared prefix tokens (-want +got):\n%s", diff)
	}

	// A prompt file: "a b c d" and "a b c x y" share 3 tokens, "a b q" 2
	// with either, "z" none; as chat prompts the role token adds one.
	list := []Prompt{{Prompt: "a b c d"}, {Prompt: "a b c x y"}, {Prompt: "a b q"}, {Prompt: "z"}}
	for _, chat := range []bool{false, true} {
		p := &Prompts{List: list, Chat: chat, Output: Fixed(4), Seed: 3}
		want := map[string]int{"a b c d": 3, "a b c x y": 3, "a b q": 2, "z": 0}
		extra := 0
		if chat {
			extra = 1
		}
		for i := range int64(len(list)) {
			req, _ := p.Session(i).Next(0)
			text := req.Prompt
			if chat {
				text = req.Messages[0].Content
			}
			if req.SharedPrefixTokens != want[text]+extra {
				t.Errorf("chat=%v %q: shared %d, want %d", chat, text, req.SharedPrefixTokens, want[text]+extra)
			}
		}
		// A session past the end resends an entry: all of it is shared.
		req, _ := p.Session(int64(len(list))).Next(0)
		if req.SharedPrefixTokens != req.InputTokens {
			t.Errorf("chat=%v: a repeated prompt shares %d of %d tokens", chat, req.SharedPrefixTokens, req.InputTokens)
		}
	}
}
