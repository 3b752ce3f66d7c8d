package gateway

import (
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// hopHeaders are not forwarded in either direction (RFC 9110 §7.6.1; the
// list httputil.ReverseProxy strips, Proxy-Connection included).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// copyResponseHeaders adds to dst the end-to-end headers of src, an
// upstream's response: neither the hop-by-hop headers nor those its
// Connection header names (so that it cannot remove the gateway's own).
//
// The values are shared, not copied: the upstream's response is only
// read, the gateway replaces a header's values rather than changing them
// in place, and net/http's server copies the header map when the response
// is written.
func copyResponseHeaders(dst, src http.Header) {
	conn := src.Values("Connection")
	for k, vs := range src {
		if slices.Contains(hopHeaders, k) || namedIn(conn, k) {
			continue
		}
		dst[k] = vs
	}
}

// valueCount is the number of values in h.
func valueCount(h http.Header) int {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	return n
}

// carve copies vs to the start of all and returns that copy, its capacity
// its length (an append to it never writes into the next header's
// values), and the rest of all: the way http.Header.Clone shares one
// slice among every header's values.
func carve(all, vs []string) (copied, rest []string) {
	n := copy(all, vs)
	return all[:n:n], all[n:]
}

// namedIn reports whether a Connection header's values name the header k.
func namedIn(connection []string, k string) bool {
	for _, f := range connection {
		for n := range strings.SplitSeq(f, ",") {
			if strings.EqualFold(textproto.TrimString(n), k) {
				return true
			}
		}
	}
	return false
}

// copyRequestHeaders copies a client's request headers to the upstream
// request, less the hop-by-hop ones and those the gateway sets itself,
// with the client's address (remoteAddr, host:port) appended to
// X-Forwarded-For and to Forwarded where the client sent one.
//
// The headers left out are skipped as the copy is made (as
// copyResponseHeaders does), not copied and then deleted: no map deletion
// per request on the way to the upstream.
func copyRequestHeaders(dst, src http.Header, remoteAddr string) {
	conn := src.Values("Connection")
	all := make([]string, valueCount(src)) // every value in one allocation
	for k, vs := range src {
		if slices.Contains(hopHeaders, k) || slices.Contains(requestOnlyHeaders, k) || namedIn(conn, k) {
			continue
		}
		dst[k], all = carve(all, vs)
	}
	appendClient(dst, remoteAddr)
}

// appendClient appends the client's IP address to dst's X-Forwarded-For
// (set when absent) and, where present, Forwarded (RFC 7239 §4, an IPv6
// address quoted in brackets), as httputil.ReverseProxy does for the
// first: a client's own values are never passed on as the client's.
func appendClient(dst http.Header, remoteAddr string) {
	ip, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return
	}
	if prior := dst["X-Forwarded-For"]; len(prior) > 0 {
		dst["X-Forwarded-For"] = []string{strings.Join(prior, ", ") + ", " + ip}
	} else {
		dst["X-Forwarded-For"] = []string{ip}
	}
	if prior := dst["Forwarded"]; len(prior) > 0 {
		node := "for=" + ip
		if strings.Contains(ip, ":") {
			node = `for="[` + ip + `]"`
		}
		dst["Forwarded"] = []string{strings.Join(prior, ", ") + ", " + node}
	}
}

// requestOnlyHeaders are the client's headers that are not passed
// upstream besides the hop-by-hop ones: Accept-Encoding (the stream is
// kept uncompressed, readable event by event), Content-Length (the
// upstream request's own body sets it), the trace context (set by the
// span, or copied back by inject) and the gateway's priority header.
// tokentrace serve's fault-injection header goes with the gateway's key
// where clients have keys (stripKeyed).
var requestOnlyHeaders = []string{"Accept-Encoding", "Content-Length", "Traceparent", "Tracestate", headerPriority}

// stripKeyed removes from an upstream request what a keyed gateway's
// client must not pass on: the gateway's key (not the upstream's) and
// tokentrace serve's fault-injection header (on a gateway clients share,
// no client fails requests at will; an open one, as in tests, passes it).
func stripKeyed(h http.Header) {
	h.Del("Authorization")
	h.Del("X-Api-Key")
	h.Del(headerFault)
}

// headerFault is tokentrace serve's fault-injection header
// (serve.FaultHeader, canonical form).
const headerFault = "X-Tokentrace-Fault"
