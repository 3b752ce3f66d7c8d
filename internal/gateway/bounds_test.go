package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// TestEndlessWholeAnswerIsBounded: a non-streamed answer that does not
// end is read up to server.max_response_bytes, no further, whatever the
// API: the client gets 502 upstream_response_too_large in the API's own
// error shape, the upstream's connection is closed, and what the gateway
// allocated stays near the bound (the upstream sends 512 MiB).
func TestEndlessWholeAnswerIsBounded(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	for _, c := range []struct {
		api  openai.API
		body string
	}{
		{openai.APIChat, chatBody("m", false, "x", "")},
		{openai.APIResponses, `{"model":"m","input":"x"}`},
		{openai.APIMessages, `{"model":"m","max_tokens":5,` + msgs + `}`},
		{openai.APIOllama, `{"model":"m","stream":false,` + msgs + `}`},
	} {
		t.Run(c.api.String(), func(t *testing.T) {
			up := openaitest.Start(t, &openaitest.Upstream{Endless: 512 << 20})
			cfg, err := QuickConfig([]string{up.URL()})
			if err != nil {
				t.Fatal(err)
			}
			cfg.Server.MaxResponseBytes = 1 << 20
			g, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			gw := startGateway(t, g)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			resp := postJSON(t, gw.URL+c.api.Path(), c.body)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			runtime.ReadMemStats(&after)
			if msg := apiErrorMessage(c.api, b); resp.StatusCode != http.StatusBadGateway || !strings.Contains(msg, "1048576 bytes") {
				t.Fatalf("status %d body %.200s, want 502 naming the bound in the API's error shape", resp.StatusCode, b)
			}
			if code := apiErrorCode(b); !c.api.Typed() && !c.api.NDJSON() && code != "upstream_response_too_large" {
				t.Errorf("code %q, want upstream_response_too_large", code)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
				t.Errorf("allocated %d MiB for a 1 MiB bound", got>>20)
			}
			waitFor(t, "the upstream's connection closed", func() bool { return up.Closed.Load() == 1 })
			if n := upstreamErrors(g, "default", "response_too_large"); n != 1 {
				t.Errorf("response_too_large counted %v times, want 1", n)
			}
		})
	}
}

// apiErrorCode is an OpenAI-shaped error body's code.
func apiErrorCode(b []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Error.Code
}

// TestStreamEndsForTheClientAtItsEnd: an upstream that keeps its
// connection open after the answer's end — after [DONE], or after the
// final usage chunk with no [DONE] — does not hold the client: the client
// gets exactly one [DONE] while the upstream still holds on, the upstream's
// connection is closed, and decode ends before the upstream would have let
// go.
func TestStreamEndsForTheClientAtItsEnd(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"after [DONE]", roleChunk + textChunk + stopChunk + usageChunk + doneEvent},
		{"usage chunk, no [DONE]", roleChunk + textChunk + stopChunk + usageChunk},
	} {
		t.Run(c.name, func(t *testing.T) {
			const hold = 30 * time.Second
			release := make(chan struct{})
			gone := make(chan struct{}, 1)
			up := openaitest.Start(t, &openaitest.Upstream{Script: c.body, Hold: true, Release: release, Gone: gone})
			g := quickGateway(t, up.URL())
			gw := startGateway(t, g)
			timer := time.AfterFunc(hold, func() { close(release) })
			defer timer.Stop()
			resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", `,"stream_options":{"include_usage":true}`), nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !timer.Stop() {
				t.Fatalf("the client's stream ended only when the upstream let go (%v)", hold)
			}
			defer close(release)
			if n := strings.Count(string(b), "[DONE]"); resp.StatusCode != 200 || n != 1 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
				t.Fatalf("status %d, %d [DONE]s:\n%s", resp.StatusCode, n, b)
			}
			if strings.Contains(string(b), "error") {
				t.Errorf("an error event in a whole answer:\n%s", b)
			}
			select {
			case <-gone:
			case <-time.After(hold):
				t.Fatal("the upstream's connection was not closed")
			}
			tm := timingMap(resp.Trailer.Values("Server-Timing")...)
			if d, ok := tm[latency.TimingName("decode")]; !ok || d >= hold {
				t.Errorf("decode %v (recorded: %v), want it ended at the answer's end", d, ok)
			}
		})
	}
}

