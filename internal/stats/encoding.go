package stats

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// histogramJSON is a Histogram's stable JSON form (docs/metrics.md,
// "Histograms"): the layout (1,024 sub-buckets per power of two), the exact
// count, sum, minimum and maximum, and the non-empty buckets in ascending
// order, each as [lowest value of the bucket, count].
type histogramJSON struct {
	SubBuckets int        `json:"sub_buckets"`
	Count      int64      `json:"count"`
	Sum        int64      `json:"sum"`
	Min        int64      `json:"min"`
	Max        int64      `json:"max"`
	Buckets    [][2]int64 `json:"buckets"`
}

// MarshalJSON writes h's stable form, for example
//
//	{"sub_buckets":1024,"count":3,"sum":2600,"min":0,"max":2000,"buckets":[[0,1],[600,1],[2000,1]]}
//
// The same values always give the same bytes, whatever order they were
// added or merged in.
func (h *Histogram) MarshalJSON() ([]byte, error) {
	out := histogramJSON{SubBuckets: subBuckets, Count: h.n, Sum: h.sum, Min: h.min, Max: h.max,
		Buckets: [][2]int64{}}
	if h.n > 0 {
		for i, hi := bucketOf(h.min), bucketOf(h.max); i <= hi; i++ {
			if c := h.counts[i]; c > 0 {
				out.Buckets = append(out.Buckets, [2]int64{bucketLow(i), c})
			}
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads the form MarshalJSON writes. It checks it whole and
// leaves h unchanged on an error: another layout, a bucket value that is
// not a bucket's lowest value, buckets out of order or repeated, counts
// that are not positive or do not add up to count, a minimum or maximum
// outside the first or last bucket, or a sum the buckets cannot give.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var in histogramJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	if in.SubBuckets != subBuckets {
		return fmt.Errorf("histogram: sub_buckets %d: this layout has %d", in.SubBuckets, subBuckets)
	}
	if in.Count == 0 {
		if len(in.Buckets) > 0 || in.Sum != 0 || in.Min != 0 || in.Max != 0 {
			return errors.New("histogram: count 0 with buckets, sum, min or max")
		}
		*h = Histogram{}
		return nil
	}
	if in.Count < 0 || len(in.Buckets) == 0 {
		return fmt.Errorf("histogram: count %d with %d buckets", in.Count, len(in.Buckets))
	}
	var out Histogram
	var n, lowSum, highSum int64
	prev := -1
	for j, bk := range in.Buckets {
		v, c := bk[0], bk[1]
		if v < 0 || c <= 0 {
			return fmt.Errorf("histogram: bucket %d: value %d count %d: want a value ≥ 0 and a count > 0", j, v, c)
		}
		i := bucketOf(v)
		if bucketLow(i) != v {
			return fmt.Errorf("histogram: bucket %d: %d is not the lowest value of a bucket (%d is)", j, v, bucketLow(i))
		}
		if i <= prev {
			return fmt.Errorf("histogram: bucket %d: value %d out of ascending order", j, v)
		}
		prev = i
		if n = addSat(n, c); n == math.MaxInt64 {
			return fmt.Errorf("histogram: bucket counts overflow")
		}
		lowSum = addSat(lowSum, mulSat(v, c))
		highSum = addSat(highSum, mulSat(v+bucketWidth(i)-1, c))
	}
	if n != in.Count {
		return fmt.Errorf("histogram: buckets hold %d values, count says %d", n, in.Count)
	}
	first, last := bucketOf(in.Buckets[0][0]), prev
	if in.Min < 0 || bucketOf(in.Min) != first || in.Max < in.Min || bucketOf(in.Max) != last {
		return fmt.Errorf("histogram: min %d / max %d outside the first / last bucket", in.Min, in.Max)
	}
	if in.Sum < lowSum || in.Sum > highSum {
		return fmt.Errorf("histogram: sum %d outside what the buckets allow [%d, %d]", in.Sum, lowSum, highSum)
	}
	out.grow(last + 1)
	for _, bk := range in.Buckets {
		out.counts[bucketOf(bk[0])] = bk[1]
	}
	out.n, out.sum, out.min, out.max = in.Count, in.Sum, in.Min, in.Max
	*h = out
	return nil
}

// mulSat multiplies two non-negative numbers, saturating at math.MaxInt64.
func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}
