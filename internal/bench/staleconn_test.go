package bench

import (
	"context"
	"sync"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/staleconn/staleconntest"
)

// A server that closes after each streamed answer though its headers say
// keep-alive (llama-server): four closed-loop workers, 400 requests, no
// failure; the requests that met a closed pooled connection carry Resent
// and the report counts them, not as failures.
func TestServerClosingAfterEachAnswerFailsNothing(t *testing.T) {
	c := newTestClient(t, staleconntest.Start(t, staleconntest.CloseAfterAnswer)+"/v1", nil)
	recs := make([]latency.Record, 400)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(recs); i += 4 {
				req := testReq
				recs[i].ID = "r"
				c.Do(context.Background(), &req, &recs[i])
			}
		}()
	}
	wg.Wait()
	col := report.NewCollector(report.Options{})
	resent := 0
	for i := range recs {
		if !recs[i].OK() {
			t.Errorf("request %d failed: %s %s", i, recs[i].ErrorKind, recs[i].Error)
		}
		// More than one where Go's transport had itself retried, on
		// another pooled connection, a request it had not written at all
		// (Record.Resent); our own resend is at most one
		// (TestStaleConnectionRecord).
		if recs[i].Resent > 0 {
			resent++
		}
		col.Add(&recs[i])
	}
	if s := col.Report().Summary; s.Failed != 0 || s.Resent != resent {
		t.Errorf("report: %d failed, %d resent; records say %d resent", s.Failed, s.Resent, resent)
	}
	t.Logf("400 requests, %d resent", resent)
}

// A connection's second request read and closed unanswered: resent once,
// its record a success with Resent 1 and the fresh connection's set-up;
// a reset after the answer began is a failure, never resent.
func TestStaleConnectionRecord(t *testing.T) {
	c := newTestClient(t, staleconntest.Start(t, staleconntest.DiscardSecond)+"/v1", nil)
	if r := do(t, c); !r.OK() || r.Resent != 0 {
		t.Fatalf("first request: %+v", r)
	}
	r := do(t, c)
	if !r.OK() || r.Resent != 1 || r.ConnectNS == 0 {
		t.Errorf("second request: ok %v, resent %d, connect %d ns; want a success resent once on a new connection", r.OK(), r.Resent, r.ConnectNS)
	}
	c = newTestClient(t, staleconntest.Start(t, staleconntest.CutSecond)+"/v1", nil)
	do(t, c)
	if r := do(t, c); r.OK() || r.Resent != 0 || r.ErrorKind != latency.FailReset {
		t.Errorf("cut after the first byte: ok %v, resent %d, kind %q; want a reset, not resent", r.OK(), r.Resent, r.ErrorKind)
	}
}
