package capacity

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// A disaggregated deployment's rate bound is its slower pool's: P × one
// prefill-only replica's rate, or D × one decode-only replica's.
func TestBoundOfPools(t *testing.T) {
	b := Bound{perReplica: 3, prefillRate: 10, decodeRate: 2}
	for _, tt := range []struct {
		p, d int
		want float64
	}{
		{0, 1, 3}, {0, 4, 12}, // aggregated: replicas × one replica's rate
		{1, 1, 2},  // min(10, 2)
		{1, 3, 6},  // min(10, 6)
		{1, 8, 10}, // min(10, 16): the prefill pool binds
		{2, 8, 16}, // min(20, 16)
	} {
		got := b.at(Deployment{PrefillReplicas: tt.p, Replicas: tt.d}).MaxRate
		if got != tt.want {
			t.Errorf("%dP:%dD: rate bound %v, want %v", tt.p, tt.d, got, tt.want)
		}
	}
}

func TestParseVaryPools(t *testing.T) {
	s := vary(t, "prefill-replicas=0-2", "kv-link=tcp,nvlink")
	if len(s.PrefillReplicas) != 3 || len(s.KVLinks) != 2 {
		t.Fatalf("%+v", s)
	}
	// Aggregated candidates take no link: 1 + 2 × 2 per replica count.
	if got := len(s.around(h100(), []int{1, 2})); got != 10 {
		t.Errorf("%d deployments, want 10", got)
	}
	for _, bad := range []string{"prefill-replicas=-1", "kv-link=pigeon"} {
		if _, err := ParseVary([]string{bad}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	d := h100()
	d.PrefillReplicas, d.KVLink = 1, "pigeon"
	if _, err := d.resolve(); err == nil || !strings.Contains(err.Error(), "kv_link") {
		t.Errorf("an unknown link: %v", err)
	}
}

// A plan over aggregated and disaggregated deployments of long prompts
// answers which way serves the target and with which ratio, each split's
// best with the twin's interval on its latency.
func TestPlanAggregatedOrDisaggregated(t *testing.T) {
	w := synthetic(t, workload.Fixed(3000), workload.Fixed(100), 0, 6, 60)
	obj := Objective{SLOs: slos(t, "tpot:p99<=30ms,ttft:p99<=2s"), TargetRate: 6}
	pl := search(t, h100(), vary(t, "prefill-replicas=0,1", "replicas=1-2"), w, obj)
	a := pl.PD
	if a == nil {
		t.Fatalf("no P/D answer\n%s", planText(pl))
	}
	var ratios []string
	for _, r := range a.Ratios {
		ratios = append(ratios, r.Ratio)
		if r.Candidate == nil {
			t.Fatalf("%s: no candidate", r.Ratio)
		}
		if l := r.Candidate.Latency(true); l != Unbounded {
			// The interval is the twin's stated error at the first SLO
			// (tpot p99: 10 %) either side.
			if r.Err != 0.10 || math.Abs(float64(r.Low)-0.9*float64(l)) > 1 || math.Abs(float64(r.High)-1.1*float64(l)) > 1 {
				t.Errorf("%s: %v ±%v → %v–%v", r.Ratio, l, r.Err, r.Low, r.High)
			}
		}
	}
	if strings.Join(ratios, " ") != "agg 1:1 1:2" {
		t.Errorf("ratios %v", ratios)
	}
	if a.Verdict == "" || (a.Aggregated == nil) == (a.Disaggregated == nil) && a.Aggregated == nil {
		t.Errorf("verdict %q, aggregated %v, disaggregated %v", a.Verdict, a.Aggregated, a.Disaggregated)
	}
	if pl.Best != a.Aggregated && pl.Best != a.Disaggregated {
		t.Errorf("the plan's answer #%d is neither side's best", pl.Best.ID)
	}
	var text bytes.Buffer
	if err := pl.WriteText(&text); err != nil || !strings.Contains(text.String(), "aggregated or disaggregated: ") {
		t.Errorf("text: %v\n%s", err, text.String())
	}
	var page bytes.Buffer
	if err := pl.WriteHTML(&page); err != nil || !strings.Contains(page.String(), "<h2>Aggregated or disaggregated</h2>") ||
		!strings.Contains(page.String(), "1P:2D over rdma-400g") {
		t.Errorf("html: %v, no P/D section", err)
	}
	var js bytes.Buffer
	if err := pl.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var got struct {
		PD struct {
			Verdict string `json:"verdict"`
			Ratios  []struct {
				Ratio string `json:"ratio"`
			} `json:"ratios"`
		} `json:"pd"`
		Candidates []struct {
			Prefill int    `json:"prefill_replicas"`
			Link    string `json:"kv_link"`
			GPUs    int    `json:"gpus"`
			Repl    int    `json:"replicas"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.PD.Verdict != a.Verdict || len(got.PD.Ratios) != 3 {
		t.Errorf("json pd %+v", got.PD)
	}
	for _, c := range got.Candidates {
		if c.GPUs != c.Prefill+c.Repl || (c.Prefill > 0) != (c.Link == "rdma-400g") {
			t.Errorf("json candidate %+v", c)
		}
	}
}

// Without a prefill dimension a plan has no P/D answer.
func TestPlanWithoutPoolsHasNoPDAnswer(t *testing.T) {
	w := synthetic(t, workload.Fixed(500), workload.Fixed(50), 0, 2, 40)
	pl := search(t, h100(), vary(t, "replicas=1-2"), w, Objective{SLOs: []latency.SLO{{Metric: latency.TTFT, Percentile: 99, Max: 1e9}}, TargetRate: 2})
	if pl.PD != nil {
		t.Errorf("P/D answer %+v", pl.PD)
	}
}

// Prefill and decode pools on different GPUs (Splitwise's heterogeneous
// machines): each pool priced at its own GPU, the prefill pool simulated
// on its GPU's performance model, the candidate named and written with it.
func TestPlanPrefillOnAnotherGPU(t *testing.T) {
	s := vary(t, "prefill-replicas=0,1", "prefill-gpu=same,A100-80GB-SXM")
	// Aggregated candidates take no prefill GPU: 1 + 1 × 2.
	if got := len(s.around(h100(), []int{1})); got != 3 {
		t.Errorf("%d deployments, want 3", got)
	}
	w := synthetic(t, workload.Fixed(3000), workload.Fixed(100), 0, 3, 60)
	obj := Objective{SLOs: slos(t, "tpot:p99<=30ms,ttft:p99<=2s"), TargetRate: 3}
	s.Replicas = []int{1, 2}
	pl := search(t, h100(), s, w, obj)
	prices := perfmodel.BuiltinPrices()
	h, _ := prices.Lookup("H100-SXM")
	a, _ := prices.Lookup("A100-80GB-SXM")
	var same, other *Candidate
	for _, c := range pl.Candidates {
		switch {
		case c.PrefillReplicas != 1 || c.Replicas != 2:
		case c.PrefillGPU == "":
			same = c
		default:
			other = c
		}
	}
	if same == nil || other == nil {
		t.Fatalf("candidates 1P:1D on H100 %v, with an A100 prefill %v\n%s", same, other, planText(pl))
	}
	if want := h.PerHour(2) + a.PerHour(1); math.Abs(other.USDPerHour-want) > 1e-9 || same.USDPerHour != h.PerHour(3) {
		t.Errorf("$/h: A100 prefill %v, want %v; H100 prefill %v, want %v", other.USDPerHour, want, same.USDPerHour, h.PerHour(3))
	}
	if !strings.Contains(other.Name, "prefill on A100-80GB-SXM") || other.key == same.key || other.Status == Duplicate {
		t.Errorf("candidate %q (%s), key %q against %q", other.Name, other.Status, other.key, same.key)
	}
	// The A100 prefills more slowly: its TTFT is higher at the same load.
	if other.Check != nil && same.Check != nil && len(other.Check.Values) > 1 && !(other.Check.Values[1] > same.Check.Values[1]) {
		t.Errorf("TTFT P99 with an A100 prefill %v, with an H100 %v: want higher", other.Check.Values[1], same.Check.Values[1])
	}
	var js bytes.Buffer
	if err := pl.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"prefill_gpu": "A100-80GB-SXM"`) {
		t.Errorf("json: %v, no prefill_gpu", err)
	}
	t.Logf("1P:2D all H100 $%.2f/h %s %v; A100 prefill $%.2f/h %s %v", same.USDPerHour, same.Status, same.Check, other.USDPerHour, other.Status, other.Check)
	d := h100()
	d.PrefillReplicas, d.PrefillGPU = 1, "no-such-gpu"
	if _, err := d.resolve(); err == nil || !strings.Contains(err.Error(), "prefill_gpu") {
		t.Errorf("an unknown prefill GPU: %v", err)
	}
}

// A prefill pool at another TP than the decode pool's: its replicas take
// that many GPUs each and are priced so, it prefills faster at TP 2, and
// the candidate is named and written with it; a TP the heads do not divide
// is refused by name.
func TestPlanPrefillTP(t *testing.T) {
	s := vary(t, "prefill-replicas=0,1", "prefill-tensor-parallel-size=same,2")
	// Aggregated candidates take no prefill TP: 1 + 1 × 2.
	if got := len(s.around(h100(), []int{2})); got != 3 {
		t.Errorf("%d deployments, want 3", got)
	}
	w := synthetic(t, workload.Fixed(3000), workload.Fixed(100), 0, 3, 60)
	obj := Objective{SLOs: slos(t, "tpot:p99<=30ms,ttft:p99<=2s"), TargetRate: 3}
	s.Replicas = []int{2}
	pl := search(t, h100(), s, w, obj)
	h, _ := perfmodel.BuiltinPrices().Lookup("H100-SXM")
	var tp1, tp2 *Candidate
	for _, c := range pl.Candidates {
		switch {
		case c.PrefillReplicas != 1:
		case c.PrefillTP == 0:
			tp1 = c
		default:
			tp2 = c
		}
	}
	if tp1 == nil || tp2 == nil {
		t.Fatalf("candidates 1P:2D at the decode TP %v, at TP 2 %v\n%s", tp1, tp2, planText(pl))
	}
	if tp2.GPUs != 4 || tp1.GPUs != 3 || math.Abs(tp2.USDPerHour-h.PerHour(4)) > 1e-9 {
		t.Errorf("GPUs %d and %d, want 4 and 3; $/h %v, want %v", tp2.GPUs, tp1.GPUs, tp2.USDPerHour, h.PerHour(4))
	}
	if !strings.Contains(tp2.Name, "prefill on H100-SXM TP2") || tp2.key == tp1.key {
		t.Errorf("candidate %q, key %q against %q", tp2.Name, tp2.key, tp1.key)
	}
	if tp2.Check != nil && tp1.Check != nil && len(tp2.Check.Values) > 1 && !(tp2.Check.Values[1] < tp1.Check.Values[1]) {
		t.Errorf("TTFT P99 with a TP 2 prefill %v, at TP 1 %v: want lower", tp2.Check.Values[1], tp1.Check.Values[1])
	}
	var js bytes.Buffer
	if err := pl.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"prefill_tensor_parallel_size": 2`) {
		t.Errorf("json: %v, no prefill_tensor_parallel_size", err)
	}
	t.Logf("1P:2D prefill TP1 $%.2f/h %s %v; TP2 $%.2f/h %s %v", tp1.USDPerHour, tp1.Status, tp1.Check, tp2.USDPerHour, tp2.Status, tp2.Check)
	d := h100()
	d.PrefillReplicas, d.PrefillTP = 1, 3
	if _, err := d.resolve(); err == nil || !strings.Contains(err.Error(), "prefill_tp") {
		t.Errorf("a TP the heads do not divide: %v", err)
	}
}
