package gateway

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/browsertest"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// TestLivePageUnderLoad opens the gateway's /live/ in headless Chromium
// while 12 clients keep two pools busy (one with room, one small enough
// to shed): the page updates over its events, shows each pool and
// upstream with its counts moving, and a 1280×800 screenshot is saved
// (go test -run LivePageUnderLoad -artifacts -outputdir DIR keeps it).
func TestLivePageUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	browser := browsertest.Find()
	if browser == "" {
		t.Skip("no Chromium installed (apt-get install chromium); skipping the browser test of the gateway's live page")
	}
	up := func(name string, ttft time.Duration) string {
		return openaitest.Start(t, &openaitest.Upstream{Name: name, TTFT: ttft, Gap: 5 * time.Millisecond, Chunks: 12}).URL()
	}
	g := mustGateway(t, fmt.Sprintf(`
pools:
  - {name: chat, replicas: [{url: %q}, {url: %q}], queue: {concurrency: 8}}
  - {name: small, replicas: [{url: %q}], queue: {concurrency: 1, max_size: 1}}
routes: [{model: "small", pool: small}, {model: "*", pool: chat}]
`, up("a", 20*time.Millisecond), up("b", 60*time.Millisecond), up("c", 40*time.Millisecond)))
	g.NewLiveBoard(5 * time.Second)
	gw := startGateway(t, g)
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Add(1)
	go func() { defer wg.Done(); g.RunLive(ctx) }()
	var sent atomic.Int64
	for i := range 12 {
		model := "m"
		if i%3 == 0 {
			model = "small"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if s, _, _ := do(t, gw.URL, chatBody(model, true, "a live page test", ""), nil); s != 200 {
					time.Sleep(20 * time.Millisecond) // a refused client backs off
				}
				sent.Add(1)
			}
		}()
	}

	b := browsertest.Start(t, browser)
	b.Call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": false})
	b.Call(t, "Page.navigate", map[string]any{"url": admin.URL + LivePath + "/"})
	wait := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(time.Minute); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("waited a minute in vain for %s", what)
			}
		}
	}
	num := func(expr string) int64 {
		n, _ := strconv.ParseInt(b.Eval(t, expr), 10, 64)
		return n
	}
	wait("the page", func() bool { return b.Eval(t, "document.body.dataset.seq") != "" })
	seq0 := num("document.body.dataset.seq")
	total := `Number((document.getElementById("g-pool-chat-total") || {dataset: {}}).dataset.v || 0)`
	wait("events", func() bool {
		return num("document.body.dataset.seq") >= seq0+2 && num("document.body.dataset.events") >= 2
	})
	t0 := num(total)
	wait("the chat pool's total to move", func() bool { return num(total) > t0 && t0 > 0 })
	wait("the small pool to shed", func() bool { return num(`Number(document.getElementById("g-pool-small-r429").dataset.v)`) > 0 })
	if b.Eval(t, `String(document.getElementById("gwcard").hidden)`) != "false" {
		t.Error("the gateway card is hidden")
	}
	if n := num(`document.querySelectorAll("#groups tbody tr").length`); n != 5 {
		t.Errorf("%d pool and upstream rows, want 5 (2 pools, 3 upstreams)", n)
	}
	if n := num(`document.querySelectorAll("#stages tr").length`); n == 0 {
		t.Error("no stage split shown")
	}
	for _, e := range b.Errs {
		t.Errorf("the page's console: %.300s", e)
	}
	shot := filepath.Join(t.ArtifactDir(), "gateway-live.png")
	t.Logf("screenshot: %s (%d bytes); %d requests sent", shot, b.Screenshot(t, shot, 20000), sent.Load())
}
