package gateway

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
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
	bufs  *sendBuf         // queued's and spare's storage, pooled (sendBufs)
	on    bool             // between start and stop (the relay's goroutine reads it)

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
}

// start sends what is written to q on to w, guarded by guard, until stop;
// now is the clock its busy time is read on.
func (q *sendQueue) start(w http.ResponseWriter, guard *sendGuard, now func() time.Time, sent func()) {
	q.w, q.guard, q.now, q.sent, q.busyTotal = w, guard, now, sent, 0
	q.rc = *http.NewResponseController(w)
	q.fe, _ = w.(interface{ FlushError() error })
	q.cond.L = &q.mu
	q.queued, q.flush, q.busy, q.stopped, q.err = q.queued[:0], false, false, false, nil
	q.bufs = sendBufs.Get().(*sendBuf)
	q.queued, q.spare = q.bufs[0][:0], q.bufs[1][:0]
	q.on = true
	q.done.Add(1)
	go q.send()
}

// Write queues b; it waits while the queue is full, and returns the
// error of a failed write to the client.
func (q *sendQueue) Write(b []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.err == nil && len(q.queued) > 0 && len(q.queued)+len(b) > sendQueueBytes {
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
	for q.err == nil && (len(q.queued) > 0 || q.busy) {
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
	if cap(q.queued)+cap(q.spare) <= 2*sendBufKeep { // back to the pool, unless a slow client grew them
		q.bufs[0], q.bufs[1] = q.queued[:0], q.spare[:0]
		sendBufs.Put(q.bufs)
	}
	q.bufs, q.queued, q.spare = nil, nil, nil
}

// sendBuf is a send queue's two buffers, pooled between streams.
type sendBuf [2][]byte

// sendBufKeep is the largest buffer the pool keeps.
const sendBufKeep = 16 << 10

var sendBufs = sync.Pool{New: func() any { return &sendBuf{make([]byte, 0, 4096), make([]byte, 0, 4096)} }}

// send is the sending goroutine: it takes what the relay queued, when
// asked, and writes and flushes it to the client outside the lock.
func (q *sendQueue) send() {
	defer q.done.Done()
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for !q.stopped && (!q.flush || len(q.queued) == 0 || q.err != nil) {
			q.cond.Wait()
		}
		if q.stopped {
			return
		}
		out := q.queued
		q.queued, q.spare = q.spare[:0], nil
		q.flush, q.busy, q.busyFrom = false, true, q.now()
		q.cond.Broadcast() // room for a relay waiting on a full queue
		q.mu.Unlock()
		err := q.write(out)
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

// write writes b to the client and flushes it, under a renewed deadline.
func (q *sendQueue) write(b []byte) error {
	q.guard.renew()
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
