package gateway

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// sendGuard bounds the writes of an answer to its client (nginx's
// send_timeout, server.send_timeout): a write deadline SendTimeout ahead,
// renewed before each write (at most every sixteenth of it, so a write
// is allowed 15/16 of the timeout at least), and cut to a short grace when
// the request's context ends (its total timeout, the client's end) while
// the answer is being sent. A write past its deadline fails, which ends
// the stream and closes the client's connection.
type sendGuard struct {
	rc      http.ResponseController
	timeout time.Duration
	renewed time.Time // when the deadline was last set ahead
	// unsupported: the writer has no deadlines (a test recorder).
	unsupported bool
	cutAt       atomic.Int64 // the cut deadline, Unix ns; 0: none
	mu          sync.Mutex   // orders cut against over
	over        bool         // the handler returned: the connection is not the request's any more
}

// start sets the guard up for w with the configured timeout (0: none).
func (s *sendGuard) start(w http.ResponseWriter, timeout time.Duration) {
	s.rc = *http.NewResponseController(w)
	s.timeout = timeout
	s.unsupported = s.rc.SetWriteDeadline(time.Time{}) != nil
}

// renew sets the write deadline SendTimeout ahead, unless it was set
// less than a sixteenth of it ago; a cut deadline stands.
func (s *sendGuard) renew() {
	if s.unsupported || s.timeout <= 0 {
		return
	}
	now := time.Now()
	if now.Sub(s.renewed) < s.timeout/16 {
		return
	}
	s.renewed = now
	_ = s.rc.SetWriteDeadline(now.Add(s.timeout))
	if c := s.cutAt.Load(); c != 0 { // cut meanwhile: its deadline stands
		_ = s.rc.SetWriteDeadline(time.Unix(0, c))
	}
}

// cut gives the writes grace more from now, no longer; it may run on
// another goroutine than the writes, but not after end.
func (s *sendGuard) cut(grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over || s.unsupported {
		return
	}
	at := time.Now().Add(grace)
	s.cutAt.Store(at.UnixNano())
	_ = s.rc.SetWriteDeadline(at)
}

// end marks the handler's return: no cut touches the connection after it
// (a later request may be using it). What net/http writes after the
// handler (the last chunk, the trailers) gets a whole SendTimeout, not
// what was left of the last write's; a later request on the connection
// starts without a deadline (clearWriteDeadline).
func (s *sendGuard) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.over = true
	if s.unsupported || s.timeout <= 0 {
		return
	}
	if c := s.cutAt.Load(); c != 0 { // cut: its deadline stands
		return
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
}

// clearWriteDeadline takes off w's connection the write deadline an
// earlier request on it left (sendGuard.end): each request's answer is
// bounded by its own.
func clearWriteDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
}

// sendQueueBytes bounds what a streamed answer's queue (sendQueue) holds
// for a client that has not taken it yet (one event more when the queue
// is empty): 256 KiB, a long answer's SSE events (1,000 chat chunks take
// about 200 KB), beside what the sockets hold.
const sendQueueBytes = 256 << 10

// sendQueue carries a streamed answer's writes to the client on a
// goroutine of its own, so that the relay reads the upstream's answer to
// its end while a client that reads slowly is still being sent what came
// before: a write returns once queued (the relay waits only while the
// queue holds sendQueueBytes), and the pool slots are given back when the
// upstream's answer ends, not when the client has read it. Each write to
// the client runs under the send guard's deadline; the first that fails
// fails every later write, flush and wait.
type sendQueue struct {
	w     http.ResponseWriter
	rc    http.ResponseController
	fe    interface{ FlushError() error } // w's own flush, when it has one
	guard *sendGuard
	now   func() time.Time // the gateway's clock, for busyFor
	sent  func()           // after each write was timed (Gateway.sentTest)
	done  sync.WaitGroup   // the sending goroutine
	bufs  *sendBuf         // queued's, spare's and raw's storage, pooled (sendBufs)
	on    bool             // between start and stop (the relay's goroutine reads it)
	// raw, when set, is the client's TCP connection below net/http: the
	// answer's chunks are framed here and written to it, by the relay
	// itself while the connection takes each whole at once (rawSend.try),
	// by the sending goroutine, started then, from the first that it
	// does not (sendQueue.flushRaw).
	raw *rawSend // &bufs.raw when set
	// sending: the sending goroutine runs (from start without raw, from
	// the first write the connection did not take whole with it).
	sending bool

	mu      sync.Mutex
	cond    sync.Cond // on mu: the sender waits for work, the relay for room or the end
	queued  []byte    // written by the relay, not yet taken by the sender
	spare   []byte    // the sender's last buffer, queued's next storage
	flush   bool      // the relay asked for what is queued to be sent
	busy    bool      // the sender is writing to the client
	stopped bool
	err     error // the first failed write or flush to the client
	// busyTotal is the time the sender spent in writes to the client
	// (busyFrom: when the current one began).
	busyTotal time.Duration
	busyFrom  time.Time
	rest      []byte // framed bytes a raw write left, sent first by the sender
}

