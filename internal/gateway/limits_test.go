package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/httplimit/httplimittest"
)

// runGateway serves a gateway on a loopback port with the YAML configuration
// given, until the test ends, and returns its address.
func runGateway(t *testing.T, yamlText string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, RunConfig{ConfigPath: path, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			func(a net.Addr) { addrc <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	select {
	case a := <-addrc:
		return a.String()
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not start")
	}
	return ""
}

// TestSlowBodiesAreTimedOut: 500 clients that send headers and 28 of the
// 1000 body bytes they announce, then nothing, do not keep an ordinary
// request from being served; each is answered 408 and disconnected once
// server.body_timeout has passed, and the descriptors are given back.
func TestSlowBodiesAreTimedOut(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 500 connections for the body timeout")
	}
	up := newFakeUpstream(t, &fakeUpstream{name: "a"})
	const bodyTimeout = 5 * time.Second
	addr := runGateway(t, fmt.Sprintf("server: {body_timeout: %v}\npools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\n",
		bodyTimeout, up.URL()))
	httplimittest.SlowBodies{Addr: addr, Path: "/v1/chat/completions", Clients: 500, Normal: httplimittest.PostOK("http://"+addr+"/v1/chat/completions", chatBody("m", false, "hi", "")), Wait: bodyTimeout + 30*time.Second}.Run(t)
}

func TestServerLimitsConfig(t *testing.T) {
	const pools = "pools: [{name: p, replicas: [{url: \"http://h:1\"}]}]\n"
	c, err := ParseConfig([]byte(pools))
	if err != nil {
		t.Fatal(err)
	}
	want := httplimit.Limits{ReadHeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxConns: httplimit.DefaultMaxConns(2)}
	if got := c.Server.limits(); got != want {
		t.Errorf("default limits %+v, want %+v", got, want)
	}
	c, err = ParseConfig([]byte(pools + "server: {read_header_timeout: 2s, body_timeout: 7s, idle_timeout: 1m, max_connections: 300}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = httplimit.Limits{ReadHeaderTimeout: 2 * time.Second, BodyTimeout: 7 * time.Second, IdleTimeout: time.Minute, MaxConns: 300}
	if got := c.Server.limits(); got != want {
		t.Errorf("limits %+v, want %+v", got, want)
	}
	if _, err := ParseConfig([]byte(pools + "server: {max_connections: -1}\n")); err == nil || !strings.Contains(err.Error(), "server.max_connections") {
		t.Errorf("negative max_connections: %v", err)
	}
	if _, err := ParseConfig([]byte(pools + "server: {body_timeout: -1s}\n")); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative body_timeout: %v", err)
	}
}
