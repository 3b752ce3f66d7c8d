// Package gatewaytest runs tokentrace's gateway for other packages' tests,
// built from a YAML configuration file as a user writes one: the path
// `tokentrace gateway --config` takes (gateway.NewServer, then Serve on a
// loopback listener).
//
// It imports nothing of this module but internal/gateway, which it runs.
package gatewaytest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/gateway"
)

// OnePool is a configuration of one pool, "default", over the replica at
// url (an upstream's base URL without /v1), with every model routed to it;
// kind is the replica's kind (such as "llamacpp"), or "" for the default.
func OnePool(url, kind string) string {
	replica := fmt.Sprintf("{url: %q}", url)
	if kind != "" {
		replica = fmt.Sprintf("{url: %q, kind: %s}", url, kind)
	}
	return "pools:\n  - name: default\n    replicas: [" + replica + "]\nroutes:\n  - {model: \"*\", pool: default}\n"
}

// Start writes yaml to a file in a test folder, builds the gateway from it
// and serves it on a loopback port, its log discarded and a grace of one
// second, until stop is called or the test ends. It returns the gateway's
// base URL ("http://127.0.0.1:PORT") and stop, which ends the gateway,
// waits for Serve to return (a gateway that exports spans has flushed them
// by then) and fails the test if Serve returned an error; a second call
// does nothing. An invalid configuration fails the test at once.
func Start(t testing.TB, yaml string) (url string, stop func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return StartFile(t, path, 0)
}

// StartFile is Start for the configuration file at path, which the
// gateway reloads every reload (0: the gateway's default), as `tokentrace
// gateway --config` does.
func StartFile(t testing.TB, path string, reload time.Duration) (url string, stop func()) {
	t.Helper()
	gw, err := gateway.NewServer(gateway.RunConfig{ConfigPath: path, ReloadInterval: reload,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	t.Cleanup(stop)
	return "http://" + ln.Addr().String(), stop
}
