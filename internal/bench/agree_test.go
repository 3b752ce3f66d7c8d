package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// agreeRecords builds 1,000 streamed answers of two one-token chunks and no
// role-only chunk, so that tokentrace's TTFT is also vLLM's and AIPerf's
// and its ITL is also vLLM's ITL and AIPerf's ICL. In some order the
// TTFTs are 1 ms + 100 µs × k and the gaps 1 ms + 60 µs × k for k =
// 0 … 999: the nearest-rank P99 is the value of rank ⌈0.99 × 1000⌉ = 990
// (k = 989), TTFT 99.9 ms and ITL 60.34 ms, and the ranks beside it read
// 99.8 / 100 ms and 60.28 / 60.40 ms.
func agreeRecords() []*latency.Record {
	r := rand.New(rand.NewPCG(4, 2))
	ttft, gap := r.Perm(1000), r.Perm(1000)
	recs := make([]*latency.Record, 1000)
	for i := range recs {
		sent := int64(i) * int64(time.Second)
		first := sent + int64(time.Millisecond) + int64(ttft[i])*100_000
		second := first + int64(time.Millisecond) + int64(gap[i])*60_000
		recs[i] = &latency.Record{Schema: latency.RecordSchema, ID: "r" + string(rune('a'+i%26)), Stream: true,
			IntendedNS: sent, SentNS: sent, FirstTokenNS: first, EndNS: second + int64(time.Millisecond),
			ChunkNS: []int64{first, second}, ChunkTokens: []int32{1, 1}, LastEventNS: second,
			InputTokens: 10, OutputTokens: 2, InputSource: latency.SourceUsage, OutputSource: latency.SourceUsage,
			FinishReason: "stop", Status: 200}
	}
	return recs
}

// TestSameP99Everywhere: the same records give the same P99 in bench's
// console summary (the report's text, built in process as bench builds
// it), in `tokentrace report`'s JSON (records read back from
// requests.jsonl) and in the vLLM and AIPerf compatibility views.
func TestSameP99Everywhere(t *testing.T) {
	recs := agreeRecords()
	const wantTTFT, wantITL = 99.9, 60.34

	// bench: records into the collector (and so the compat views) as they
	// finish.
	coll := report.NewCollector(report.Options{})
	dir := t.TempDir()
	w, err := results.NewRecordWriter(filepath.Join(dir, results.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		w.Write(r)
		coll.Add(r)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var console bytes.Buffer
	if err := coll.Report().WriteText(&console); err != nil {
		t.Fatal(err)
	}
	consoleP99 := map[string]string{}
	for _, line := range strings.Split(console.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 7 && (f[0] == "ttft" || f[0] == "itl") {
			consoleP99[f[0]] = f[6] // metric count mean p50 p90 p95 p99
		}
	}

	// report: the records file read back, written as JSON.
	rep, err := report.Load(context.Background(), []string{dir}, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Metrics []struct {
			Metric string  `json:"metric"`
			P99    float64 `json:"p99_ms"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal(js.Bytes(), &parsed); err != nil {
		t.Fatal(err)
	}
	jsonP99 := map[string]float64{}
	for _, m := range parsed.Metrics {
		jsonP99[m.Metric] = m.P99
	}

	v, back := coll.Report().Compat, rep.Compat // as bench keeps them; from the records read back
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"report JSON ttft", jsonP99["ttft"], wantTTFT},
		{"vLLM TTFT", v.VLLM.TTFT.P99, wantTTFT},
		{"AIPerf TTFT", v.AIPerf.TTFT.P99, wantTTFT},
		{"vLLM TTFT read back", back.VLLM.TTFT.P99, wantTTFT},
		{"report JSON itl", jsonP99["itl"], wantITL},
		{"vLLM ITL", v.VLLM.ITL.P99, wantITL},
		{"AIPerf ICL", v.AIPerf.ICL.P99, wantITL},
		{"AIPerf ICL read back", back.AIPerf.ICL.P99, wantITL},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s P99 = %v ms, want %v", tt.name, tt.got, tt.want)
		}
	}
	if consoleP99["ttft"] != "99.9ms" || consoleP99["itl"] != "60.3ms" {
		t.Errorf("console P99s %v, want ttft 99.9ms and itl 60.3ms:\n%s", consoleP99, console.String())
	}
}

// TestSameP99PastTheExactCaps: with more gaps than report keeps one by one
// (2,097,152) the ITL comes from a histogram in report and in the compat
// views alike, and it is the same histogram, so the P99s are still equal
// (and within 0.05 % of the exact value).
func TestSameP99PastTheExactCaps(t *testing.T) {
	const requests, chunks = 2100, 1001 // 2,100,000 one-token gaps
	r := rand.New(rand.NewPCG(9, 9))
	coll := report.NewCollector(report.Options{Resamples: 10})
	rec := &latency.Record{Schema: latency.RecordSchema, ID: "r", Stream: true, InputTokens: 10,
		OutputTokens: chunks, InputSource: latency.SourceUsage, OutputSource: latency.SourceUsage,
		FinishReason: "stop", Status: 200, ChunkNS: make([]int64, chunks), ChunkTokens: make([]int32, chunks)}
	var exact []int64
	for i := range requests {
		sent := int64(i) * int64(time.Minute)
		rec.IntendedNS, rec.SentNS = sent, sent
		at := sent + int64(time.Millisecond)
		for k := range rec.ChunkNS {
			if k > 0 {
				g := int64(time.Millisecond) + r.Int64N(int64(50*time.Millisecond))
				at += g
				exact = append(exact, g)
			}
			rec.ChunkNS[k], rec.ChunkTokens[k] = at, 1
		}
		rec.FirstTokenNS, rec.LastEventNS, rec.EndNS = rec.ChunkNS[0], at, at+int64(time.Millisecond)
		coll.Add(rec)
	}
	var itl report.Dist
	rep := coll.Report()
	for _, d := range rep.Metrics {
		if d.Metric == "itl" {
			itl = d
		}
	}
	v := rep.Compat
	if !itl.Approx || itl.Count != int64(len(exact)) {
		t.Fatalf("report ITL: approx %v count %d, want a histogram of %d", itl.Approx, itl.Count, len(exact))
	}
	if itl.P99 != v.VLLM.ITL.P99 || itl.P99 != v.AIPerf.ICL.P99 {
		t.Errorf("ITL P99: report %v ms, vLLM view %v, AIPerf ICL %v", itl.P99, v.VLLM.ITL.P99, v.AIPerf.ICL.P99)
	}
	slices.Sort(exact)
	want := float64(stats.Percentile(exact, 99)) / 1e6
	if math.Abs(itl.P99-want) > want*stats.RelativeError {
		t.Errorf("ITL P99 %v ms, exact %v ms: off by more than %v", itl.P99, want, stats.RelativeError)
	}
}