// TestDecodeEndsAtTheEndEvent: the client's [DONE], the gateway's decode
// and its total end when the upstream's end event arrives, not when the
// upstream lets go of the connection: the client reads its [DONE] while
// the upstream still holds its trailer back (before the fix the gateway
// waited for it, up to the grace, and counted that wait as decode). The
// trailer the upstream sends afterwards still reaches the client in the
// gateway's trailer. After a final usage chunk with no [DONE], decode
// ends at the usage chunk; the wait for the [DONE] is post_process.
func TestDecodeEndsAtTheEndEvent(t *testing.T) {
	const grace = 3 * time.Second
	const upstreamTiming = "server_queue;dur=7, prefill;dur=3, server_decode;dur=1"
	t.Run("[DONE], trailer held back", func(t *testing.T) {
		release := make(chan struct{})
		up := openaitest.Start(t, &openaitest.Upstream{Script: roleChunk + textChunk + stopChunk + usageChunk + doneEvent, Timing: upstreamTiming, Hold: true, Release: release})
		g := quickGateway(t, up.URL())
		g.endGraceTest = grace
		gw := startGateway(t, g)
		resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", `,"stream_options":{"include_usage":true}`), nil)
		defer resp.Body.Close()
		kept, err := openaitest.ReadToDone(resp.Body, latency.FinalTimingComment)
		if err != nil {
			t.Fatal(err)
		}
		close(release) // only now does the upstream send its trailer
		final := timingMap(string(kept))
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		tr := timingMap(resp.Trailer.Values("Server-Timing")...)
		for _, tm := range []map[latency.TimingName]time.Duration{final, tr} {
			if d, ok := tm[latency.TimingDecode]; !ok || d >= grace {
				t.Errorf("decode %v (reported: %v), want it ended at [DONE], before the %v grace", d, ok, grace)
			}
			if d := tm[latency.TimingTotal]; d >= grace {
				t.Errorf("total %v, want it ended at [DONE]", d)
			}
		}
		if d, ok := tr[latency.TimingServerQueue]; !ok || d != 7*time.Millisecond {
			t.Errorf("the upstream's trailer did not reach the client's: server_queue %v (%v) in %v", d, ok, resp.Trailer)
		}
		if tr[latency.TimingDecode] != final[latency.TimingDecode] {
			t.Errorf("decode %v in the trailer, %v in the final event: want one instant", tr[latency.TimingDecode], final[latency.TimingDecode])
		}
	})
	t.Run("usage chunk, no [DONE]", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		up := openaitest.Start(t, &openaitest.Upstream{Script: roleChunk + textChunk + stopChunk + usageChunk, Timing: upstreamTiming, Hold: true, Release: release})
		g := quickGateway(t, up.URL())
		g.endGraceTest = grace
		gw := startGateway(t, g)
		resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", `,"stream_options":{"include_usage":true}`), nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if n := strings.Count(string(b), "[DONE]"); n != 1 {
			t.Fatalf("%d [DONE]s:\n%s", n, b)
		}
		tr := timingMap(resp.Trailer.Values("Server-Timing")...)
		if d, ok := tr[latency.TimingDecode]; !ok || d >= grace/2 {
			t.Errorf("decode %v (reported: %v), want it ended at the usage chunk", d, ok)
		}
		if d := tr[latency.TimingPostProcess]; d < grace/2 {
			t.Errorf("post_process %v, want the wait for [DONE] (%v) in it", d, grace)
		}
	})
}
