package verify

import (
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/capacity"
)

func TestParsePDApplied(t *testing.T) {
	for _, tt := range []struct{ in, lever, after, err string }{
		{"disaggregate=1P:1D", "disaggregate", "1P:1D", ""},
		{"disaggregate=2", "disaggregate", "2", ""},
		{"pd-ratio=1:2", "pd-ratio", "1P:2D", ""},
		{"pd-ratio=2p:1d", "pd-ratio", "2P:1D", ""},
		{"kv-link=tcp", "kv-link", "tcp", ""},
		{"pd-ratio=3", "", "", "pd-ratio wants a P:D split"},
		{"disaggregate=0P:1D", "", "", "not a P:D split"},
		{"disaggregate=xP:1D", "", "", "not a P:D split"},
		{"kv-link=carrier-pigeon", "", "", "not a link preset"},
		{"prefill-tp=2", "prefill-tp", "2", ""},
		{"prefill-gpu=A100-80GB-SXM", "prefill-gpu", "A100-80GB-SXM", ""},
		{"prefill-tp=two", "", "", "not a non-negative integer"},
	} {
		c, err := ParseApplied(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseApplied(%q) error %v, want one saying %q", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || c.Lever != tt.lever || c.After != tt.after || !c.Modeled):
			t.Errorf("ParseApplied(%q) = %+v, %v; want lever %s, after %s", tt.in, c, err, tt.lever, tt.after)
		}
	}
	var d capacity.Deployment
	c, _ := ParseApplied("disaggregate=1P:3D")
	k, _ := ParseApplied("kv-link=nvlink")
	if err := apply(&d, []Change{c, k}); err != nil || d.PrefillReplicas != 1 || d.Replicas != 3 || d.KVLink != "nvlink" {
		t.Errorf("apply: %+v, %v", d, err)
	}
	tp, _ := ParseApplied("prefill-tp=2")
	if err := apply(&d, []Change{tp}); err != nil || d.PrefillTP != 2 || d.PrefillReplicas != 1 {
		t.Errorf("apply prefill-tp: %+v, %v", d, err)
	}
	back, _ := ParseApplied("disaggregate=4")
	if err := apply(&d, []Change{back}); err != nil || d.Disaggregated() || d.Replicas != 4 || d.KVLink != "" {
		t.Errorf("apply aggregated: %+v, %v", d, err)
	}
}

// The gateway's evidence of its pools folds into one change of the
// pools; without it, the second run's twin (its records' prefill hop)
// names the change, and its link one of kv_link.
func TestFoldPD(t *testing.T) {
	agg := map[string]string{"gateway_concurrency": "0", "replicas": "2", "prefill_replicas": "0"}
	pd := map[string]string{"gateway_concurrency": "0", "replicas": "1", "prefill_replicas": "1"}
	for _, tt := range []struct {
		name          string
		a, b          map[string]string
		before, after PD
		want          []string
	}{
		{"gateway evidence", agg, pd, PD{Decode: 1}, PD{Prefill: 1, Decode: 1, Link: "tcp"},
			[]string{"pd_split: 2 → 1P:1D (server)", "kv_link: unset → tcp (records)"}},
		{"records only", map[string]string{"replicas": "2"}, map[string]string{"replicas": "1"}, PD{Decode: 1}, PD{Prefill: 1, Decode: 1, Link: "rdma-400g"},
			[]string{"pd_split: 2 → 1P:1D (records)", "kv_link: unset → rdma-400g (records)"}},
		{"ratio", pd, map[string]string{"gateway_concurrency": "0", "replicas": "2", "prefill_replicas": "1"}, PD{Prefill: 1, Decode: 1, Link: "tcp"}, PD{Prefill: 1, Decode: 2, Link: "tcp"},
			[]string{"pd_split: 1P:1D → 1P:2D (server)"}},
		{"unchanged", pd, pd, PD{Prefill: 1, Decode: 1, Link: "tcp"}, PD{Prefill: 1, Decode: 1, Link: "tcp"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := run(tt.a, nil), run(tt.b, nil)
			got := foldPD(Diff(a, b), tt.a, tt.b, tt.before, tt.after, "records")
			var s []string
			for _, c := range got {
				s = append(s, c.String())
			}
			if strings.Join(s, "; ") != strings.Join(tt.want, "; ") {
				t.Errorf("changes %q, want %q", s, tt.want)
			}
			if tt.name == "ratio" && leverName(got) != "pd-ratio" || tt.name == "gateway evidence" && leverName(got) != "disaggregate+kv-link" {
				t.Errorf("lever %q", leverName(got))
			}
		})
	}
}

// The replica a gateway's /upstream/metrics read the engine's settings
// from is no change.
func TestDiffIgnoresUpstreamReplica(t *testing.T) {
	a := run(map[string]string{"replica": "http://127.0.0.1:1", "max_num_seqs": "4"}, nil)
	b := run(map[string]string{"replica": "http://127.0.0.1:2", "max_num_seqs": "4"}, nil)
	if cs := Diff(a, b); len(cs) != 0 {
		t.Errorf("changes %+v, want none", cs)
	}
}
