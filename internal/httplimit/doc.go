// Package httplimit holds what keeps an HTTP server's connections bounded
// against slow or hostile clients: the deadlines every server sets (request
// headers, request body, idle keep-alive), a listener that caps the
// connections open at once, and the handler that puts the body deadline on
// each request and lifts it once the body has been read, so that a long
// streamed answer is never cut by it. `serve` and `gateway` build their
// http.Server with it.
//
// There is deliberately no whole-request read timeout and no write
// timeout: both would end a streamed answer that legitimately lasts
// minutes.
//
// It imports nothing of this module but field (whose errors Validate
// returns).
package httplimit
