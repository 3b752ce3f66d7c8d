package bench

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/workload"
)

var update = flag.Bool("update", false, "rewrite golden files")

// replay feeds recorded reads to the client's stream parser, moving the
// clock to each read's instant.
type replay struct {
	reads []struct {
		At   int64  `json:"at"`
		Data string `json:"data"`
	}
	now int64
}

func (r *replay) Read(p []byte) (int, error) {
	if len(r.reads) == 0 {
		return 0, os.ErrClosed // never reached: the stream ends with [DONE]
	}
	r.now = r.reads[0].At
	n := copy(p, r.reads[0].Data)
	r.reads[0].Data = r.reads[0].Data[n:]
	if r.reads[0].Data == "" {
		r.reads = r.reads[1:]
	}
	return n, nil
}

func recordedStream(t *testing.T) *latency.Record {
	t.Helper()
	b, err := os.ReadFile("testdata/vllm_stream.json")
	if err != nil {
		t.Fatal(err)
	}
	rp := &replay{}
	var f struct {
		Reads json.RawMessage `json:"reads"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(f.Reads, &rp.reads); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(Target{BaseURL: "http://unused", Endpoint: EndpointChat, Stream: true}, func() int64 { return rp.now }, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := &latency.Record{Stream: true, SentNS: 0}
	c.readStream(context.Background(), rec, &workload.Request{InputTokens: 12}, rp, c.now)
	if !rec.OK() {
		t.Fatalf("%s: %s", rec.ErrorKind, rec.Error)
	}
	return rec
}

// The worked example of docs/metrics.md ("Compatibility views"), computed
// by hand, then the whole result against a golden file.
func TestCompatViewsOnRecordedStream(t *testing.T) {
	rec := recordedStream(t)
	ms := func(v float64) int64 { return int64(v * 1e6) }
	ttft, _ := rec.TTFT()
	tpot, _ := rec.TPOT()
	e2e, _ := rec.E2E()
	got := map[string]any{
		"ttft": ttft, "tpot": tpot, "e2e": e2e, "itl": rec.ITLs(nil), "icl": rec.ICLs(nil), "n": rec.OutputTokens,
	}
	want := map[string]any{
		"ttft": 150 * time.Millisecond, // the first content chunk, not the role chunk
		"tpot": 14 * time.Millisecond,  // (206 − 150) / (5 − 1)
		"e2e":  206 * time.Millisecond, // [DONE]
		"itl":  []int64{ms(10), ms(20), 0},
		"icl":  []int64{ms(10), ms(20), 0},
		"n":    5, // the usage chunk; the finish chunk carried the fifth token
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tokentrace metrics (-want +got):\n%s", diff)
	}
	c := report.CompatOf(rec)
	hand := report.CompatRequest{
		VLLMTTFT:     ms(100),                                    // the role-only chunk
		VLLMTPOT:     ms(26.25),                                  // (205 − 100) / 4: latency ends at the usage chunk
		VLLMITL:      []int64{ms(50), ms(10), ms(20), 0, ms(20)}, // every choice event, the finish chunk included
		AIPerfTTFT:   ms(150),
		AIPerfITL:    ms(7.5), // (180 − 150) / (5 − 1): request latency ends at the last response
		AIPerfTTFO:   ms(150), // no reasoning: TTFT
		AIPerfICL:    []int64{ms(10), ms(20), 0},
		GuidellmTPOT: ms(6), // (180 − 150) / 5
	}
	if diff := cmp.Diff(hand, c); diff != "" {
		t.Errorf("compatibility views (-want +got):\n%s", diff)
	}
	golden := filepath.Join("testdata", "vllm_stream.golden.json")
	b, _ := json.MarshalIndent(map[string]any{"record": rec, "compat": c}, "", "  ")
	if *update {
		if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want2, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want2), string(b)+"\n"); diff != "" {
		t.Errorf("golden %s (-want +got):\n%s", golden, diff)
	}
}

// The views over a run, as bench keeps them in summary.json: the
// report's collector aggregates each request's values.
func TestCompatAggregate(t *testing.T) {
	rec := recordedStream(t)
	coll := report.NewCollector(report.Options{})
	for range 3 {
		coll.Add(rec)
	}
	v := coll.Report().Compat
	near := func(got, want float64) bool { return got >= want*0.999 && got <= want*1.001 }
	if !near(v.VLLM.TTFT.P50, 100) || !near(v.VLLM.TPOT.P50, 26.25) || v.Guidellm.TPOT.Mean != 6 || v.VLLM.ITL.Count != 15 {
		t.Errorf("views %+v", v)
	}
	if v.VLLM.ITL.P99 != 50 {
		t.Errorf("vLLM ITL P99 %g ms, want 50", v.VLLM.ITL.P99)
	}
}
