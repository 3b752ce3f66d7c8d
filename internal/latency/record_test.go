package latency

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A hand-built stream: intended at 0, sent at 2 ms, first token at 102 ms
// (a chunk of 2 tokens), then chunks of 1, 3 and 1 tokens at 112, 142 and
// 150 ms; [DONE] at 151 ms. Seven output tokens.
func handRecord() Record {
	return Record{
		IntendedNS: 0, SentNS: 2e6, FirstTokenNS: 102e6, EndNS: 151e6,
		ChunkNS:      []int64{102e6, 112e6, 142e6, 150e6},
		ChunkTokens:  []int32{2, 1, 3, 1},
		OutputTokens: 7,
	}
}

func TestRecordMetricsByHand(t *testing.T) {
	r := handRecord()
	ttft, _ := r.TTFT()
	e2e, _ := r.E2E()
	tpot, _ := r.TPOT()
	ttftI, _ := r.TTFTIntended()
	got := map[string]time.Duration{
		"ttft": ttft, "e2e": e2e, "tpot": tpot, "ttft_intended": ttftI,
		"queue": r.ClientQueue(), "stall": r.MaxStall(),
	}
	want := map[string]time.Duration{
		"ttft":          100 * time.Millisecond,      // 102 − 2
		"e2e":           149 * time.Millisecond,      // 151 − 2
		"tpot":          time.Duration(49000000 / 6), // (149 − 100) / (7 − 1)
		"ttft_intended": 102 * time.Millisecond,
		"queue":         2 * time.Millisecond,
		"stall":         30 * time.Millisecond,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	// First chunk's second token: 0; then 10 ms; then 30 ms over 3 tokens; then 8 ms.
	if diff := cmp.Diff([]int64{0, 10e6, 10e6, 10e6, 10e6, 8e6}, r.ITLs(nil)); diff != "" {
		t.Errorf("ITLs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{10e6, 30e6, 8e6}, r.ICLs(nil)); diff != "" {
		t.Errorf("ICLs (-want +got):\n%s", diff)
	}
}

func TestITLRemainderSumsExactly(t *testing.T) {
	r := Record{ChunkNS: []int64{0, 10}, ChunkTokens: []int32{1, 3}}
	got := r.ITLs(nil)
	if diff := cmp.Diff([]int64{4, 3, 3}, got); diff != "" {
		t.Errorf("ITLs (-want +got):\n%s", diff)
	}
	// No chunk counts: one token a chunk, each gap a chunk gap.
	one := Record{ChunkNS: []int64{5, 12, 30}}
	if diff := cmp.Diff([]int64{7, 18}, one.ITLs(nil)); diff != "" {
		t.Errorf("one token a chunk: ITLs (-want +got):\n%s", diff)
	}
}

func TestMeetsAll(t *testing.T) {
	r := handRecord()
	slos, _ := ParseSLOs("ttft:p99<=100ms,tpot:p99<=10ms")
	if !r.MeetsAll(slos) {
		t.Error("request at the thresholds should meet them")
	}
	slos, _ = ParseSLOs("ttft:p99<=99ms")
	if r.MeetsAll(slos) {
		t.Error("TTFT 100ms should miss ttft<=99ms")
	}
	r.ErrorKind = FailHTTP5xx
	if r.MeetsAll(nil) {
		t.Error("a failed request never meets its SLOs")
	}
	one := Record{FirstTokenNS: 5, EndNS: 6, OutputTokens: 1}
	if _, ok := one.TPOT(); ok {
		t.Error("TPOT of a one-token answer must be undefined")
	}
	slos, _ = ParseSLOs("tpot:p99<=1ns")
	if !one.MeetsAll(slos) {
		t.Error("a one-token answer has no TPOT to miss")
	}
}
