package bench

import (
	"context"
	"io"
	"testing"
	"time"
)

// The self-test's figures as Go benchmarks (docs/performance.md). Each
// reports its measurements as custom metrics; run one at a time, with the
// garbage-collector settings tokentrace bench runs under:
//
//	GOGC=400 GOMEMLIMIT=1GiB go test -run '^$' -bench Fidelity -benchtime 1x ./internal/bench
func BenchmarkFidelity1000Streams(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		res := &SelfTestResult{}
		if err := fidelityTest(context.Background(), SelfTestOptions{Streams: 1000, Tokens: 16, Gap: 50 * time.Millisecond}, res); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(res.TTFTErr[1], "ttft-err-p99-ms")
		b.ReportMetric(res.FloorTTFTErr[1], "floor-ttft-err-p99-ms")
		b.ReportMetric(res.BytesPerStream/1024, "KiB/stream")
		b.ReportMetric(res.FloorBytesPerStream/1024, "floor-KiB/stream")
	}
}

func BenchmarkRate5000(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		res := &SelfTestResult{}
		if err := rateTest(context.Background(), SelfTestOptions{Rate: 5000, RateDuration: 2 * time.Second, Tokens: 16}, res); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(res.AchievedRPS/res.ScheduledRPS, "achieved/scheduled")
		b.ReportMetric(res.PacerOnlyRPS/5000, "pacer-alone/target")
		b.ReportMetric(res.SendLagP99MS, "send-lag-p99-ms")
	}
}

func BenchmarkManyRequestsMemory(b *testing.B) {
	for b.Loop() {
		res := &SelfTestResult{}
		if err := manyTest(context.Background(), SelfTestOptions{Many: 20000, Tokens: 16}, res); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(res.BytesPerReq, "B/request-retained")
	}
}

// TestSelfTestSmall runs the whole self-test small, so it keeps working;
// its figures are not judged here (speed is measured, not asserted).
func TestSelfTestSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs loopback servers")
	}
	r, err := RunSelfTest(context.Background(), SelfTestOptions{Streams: 20, Gap: 10 * time.Millisecond, Rate: 200,
		RateDuration: 200 * time.Millisecond, Tokens: 4, Many: 200}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 0 || r.FloorErrors != 0 || r.RateErrors != 0 || r.AchievedRPS == 0 {
		t.Errorf("self-test result %+v", r)
	}
}
