package report

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// compatRecords are two streamed requests whose views are worked out by
// hand in TestCompatViewsFromRecords (instants in ms).
func compatRecords() []*latency.Record {
	ms := func(v int64) int64 { return v * 1e6 }
	base := latency.Record{Schema: latency.RecordSchema, Stream: true, Status: 200, FinishReason: "stop", InputTokens: 10}
	a, b, warm := base, base, base
	// a: content at 100, 110 and 130 ms, one token each.
	a.ID, a.SentNS, a.FirstTokenNS, a.OutputTokens = "a", 0, ms(100), 3
	a.ChunkNS, a.EndNS = []int64{ms(100), ms(110), ms(130)}, ms(131)
	// b: a role-only chunk at 1150 ms, content at 1200 and 1240 ms, the
	// usage chunk at 1250 ms.
	b.ID, b.SentNS, b.FirstTokenNS, b.OutputTokens = "b", ms(1000), ms(1200), 2
	b.OtherNS, b.ChunkNS, b.LastEventNS, b.EndNS = []int64{ms(1150)}, []int64{ms(1200), ms(1240)}, ms(1250), ms(1251)
	// A warm-up request counts in no view.
	warm.ID, warm.Warmup, warm.SentNS, warm.FirstTokenNS, warm.OutputTokens = "w", true, ms(2000), ms(9000), 1
	warm.ChunkNS, warm.EndNS = []int64{ms(9000)}, ms(9001)
	return []*latency.Record{&warm, &a, &b}
}

// The compatibility views come from the records, so a results folder, a
// bare records file and each side of a comparison print them; the numbers
// are worked out by hand (docs/metrics.md, "Compatibility views").
//
//	vLLM TTFT: a 100, b 150 (the role chunk) → P50 100, mean 125
//	vLLM TPOT: a (130 − 0 − 100) / 2 = 15, b (1250 − 1000 − 150) / 1 = 100 → P50 15
//	vLLM ITL: a 10, 20; b 50, 40 → P50 20
//	AIPerf ITL: a (130 − 100) / 2 = 15, b (1240 − 1200) / 1 = 40 → P50 15
//	AIPerf ICL: a 10, 20; b 40 → P50 20
//	guidellm TPOT: a (130 − 100) / 3 = 10, b (1240 − 1200) / 2 = 20 → P50 10
func TestCompatViewsFromRecords(t *testing.T) {
	const line = "vLLM TTFT/TPOT/ITL P50 100.00/15.00/20.00 ms · AIPerf ITL/ICL P50 15.00/20.00 ms · guidellm TPOT P50 10.00 ms"
	folder := filepath.Join(t.TempDir(), "run")
	writeRun(t, folder, compatRecords(), nil)
	other := filepath.Join(t.TempDir(), "other")
	writeRun(t, other, compatRecords()[1:2], nil) // request a alone: every view's P50 is a's
	bare := filepath.Join(other, results.RequestsFile)
	aLine := "vLLM TTFT/TPOT/ITL P50 100.00/15.00/10.00 ms · AIPerf ITL/ICL P50 15.00/10.00 ms · guidellm TPOT P50 10.00 ms"
	for _, tt := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"folder", Config{Paths: []string{folder}}, []string{"\n\ncompat    " + line + " (docs/metrics.md)\n"}},
		{"records file", Config{Paths: []string{bare}}, []string{"\n\ncompat    " + aLine + " (docs/metrics.md)\n"}},
		{"compare", Config{Paths: []string{folder, bare}, Compare: true},
			[]string{"\n\n" + `compat P50 (docs/metrics.md)          A         B
vLLM TTFT                      100.00ms  100.00ms
vLLM TPOT                       15.00ms   15.00ms
vLLM ITL                        20.00ms   10.00ms
AIPerf ITL                      15.00ms   15.00ms
AIPerf ICL                      20.00ms   10.00ms
guidellm TPOT                   10.00ms   10.00ms
`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Resamples = 10
			r, err := LoadConfig(context.Background(), tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := r.Write(&out); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.HasSuffix(out.String(), w) {
					t.Errorf("the text does not end with %q:\n%s", w, out.String())
				}
			}
			tt.cfg.Format = "json"
			if r, err = LoadConfig(context.Background(), tt.cfg); err != nil {
				t.Fatal(err)
			}
			out.Reset()
			if err := r.Write(&out); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out.String(), "compat") {
				t.Errorf("the JSON form has the compatibility views")
			}
		})
	}
	rep, err := Load(context.Background(), []string{folder}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v := rep.Compat; v.VLLM.TTFT.Mean != 125 || v.VLLM.TTFT.Count != 2 || v.VLLM.ITL.Count != 4 || v.AIPerf.ICL.Count != 3 || v.AIPerf.TTFO.Count != 0 {
		t.Errorf("views %+v", v)
	}
}

// A run without a streamed request has no views, and its text no line.
func TestCompatViewsNeedAStream(t *testing.T) {
	c := NewCollector(Options{})
	for _, r := range compatRecords()[1:] {
		r.Stream = false
		c.Add(r)
	}
	if v := c.Report().Compat; v != nil {
		t.Errorf("views %+v from requests that did not stream", v)
	}
}

// Load reduces batches of records in parallel and merges their views: the
// same views as the records added one by one, past the exact caps too.
func TestCompatViewsMergedAsAdded(t *testing.T) {
	reqs := baseline(1500, 10, 5) // about 150,000 gaps: the gap views count in histograms
	for i := range reqs {
		if i%7 == 0 {
			reqs[i].reasoning = 3 // some reason first (AIPerf's TTFO)
		}
	}
	dir := t.TempDir()
	writeRecords(t, dir, reqs, "")
	defer func(b int) { readBlock = b }(readBlock)
	readBlock = 16 << 10 // many batches
	loaded, err := Load(context.Background(), []string{dir}, Options{Resamples: 10})
	if err != nil {
		t.Fatal(err)
	}
	added := collect(Options{Resamples: 10}, reqs)
	if added.Compat.VLLM.ITL.Count <= stats.DefaultExactCap || added.Compat.AIPerf.TTFO.Count == 0 {
		t.Fatalf("views %+v: want gaps past the exact cap and some TTFO", added.Compat)
	}
	if diff := cmp.Diff(added.Compat, loaded.Compat); diff != "" {
		t.Errorf("views loaded in batches (-added +loaded):\n%s", diff)
	}
}

// Past 65,536 values, a view's percentiles come from the histogram (within
// 0.05 %).
func TestCompatStatPastExactCap(t *testing.T) {
	var h stats.Sample
	for i := range int64(100000) {
		h.Add(1e6 + i*100) // 1 ms .. 11 ms
	}
	st := compatStat(&h)
	if want := float64(1e6+98999*100) / 1e6; st.P99 < want*0.999 || st.P99 > want*1.001 || h.Values() != nil {
		t.Errorf("histogram P99 %g ms, want %g ± 0.1%%", st.P99, want)
	}
}
