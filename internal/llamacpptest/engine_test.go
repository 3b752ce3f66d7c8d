package llamacpptest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	benchpkg "github.com/tokentrace/tokentrace/internal/bench"
	"github.com/tokentrace/tokentrace/internal/cli"
	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/llamacpptest"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
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
// failure (llama-server closes the connection after a stream although it
// said keep-alive; bench resends a request that meets such a closed
// connection before any answer, internal/staleconn, and counts it as
// resent, not failed), and the server split of every successful request
// from llama.cpp's own timings.
func checkRun(t *testing.T, rep *report.Report) {
	t.Helper()
	s := rep.Summary
	for kind, n := range s.Errors {
		t.Errorf("%d of %d requests failed with %s", n, s.Requests, kind)
	}
	if s.Succeeded == 0 || s.Succeeded != s.Requests {
		t.Fatalf("%d of %d requests succeeded: %v", s.Succeeded, s.Requests, s.Errors)
	}
	// Directly, the split is llama.cpp's timings; behind tokentrace's
	// gateway, the gateway's Server-Timing holding them.
	if got := s.ServerEvidence[latency.SourceLlamaCppTimings] + s.ServerEvidence[viaGateway]; got != s.Succeeded {
		t.Errorf("%d of %d successful requests have llama.cpp's timings as their split: %v", got, s.Succeeded, s.ServerEvidence)
	}
	if s.QueueInferred == nil {
		t.Errorf("no queue inference: %+v", s)
	}
}

// viaGateway is the evidence name of llama.cpp's split as the gateway
// passes it on.
const viaGateway = latency.SourceServerTiming + " (" + latency.EngineLlamaCpp + ")"

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
		k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == report.RuleServerQueueing })
		if k < 0 {
			t.Fatalf("no server-queueing finding")
		}
		f := rep.Findings[k]
		for _, want := range []string{"llamacpp:requests_deferred", "timings.prompt_ms", "slots"} {
			if !strings.Contains(f.Evidence+strings.Join(f.Remedies, " "), want) {
				t.Errorf("the queueing finding does not say %q: %s", want, f.Evidence)
			}
		}
		if st := rep.Summary.ServerTokens; st == nil || st.Engine != "llamacpp" || st.GeneratedTokens <= 0 {
			t.Errorf("no llamacpp:* token counters in the summary: %+v", st)
		} else {
			t.Logf("server tokens: %+v", *st)
		}
		if g := rep.TTFTSplit.Groups[1]; g.Largest != string(latency.TimingServerQueue) {
			t.Errorf("TTFT's tail: largest %s/%s, want the server's queue: %+v", g.LargestHop, g.Largest, g.Stages)
		}
		for _, f := range rep.Findings {
			if f.Rule == report.RuleOutsideModel || strings.Contains(f.Title, "preempted") || strings.Contains(strings.Join(f.Remedies, " "), "KV-cache headroom") {
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
		gw, _ := gatewaytest.Start(t, gatewaytest.OnePool(s.URL, "llamacpp"))
		rep := bench(t, gw, filepath.Join(t.TempDir(), "gateway"), "--concurrency", "2", "--requests", "12")
		logFindings(t, rep)
		// The gateway's upstream transport meets the same closed
		// connections and resends as bench does.
		checkRun(t, rep)
		// The gateway read llama.cpp's timings into its own split: its
		// Server-Timing names prefill and leaves the slot wait
		// unreported, so the report still infers it rather than calling
		// it network.
		if got := rep.Summary.ServerEvidence[viaGateway]; got != rep.Summary.Succeeded {
			t.Errorf("%d of %d requests have the gateway's split of llama.cpp's timings: %v", got, rep.Summary.Succeeded, rep.Summary.ServerEvidence)
		}
		for _, g := range rep.TTFTSplit.Groups {
			for _, st := range g.Stages {
				if st.Hop == string(latency.HopGateway)+"→"+string(latency.HopServer) && st.MeanMS > 0 {
					t.Errorf("TTFT split %s calls %.3f ms between the gateway and llama.cpp network: %+v", g.Name, st.MeanMS, g.Stages)
				}
			}
		}
		// llama.cpp's decode (predicted_ms) is the server's decode behind
		// the gateway, not the gateway→server stream tail, and nothing
		// blames the outside of the model (#36).
		var decode float64
		for _, g := range rep.Decomposition.Groups {
			for _, st := range g.Stages {
				if st.Hop == string(latency.HopServer) && st.Stage == string(latency.StageDecode) {
					decode += st.MeanMS
				}
			}
		}
		if decode <= 0 {
			t.Errorf("no server decode in the decomposition behind the gateway: %+v", rep.Decomposition.Groups)
		}
		if k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == "outside-model" }); k >= 0 {
			t.Errorf("a finding blames the outside of the model behind the gateway: %s", rep.Findings[k].Evidence)
		}
	})
	t.Run("one stream's decode is named with its floor", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "one")
		checkRun(t, bench(t, s.URL, dir, "--concurrency", "1", "--requests", "15"))
		// One stream missing a TPOT objective: its decode floor and levers.
		rep, err := report.Load(context.Background(), []string{dir}, report.Options{SLOs: mustSLOs(t, "tpot:p99<=0.5ms")})
		if err != nil {
			t.Fatal(err)
		}
		logFindings(t, rep)
		if k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == report.RuleDecodeBandwidth }); k < 0 ||
			!strings.Contains(rep.Findings[k].Evidence, "One stream decodes at a time") {
			t.Errorf("one stream's decode is not named with its floor: %+v", rep.Findings)
		}
	})
	t.Run("1,000 requests, no spurious failure", func(t *testing.T) {
		// 8 workers on 4 slots, short answers: every request succeeds,
		// however often llama-server closed the connection under a
		// pooled request.
		rep := bench(t, s.URL, filepath.Join(t.TempDir(), "thousand"), "--concurrency", "8", "--requests", "1000",
			"--input-tokens", "16", "--output-tokens", "4")
		checkRun(t, rep)
		t.Logf("%d requests, %d succeeded, %d resent on a fresh connection", rep.Summary.Requests, rep.Summary.Succeeded, rep.Summary.Resent)
		if rep.Summary.Requests != 1000 {
			t.Errorf("%d requests measured, want 1000", rep.Summary.Requests)
		}
	})
	t.Run("prompt lengths the server agrees with", func(t *testing.T) {
		// Sized against llama.cpp's /apply-template and /tokenize: 256
		// asked, 256 served (within SizeTolerance), chat and completions.
		for _, ep := range []string{"chat", "completions"} {
			dir := filepath.Join(t.TempDir(), "sized-"+ep)
			checkRun(t, bench(t, s.URL, dir, "--endpoint", ep, "--input-tokens", "256", "--output-tokens", "2",
				"--concurrency", "2", "--requests", "12"))
			pl := promptLengths(t, dir)
			if pl == nil || !strings.HasPrefix(pl.Tokenizer, "llama.cpp") || pl.Sized != 12 || pl.Requests != 12 ||
				pl.GapMin < -benchpkg.SizeTolerance || pl.GapMax > benchpkg.SizeTolerance || pl.Beyond != 0 {
				t.Errorf("%s: prompts not sized to what llama-server serves: %+v", ep, pl)
			}
			t.Logf("%s: %+v", ep, pl)
		}
		// Unsized (the built-in tokenizer): the gap from usage, warned in
		// the summary and the report.
		dir := filepath.Join(t.TempDir(), "builtin")
		checkRun(t, bench(t, s.URL, dir, "--input-tokens", "256", "--output-tokens", "2", "--concurrency", "2",
			"--requests", "6", "--prompt-tokenizer", "builtin"))
		pl := promptLengths(t, dir)
		if pl == nil || pl.Tokenizer != "tokentrace" || pl.Requests != 6 || pl.Beyond != 6 || pl.GapP50 <= 0 {
			t.Errorf("the gap is not reported: %+v", pl)
		}
		t.Logf("builtin: %+v", pl)
		out, err := tokentrace(t, "report", dir)
		if err != nil || !strings.Contains(out, "prompt lengths: 6 of 6 requests") {
			t.Errorf("the report does not warn of the gap (%v):\n%s", err, out)
		}
	})
	t.Run("bench's TTFT against a minimal client, interleaved", func(t *testing.T) {
		ttftInterleaved(t, s.URL, 100)
	})
}

