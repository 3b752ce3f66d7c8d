package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/tokentrace/tokentrace/internal/jsonscan"
	"github.com/tokentrace/tokentrace/internal/openai"
)

// passesUnknown reports whether a path under /v1/ that is none of the
// APIs' is passed through (server.unknown_paths: pass, the default) rather
// than answered 404 (refuse).
func (g *Gateway) passesUnknown() bool {
	rt := g.rt.Load()
	return rt != nil && rt.cfg.Server.UnknownPaths != UnknownPathsRefuse
}

// passThrough forwards a request on a path under /v1/ the gateway does
// not read (embeddings, an endpoint newer than it) to a replica of the
// route of its body's "model" (else the "*" route), after the key's
// check, and relays the answer as it arrives, byte for byte. It is
// measured as a request of that pool and model: its status and duration
// (tokentrace_gateway_requests_total, the request duration histogram).
func (g *Gateway) passThrough(w http.ResponseWriter, r *http.Request) {
	rt := g.rt.Load()
	x := &exchange{g: g, w: w, r: r, rt: rt}
	if rj := (authenticate{}).apply(x); rj != nil {
		x.refuse(rj)
		return
	}
	start := g.now()
	limit := rt.cfg.Server.MaxBodyBytes
	body, err := readAll(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			x.fail(http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, fmt.Sprintf("request body exceeds %d bytes", limit), "", "body_too_large", 0)
			return
		}
		x.fail(http.StatusBadRequest, openai.TypeInvalidRequest, "reading request body: "+err.Error(), "", "bad_body", 0)
		return
	}
	model := bodyModel(body)
	route := rt.route(model)
	if route == nil {
		x.fail(http.StatusNotFound, openai.TypeNotFound, "unknown path "+r.URL.Path+" and no route for its model", "", "not_found", 0)
		return
	}
	req := Request{Model: model, input: -1}
	p := rt.poolFor(route, &req)
	rep := p.balancer.Pick(&req, p.replicas)
	status := g.relayThrough(x, rep, body)
	if m := g.Metrics; m != nil {
		m.Requests.WithLabelValues(p.name, route.Model, strconv.Itoa(status)).Inc()
		m.Duration.WithLabelValues(p.name, route.Model).Observe(g.now().Sub(start).Seconds())
	}
}

// relayThrough sends the request to rep and copies its answer to the
// client as it arrives; it returns the status answered.
func (g *Gateway) relayThrough(x *exchange, rep *Replica, body []byte) int {
	r := x.r
	out, err := http.NewRequestWithContext(r.Context(), r.Method, rep.cfg.URL+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		x.fail(http.StatusBadRequest, openai.TypeInvalidRequest, err.Error(), "", "bad_request", 0)
		return x.status
	}
	copyRequestHeaders(out.Header, r.Header, r.RemoteAddr)
	if x.key != nil {
		stripKeyed(out.Header)
	}
	if auth := rep.cfg.authorization(); auth != "" {
		out.Header.Set("Authorization", auth)
	}
	rep.outstanding.Add(1)
	defer rep.outstanding.Add(-1)
	resp, err := g.transport.RoundTrip(out)
	if err != nil {
		x.fail(http.StatusBadGateway, openai.TypeServer, "upstream unreachable", "", "upstream_error", 0)
		return x.status
	}
	defer resp.Body.Close()
	copyResponseHeaders(x.w.Header(), resp.Header)
	x.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(x.w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				return statusClientClosed
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			return resp.StatusCode
		}
		if err != nil {
			return http.StatusBadGateway
		}
	}
}

// bodyModel is a JSON body's top-level "model" string; "" when there is
// none or the body is no JSON object.
func bodyModel(body []byte) string {
	s := newScanner(body)
	if s.Peek() != '{' {
		return ""
	}
	model := ""
	_ = s.Object(func(k jsonscan.Str) error {
		if string(k.Raw) == "model" && s.Peek() == '"' {
			v, err := s.stringValue()
			model = v
			return err
		}
		return s.Skip()
	})
	return model
}
