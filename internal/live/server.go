package live

import (
	"bytes"
	"context"
	_ "embed"
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
			if sw.Data(p.delta) != nil {
				return
			}
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
