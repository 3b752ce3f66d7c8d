// Package staleconn holds the one rule by which bench and the gateway
// resend a request that met a pooled keep-alive connection its server had
// already closed (llama-server's way): Transport wraps a pooled
// http.RoundTripper and resends such a request once, on a fresh unpooled
// connection (its body replayable: GetBody), when the round trip failed
// before any byte of answer; anything else is returned as it is. Callers
// count resends with a trace (WithClientTrace, or a second GotConn) or
// OnResend. A host whose connections go stale LearnAfter times in a row
// gets Fresh connections up front until a probe (every ProbeEvery
// requests) finds it keeping them open. The rule and why it is not an
// Idempotency-Key header: docs/bench.md ("Faults").
//
// It imports nothing of this module (standard library only).
package staleconn
