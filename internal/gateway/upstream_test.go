package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/httplimit"
)

// startGateway serves g on a test server.
func startGateway(t testing.TB, g *Gateway) *httptest.Server {
	t.Helper()
	srv := newLimitsServer(g)
	srv.Start()
	t.Cleanup(func() { srv.Close(); g.Close() })
	return srv
}

// newLimitsServer is an unstarted test server for g in production's
// shape: httplimit's server and listener (no limits set), so that
// streamed answers go below net/http's writer (sendQueue's raw mode)
// unless the suite runs with -server.nethttp.
func newLimitsServer(g *Gateway) *httptest.Server {
	srv := httptest.NewUnstartedServer(g)
	srv.Config = httplimit.Limits{}.Server(g)
	srv.Listener = httplimit.Limits{}.Listener(srv.Listener)
	g.noRawSend = serverNetHTTP
	return srv
}

func chatBody(model string, stream bool, content string, extra string) string {
	b, _ := json.Marshal(content)
	return fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%s}]%s}`, model, stream, b, extra)
}

func post(t testing.TB, ctx context.Context, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sseEvents reads all events of a response: data payloads and comments.
func sseEvents(t testing.TB, r io.Reader) (data, comments []string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		} else if c, ok := strings.CutPrefix(line, ": "); ok {
			comments = append(comments, c)
		}
	}
	return data, comments
}

func mustGateway(t testing.TB, yamlText string) *Gateway {
	t.Helper()
	cfg, err := ParseConfig([]byte(yamlText))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
