package capacity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/racedetect"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// testOptions keep the plans CI-sized: 20 s of arrivals per simulation.
var testOptions = SearchOptions{Options: Options{Seed: 1, MinSpan: 20 * time.Second}, Parallel: 2}

func slos(t testing.TB, spec string) []latency.SLO {
	t.Helper()
	s, err := latency.ParseSLOs(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func synthetic(t testing.TB, in, out workload.Dist, prefix int, rate float64, requests int) Workload {
	t.Helper()
	src := &workload.Synthetic{Chat: true, Input: in, Output: out, PrefixTokens: prefix, PrefixGroups: 1, Turns: 1, Seed: 1}
	w, err := NewWorkload(src, workload.Load{Rate: rate, Arrival: workload.Poisson, Requests: requests}, true, "test")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func h100() Deployment {
	e := engine.DefaultOptions()
	e.EnableChunkedPrefill = true
	return Deployment{Engine: e, Replicas: 1}
}

func vary(t testing.TB, specs ...string) Space {
	t.Helper()
	s, err := ParseVary(specs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func search(t testing.TB, base Deployment, space Space, w Workload, obj Objective) *Plan {
	t.Helper()
	pl, err := Search(context.Background(), base, space, w, obj, nil, testOptions)
	if err != nil {
		t.Fatalf("%v\n%s", err, planText(pl))
	}
	return pl
}

func planText(pl *Plan) string {
	if pl == nil {
		return ""
	}
	var b strings.Builder
	_ = pl.WriteText(&b)
	for _, c := range pl.Candidates {
		fmt.Fprintf(&b, "\n#%d %s: %s %s", c.ID, c.Name, c.Status, c.Reason)
	}
	return b.String()
}

// TestOnlyPrefixCachingMeetsTTFT: 1,500-token prompts sharing a
// 1,400-token system prompt, TTFT P99 ≤ 25 ms on H100s. Prefilling a whole
// prompt takes about 45 ms, so without prefix caching no replica count can
// meet it (the roofline prunes those candidates, and a simulation confirms
// it); with prefix caching only the 100 new tokens are prefilled.
func TestOnlyPrefixCachingMeetsTTFT(t *testing.T) {
	if racedetect.Enabled {
		t.Skip("builds and tokenizes thousands of 1,500-token prompts: ~90 s under -race; the search's concurrency is raced by the other plans")
	}
	w := synthetic(t, workload.Fixed(1500), workload.Fixed(20), 1400, 4, 100)
	s := slos(t, "ttft:p99<=25ms")
	pl := search(t, h100(), vary(t, "enable-prefix-caching=false,true", "replicas=1-2"), w, Objective{SLOs: s, TargetRate: 4})
	if pl.Best == nil || !pl.Best.Engine.EnablePrefixCaching || pl.Best.Replicas != 1 {
		t.Fatalf("best: %+v\n%s", pl.Best, planText(pl))
	}
	for _, c := range pl.Candidates {
		if !c.Engine.EnablePrefixCaching && c.Status != PrunedLatency && c.Status != Misses {
			t.Errorf("#%d without prefix caching: %s", c.ID, c.Status)
		}
	}
	p, err := Evaluate(h100(), w, s, 4, testOptions.Options)
	if err != nil || p.Meets {
		t.Errorf("without prefix caching the simulation meets the SLO: %+v %v", p, err)
	}
}

// TestOnlyMoreReplicasMeetRate: 1,000-token prompts at 75 req/s, more than
// one H100 prefills (about 33 req/s); neither prefix caching (nothing is
// shared) nor a different max_num_seqs helps; replicas do. The answer is
// the fewest replicas that meet the SLOs, and every candidate with fewer
// misses them.
func TestOnlyMoreReplicasMeetRate(t *testing.T) {
	const rate = 75
	w := synthetic(t, workload.Fixed(1000), workload.Fixed(50), 0, rate, 200)
	s := slos(t, "ttft:p99<=1s")
	pl := search(t, h100(), vary(t, "replicas=1-4", "enable-prefix-caching=false,true", "max-num-seqs=64,256"), w,
		Objective{SLOs: s, TargetRate: rate})
	if pl.Best == nil || pl.Best.Replicas < 2 {
		t.Fatalf("best: %+v\n%s", pl.Best, planText(pl))
	}
	for _, c := range pl.Candidates {
		if c.Replicas < pl.Best.Replicas && (c.Status == Meets || c.Status == Dominated) {
			t.Errorf("#%d %s meets with fewer replicas than the answer #%d", c.ID, c.Name, pl.Best.ID)
		}
	}
	// The chosen configuration, simulated at the target by simulate itself
	// and judged here, meets the SLO; the next cheaper candidate does not.
	ttft := simulateP99(t, pl.Best.Deployment, w, rate)
	if ttft > s[0].Max {
		t.Errorf("the answer #%d simulated at the target: TTFT P99 %v > %v", pl.Best.ID, ttft, s[0].Max)
	}
	var cheaper []*Candidate
	for _, c := range pl.Candidates {
		if c.USDPerHour < pl.Best.USDPerHour && c.Status != Duplicate {
			cheaper = append(cheaper, c)
		}
	}
	if len(cheaper) == 0 {
		t.Fatal("no cheaper candidate")
	}
	next := slices.MaxFunc(cheaper, func(a, b *Candidate) int { return int(a.USDPerHour*100 - b.USDPerHour*100) })
	if p, err := Evaluate(next.Deployment, w, s, rate, testOptions.Options); err != nil || p.Meets {
		t.Errorf("the next cheaper #%d %s meets the SLO at the target: %+v %v", next.ID, next.Name, p, err)
	}
}

// simulateP99 runs the deployment through simulate.Run at rate (the
// request count Evaluate would use) and returns the P99 TTFT of the
// measured requests, failures counting as infinitely late.
func simulateP99(t *testing.T, d Deployment, w Workload, rate float64) time.Duration {
	t.Helper()
	ec, _, err := d.Engine.Config()
	if err != nil {
		t.Fatal(err)
	}
	src, load := w.At(rate)
	load.Requests = max(load.Requests, int(math.Ceil(rate*testOptions.MinSpan.Seconds())))
	load.WarmupRequests = load.Requests / 10
	ec.Seed, load.Seed = testOptions.Seed, testOptions.Seed
	var v []int64
	_, err = simulate.Run(simulate.Config{Engine: ec, Replicas: d.Replicas, Balancer: d.Balancer, Workload: src, Load: load, IgnoreEOS: true},
		func(r *latency.Record) {
			if r.Warmup {
				return
			}
			d, ok := r.TTFT()
			if !ok || !r.OK() {
				d = time.Duration(math.MaxInt64)
			}
			v = append(v, int64(d))
		})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(v)
	return time.Duration(stats.Percentile(v, 99))
}

// TestMaxTokensCapIsTheCheapestLever: answers of up to 2,000 tokens and an
// E2E P99 of 8 s. Decoding 2,000 tokens takes over 10 s even alone on an
// H200 with fp8 weights, so no hardware meets it; capping max_tokens at 512
// (the gateway's max_max_tokens) does, on the cheapest GPU of the space.
func TestMaxTokensCapIsTheCheapestLever(t *testing.T) {
	out, _ := workload.ParseDist("uniform:100-2000", "output")
	w := synthetic(t, workload.Fixed(500), out, 0, 2, 100)
	s := slos(t, "e2e:p99<=8s")
	pl := search(t, h100(), vary(t, "gpu=H100-SXM,H200", "dtype=bf16,fp8", "max-max-tokens=none,512", "replicas=1-2"), w,
		Objective{SLOs: s, TargetRate: 2})
	if pl.Best == nil || pl.Best.MaxMaxTokens != 512 {
		t.Fatalf("best: %+v\n%s", pl.Best, planText(pl))
	}
	for _, c := range pl.Candidates {
		if c.MaxMaxTokens == 0 && (c.Status == Meets || c.Status == Dominated) {
			t.Errorf("#%d %s meets without the cap", c.ID, c.Name)
		}
	}
	if pl.Best.Replicas != 1 || pl.Best.GPU != "H100-SXM" {
		t.Errorf("the cap alone should do on one H100: %s\n%s", pl.Best.Name, planText(pl))
	}
}

// TestNoConfigurationNamesTheClosest: an SLO no GPU can meet gives
// ErrNoneMeets, with the closest candidate and by how much it misses.
func TestNoConfigurationNamesTheClosest(t *testing.T) {
	w := synthetic(t, workload.Fixed(1000), workload.Fixed(50), 0, 10, 100)
	s := slos(t, "ttft:p99<=2ms")
	pl, err := Search(context.Background(), h100(), vary(t, "gpu=H100-SXM,L4", "replicas=1-2"), w, Objective{SLOs: s, TargetRate: 10}, nil, testOptions)
	if !errors.Is(err, ErrNoneMeets) || pl == nil || pl.Closest == nil || pl.Best != nil {
		t.Fatalf("err %v plan %+v", err, pl)
	}
	if pl.Closest.GPU != "H100-SXM" || !(pl.boundMiss(pl.Closest) > 1) {
		t.Errorf("closest: %s, miss %v", pl.Closest.Name, pl.boundMiss(pl.Closest))
	}
	text := planText(pl)
	if !strings.Contains(text, "no configuration meets the SLOs") || !strings.Contains(text, "closest  #") {
		t.Errorf("text:\n%s", text)
	}
}

// TestMaximizeThroughputWithinBudget: the answer is the highest goodput
// among the candidates within the budget, and goodput grows with replicas.
func TestMaximizeThroughputWithinBudget(t *testing.T) {
	w := synthetic(t, workload.Fixed(1000), workload.Fixed(50), 0, 10, 200)
	s := slos(t, "ttft:p99<=1s")
	pl := search(t, h100(), vary(t, "replicas=1-3"), w, Objective{SLOs: s, Budget: 6})
	if pl.Best == nil || pl.Best.Replicas != 2 {
		t.Fatalf("best: %+v\n%s", pl.Best, planText(pl))
	}
	var one, two *Candidate
	for _, c := range pl.Candidates {
		switch c.Replicas {
		case 1:
			one = c
		case 2:
			two = c
		case 3:
			if c.Status != OverBudget {
				t.Errorf("3 replicas at $%.2f/h: %s", c.USDPerHour, c.Status)
			}
		}
	}
	if !(two.GoodputRate() > 1.6*one.GoodputRate()) {
		t.Errorf("goodput of 1 and 2 replicas: %v, %v", one.GoodputRate(), two.GoodputRate())
	}
	if !(one.GoodputRate() <= one.Bound.MaxRate*DefaultMargin) {
		t.Errorf("goodput %v above the roofline bound %v", one.GoodputRate(), one.Bound.MaxRate)
	}
}

// TestProfileAppliesToItsCandidates: a profile for H100-SXM TP1 bf16
// times the candidates of that GPU, TP and precision ("profiled"); the
// others run on the default constants, and the plan goes on.
func TestProfileAppliesToItsCandidates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h100.yaml")
	gpu, err := perfmodel.LookupGPU("H100-SXM")
	if err != nil {
		t.Fatal(err)
	}
	c := perfmodel.ProfileFromEfficiency(perfmodel.DefaultEfficiency(gpu))
	p := &perfmodel.Profile{Schema: perfmodel.ProfileSchema, Model: "Llama-3.1-8B", GPU: "H100-SXM", TP: 1, DType: "bf16", KVDType: "bf16",
		Constants: c, Range: perfmodel.FitRange{BatchMin: 1, BatchMax: 32, InputMin: 100, InputMax: 3000, OutputMin: 16, OutputMax: 128}}
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	base := h100()
	base.Engine.Profile = path
	w := synthetic(t, workload.Fixed(500), workload.Fixed(20), 0, 5, 100)
	pl, err := Search(context.Background(), base, vary(t, "gpu=H100-SXM,L4", "replicas=1"), w, Objective{SLOs: slos(t, "ttft:p99<=1s"), TargetRate: 5}, nil, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pl.Candidates {
		if profiled := strings.HasSuffix(c.Name, "profiled"); profiled != (c.GPU == "H100-SXM") {
			t.Errorf("#%d %s", c.ID, c.Name)
		}
	}
	base.Engine.Profile = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := Search(context.Background(), base, Space{}, w, Objective{SLOs: slos(t, "ttft:p99<=1s"), TargetRate: 5}, nil, testOptions); err == nil {
		t.Error("a missing profile was accepted")
	}
}
