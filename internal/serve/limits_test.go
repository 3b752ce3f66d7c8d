package serve

import (
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
	normal := httplimittest.PostOK(s.URL()+"/chat/completions",
		`{"model":"`+testModel+`","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
	httplimittest.SlowBodies{Addr: s.Addr().String(), Path: "/v1/chat/completions", Clients: 500,
		Normal: normal, Wait: cfg.Limits.BodyTimeout + 30*time.Second}.Run(t)
}
