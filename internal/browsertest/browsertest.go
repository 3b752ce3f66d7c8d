// Package browsertest drives headless Chromium for the tests of the pages
// tokentrace serves (bench's and the gateway's live view): over its
// DevTools pipe, one page, its uncaught exceptions and console errors
// collected; and the raw event stream a stalled browser holds open
// (OpenStalledStream).
//
// It imports nothing of this module but internal/process (the browser's
// process group).
package browsertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
)

// Find returns a headless-capable Chromium, or "" when none is
// installed.
func Find() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Devtools is headless Chromium driven over --remote-debugging-pipe: the
// DevTools protocol's JSON messages, each ended by a NUL byte, on the
// child's fd 3 (to it) and fd 4 (from it), attached to one page.
type Devtools struct {
	w    io.Writer
	r    *bufio.Reader
	id   int
	sess string
	// errs are the page's uncaught exceptions and console errors seen so
	// far (Runtime.exceptionThrown, Runtime.consoleAPICalled "error").
	Errs []string
}

// Start runs browser headless (ended with the test) and attaches to a
// new blank page.
func Start(t *testing.T, browser string) *Devtools {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	toR, toW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := process.CommandGroup(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-extensions", "--no-first-run", "--hide-scrollbars", "--remote-debugging-pipe",
		"--user-data-dir="+filepath.Join(t.TempDir(), "profile"), "about:blank")
	cmd.ExtraFiles = []*os.File{toR, fromW}
	if err := process.StartCmd(cmd); err != nil {
		cancel()
		t.Fatal(err)
	}
	_ = toR.Close()
	_ = fromW.Close()
	t.Cleanup(func() {
		_ = toW.Close()
		cancel()
		_ = cmd.Wait()
		_ = fromR.Close()
	})
	d := &Devtools{w: toW, r: bufio.NewReader(fromR)}
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := json.Unmarshal(d.Call(t, "Target.createTarget", map[string]any{"url": "about:blank"}), &target); err != nil {
		t.Fatal(err)
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(d.Call(t, "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}), &attached); err != nil {
		t.Fatal(err)
	}
	d.sess = attached.SessionID
	d.Call(t, "Runtime.enable", map[string]any{})
	return d
}

// Call sends one command and returns its result, skipping events.
func (d *Devtools) Call(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	d.id++
	msg := map[string]any{"id": d.id, "method": method, "params": params}
	if d.sess != "" {
		msg["sessionId"] = d.sess
	}
	b, _ := json.Marshal(msg)
	if _, err := d.w.Write(append(b, 0)); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	for {
		line, err := d.r.ReadBytes(0)
		if err != nil {
			t.Fatalf("%s: reading the browser: %v", method, err)
		}
		var r struct {
			ID     int             `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(bytes.TrimSuffix(line, []byte{0}), &r); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if r.Method == "Runtime.exceptionThrown" || r.Method == "Runtime.consoleAPICalled" && bytes.Contains(r.Params, []byte(`"type":"error"`)) {
			d.Errs = append(d.Errs, string(r.Params))
		}
		if r.ID != d.id {
			continue
		}
		if r.Error != nil {
			t.Fatalf("%s: %v", method, errors.New(r.Error.Message))
		}
		return r.Result
	}
}

// Eval evaluates a JavaScript expression in the page, as a string ("" for
// undefined).
func (d *Devtools) Eval(t *testing.T, expr string) string {
	t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	if err := json.Unmarshal(d.Call(t, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}), &r); err != nil {
		t.Fatal(err)
	}
	if r.Result.Value == nil {
		return ""
	}
	return fmt.Sprint(r.Result.Value)
}

// Screenshot saves the page as a PNG at path and returns its size; it
// fails the test on a picture under min bytes (a blank page).
func (d *Devtools) Screenshot(t *testing.T, path string, min int) int {
	t.Helper()
	var png struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(d.Call(t, "Page.captureScreenshot", map[string]any{"format": "png"}), &png); err != nil {
		t.Fatal(err)
	}
	img, err := base64.StdEncoding.DecodeString(png.Data)
	if err != nil || len(img) < min {
		t.Fatalf("screenshot: %v (%d bytes)", err, len(img))
	}
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	return len(img)
}
