// Package httplimit holds what keeps an HTTP server's connections bounded
// against slow or hostile clients: the deadlines every server sets (request
// headers, request body, idle keep-alive), a listener that caps the
// connections open at once, and the handler that puts the body deadline on
// each request and lifts it once the body has been read, so that a long
// streamed answer is never cut by it. It also owns a server's lifecycle:
// Limits.Serve is the one way serve, the app and the gateway run (each as
// New… then Serve(ctx, ln)): serve until the context ends, then a stop
// hook (the gateway's drain, serve's engine stop), then a graceful
// shutdown in which requests in flight get a grace to finish, idle
// connections do not hold it up, and requests still running past it are
// cut and reported (ErrGraceExpired). On the client side it holds the one
// redirect rule of the module's HTTP clients: none is followed
// (NoRedirects).
//
// There is deliberately no whole-request read timeout and no write
// timeout: both would end a streamed answer that legitimately lasts
// minutes.
//
// It imports nothing of this module but field (whose errors Validate
// returns).
package httplimit
