package gateway

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestUpstreamErrorEventLogged: an upstream whose stream carries an error
// event (vLLM's {"error":{…}} mid-stream, then the connection closed) is
// logged with the upstream's message, credentials masked and bounded,
// counted as error_event, and not as a broken stream of "unexpected EOF".
func TestUpstreamErrorEventLogged(t *testing.T) {
	long := strings.Repeat("x", 1000)
	errEv := `data: {"error":{"message":"CUDA out of memory (Bearer sk-secret123456789) ` + long + `","type":"InternalServerError","code":500}}` + "\n\n"
	for _, c := range []struct {
		name, body string
	}{
		{"mid-stream", roleChunk + textChunk + errEv},
		{"before the first token", roleChunk + errEv},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs lockedBuffer
			g := quickGateway(t, scriptedUpstream(t, c.body))
			g.Log = slog.New(slog.NewTextHandler(&logs, nil))
			gw := startGateway(t, g)
			resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), "CUDA out of memory") {
				t.Errorf("the client's answer lost the upstream's error: %s", b)
			}
			got := logs.String()
			if !strings.Contains(got, `msg="upstream error event"`) || !strings.Contains(got, "InternalServerError: CUDA out of memory") {
				t.Errorf("log = %s, want the upstream's message", got)
			}
			for _, bad := range []string{"unexpected EOF", "sk-secret123456789", strings.Repeat("x", 400)} {
				if strings.Contains(got, bad) {
					t.Errorf("log holds %.40q: %s", bad, got)
				}
			}
			if n := upstreamErrors(g, "default", "error_event"); n != 1 {
				t.Errorf("upstream_errors_total{kind=error_event} = %v, want 1", n)
			}
			if n := upstreamErrors(g, "default", "stream_broken"); n != 0 {
				t.Errorf("upstream_errors_total{kind=stream_broken} = %v, want 0", n)
			}
		})
	}
}