// promptLengths reads summary.json's prompt_lengths.
func promptLengths(t *testing.T, dir string) *benchpkg.PromptLengths {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Prompts *benchpkg.PromptLengths `json:"prompt_lengths"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	return sum.Prompts
}

// ttftInterleaved sends the same streamed request pairs times through
// bench's client and through a minimal client, alternating (ABBA, so
// neither always goes first), and logs the two TTFT P50s and the P50 of
// the paired differences: the run docs/engines.md quotes. Logged, not
// asserted: a shared machine's load moves wall times.
func ttftInterleaved(t *testing.T, url string, pairs int) {
	t.Helper()
	content := strings.Repeat("word ", 60)
	target := benchpkg.Target{BaseURL: url, Endpoint: benchpkg.EndpointChat, Model: "m", Stream: true, IgnoreEOS: true, Timeout: time.Minute}
	zero := time.Now()
	client, err := benchpkg.NewClient(target, func() int64 { return int64(time.Since(zero)) }, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	req := workload.Request{Messages: []tokenizer.Message{{Role: "user", Content: content}}, MaxTokens: 8}
	// The body bench sends, byte for byte.
	body := `{"model":"m","messages":[{"role":"user","content":"` + content + `"}],"max_tokens":8,"ignore_eos":true,` +
		`"stream":true,"stream_options":{"include_usage":true}}`
	minimal := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var ours, theirs, diffs []int64
	resent := 0
	for i := range 2 * pairs {
		if i%4 == 0 || i%4 == 3 { // bench, minimal, minimal, bench, …
			rec := &latency.Record{ID: fmt.Sprintf("interleaved-%d", i)}
			client.Do(context.Background(), &req, rec)
			d, ok := rec.TTFT()
			if !rec.OK() || !ok {
				t.Fatalf("bench's request %d: %s %s", i, rec.ErrorKind, rec.Error)
			}
			resent += rec.Resent
			ours = append(ours, int64(d))
		} else {
			theirs = append(theirs, minimalTTFT(t, minimal, url, body))
		}
		if i%2 == 1 {
			diffs = append(diffs, ours[len(ours)-1]-theirs[len(theirs)-1])
		}
	}
	p50 := func(xs []int64) float64 {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		return float64(stats.Percentile(xs, 50)) / 1e6
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("TTFT P50 over %d pairs, interleaved: bench %.3f ms, minimal client %.3f ms; paired difference P50 %+.3f ms; bench resent %d; load average %s",
		pairs, p50(ours), p50(theirs), p50(diffs), resent, strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
}

// minimalTTFT sends body on a fresh connection and times the first
// content event after the request began: the least a client can add.
func minimalTTFT(t *testing.T, client *http.Client, url, body string) int64 {
	t.Helper()
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
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before a token: %v", err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			d := int64(time.Since(start))
			_, _ = io.Copy(io.Discard, resp.Body)
			return d
		}
	}
}

func mustSLOs(t *testing.T, s string) []latency.SLO {
	t.Helper()
	slos, err := latency.ParseSLOs(s)
	if err != nil {
		t.Fatal(err)
	}
	return slos
}
