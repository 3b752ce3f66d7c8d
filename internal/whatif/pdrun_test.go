package whatif

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
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
