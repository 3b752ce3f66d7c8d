package httplimit

import (
	"net"
	"sync"
)

// LimitListener returns a listener that has at most n accepted connections
// open at once: Accept waits for one to close before taking the next from
// the kernel's queue. Closing the listener ends a waiting Accept.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots     chan struct{} // one element per open connection
	done      chan struct{} // closed by Close
	closeOnce sync.Once
}

// Accept waits for a free slot, then accepts.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, free: func() { <-l.slots }}, nil
}

// Close closes the listener and ends a waiting Accept.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back when first closed.
type limitConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// NetConn returns the connection a limited connection wraps.
func (c *limitConn) NetConn() net.Conn { return c.Conn }

// NetConn returns the connection under c's wrappers (those with a
// NetConn method, as tls.Conn and LimitListener's connections have), for
// what only the bare connection offers (a TCP connection's SetLinger).
func NetConn(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}