// start sends what is written to q on to w, guarded by guard, until stop;
// now is the clock its busy time is read on. With raw (the request's
// HTTP/1.1 connection, net/http's response chunked) the chunks go to raw
// below w once w's head and first writes were flushed, and the sending
// goroutine starts only when the connection does not take a write whole.
func (q *sendQueue) start(w http.ResponseWriter, guard *sendGuard, now func() time.Time, sent func(), raw *net.TCPConn, rc syscall.RawConn) {
	q.w, q.guard, q.now, q.sent, q.busyTotal = w, guard, now, sent, 0
	q.rc = *http.NewResponseController(w)
	q.fe, _ = w.(interface{ FlushError() error })
	q.cond.L = &q.mu
	q.flush, q.busy, q.stopped, q.err, q.rest = false, false, false, nil, nil
	q.bufs = sendBufs.Get().(*sendBuf)
	q.queued, q.spare = q.bufs.b[0][:0], q.bufs.b[1][:0]
	q.on, q.raw, q.sending = true, nil, false
	if raw != nil && rc != nil {
		q.raw = &q.bufs.raw
		q.raw.conn, q.raw.sc, q.raw.headed, q.raw.out = raw, rc, false, nil
		return
	}
	q.startSender()
}

// startSender starts the sending goroutine.
func (q *sendQueue) startSender() {
	q.sending = true
	q.done.Add(1)
	go q.send()
}

// direct reports whether the relay itself writes to the client (raw,
// no sending goroutine yet): a write's time is then the gateway's own,
// not the client's backpressure. Read on the relay's goroutine only.
func (q *sendQueue) direct() bool { return q.raw != nil && !q.sending }

// Write queues b; it waits while the queue is full, and returns the
// error of a failed write to the client.
func (q *sendQueue) Write(b []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.err == nil && len(q.queued) > 0 && len(q.queued)+len(b) > sendQueueBytes {
		if q.raw != nil && !q.sending {
			_ = q.flushRaw() // empties the queue
			continue
		}
		q.flush = true
		q.cond.Broadcast()
		q.cond.Wait()
	}
	if q.err != nil {
		return 0, q.err
	}
	q.queued = append(q.queued, b...)
	return len(b), nil
}

// FlushError asks for what is queued to be sent and flushed, without
// waiting for it (sse.Writer's flush).
func (q *sendQueue) FlushError() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.raw != nil && !q.sending {
		return q.flushRaw()
	}
	if len(q.queued) > 0 {
		q.flush = true
		q.cond.Broadcast()
	}
	return q.err
}

