package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/openai"
)

// readBody reads the body (at most server.max_body_bytes, within
// server.body_timeout) and scans the few fields the gateway needs
// (ScanRequest).
type readBody struct{}

func (readBody) apply(x *exchange) *rejection {
	limit := x.rt.cfg.Server.MaxBodyBytes
	if x.r.ContentLength > limit { // declared too large: refused before any of it is asked for (no 100 Continue)
		x.w.Header().Set("Connection", "close")
		return refuse(http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, fmt.Sprintf("request body exceeds %d bytes", limit), "", "body_too_large")
	}
	x.r.Body = http.MaxBytesReader(x.w, x.r.Body, limit)
	body, err := readAll(x.r.Body, x.r.ContentLength, limit)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return refuse(http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, fmt.Sprintf("request body exceeds %d bytes", mbe.Limit), "", "body_too_large")
		case httplimit.IsBodyTimeout(err):
			x.w.Header().Set("Connection", "close")
			return refuse(http.StatusRequestTimeout, openai.TypeInvalidRequest, "the request body was not received within server.body_timeout", "", "request_timeout")
		}
		return refuse(http.StatusBadRequest, openai.TypeInvalidRequest, "reading request body: "+err.Error(), "", "bad_body")
	}
	x.body = body
	x.req, err = ScanRequest(body, x.api, x.rt.cfg.Server.PrefixBytes)
	if err != nil {
		return refuse(http.StatusBadRequest, openai.TypeInvalidRequest, err.Error(), "", "invalid_request")
	}
	return nil
}

// readAll reads a request body into one buffer sized from Content-Length
// when the client sent it (no regrowth for large prompts).
func readAll(rd io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength <= 0 || contentLength > limit {
		return io.ReadAll(rd)
	}
	buf := make([]byte, contentLength, contentLength+1)
	if _, err := io.ReadFull(rd, buf); err != nil {
		return nil, err
	}
	// Drain to EOF so a body longer than announced is caught by the limit.
	var one [1]byte
	if n, err := rd.Read(one[:]); n > 0 || (err != nil && err != io.EOF) {
		if err == nil {
			err = errors.New("body longer than its Content-Length")
		}
		return nil, err
	}
	return buf, nil
}
