package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokentrace/tokentrace/internal/browsertest"
	"github.com/tokentrace/tokentrace/internal/live"
	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/racedetect"
	"github.com/tokentrace/tokentrace/internal/sse"
)

// liveStream is a browser's /live/events stream over a connection whose
// receive buffer is fixed at 64 KiB (no autotuning): unread, it fills the
// admin server's buffers soon.
type liveStream struct {
	conn net.Conn
	rd   *sse.Reader
}

func openLiveStream(t *testing.T, addr string) *liveStream {
	t.Helper()
	return &liveStream{conn: browsertest.OpenStalledStream(t, addr, LivePath+"/events")}
}

// next reads the stream's next snapshot (the response head first).
func (s *liveStream) next(t *testing.T) *live.Snapshot {
	t.Helper()
	if s.rd == nil {
		resp, err := http.ReadResponse(bufio.NewReader(s.conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("events: %v %v", resp, err)
		}
		s.rd = sse.NewReader(resp.Body, func() int64 { return 0 }, 1<<20)
	}
	ev, err := s.rd.Next()
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	var snap live.Snapshot
	if err := json.Unmarshal(ev.Data, &snap); err != nil {
		t.Fatal(err)
	}
	return &snap
}

// catchUp reads until the snapshot seq, keeping the history points as
// the page does (a point newer than the last kept is added).
func (s *liveStream) catchUp(t *testing.T, seq int64, kept []live.Point) []live.Point {
	t.Helper()
	for {
		snap := s.next(t)
		for _, p := range snap.History {
			if len(kept) == 0 || p.T > kept[len(kept)-1].T {
				kept = append(kept, p)
			}
		}
		if len(kept) > 600 { // the page keeps 600
			kept = kept[len(kept)-600:]
		}
		if snap.Seq >= seq {
			return kept
		}
	}
}

// TestLiveStalledBrowsers: while two /live browsers stall (one never
// reads, one stops after its first event), 40 streamed requests go
// through the gateway between 10,000 ticks of its live view (≈ 14 MB of
// events, more than the sockets hold). Every request is answered and
// taken by the board (none dropped: the hand-off never waited on a
// stream), the ticks never wait (the test would hang), the streams skip
// the snapshots they cannot send (counted) instead of queueing them (the
// heap grows by less than a quarter of what was published), and once each
// browser reads again it reaches the latest snapshot with every history
// point.
func TestLiveStalledBrowsers(t *testing.T) {
	a := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	g := mustGateway(t, fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\n", a.URL()))
	g.NewLiveBoard(time.Minute)
	data := startGateway(t, g).URL
	ad := httptest.NewServer(g.AdminHandler())
	t.Cleanup(ad.Close)
	stalled, slow := openLiveStream(t, ad.Listener.Addr().String()), openLiveStream(t, ad.Listener.Addr().String())
	first := slow.next(t)
	waitFor(t, "both streams open", func() bool { return g.Live.Streams().Open == 2 })
	body := chatBody("m", true, "x", "")
	base := int64(g.sinceBase())
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const requests, ticks = 40, 10000
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		for i := range ticks {
			if i%(ticks/requests) == 0 {
				if s, _, b := do(t, data, body, nil); s != 200 {
					t.Errorf("status %d: %s", s, b)
				}
			}
			g.Live.Step(base + int64(i+1)*int64(time.Second))
		}
	}()
	select {
	case <-ran:
	case <-time.After(2 * time.Minute): // a hang guard, not a timing bound
		t.Fatal("the gateway's requests or ticks waited on the browsers that do not read")
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	latest := g.Live.Latest()
	one := *latest
	one.History = one.History[len(one.History)-1:]
	published := int64(ticks) * int64(len(mustJSON(t, &one))) // an event: the snapshot with its newest point
	st := g.Live.Streams()
	grown := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("%d ticks (≈ %.1f MB of events); streams sent %d, coalesced %d; heap %+.2f MB", ticks, float64(published)/1e6, st.Events, st.Coalesced, float64(grown)/1e6)
	ok := int64(testutil.ToFloat64(g.Metrics.seriesFor("p", "*").ok))
	if latest.Done != requests || latest.Dropped != 0 || ok != requests {
		t.Errorf("the board took %d requests (%d dropped), the metrics answered %d; want %d, 0", latest.Done, latest.Dropped, ok, requests)
	}
	if st.Coalesced == 0 || st.Events >= 2*ticks {
		t.Errorf("streams sent %d events and skipped %d: the unread streams should have skipped snapshots", st.Events, st.Coalesced)
	}
	if grown > published/4 && !racedetect.Enabled { // the race detector's allocations are its own
		t.Errorf("heap grew %d B while ≈ %d B of events were published: the streams queue what they cannot send", grown, published)
	}
	for name, s := range map[string]*liveStream{"slow": slow, "stalled": stalled} {
		var kept []live.Point
		if name == "slow" {
			kept = first.History
		}
		kept = s.catchUp(t, latest.Seq, kept)
		if len(kept) != len(latest.History) || kept[len(kept)-1].T != latest.History[len(latest.History)-1].T {
			t.Errorf("%s browser: %d history points once caught up, the view has %d", name, len(kept), len(latest.History))
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
