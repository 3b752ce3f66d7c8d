package live

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/sse"
)

//go:embed page.html
var page []byte

// stateMark is where the page's first snapshot goes.
var stateMark = []byte("/*STATE*/null")

// DefaultAddr is where bench --live serves the page: loopback only.
const DefaultAddr = "127.0.0.1:8765"

// subscribers are the open /events streams, each told of a new snapshot
// by a non-blocking send on its channel.
type subscribers struct {
	mu    sync.Mutex
	chans map[chan struct{}]struct{}
	ended chan struct{} // closed by end
	once  sync.Once
}

func (s *subscribers) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended == nil {
		s.ended, s.chans = make(chan struct{}), map[chan struct{}]struct{}{}
	}
}

// add opens a stream's channel; the returned function closes it.
func (s *subscribers) add() (chan struct{}, <-chan struct{}, func()) {
	s.init()
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.chans[ch] = struct{}{}
	s.mu.Unlock()
	return ch, s.ended, func() {
		s.mu.Lock()
		delete(s.chans, ch)
		s.mu.Unlock()
	}
}

// notify tells every stream that a snapshot is waiting; a stream still
// busy with the last one is told once.
func (s *subscribers) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// end ends every stream after its last snapshot.
func (s *subscribers) end() {
	s.init()
	s.once.Do(func() { close(s.ended) })
}

// Handler serves the page at /, its events at /events (SSE: the whole
// snapshot first, then each new one with only its newest history point)
// and the current snapshot at /snapshot.json.
func (b *Board) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", b.servePage)
	mux.HandleFunc("GET /events", b.serveEvents)
	mux.HandleFunc("GET /snapshot.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b.cur.Load().fullJSON())
	})
	return mux
}

// servePage writes the page with the current snapshot in it, so that it
// shows the run before its first event.
func (b *Board) servePage(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	// encoding/json escapes "<" in strings: no "</script>" can end it early.
	state := b.cur.Load().fullJSON()
	before, after, _ := bytes.Cut(page, stateMark)
	_, _ = w.Write(before)
	_, _ = w.Write(state)
	_, _ = w.Write(after)
}

// serveEvents streams the snapshots until the run ends, the client goes
// or the server stops.
func (b *Board) serveEvents(w http.ResponseWriter, r *http.Request) {
	ch, ended, closeSub := b.subs.add()
	defer closeSub()
	defer b.watch()()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	sw := sse.NewWriter(w)
	p := b.cur.Load()
	if sw.Data(p.fullJSON()) != nil {
		return
	}
	last := p.snap.Seq
	for !p.snap.Final {
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		case <-ended:
		}
		p = b.cur.Load()
		if p.snap.Seq != last {
			data := p.delta
			if skipped := p.snap.Seq - last - 1; skipped > 0 {
				b.coalesced.Add(skipped)
				data = p.catchUp(int(skipped) + 1)
			}
			if sw.Data(data) != nil {
				return
			}
			b.events.Add(1)
			last = p.snap.Seq
		}
		select {
		case <-ended:
			if b.cur.Load().snap.Seq == last {
				return
			}
		default:
		}
	}
}

// catchUp is the snapshot's encoding with its last n history points: the
// event of a stream that skipped n − 1 snapshots, so that the page's
// charts miss none of their points (encoded on the stream's goroutine).
func (p *published) catchUp(n int) []byte {
	d := *p.snap
	if len(d.History) > n {
		d.History = d.History[len(d.History)-n:]
	}
	b, _ := json.Marshal(&d) // a Snapshot always encodes
	return b
}

// StreamCounts are the board's /events streams so far.
type StreamCounts struct {
	// Open is the streams and terminal views watching now.
	Open int64
	// Events counts the snapshots sent after each stream's first;
	// Coalesced the snapshots a stream skipped because a newer one was
	// published before it could send them (a slow or stalled reader).
	Events, Coalesced int64
}

// Streams returns the streams' counts.
func (b *Board) Streams() StreamCounts {
	return StreamCounts{Open: b.watchers.Load(), Events: b.events.Load(), Coalesced: b.coalesced.Load()}
}

// Serve serves the board's page on ln until ctx ends, with the deadlines
// and lifecycle of every server here (httplimit.Limits.Serve); the open
// streams end first.
func (b *Board) Serve(ctx context.Context, ln net.Listener) error {
	l := httplimit.Limits{MaxConns: 64}.WithDefaults(1)
	return l.Serve(ctx, ln, b.Handler(), httplimit.Stop{Grace: 2 * time.Second, Stopping: b.subs.end})
}

// IsLoopback reports whether addr's host is a loopback address or
// "localhost".
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
