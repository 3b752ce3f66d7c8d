package llamacpptest_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/cli"
	"github.com/tokentrace/tokentrace/internal/gateway"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/llamacpptest"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// tokentrace runs the command line as a user would.
func tokentrace(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := cli.NewRoot()
	var out bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// bench runs tokentrace bench against url with small requests (64 prompt
// tokens, 32 answer tokens run to the end) and returns the report of its
// results folder.
func bench(t *testing.T, url, dir string, args ...string) *report.Report {
	t.Helper()
	args = append([]string{"bench", "--url", url, "--model", "m", "--input-tokens", "64", "--output-tokens", "32",
		"--ignore-eos", "--no-calibration", "--scrape-interval", "250ms", "--seed", "3", "--output-dir", dir}, args...)
	console, err := tokentrace(t, args...)
	var ee *cli.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Code == cli.ExitSLOFailed) {
		t.Fatalf("bench: %v\n%s", err, console)
	}
	rep, err := report.Load(context.Background(), []string{dir}, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// checkRun checks what every run against llama-server must show: no
// failure but resets of a reused connection (llama-server closes the
// connection after a stream although it said keep-alive; bench's retry of
// a request that never reached the server removes them), and the server
// split of every successful request from llama.cpp's own timings.
func checkRun(t *testing.T, rep *report.Report, tolerated ...string) {
	t.Helper()
	s := rep.Summary
	tolerated = append(tolerated, latency.ErrReset, latency.ErrConnect)
	for kind, n := range s.Errors {
		if !slices.Contains(tolerated, kind) {
			t.Errorf("%d requests failed with %s", n, kind)
		}
	}
	if s.Succeeded < s.Requests/2 {
		t.Fatalf("only %d of %d requests succeeded: %v", s.Succeeded, s.Requests, s.Errors)
	}
	if got := s.ServerEvidence[latency.SourceLlamaCppTimings]; got != s.Succeeded {
		t.Errorf("%d of %d successful requests have llama.cpp's timings as their split: %v", got, s.Succeeded, s.ServerEvidence)
	}
	if s.QueueInferred == nil {
		t.Errorf("no queue inference: %+v", s)
	}
}

func logFindings(t *testing.T, rep *report.Report) {
	for i, f := range rep.Findings {
		t.Logf("%d [%s] %s: %s\n  do: %s", i, f.Severity, f.Rule, f.Evidence, strings.Join(f.Remedies, "; "))
	}
	t.Logf("notes: %q", rep.Notes)
}

// TestAgainstLlamaServer is the end-to-end suite against a real engine
// nobody on this project wrote: llama.cpp's llama-server with 4 slots and
// a small random-weight model, on this machine's CPU. It asserts what the
// tools conclude, never a latency.
func TestAgainstLlamaServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama-server (about a minute)")
	}
	s := llamacpptest.Start(t, llamacpptest.Options{Slots: 4})
	t.Run("closed loop of 8 on 4 slots is queueing for a slot", func(t *testing.T) {
		rep := bench(t, s.URL, filepath.Join(t.TempDir(), "closed"), "--concurrency", "8", "--requests", "48")
		logFindings(t, rep)
		checkRun(t, rep)
		k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == "server-queueing" })
		if k < 0 {
			t.Fatalf("no server-queueing finding")
		}
		f := rep.Findings[k]
		for _, want := range []string{"llamacpp:requests_deferred", "timings.prompt_ms", "slots"} {
			if !strings.Contains(f.Evidence+strings.Join(f.Remedies, " "), want) {
				t.Errorf("the queueing finding does not say %q: %s", want, f.Evidence)
			}
		}
		if g := rep.TTFTSplit.Groups[1]; g.Largest != string(latency.TimingServerQueue) {
			t.Errorf("TTFT's tail: largest %s/%s, want the server's queue: %+v", g.LargestHop, g.Largest, g.Stages)
		}
		for _, f := range rep.Findings {
			if f.Rule == "outside-model" || strings.Contains(f.Title, "preempted") || strings.Contains(strings.Join(f.Remedies, " "), "KV-cache headroom") {
				t.Errorf("a finding blames what llama.cpp's evidence does not show: %s: %s", f.Rule, f.Evidence)
			}
		}
	})
	t.Run("open loop with --duration, then report", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "open")
		rep := bench(t, s.URL, dir, "--rate", "3", "--duration", "4s")
		logFindings(t, rep)
		checkRun(t, rep)
		out, err := tokentrace(t, "report", dir)
		if err != nil {
			t.Errorf("report of a --duration run: %v\n%s", err, out)
		}
		if !strings.Contains(out, "llama.cpp's per-request timings") {
			t.Errorf("the report does not say which evidence it had:\n%s", out)
		}
	})
	t.Run("gateway in front", func(t *testing.T) {
		gw := startGateway(t, s.URL)
		rep := bench(t, gw, filepath.Join(t.TempDir(), "gateway"), "--concurrency", "2", "--requests", "12")
		logFindings(t, rep)
		// The gateway's upstream transport meets the same closed
		// connections and answers 502 until it retries them.
		checkRun(t, rep, latency.ErrHTTP5xx)
	})
	t.Run("bench's TTFT against a minimal client", func(t *testing.T) {
		// One request at a time, the same size: bench's TTFT P50 beside a
		// client that only times the first content event. Logged (docs/
		// engines.md quotes it), not asserted: the machine is shared.
		minimal := minimalTTFTs(t, s.URL, 15)
		dir := filepath.Join(t.TempDir(), "one")
		rep := bench(t, s.URL, dir, "--concurrency", "1", "--requests", "15")
		checkRun(t, rep)
		// One stream missing a TPOT objective: its decode floor and levers.
		rep, err := report.Load(context.Background(), []string{dir}, report.Options{SLOs: mustSLOs(t, "tpot:p99<=0.5ms")})
		if err != nil {
			t.Fatal(err)
		}
		logFindings(t, rep)
		if k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == "decode-bandwidth" }); k < 0 ||
			!strings.Contains(rep.Findings[k].Evidence, "One stream decodes at a time") {
			t.Errorf("one stream's decode is not named with its floor: %+v", rep.Findings)
		}
		var ttft float64
		for _, d := range rep.Metrics {
			if d.Metric == "ttft" {
				ttft = d.P50
			}
		}
		slices.Sort(minimal)
		p50 := float64(stats.Percentile(minimal, 50)) / 1e6
		t.Logf("TTFT P50: bench %.2f ms, minimal client %.2f ms (difference %+.2f ms)", ttft, p50, ttft-p50)
		if ttft <= 0 || p50 <= 0 {
			t.Errorf("TTFT P50: bench %v ms, minimal client %v ms", ttft, p50)
		}
	})
}

// minimalTTFTs sends n streamed requests one after another with a fresh
// connection each and times the first content event after the request
// was written: the least a client can add.
func minimalTTFTs(t *testing.T, url string, n int) []int64 {
	t.Helper()
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 60) +
		`"}],"max_tokens":32,"ignore_eos":true,"stream":true}`
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var out []int64
	for range n {
		req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended before a token: %v", err)
			}
			if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
				out = append(out, int64(time.Since(start)))
				break
			}
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return out
}

// startGateway runs tokentrace's gateway in front of the server, with the
// server named as a llama.cpp replica, and returns its URL.
func startGateway(t *testing.T, upstream string) string {
	t.Helper()
	yaml := fmt.Sprintf("pools:\n  - name: default\n    replicas: [{url: %q, kind: llamacpp}]\nroutes:\n  - {model: \"*\", pool: default}\n", upstream)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.NewServer(gateway.RunConfig{ConfigPath: path, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Grace: time.Second})
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
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("gateway: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func mustSLOs(t *testing.T, s string) []latency.SLO {
	t.Helper()
	slos, err := latency.ParseSLOs(s)
	if err != nil {
		t.Fatal(err)
	}
	return slos
}
