// Package route holds the request-placement policies shared by the gateway
// (on the wall clock, over HTTP replicas) and the simulator (on a virtual
// clock, over simulated engines): the balancers that pick a replica, the
// length bands that pick a pool, and the admission queue's decisions
// (bounded queue, priority and deadline order, early rejection, adaptive
// concurrency limit). Nothing here reads a clock, blocks or does I/O: time
// is passed in, and callers add their own locking, waiting and transport.
//
// It imports nothing of this module, and never net/http (not even
// indirectly).
package route
