// Package h1 is the plain-HTTP/1.1 client transport of bench and the
// gateway: a request is written and its answer read on the goroutine that
// sent it, over pooled keep-alive connections, so a stream in flight holds
// one goroutine and its connection's read buffer (requests are written
// through buffers shared by the connections; net/http's Transport adds a
// reader and a writer goroutine and a write buffer per connection). Answers are parsed
// by net/http's http.ReadResponse; what is not plain http:// goes through
// another transport. Why and the figures: docs/performance.md.
//
// It imports nothing of this module (standard library only).
package h1
