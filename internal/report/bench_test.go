package report

import (
	"bufio"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/results"
)

// appendBenchRecord appends one realistic requests.jsonl line: a streamed
// answer of n tokens, one per chunk, with the server's split.
func appendBenchRecord(b []byte, i int, rng *rand.Rand) []byte {
	at := int64(i) * 10e6                              // 100 req/s
	n := 16 + int(math.Exp(rng.NormFloat64()*0.8+4.6)) // median ≈ 115 output tokens
	n = min(n, 2000)
	input := 100 + rng.IntN(3000)
	sent := at + int64(rng.IntN(50000))
	first := sent + 20e6 + int64(input)*20000 + int64(rng.IntN(5e6))
	gap := int64(12e6 + rng.IntN(4e6))
	b = append(b, `{"v":1,"id":"req-`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `","model":"bench","stream":true,"intended_ns":`...)
	b = strconv.AppendInt(b, at, 10)
	b = append(b, `,"sent_ns":`...)
	b = strconv.AppendInt(b, sent, 10)
	b = append(b, `,"wrote_ns":`...)
	b = strconv.AppendInt(b, sent+80000, 10)
	b = append(b, `,"first_byte_ns":`...)
	b = strconv.AppendInt(b, first-1e6, 10)
	b = append(b, `,"first_token_ns":`...)
	b = strconv.AppendInt(b, first, 10)
	end := first + int64(n-1)*gap + 300000
	b = append(b, `,"end_ns":`...)
	b = strconv.AppendInt(b, end, 10)
	b = append(b, `,"chunk_ns":[`...)
	for k := 0; k < n; k++ {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, first+int64(k)*gap, 10)
	}
	b = append(b, `],"input_tokens":`...)
	b = strconv.AppendInt(b, int64(input), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"input_source":"usage","output_source":"usage","finish_reason":"stop","status":200,"server":{"queue_ns":`...)
	b = strconv.AppendInt(b, 2e6, 10)
	b = append(b, `,"prefill_ns":`...)
	b = strconv.AppendInt(b, first-sent-2e6-1e6, 10)
	b = append(b, `,"decode_ns":`...)
	b = strconv.AppendInt(b, int64(n-1)*gap, 10)
	b = append(b, `,"source":"server-timing"}}`...)
	return append(b, '\n')
}

// benchFile writes n records once per process into the temp folder.
func benchFile(tb testing.TB, n int) string {
	path := filepath.Join(os.TempDir(), "tokentrace-report-bench-"+strconv.Itoa(n)+".jsonl")
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		return path
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	var line []byte
	for i := range n {
		line = appendBenchRecord(line[:0], i, rng)
		_, _ = w.Write(line) // a bufio.Writer keeps its first error for Flush, checked below
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	if err := os.Rename(path+".tmp", path); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BenchmarkReport1M reads and reports 1,000,000 records from a
// requests.jsonl file (the file is written once, outside the timing).
// Target: under 10 s and under 1 GiB. It reports the memory the Go runtime
// obtained from the OS (sys-MiB) and the file size.
func BenchmarkReport1M(b *testing.B) { benchReport(b, 1_000_000) }

// BenchmarkReport100k is the same at a tenth of the size, for quick checks.
func BenchmarkReport100k(b *testing.B) { benchReport(b, 100_000) }

func benchReport(b *testing.B, n int) {
	path := benchFile(b, n)
	st, _ := os.Stat(path)
	b.ReportAllocs()
	b.SetBytes(st.Size())
	runtime.GC()
	var rep *Report
	cpu0 := process.SelfCPU()
	start := time.Now()
	for b.Loop() {
		var err error
		rep, err = Load(context.Background(), []string{path}, Options{SLOs: mustSLOs(b, "ttft:p99<=1s,tpot:p99<=20ms")})
		if err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	cpu := process.SelfCPU() - cpu0
	if rep.Summary.Requests != n {
		b.Fatalf("reported %d requests, want %d", rep.Summary.Requests, n)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.Sys)/(1<<20), "sys-MiB")
	b.ReportMetric(float64(st.Size())/(1<<20), "file-MiB")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.Logf("%d records (%.0f MiB) in %v wall, %v CPU per report", n, float64(st.Size())/(1<<20),
		elapsed/time.Duration(b.N), cpu/time.Duration(b.N))
}

// BenchmarkCollectorAdd is bench's per-request cost: one decoded record
// (115 one-token chunks, the server's split) added to a collector.
func BenchmarkCollectorAdd(b *testing.B) {
	line := appendBenchRecord(nil, 1, rand.New(rand.NewPCG(1, 2)))
	var r latency.Record
	if err := results.DecodeRecord(line, &r); err != nil {
		b.Fatal(err)
	}
	c := NewCollector(Options{})
	b.ReportAllocs()
	for b.Loop() {
		c.Add(&r)
	}
}
