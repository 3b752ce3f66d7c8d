package latency

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestTRTLLMPerfMetricsFixture reads the fixture written from
// trtllm-serve's get_perf_metrics: request 7 waited 48 ms (5031.250 −
// 5031.202), prefilled 40 ms and decoded 190 ms; request 8, a decode
// instance's record, waited 4 ms for its KV cache over 4 ms of transfer.
// Arrival is the HTTP front end's (server_arrival_time 5031.200, before
// the executor's 5031.202); request 8's server_arrival_time is null, so
// its arrival_time; done is last_token_time.
func TestTRTLLMPerfMetricsFixture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "engines", "trtllm-perf-metrics.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseTRTLLMPerfMetrics(b)
	if err != nil {
		t.Fatal(err)
	}
	sp := func(q, p, d int64) *ServerSplit {
		return &ServerSplit{QueueNS: q, PrefillNS: p, DecodeNS: d, Source: SourceTRTLLMPerfMetrics, Engine: EngineTRTLLM}
	}
	want := []TRTLLMPerf{
		{RequestID: "7", Split: sp(48_000_000, 40_000_000, 190_000_000), ArrivalS: 5031.200, DoneS: 5031.480},
		{RequestID: "8", Split: sp(4_000_000, 6_000_000, 180_000_000), KVTransferNS: 4_000_000, KVCacheBytes: 2097152,
			ArrivalS: 5032.000, DoneS: 5032.190},
	}
	want[1].Split.KVTransferNS = 4_000_000 // the split keeps it as its own stage too
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestParseTRTLLMPerfMetrics(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		n         int
		err       bool
	}{
		{"empty", `[]`, 0, false},
		{"string id, no last token", `[{"request_id":"a","perf_metrics":{"timing_metrics":{"arrival_time":1,"first_scheduled_time":2,"first_token_time":3}}}]`, 1, false},
		{"out of order", `[{"request_id":1,"perf_metrics":{"timing_metrics":{"arrival_time":3,"first_scheduled_time":2,"first_token_time":3}}}]`, 0, false},
		{"keys are exact", `[{"request_id":1,"perf_metrics":{"timing_metrics":{"Arrival_time":1,"first_scheduled_time":2,"first_token_time":3}}}]`, 0, false},
		{"no perf_metrics", `[{"request_id":1}]`, 0, false},
		{"not an array", `{"request_id":1}`, 0, true},
	} {
		got, err := ParseTRTLLMPerfMetrics([]byte(c.raw))
		if (err != nil) != c.err || len(got) != c.n {
			t.Errorf("%s: %d records, error %v", c.name, len(got), err)
		}
	}
}

func FuzzParseTRTLLMPerfMetrics(f *testing.F) {
	f.Add([]byte(`[{"request_id":7,"perf_metrics":{"timing_metrics":{"arrival_time":1,"first_scheduled_time":1.5,"first_token_time":2,"last_token_time":3,"kv_cache_transfer_start":1.1,"kv_cache_transfer_end":1.2,"kv_cache_size":9}}}]`))
	f.Add([]byte(`[{"request_id":"x","perf_metrics":{"timing_metrics":{"arrival_time":1e300,"first_scheduled_time":2,"first_token_time":3}}}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, _ := ParseTRTLLMPerfMetrics(b)
		for _, r := range recs {
			if s := r.Split; s == nil || s.QueueNS < 0 || s.PrefillNS < 0 || s.DecodeNS < 0 || r.KVTransferNS < 0 || r.KVCacheBytes < 0 {
				t.Fatalf("record %+v from %q", r, b)
			}
		}
	})
}

func TestTRTLLMRequestID(t *testing.T) {
	for in, want := range map[string]string{"chatcmpl-7": "7", "cmpl-123": "123", "chatcmpl-": "", "chatcmpl-abc": "",
		"chatcmpl-5f1e2d": "", "7": "", "cmpl-1-2": "", "chatcmpl-123456789012345678901": ""} {
		if got := TRTLLMRequestID(in); got != want {
			t.Errorf("TRTLLMRequestID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseSteadyClockOffset(t *testing.T) {
	for _, c := range []struct {
		raw        string
		recv, xmit time.Duration
		err        bool
	}{
		{`{"receive_ts":5031.25,"transmit_ts":5031.45}`, 5031250 * time.Millisecond, 5031450 * time.Millisecond, false},
		{`{"receive_ts":2,"transmit_ts":1}`, 0, 0, true},
		{`{"Receive_ts":1,"transmit_ts":2}`, 0, 0, true},
		{`{"receive_ts":-1,"transmit_ts":2}`, 0, 0, true},
		{`{"receive_ts":"1","transmit_ts":2}`, 0, 0, true},
		{`[]`, 0, 0, true},
	} {
		r, x, err := ParseSteadyClockOffset([]byte(c.raw))
		if (err != nil) != c.err || r != c.recv || x != c.xmit {
			t.Errorf("%s: %v %v %v", c.raw, r, x, err)
		}
	}
}

func FuzzParseSteadyClockOffset(f *testing.F) {
	f.Add([]byte(`{"receive_ts":5031.25,"transmit_ts":5031.45}`))
	f.Add([]byte(`{"receive_ts":1e300,"transmit_ts":1e301}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, x, err := ParseSteadyClockOffset(b)
		if err == nil && (r < 0 || x < r) {
			t.Fatalf("%v %v from %q", r, x, b)
		}
	})
}
