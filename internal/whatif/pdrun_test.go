package whatif

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/simulate"
)

// writeRecords writes recs as a results folder's requests.jsonl.
func writeRecords(t *testing.T, recs []latency.Record) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, results.RequestsFile), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A measured run whose records carry a prefill hop is disaggregated; the
// link is the preset whose transfers come nearest the kv_transfer stages
// (here exactly TCP's for 2,000-token prompts: 125 full blocks of 16).
func TestPDOfRecords(t *testing.T) {
	ec, _, err := engine.DefaultOptions().Config()
	if err != nil {
		t.Fatal(err)
	}
	tcp, _ := perfmodel.LookupLink("tcp")
	var recs []latency.Record
	for i := range 9 {
		in := 2000 + 16*i
		full := in / ec.BlockSize * ec.BlockSize
		recs = append(recs, latency.Record{ID: "r", InputTokens: in, Timing: []latency.HopStage{
			{Hop: latency.HopPrefill, Name: latency.PrefillQueue, NS: 1000},
			{Hop: latency.HopPrefill, Name: string(latency.TimingPrefill), NS: 5e7},
			{Hop: latency.HopServer, Name: string(latency.TimingKVTransfer), NS: int64(tcp.Transfer(int64(full) * ec.KVBytesPerToken))},
		}})
	}
	recs = append(recs, latency.Record{ID: "failed", ErrorKind: latency.FailHTTP5xx, Timing: recs[0].Timing},
		latency.Record{ID: "aggregated", InputTokens: 100})
	pd, err := pdOfRecords(writeRecords(t, recs), ec)
	if err != nil {
		t.Fatal(err)
	}
	if pd.requests != 9 || pd.link != "tcp" || pd.tokens != 2064 {
		t.Errorf("%+v, want 9 requests over tcp, the median transfer 2064 tokens", pd)
	}
	if n := pd.note(); !strings.Contains(n, "tcp (3.125 GB/s") || !strings.Contains(n, "1 prefill and 1 decode instance") {
		t.Errorf("note %q", n)
	}
	agg, err := pdOfRecords(writeRecords(t, recs[len(recs)-1:]), ec)
	if err != nil || agg.requests != 0 {
		t.Errorf("an aggregated run: %+v, %v", agg, err)
	}
}

// A measured P/D run benched through the gateway takes its pools' sizes
// from the gateway's configuration evidence in run.json (1P:3D here);
// without it, or with no prefill pool named, the twin is 1P:1D.
func TestDisaggregatedOfGatewayPools(t *testing.T) {
	rec := latency.Record{ID: "r", InputTokens: 512, Timing: []latency.HopStage{
		{Hop: latency.HopPrefill, Name: string(latency.TimingPrefill), NS: 5e7}}}
	dir := writeRecords(t, []latency.Record{rec})
	for _, c := range []struct {
		name       string
		server     *results.ServerInfo
		wantP      int
		wantD      int
		wantInNote string
	}{
		{"gateway 1P3D", &results.ServerInfo{Config: map[string]string{"gateway_concurrency": "0", "replicas": "3", "prefill_replicas": "1"}}, 1, 3, "1 prefill and 3 decode instance(s), the pools the gateway's configuration evidence shows"},
		{"gateway 2P1D", &results.ServerInfo{Config: map[string]string{"replicas": "1", "prefill_replicas": "2"}}, 2, 1, "2 prefill and 1 decode"},
		{"gateway aggregated route", &results.ServerInfo{Config: map[string]string{"replicas": "4", "prefill_replicas": "0"}}, 1, 1, "the pools' sizes are not in the records"},
		{"no evidence", nil, 1, 1, "1 prefill and 1 decode instance"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tw := Twin{}
			tw.Deployment = capacity.Deployment{Engine: engine.DefaultOptions(), Replicas: 1}
			if err := tw.disaggregatedOf(dir, results.RunInfo{Server: c.server}); err != nil {
				t.Fatal(err)
			}
			d := tw.Deployment
			if d.PrefillReplicas != c.wantP || d.Replicas != c.wantD {
				t.Errorf("%dP:%dD, want %dP:%dD", d.PrefillReplicas, d.Replicas, c.wantP, c.wantD)
			}
			if n := strings.Join(tw.Notes, "\n"); !strings.Contains(n, c.wantInNote) {
				t.Errorf("notes %q lack %q", n, c.wantInNote)
			}
		})
	}
}

// The twin of a simulated disaggregated run takes its prefill pool's own
// GPU and TP from the run's typed configuration.
func TestTwinOfTakesThePrefillEngine(t *testing.T) {
	dir := t.TempDir()
	if err := results.WriteRunInfo(dir, results.RunInfo{Simulated: true}); err != nil {
		t.Fatal(err)
	}
	o := simulate.DefaultOptions()
	o.Engine.Model, o.Engine.TensorParallelSize, o.Workload.Requests = "Llama-3.1-70B", 4, 10
	o.PrefillReplicas, o.KVLink, o.PrefillGPU, o.PrefillTensorParallelSize = 2, "nvlink", "A100-80GB-SXM", 8
	tw, skip, err := TwinOf(dir, Recorded{Run: &simulate.RunConfig{Options: o}}, "", "")
	if err != nil || skip != "" {
		t.Fatalf("%v, skipped: %s", err, skip)
	}
	d := tw.Deployment
	if d.PrefillReplicas != 2 || d.KVLink != "nvlink" || d.PrefillGPU != "A100-80GB-SXM" || d.PrefillTP != 8 {
		t.Errorf("deployment %+v, want 2 prefill replicas on A100-80GB-SXM TP8 over nvlink", d)
	}
}
