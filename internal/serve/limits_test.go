package serve

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit/httplimittest"
)

// TestSlowBodiesAreTimedOut: 500 clients that send headers and 28 of the
// 1000 body bytes they announce, then nothing, do not keep an ordinary
// request from being served; each is answered 408 and disconnected once
// the body timeout has passed, and the descriptors they held are given
// back.
func TestSlowBodiesAreTimedOut(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 500 connections for the body timeout")
	}
	cfg := testConfig(time.Millisecond)
	cfg.Limits.BodyTimeout = 5 * time.Second
	s := startServer(t, cfg)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	normal := func() error {
		resp, err := client.Post(s.URL()+"/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+testModel+`","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return err
	}
	httplimittest.SlowBodies{Addr: s.Addr().String(), Path: "/v1/chat/completions", Clients: 500,
		Normal: normal, Wait: cfg.Limits.BodyTimeout + 30*time.Second}.Run(t)
}
