package whatif

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/prediction"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// pdBaseline is a run of 2,000-token prompts at 4 req/s on d.
func pdBaseline(t *testing.T, d capacity.Deployment) Baseline {
	t.Helper()
	src := &workload.Synthetic{Input: workload.Fixed(2000), Output: workload.Fixed(64), Turns: 1, Seed: 1}
	w, err := capacity.NewWorkload(src, workload.Load{Rate: 4, Arrival: workload.Poisson, Requests: 60}, true, "test")
	if err != nil {
		t.Fatal(err)
	}
	return Baseline{Deployment: d, Workload: w, Basis: "test"}
}

// predict runs what-if with the levers asked and the findings given,
// and returns each remedy's title.
func predict(t *testing.T, d capacity.Deployment, rules []string, levers ...string) []prediction.Remedy {
	t.Helper()
	rep := &report.Report{}
	for _, r := range rules {
		rep.Findings = append(rep.Findings, report.Finding{Rule: r})
	}
	w, err := Run(context.Background(), pdBaseline(t, d), rep, Options{Levers: levers, SpeculativeK: 4, SpeculativeAlpha: 0.7, Seed: 1, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if w == nil {
		return nil
	}
	for _, r := range w.Remedies {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Title, r.Error)
		}
	}
	return w.Remedies
}

func titles(rs []prediction.Remedy) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Title)
	}
	slices.Sort(out)
	return out
}

// An aggregated run is split into P:D pools of its own GPUs (one more for
// a single replica); a disaggregated run is merged back, its P:D ratio
// moved toward the side the findings say waits, and its link made faster.
func TestPDLevers(t *testing.T) {
	agg := func(n int) capacity.Deployment {
		return capacity.Deployment{Engine: engine.DefaultOptions(), Replicas: n}
	}
	pd := func(p, d int, link string) capacity.Deployment {
		x := agg(d)
		x.PrefillReplicas, x.KVLink = p, link
		return x
	}
	for _, tt := range []struct {
		name   string
		d      capacity.Deployment
		rules  []string
		levers []string
		want   []string
	}{
		{"one replica split", agg(1), nil, []string{"disaggregate"}, []string{"disaggregated 1P:1D"}},
		{"three replicas split", agg(3), nil, []string{"disaggregate"}, []string{"disaggregated 1P:2D", "disaggregated 2P:1D"}},
		{"interference calls for it", agg(2), []string{report.RulePrefillInterference}, nil, nil},
		{"merged", pd(1, 2, ""), nil, []string{"disaggregate"}, []string{"aggregated: 3 replicas"}},
		{"prefill queue", pd(1, 2, ""), []string{report.RulePDPrefillQueue}, nil, []string{"P:D 2:1", "P:D 2:2", "prefill TP2"}},
		{"decode queue", pd(2, 1, ""), []string{report.RulePDDecodeQueue}, nil, []string{"P:D 1:2", "P:D 2:2"}},
		{"transfer-bound over tcp", pd(1, 1, "tcp"), []string{report.RulePDTransfer}, []string{"disaggregate", "kv-link"},
			[]string{"KV link nvlink", "KV link rdma-400g", "aggregated: 2 replicas"}},
		{"no ratio for an aggregated run", agg(2), nil, []string{"pd-ratio", "kv-link"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := predict(t, tt.d, tt.rules, tt.levers...)
			got := titles(rs)
			want := tt.want
			if tt.name == "interference calls for it" {
				// The finding calls for disaggregation among other levers.
				if !slices.Contains(got, "disaggregated 1P:1D") {
					t.Errorf("remedies %v: no disaggregated 1P:1D", got)
				}
				return
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("remedies (-want +got):\n%s", diff)
			}
			for _, r := range rs {
				if len(r.After.ValuesMS) == 0 || r.After.ValuesMS[0] == nil || r.Effect == nil {
					t.Errorf("%s: no prediction (%+v)", r.Title, r.After)
				}
				if strings.HasPrefix(r.Title, "disaggregated") && !strings.Contains(strings.Join(r.Assumes, " "), "rdma-400g") {
					t.Errorf("%s: assumes %q, want the link named", r.Title, r.Assumes)
				}
			}
		})
	}
}

// Over TCP, 2,000-token prompts spend ≈ 84 ms each moving their KV cache
// (docs/performance.md): merging the pools removes it, and NVLink cuts it
// to ≈ 0.6 ms, so both predict a lower TTFT P99 than the run's.
func TestPDLeversLowerATransferBoundTTFT(t *testing.T) {
	d := capacity.Deployment{Engine: engine.DefaultOptions(), Replicas: 1, PrefillReplicas: 1, KVLink: "tcp"}
	for _, r := range predict(t, d, []string{report.RulePDTransfer}, "disaggregate", "kv-link") {
		if r.Effect == nil || *r.Effect >= 1 {
			t.Errorf("%s: effect on TTFT P99 %v, want below 1", r.Title, r.Effect)
		}
	}
}

// A prefill pool at twice the TP prefills each prompt faster: TTFT P99
// predicted lower, the decode pool unchanged, the assumption naming the
// shards the KV transfer moves.
func TestPrefillTPLeverLowersTTFT(t *testing.T) {
	d := capacity.Deployment{Engine: engine.DefaultOptions(), Replicas: 2, PrefillReplicas: 1}
	rs := predict(t, d, []string{report.RulePDPrefillQueue}, "prefill-tp")
	if len(rs) != 1 || rs[0].Title != "prefill TP2" {
		t.Fatalf("remedies %v, want prefill TP2", titles(rs))
	}
	if r := rs[0]; r.Effect == nil || *r.Effect >= 1 || !strings.Contains(strings.Join(r.Assumes, " "), "shards") {
		t.Errorf("effect on TTFT P99 %v, assumes %q", r.Effect, r.Assumes)
	}
}

func TestOptionsCheckNamesTheLink(t *testing.T) {
	err := Options{SpeculativeK: 4, SpeculativeAlpha: 0.7, KVLink: "pigeon"}.Check()
	if err == nil || !strings.Contains(err.Error(), "kv_link") {
		t.Errorf("%v, want an error naming kv_link", err)
	}
}
