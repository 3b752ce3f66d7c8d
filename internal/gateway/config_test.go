package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/process"
)

func TestConfigValidation(t *testing.T) {
	ok := `pools: [{name: p, replicas: [{url: "http://h:1"}]}]
routes: [{model: "*", pool: p}]`
	c, err := ParseConfig([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pools[0].Balancer != "least_outstanding" || c.Pools[0].Queue.MaxSize != 1024 || c.Server.MaxBodyBytes != 4<<20 || c.Routes[0].Length.OnExceed != "reject" {
		t.Errorf("defaults not filled: %+v", c)
	}
	cases := []struct{ name, yaml, want string }{
		{"no pools", `routes: []`, "no pools"},
		{"unknown field", ok + "\nbogus: 1", "unknown field"},
		{"bad url", `pools: [{name: p, replicas: [{url: "ftp://x"}]}]`, "absolute http(s) URL"},
		{"unknown pool", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: q}]`, `unknown pool "q"`},
		{"bad balancer", `pools: [{name: p, balancer: random, replicas: [{url: "http://h"}]}]`, "unknown balancer"},
		{"bad evidence", `pools: [{name: p, evidence: always, replicas: [{url: "http://h"}]}]`, "unknown evidence \"always\" (pass, ask)"},
		{"shared without redis", `pools: [{name: p, replicas: [{url: "http://h"}], queue: {concurrency: 4, shared: true}}]`, "queue.shared needs redis"},
		{"shared without a limit", `pools: [{name: p, replicas: [{url: "http://h"}], queue: {shared: true}}]
redis: {url: "redis://h:6379"}`, "queue.shared needs queue.concurrency"},
		{"shared adaptive", `pools: [{name: p, replicas: [{url: "http://h"}], queue: {concurrency: 4, adaptive: gradient, shared: true}}]
redis: {url: "redis://h:6379"}`, "queue.shared needs a fixed limit"},
		{"redis url and env", `pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {url: "redis://h:6379", url_env: X}`, "url or url_env, not both"},
		{"redis no url", `pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {timeout: 1s}`, "redis: needs url or url_env"},
		{"redis bad scheme", `pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {url: "http://user:pw-secret@h:6379"}`, "must be a redis://"},
		{"redis on_error", `pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {url: "redis://h:6379", on_error: ignore}`, "fail_open or fail_closed"},
		{"load factor below 1", `pools: [{name: p, balancer: prefix_bounded_load, load_factor: 0.9, replicas: [{url: "http://h"}]}]`, "load_factor 0.9 must be at least 1"},
		{"load factor of another balancer", `pools: [{name: p, balancer: prefix_affinity, load_factor: 1.5, replicas: [{url: "http://h"}]}]`, "prefix_bounded_load's setting"},
		{"bad duration", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, timeouts: {ttft: soon}}]`, "duration"},
		{"bad key hash", `pools: [{name: p, replicas: [{url: "http://h"}]}]
keys: [{name: k, sha256: abc}]`, "64 hex digits"},
		{"fallback loop", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, fallback: a}]`, "falls back to itself"},
		{"unknown fallback", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, fallback: b}]`, "neither a route"},
		{"aimd without concurrency", `pools: [{name: p, replicas: [{url: "http://h"}], queue: {aimd: true}}]`, "needs queue.concurrency"},
		{"default over max", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, length: {default_max_tokens: 10, max_max_tokens: 5}}]`, "exceeds max_max_tokens"},
		{"bad on_exceed", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, length: {on_exceed: truncate}}]`, "reject or clamp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := ParseConfig([]byte(`pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {url: "http://user:pw-secret@h:6379"}`)); err == nil || strings.Contains(err.Error(), "pw-secret") {
		t.Errorf("a bad redis url's password is quoted: %v", err)
	}
	if _, err := QuickConfig([]string{"not a url"}); err == nil {
		t.Error("QuickConfig accepted a bad URL")
	}
}

// lockedBuffer is a log sink safe for the watcher goroutine.
type lockedBuffer = process.Log

// replaceFile replaces the file at path with text atomically: a loaded
// machine can stall a plain write between truncating and writing for
// longer than two polls of Watch.
func replaceFile(t testing.TB, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestHotReloadAppliesValidAndKeepsOldOnInvalid(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(s string) { replaceFile(t, path, s) }
	base := fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}]}]\n", up.URL())
	write(base + "routes: [{model: one, pool: p}]\n")
	cfg, loaded, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, g)
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Watch(ctx, path, loaded, 5*time.Millisecond, g.SetConfig, slog.New(slog.NewTextHandler(&logs, nil)))

	status := func(model string) int { s, _, _ := do(t, gw.URL, chatBody(model, false, "x", ""), nil); return s }
	if status("two") != 404 {
		t.Fatal("route two exists before the reload")
	}
	write(base + "routes: [{model: one, pool: p}, {model: two, pool: p}]\n")
	waitFor(t, "route two after reload", func() bool { return status("two") == 200 })

	write(base + "routes: [{model: one, pool: nowhere}]\n") // invalid
	waitFor(t, "the invalid reload to be logged", func() bool { return strings.Contains(logs.String(), "keeping the running configuration") })
	if !strings.Contains(logs.String(), `unknown pool`) {
		t.Errorf("log does not say why: %s", logs.String())
	}
	if status("two") != 200 || status("one") != 200 {
		t.Error("an invalid reload changed the running configuration")
	}
}

