package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// policyExchange is a request on its way in, for the policy tests: the
// gateway of the configuration given, the body, the request's headers.
func policyExchange(t *testing.T, yamlText, body string, hdr map[string]string) *exchange {
	t.Helper()
	g := mustGateway(t, yamlText)
	t.Cleanup(g.Close)
	r := httptest.NewRequest(http.MethodPost, chatPath, strings.NewReader(body))
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	x := &exchange{g: g, w: httptest.NewRecorder(), r: r, rt: g.rt.Load(), api: openai.APIChat}
	x.tl.start = g.now()
	return x
}

// through runs the policies given, in order, and returns the first
// rejection.
func through(x *exchange, ps ...policy) *rejection {
	for _, p := range ps {
		if r := p.apply(x); r != nil {
			return r
		}
	}
	return nil
}

// onePool is a pool of one replica; anyRoute routes every model to it.
const (
	onePool  = "pools: [{name: p, replicas: [{url: \"http://127.0.0.1:1\"}]}]\n"
	anyRoute = "routes: [{model: \"*\", pool: p}]\n"
)

func ptr[T any](v T) *T { return &v }
