package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestDateInterval: hand-computed bounds. The reference is 2.3 s ahead.
// A sample sent at local 10.0 s and answered at 10.1 s, Date 12 s (the
// reference read 12.3–12.4 s): the offset is in [12 − 10.1, 13 − 10.0) =
// [1.9, 3.0) s. A second sent at 10.65 s, answered at 10.75 s, Date 12 s
// (read 12.95–13.05 s, stamped before its tick): [1.25, 2.35) s. A third
// sent at 10.72 s, answered at 10.78 s, Date 13 s (stamped after the
// tick): [2.22, 3.28) s. Together: [2.22, 2.35) s.
func TestDateInterval(t *testing.T) {
	s := func(sent, recv float64, date int64) dateSample {
		return dateSample{sent: int64(sent * 1e9), recv: int64(recv * 1e9), date: date}
	}
	for _, tt := range []struct {
		samples []dateSample
		lo, hi  int64
	}{
		{[]dateSample{s(10.0, 10.1, 12)}, 1.9e9, 3.0e9},
		{[]dateSample{s(10.0, 10.1, 12), s(10.65, 10.75, 12)}, 1.9e9, 2.35e9},
		{[]dateSample{s(10.0, 10.1, 12), s(10.65, 10.75, 12), s(10.72, 10.78, 13)}, 2.22e9, 2.35e9},
	} {
		lo, hi := dateInterval(tt.samples)
		if d := lo - tt.lo; d < -10 || d > 10 {
			t.Errorf("%v: lo %d, want %d", tt.samples, lo, tt.lo)
		}
		if d := hi - tt.hi; d < -10 || d > 10 {
			t.Errorf("%v: hi %d, want %d", tt.samples, hi, tt.hi)
		}
	}
	// A Date that goes back while local time goes forward contradicts.
	if lo, hi := dateInterval([]dateSample{s(10.0, 10.1, 13), s(12.0, 12.1, 13)}); lo < hi {
		t.Errorf("contradicting samples give [%d, %d)", lo, hi)
	}
}

// TestOffsetByDateAgainstServers measures a server on this machine (true
// offset 0) and one whose Date runs 2.5 s ahead: each true offset lies
// within the measured bounds, which are far tighter than a second.
func TestOffsetByDateAgainstServers(t *testing.T) {
	if testing.Short() {
		t.Skip("takes up to 3.5 s of real time per server")
	}
	for _, tt := range []struct {
		name  string
		ahead time.Duration
	}{{"same clock", 0}, {"2.5 s ahead", 2500 * time.Millisecond}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.ahead != 0 {
					w.Header().Set("Date", time.Now().Add(tt.ahead).UTC().Format(http.TimeFormat))
				}
				_, _ = w.Write([]byte(`{"data":[{"id":"m"}]}`))
			}))
			defer srv.Close()
			off, err := MeasureClockOffset(context.Background(), Target{BaseURL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			if d := off.Offset - tt.ahead; d < -off.Uncertainty || d > off.Uncertainty {
				t.Errorf("measured %s ± %s; the true offset %s is outside", off.Offset, off.Uncertainty, tt.ahead)
			}
			if off.Uncertainty > 100*time.Millisecond {
				t.Errorf("uncertainty %s over %d samples: the ticks were not straddled", off.Uncertainty, off.Samples)
			}
			t.Logf("offset %s ± %s over %d samples", off.Offset, off.Uncertainty, off.Samples)
		})
	}
}

// TestOffsetByDateRefusesBadReferences: no Date, and a Date that
// contradicts itself (two clocks 1.5 s apart behind one URL).
func TestOffsetByDateRefusesBadReferences(t *testing.T) {
	if testing.Short() {
		t.Skip("takes real time")
	}
	n := 0
	for _, h := range []http.HandlerFunc{
		func(w http.ResponseWriter, r *http.Request) { w.Header()["Date"] = nil },
		func(w http.ResponseWriter, r *http.Request) {
			n++
			w.Header().Set("Date", time.Now().Add(time.Duration(n%2)*1500*time.Millisecond).UTC().Format(http.TimeFormat))
		},
	} {
		srv := httptest.NewServer(h)
		_, err := MeasureClockOffset(context.Background(), Target{BaseURL: srv.URL})
		srv.Close()
		if err == nil {
			t.Error("a bad reference was measured")
		} else {
			t.Log(err)
		}
	}
}
