// Package staleconn holds the one rule by which bench and the gateway
// resend a request: a keep-alive connection taken from the pool turned out
// to be closed by its server before the request reached it. llama.cpp's
// llama-server, for one, closes the connection after each streamed answer
// although its headers say keep-alive; the next request on the pooled
// connection meets end of file before a byte of answer.
//
// Transport wraps a pooled http.RoundTripper. A request whose round trip
// fails on a reused connection, before any byte of the response arrived,
// because the server closed or reset it (net/http's "server closed idle
// connection", end of file, a reset, a broken pipe) is resent once, on a
// fresh connection that is not pooled; its body must be replayable
// (GetBody). The server had not answered a byte on a connection it had
// already served: that is the keep-alive race, and a server that closes
// after its answer resets the next request it did not read. Anything else
// is returned as it is, a real failure: an error after the first byte of
// answer (the server had the request), any error on a fresh connection
// (the resend's included: there is one resend, never two), a timeout, a
// cancelled request. Requests Go's transport itself resends because
// nothing of them was written are left to it. Callers count resends with
// a trace (WithClientTrace, or httptrace: a resent request gets a second
// GotConn) or OnResend.
//
// Why not an Idempotency-Key header, which makes Go's transport retry a
// POST by itself: it tells the server (and every proxy between) that the
// request is idempotent, which a generation is not; Go then also retries
// a reset before the first byte (a request that may have been read); and
// it retries on another pooled connection, as many times as there are
// stale ones, unseen.
//
// A resend costs its request a failed try first. A host whose
// connections go stale LearnAfter times in a row (llama-server's way) is
// learned: its requests go through Fresh up front, with Connection: close,
// until a probe (two through Pooled every ProbeEvery requests) finds the
// second answered on the first's connection.
//
// It imports nothing of this module (standard library only).
package staleconn