func TestAPIKeysNeverLogged(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Status: 500})
	var logs lockedBuffer
	g := mustGateway(t, fmt.Sprintf(`pools: [{name: p, replicas: [{url: %q, api_key: sk-upstream-secret}]}]
routes: [{model: "*", pool: p}]`, up.URL()))
	g.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	gw := startGateway(t, g)
	s, hdr, body := do(t, gw.URL, chatBody("m", false, "x", ""), nil)
	if s != 500 {
		t.Fatalf("status %d", s)
	}
	if got := up.Headers()[0].Get("Authorization"); got != "Bearer sk-upstream-secret" {
		t.Errorf("upstream got Authorization %q", got)
	}
	for _, where := range []string{logs.String(), body, fmt.Sprint(hdr)} {
		if strings.Contains(where, "sk-upstream-secret") {
			t.Errorf("the upstream key leaked: %s", where)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("pools: [{name: p, replicas: [{url: \"http://h:1\"}]}]\nroutes: [{model: \"*\", pool: p}]\n"))
	f.Add([]byte("pools:\n  - name: a\n    balancer: prefix_affinity\n    queue: {concurrency: 2, aimd: true}\n    replicas: [{url: \"http://x\", kind: vllm}]\nroutes:\n  - model: m\n    length_pools: [{max_input_tokens: 10, pool: a}, {pool: a}]\n    timeouts: {ttft: 1s, retries: 2}\n"))
	f.Add([]byte("keys: [{name: k, sha256: 00}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if len(c.Pools) == 0 {
			t.Fatal("accepted a config without pools")
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("validated config fails a second validation: %v", err)
		}
		g := &Gateway{}
		if err := g.SetConfig(c); err != nil {
			t.Fatalf("SetConfig of a valid config: %v", err)
		}
		g.Close()
	})
}

// TestReloadUnderTraffic reloads the configuration while requests run; the
// race detector checks the shared state.
func TestReloadUnderTraffic(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Chunks: 3, Gap: time.Millisecond})
	mk := func(conc int) *Config {
		c, err := ParseConfig([]byte(fmt.Sprintf("pools: [{name: p, scrape_interval: 5ms, replicas: [{url: %q}], queue: {concurrency: %d, aimd: true}}]\nroutes: [{model: \"*\", pool: p}]\n", up.URL(), conc)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	g, err := New(mk(4))
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, g)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if s, _, b := do(t, gw.URL, chatBody("m", true, "x", ""), nil); s != 200 {
					t.Errorf("%d %s", s, b)
				}
			}
		}()
	}
	for i := range 20 {
		if err := g.SetConfig(mk(2 + i%3)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	if d, f, _ := poolState(g, "p"); d != 0 || f != 0 {
		t.Errorf("after the traffic: depth %d in flight %d, want 0 0", d, f)
	}
}

// TestDocsExampleConfigIsValid keeps docs/gateway.md's example honest.
func TestDocsExampleConfigIsValid(t *testing.T) {
	doc, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Skip("docs/gateway.md not found:", err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	if !ok {
		t.Fatal("no yaml block in docs/gateway.md")
	}
	block, _, _ := strings.Cut(rest, "```")
	block = strings.ReplaceAll(block, "<tokentrace gateway hash-key KEY>", HashKey("KEY"))
	t.Setenv("UPSTREAM_KEY", "secret")
	t.Setenv("TOKENTRACE_REDIS_URL", "redis://127.0.0.1:6379/0")
	if _, err := ParseConfig([]byte(block)); err != nil {
		t.Fatalf("the documented example is invalid: %v", err)
	}
}

// Validate only checks: it fills no default and changes no value, and a
// configuration that passed SetDefaults and Validate passes both again
// unchanged.
func TestValidateChangesNothing(t *testing.T) {
	t.Setenv("UP_KEY", "sk-from-env")
	raw := &Config{
		Pools: []PoolConfig{{Name: "p", Balancer: "queue_aware", Queue: QueueConfig{Concurrency: 4, Adaptive: AdaptiveGradient},
			Replicas: []ReplicaConfig{{URL: "http://u:pw@h:1/", APIKeyEnv: "UP_KEY"}}}},
		Routes: []RouteConfig{{Model: "*", Pool: "p"}},
		Keys:   []KeyConfig{{Name: "k", SHA256: strings.ToUpper(HashKey("x"))}},
	}
	before := fmt.Sprintf("%+v", *raw)
	if err := raw.Validate(); err != nil {
		t.Fatal(err)
	}
	if after := fmt.Sprintf("%+v", *raw); after != before {
		t.Errorf("Validate changed the configuration:\n%s\n%s", before, after)
	}
	raw.SetDefaults()
	p := raw.Pools[0]
	if p.ScrapeInterval.D() != time.Second || p.Queue.MaxSize != 1024 || p.Queue.MinConcurrency != 1 || p.Queue.MaxConcurrency != 16 ||
		p.Replicas[0].URL != "http://h:1" || p.Replicas[0].APIKey != "sk-from-env" || raw.Keys[0].SHA256 != HashKey("x") ||
		raw.Routes[0].Length.OnExceed != "reject" || raw.Server.MaxBodyBytes != 4<<20 || raw.Server.PrefixBytes != 512 {
		t.Errorf("defaults not filled: %+v", raw)
	}
	once := fmt.Sprintf("%+v", *raw)
	raw.SetDefaults()
	if err := raw.Validate(); err != nil || fmt.Sprintf("%+v", *raw) != once {
		t.Errorf("SetDefaults twice: %v\n%s\n%+v", err, once, *raw)
	}
	if raw.Pools[0].Replicas[0].authorization() != "Bearer sk-from-env" {
		t.Errorf("authorization %q", raw.Pools[0].Replicas[0].authorization())
	}
}