// wait returns once everything queued was sent and flushed, or a write
// to the client failed (its error); at once when q is not started.
func (q *sendQueue) wait() error {
	if !q.on {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.raw != nil && !q.sending {
		_ = q.flushRaw()
	}
	for q.err == nil && (len(q.queued) > 0 || len(q.rest) > 0 || q.busy) {
		q.flush = true
		q.cond.Broadcast()
		q.cond.Wait()
	}
	return q.err
}

// busyFor is the time the client has taken so far to accept the writes
// (the one under way included); 0 when q is not started.
func (q *sendQueue) busyFor() time.Duration {
	if !q.on {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.busyTotal
	if q.busy {
		d += q.now().Sub(q.busyFrom)
	}
	return d
}

// stop waits for what is queued to be sent (or to fail) and ends the
// sending goroutine; w is not written after it returns.
func (q *sendQueue) stop() {
	_ = q.wait()
	q.mu.Lock()
	q.stopped = true
	q.cond.Broadcast()
	q.mu.Unlock()
	q.done.Wait()
	q.on = false
	r := &q.bufs.raw
	q.raw, r.conn, r.sc, r.out = nil, nil, nil, nil
	if cap(q.queued)+cap(q.spare)+cap(r.frame) <= 3*sendBufKeep { // back to the pool, unless a slow client grew them
		q.bufs.b[0], q.bufs.b[1] = q.queued[:0], q.spare[:0]
		sendBufs.Put(q.bufs)
	}
	q.bufs, q.queued, q.spare, q.rest = nil, nil, nil, nil
}

// sendBuf is a send queue's buffers (queued, spare) and raw sender (its
// framing buffer, its write function bound once), pooled between streams.
type sendBuf struct {
	b   [2][]byte
	raw rawSend
}

// sendBufKeep is the largest buffer the pool keeps.
const sendBufKeep = 16 << 10

var sendBufs = sync.Pool{New: func() any {
	sb := &sendBuf{b: [2][]byte{make([]byte, 0, 4096), make([]byte, 0, 4096)}}
	sb.raw.frame = make([]byte, 0, 4096)
	sb.raw.tryFn = sb.raw.writeOnce
	return sb
}}

// send is the sending goroutine: it takes what the relay queued, when
// asked, and writes and flushes it to the client outside the lock.
func (q *sendQueue) send() {
	defer q.done.Done()
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for !q.stopped && (!q.flush || len(q.queued) == 0 && len(q.rest) == 0 || q.err != nil) {
			q.cond.Wait()
		}
		if q.stopped {
			return
		}
		out, rest := q.queued, q.rest
		q.queued, q.spare, q.rest = q.spare[:0], nil, nil
		q.flush, q.busy, q.busyFrom = false, true, q.now()
		q.cond.Broadcast() // room for a relay waiting on a full queue
		q.mu.Unlock()
		err := q.write(out, rest)
		q.mu.Lock()
		q.spare, q.busy = out[:0], false
		q.busyTotal += q.now().Sub(q.busyFrom)
		if q.sent != nil {
			q.sent()
		}
		if err != nil && q.err == nil {
			q.err = err
		}
		q.cond.Broadcast()
	}
}

// write writes b to the client and flushes it, under a renewed deadline;
// on a raw connection, what a raw write left (rest, framed) first, then b
// as one chunk.
func (q *sendQueue) write(b, rest []byte) error {
	q.guard.renew()
	if q.raw != nil {
		return q.raw.write(b, rest)
	}
	return q.httpWrite(b)
}

// httpWrite writes b to the client through net/http's response writer
// and flushes it.
func (q *sendQueue) httpWrite(b []byte) error {
	if _, err := q.w.Write(b); err != nil {
		return err
	}
	if q.fe != nil {
		return q.fe.FlushError()
	}
	if err := q.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// rawFirstMax is the most the first raw-mode flush sends through net/http
// with the answer's head (one write, as net/http sends them): at the
// start of the answer the connection takes it whole; a larger first
// flush sends the head alone first.
const rawFirstMax = 2 << 10

// flushRaw sends what is queued, with q.mu held, on the relay's
// goroutine: the first flush through net/http (the answer's head, net/http
// choosing chunked framing), each later one framed as one chunk and
// written to the raw connection at once if it takes it whole; else what
// it left goes to the sending goroutine, started now, as everything after
// it. A write that fails fails the queue.
func (q *sendQueue) flushRaw() error {
	if q.err != nil || len(q.queued) == 0 {
		return q.err
	}
	r := q.raw
	q.guard.renew()
	var err error
	switch {
	case !r.headed && len(q.queued) <= rawFirstMax:
		r.headed = true
		err = q.httpWrite(q.queued)
	case !r.headed:
		r.headed = true
		if err = q.httpWrite(nil); err == nil {
			return q.flushRaw()
		}
	default:
		q.rest, err = r.try(q.queued)
	}
	q.queued = q.queued[:0]
	if q.sent != nil {
		q.sent()
	}
	if err != nil {
		q.err = err
		return err
	}
	if len(q.rest) > 0 { // the connection is full: the client is behind
		q.flush = true
		q.startSender()
	}
	return nil
}

// rawSend writes a chunked answer's chunks to the client's TCP
// connection below net/http, which has sent the answer's head and
// flushed everything before them; net/http writes the last chunk and the
// trailers after the handler.
type rawSend struct {
	conn   *net.TCPConn
	sc     syscall.RawConn
	headed bool   // the head went out through net/http
	frame  []byte // try's chunk: size line, data, CRLF
	// tryFn is writeOnce bound once; out, n and errno its operand and
	// results.
	tryFn func(fd uintptr) bool
	out   []byte
	n     int
	errno error
	bufs  net.Buffers // write's chunk: size line, data, CRLF (one writev)
	hdr   [16]byte
}

var crlf = []byte("\r\n")

// try frames b as one chunk and writes it with one non-blocking write:
// what the connection did not take (nil when it took it all) is left,
// framed, for a blocking write. The connection's write deadline (a cut
// send guard's) fails it as any write.
func (r *rawSend) try(b []byte) (left []byte, err error) {
	r.frame = strconv.AppendInt(r.frame[:0], int64(len(b)), 16)
	r.frame = append(append(append(r.frame, crlf...), b...), crlf...)
	r.out = r.frame
	if err := r.sc.Write(r.tryFn); err != nil {
		return nil, r.fail(err)
	}
	n := max(r.n, 0)
	if r.errno != nil && !errors.Is(r.errno, syscall.EAGAIN) {
		return nil, r.fail(&net.OpError{Op: "write", Net: "tcp", Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: r.errno})
	}
	if n == len(r.frame) {
		return nil, nil
	}
	return r.frame[n:], nil
}

// write writes rest (framed bytes a try left), then b as one chunk,
// waiting for the connection as long as its write deadline allows.
func (r *rawSend) write(b, rest []byte) error {
	if len(rest) > 0 {
		if _, err := r.conn.Write(rest); err != nil {
			return r.fail(err)
		}
	}
	if len(b) == 0 {
		return nil
	}
	h := strconv.AppendInt(r.hdr[:0], int64(len(b)), 16)
	r.bufs = append(r.bufs[:0], append(h, crlf...), b, crlf)
	if _, err := r.bufs.WriteTo(r.conn); err != nil {
		return r.fail(err)
	}
	return nil
}

// fail closes the connection after a failed write, which may have left
// a chunk cut short (net/http, which did not see it fail, would
// otherwise keep the connection for another request), and returns err.
func (r *rawSend) fail(err error) error {
	_ = r.conn.Close()
	return err
}
