package whatif

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
)

// Where the server exposes no scheduler (a run through a gateway), the
// twin takes the one the profile was fitted with; the server's own
// evidence wins where it has it.
func TestEngineOfProfileTakesTheProfilesScheduler(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	g, err := perfmodel.LookupGPU("H100-SXM")
	if err != nil {
		t.Fatal(err)
	}
	p := &perfmodel.Profile{Constants: perfmodel.ProfileFromEfficiency(perfmodel.DefaultEfficiency(g)), Schema: perfmodel.ProfileSchema, Model: "Llama-3.1-8B", GPU: "H100-SXM", TP: 1, DType: "bf16", KVDType: "bf16",
		Range:     perfmodel.FitRange{BatchMin: 1, BatchMax: 4, InputMin: 1, InputMax: 512, OutputMin: 1, OutputMax: 64},
		Scheduler: map[string]string{"max_num_seqs": "4", "enable_prefix_caching": "true"}}
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	e, notes, err := EngineOfProfile(path, results.RunInfo{})
	if err != nil || e.MaxNumSeqs != 4 || !e.EnablePrefixCaching || !strings.Contains(strings.Join(notes, "\n"), "the profile's 4") {
		t.Fatalf("EngineOfProfile: seqs %d, prefix caching %v, %v; notes %q", e.MaxNumSeqs, e.EnablePrefixCaching, err, notes)
	}
	e, _, err = EngineOfProfile(path, results.RunInfo{Server: &results.ServerInfo{Config: map[string]string{"max_num_seqs": "16"}}})
	if err != nil || e.MaxNumSeqs != 16 {
		t.Errorf("the server's own max_num_seqs: %d, %v", e.MaxNumSeqs, err)
	}
}
