package stats

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestHistogramJSONByHand: the stable form of {0, 600, 2000, 3001, 3000}:
// below 2,048 every bucket holds one value; 3000 and 3001 share the
// width-2 bucket [3000, 3002).
func TestHistogramJSONByHand(t *testing.T) {
	h := histOf([]int64{0, 600, 2000, 3001, 3000})
	got := encode(t, h)
	want := `{"sub_buckets":1024,"count":5,"sum":8601,"min":0,"max":3001,"buckets":[[0,1],[600,1],[2000,1],[3000,2]]}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := encode(t, &Histogram{}); got != `{"sub_buckets":1024,"count":0,"sum":0,"min":0,"max":0,"buckets":[]}` {
		t.Errorf("empty: %s", got)
	}
	var back Histogram
	if err := json.Unmarshal([]byte(want), &back); err != nil {
		t.Fatal(err)
	}
	if encode(t, &back) != want || back.Percentile(100) != 3001 || back.Percentile(80) != 3001 || back.Percentile(60) != 2000 {
		t.Errorf("round trip: %s p80 %d", encode(t, &back), back.Percentile(80))
	}
}

func TestHistogramJSONRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for range 20 {
		h := histOf(randomValues(r, r.IntN(2000)))
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var back Histogram
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%v in %s", err, b)
		}
		if encode(t, &back) != string(b) {
			t.Fatal("round trip changed the histogram")
		}
		for _, p := range []float64{1, 50, 99, 100} {
			if back.Percentile(p) != h.Percentile(p) {
				t.Errorf("p%v: %d after a round trip, %d before", p, back.Percentile(p), h.Percentile(p))
			}
		}
	}
}

func TestHistogramJSONRejects(t *testing.T) {
	const ok = `"count":2,"sum":1300,"min":600,"max":700,"buckets":[[600,1],[700,1]]}`
	tests := []struct{ name, in, want string }{
		{"not JSON", `{`, "unexpected end"},
		{"other layout", `{"sub_buckets":128,` + ok, "sub_buckets 128"},
		{"no layout", `{` + ok, "sub_buckets 0"},
		{"count 0 with buckets", `{"sub_buckets":1024,"count":0,"sum":0,"min":0,"max":0,"buckets":[[1,1]]}`, "count 0"},
		{"negative count", `{"sub_buckets":1024,"count":-1,"sum":0,"min":0,"max":0,"buckets":[[1,1]]}`, "count -1"},
		{"count without buckets", `{"sub_buckets":1024,"count":1,"sum":0,"min":0,"max":0,"buckets":[]}`, "count 1 with 0 buckets"},
		{"not a bucket start", `{"sub_buckets":1024,"count":1,"sum":3001,"min":3001,"max":3001,"buckets":[[3001,1]]}`, "not the lowest value"},
		{"out of order", `{"sub_buckets":1024,"count":2,"sum":1300,"min":600,"max":700,"buckets":[[700,1],[600,1]]}`, "ascending"},
		{"repeated", `{"sub_buckets":1024,"count":2,"sum":1200,"min":600,"max":600,"buckets":[[600,1],[600,1]]}`, "ascending"},
		{"zero count", `{"sub_buckets":1024,"count":1,"sum":600,"min":600,"max":700,"buckets":[[600,1],[700,0]]}`, "count > 0"},
		{"negative value", `{"sub_buckets":1024,"count":1,"sum":0,"min":0,"max":0,"buckets":[[-1,1]]}`, "value ≥ 0"},
		{"counts do not add up", `{"sub_buckets":1024,"count":3,` + ok[len(`"count":2,`):], "hold 2 values"},
		{"min outside", `{"sub_buckets":1024,"count":2,"sum":1300,"min":601,"max":700,"buckets":[[600,1],[700,1]]}`, "min 601"},
		{"max outside", `{"sub_buckets":1024,"count":2,"sum":1300,"min":600,"max":699,"buckets":[[600,1],[700,1]]}`, "max 699"},
		{"sum impossible", `{"sub_buckets":1024,"count":2,"sum":1400,"min":600,"max":700,"buckets":[[600,1],[700,1]]}`, "sum 1400"},
		{"count overflow", `{"sub_buckets":1024,"count":1,"sum":0,"min":0,"max":1,"buckets":[[0,9223372036854775807],[1,9223372036854775807]]}`, "overflow"},
	}
	for _, tt := range tests {
		h := histOf([]int64{42})
		err := json.Unmarshal([]byte(tt.in), h)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
		if h.Count() != 1 || h.Percentile(50) != 42 {
			t.Errorf("%s: a rejected input changed the histogram", tt.name)
		}
	}
}

// FuzzHistogramUnmarshal: whatever the bytes, decoding does not panic, and
// what it accepts is a consistent histogram that encodes back to itself.
func FuzzHistogramUnmarshal(f *testing.F) {
	f.Add([]byte(`{"sub_buckets":1024,"count":5,"sum":8601,"min":0,"max":3001,"buckets":[[0,1],[600,1],[2000,1],[3000,2]]}`))
	f.Add([]byte(`{"sub_buckets":1024,"count":0,"sum":0,"min":0,"max":0,"buckets":[]}`))
	f.Add([]byte(`{"sub_buckets":1024,"count":1,"sum":9223372036854775807,"min":9223372036854775807,"max":9223372036854775807,"buckets":[[9218868437227405312,1]]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Histogram
		if err := json.Unmarshal(b, &h); err != nil {
			return
		}
		enc, err := json.Marshal(&h)
		if err != nil {
			t.Fatal(err)
		}
		var again Histogram
		if err := json.Unmarshal(enc, &again); err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if enc2, _ := json.Marshal(&again); string(enc2) != string(enc) {
			t.Fatalf("not stable: %s then %s", enc, enc2)
		}
		var total int64
		for _, c := range h.counts {
			total += c
		}
		if total != h.Count() {
			t.Fatalf("buckets hold %d, count %d", total, h.Count())
		}
		for _, p := range []float64{0.1, 50, 99, 100} {
			if v := h.Percentile(p); h.Count() > 0 && (v < h.Min() || v > h.Max()) {
				t.Fatalf("p%v = %d outside [%d, %d]", p, v, h.Min(), h.Max())
			}
		}
		// Merging the decoded histogram into a used one keeps it consistent.
		m := histOf([]int64{1, 1 << 40})
		m.Merge(&h)
		if m.Count() != h.Count()+2 {
			t.Fatalf("merge count %d", m.Count())
		}
	})
}
