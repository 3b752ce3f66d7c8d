package report_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/cli"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/serve"
)

// scenario is a bench run on the embedded engine whose cause is known by
// construction, and the diagnosis it must get (docs/report.md, "Scenarios
// with known answers").
type scenario struct {
	name string
	// args are bench's flags besides the results folder, the SLO and the
	// scrape interval; slo is the objective the symptom breaks.
	args []string
	slo  string
	// network and tail, when set, put a proxy between bench and a served
	// engine that holds each request that long before passing it on
	// (network), or the end of each stream before its [DONE] (work after
	// the last token).
	network, tail time.Duration
	// rule is the first finding's (the load generator's own doubts aside:
	// a busy machine can raise them in any scenario); its remedies must
	// say lever and its evidence says. severity, when set, is its severity.
	// also is another rule that may come first in its place with the same
	// cause, lever and evidence (on a busy machine the evidence can fall
	// below one rule's bar and still meet the other's).
	rule     string
	also     string
	severity string
	lever    string
	says     []string
	// present is a finding that must be there too, not necessarily first.
	present string
}

var scenarios = []scenario{
	{name: "prefill, shared prefix, caching off",
		args: []string{"--rate", "4", "--arrival", "poisson", "--requests", "16", "--input-tokens", "4000",
			"--prefix-tokens", "3600", "--output-tokens", "16"},
		slo: "ttft:p99<=100ms", rule: "prefill-bound", lever: "turn on prefix caching",
		says: []string{"90% of input tokens are a prefix shared with other requests", "prefix caching is off"}},
	{name: "prefill, distinct prompts, caching on",
		args: []string{"--rate", "4", "--arrival", "poisson", "--requests", "16", "--input-tokens", "4000",
			"--output-tokens", "16", "--sim-enable-prefix-caching"},
		slo: "ttft:p99<=100ms", rule: "prefill-bound", lever: "more compute per replica",
		says: []string{"largest TTFT term", "ms per 1k tokens"}},
	{name: "prefill chunks stalling decodes",
		args: []string{"--rate", "3", "--arrival", "poisson", "--requests", "12", "--input-tokens", "7000",
			"--output-tokens", "64"},
		slo: "itl:p99<=50ms", rule: "prefill-interference", also: "stalls", lever: "max_num_batched_tokens, now 8192",
		says: []string{"overlap another request's prefill", "not preemptions", "Chunked prefill is already on"}},
	{name: "bandwidth-bound decode",
		args: []string{"--concurrency", "48", "--requests", "96", "--input-tokens", "16", "--output-tokens", "128"},
		slo:  "tpot:p99<=7ms", rule: "decode-bandwidth", lever: "quantize weights and KV cache",
		says: []string{"memory-bandwidth bound"}},
	{name: "KV exhaustion and preemption",
		args: []string{"--concurrency", "16", "--requests", "32", "--input-tokens", "256", "--output-tokens", "128",
			"--sim-num-gpu-blocks-override", "200"},
		slo: "tpot:p99<=10ms", rule: "kv-cache", lever: "KV-cache headroom",
		// The peak is sampled at scrapes: 99 % on a busy machine.
		says: []string{"The server's KV cache ran out", "preemption(s) during the run", "KV-cache usage peaked at"}},
	{name: "overload queueing",
		args: []string{"--rate", "60", "--requests", "80", "--sim-max-num-seqs", "2", "--input-tokens", "128",
			"--output-tokens", "16"},
		slo: "ttft:p99<=200ms", rule: "server-queueing", severity: "critical",
		lever: "keep the offered rate below the measured capacity", says: []string{"above the measured capacity"}},
	{name: "bursty arrivals",
		args: []string{"--rate", "5", "--arrival", "gamma", "--burstiness", "0.1", "--requests", "24",
			"--input-tokens", "128", "--output-tokens", "64", "--sim-max-num-seqs", "4"},
		slo: "ttft:p99<=200ms", rule: "server-queueing", severity: "warning", lever: "headroom for bursts",
		says: []string{"bursts of arrivals"}},
	{name: "long outputs",
		args: []string{"--rate", "8", "--arrival", "poisson", "--requests", "24", "--input-tokens", "128",
			"--output-tokens", "lognormal:mean=60,sigma=1.2"},
		slo: "e2e:p99<=1s", rule: "output-length", lever: "cap max_tokens", says: []string{"Capping max_tokens"}},
	{name: "client-side bottleneck",
		args: []string{"--rate", "20", "--concurrency", "2", "--requests", "30", "--input-tokens", "128",
			"--output-tokens", "32"},
		slo: "e2e_intended:p99<=1s", rule: "client-bottleneck", severity: "critical", lever: "in-flight caps",
		says: []string{"left the client late"}},
	{name: "network overhead", network: 60 * time.Millisecond,
		args: []string{"--rate", "5", "--arrival", "poisson", "--requests", "16", "--input-tokens", "128",
			"--output-tokens", "8"},
		slo: "ttft:p99<=40ms", rule: "outside-model", lever: "move the client closer", says: []string{"The largest is network"}},
	{name: "post-processing after the last token", tail: 200 * time.Millisecond,
		args: []string{"--rate", "5", "--arrival", "poisson", "--requests", "16", "--input-tokens", "128",
			"--output-tokens", "8"},
		slo: "e2e:p99<=250ms", rule: "outside-model", lever: "post-processing after the last token",
		says: []string{"The largest is stream_tail"}},
	{name: "closed-loop waves",
		args: []string{"--concurrency", "8", "--requests", "40", "--input-tokens", "2000", "--output-tokens", "32"},
		slo:  "ttft:p99<=100ms", present: "closed-loop-waves"},
}

// TestScenariosWithKnownAnswers runs each scenario through the real path
// (bench in process against serve in process, over HTTP) and checks that
// the first finding names the cause built in and its lever, and that no
// finding claims a cause the server's counters or configuration
// contradict. It asserts the diagnosis, never a latency: on a busy
// machine the numbers move, the cause does not.
func TestScenariosWithKnownAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bench against the embedded engine, a few seconds per scenario")
	}
	for _, sc := range scenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			rep := runScenario(t, sc)
			for i, f := range rep.Findings {
				t.Logf("%d [%s] %s: %s\n  do: %s", i, f.Severity, f.Rule, f.Evidence, strings.Join(f.Remedies, "; "))
			}
			checkCounters(t, rep)
			if sc.present != "" && findingOf(rep, sc.present) == nil {
				t.Errorf("no %s finding", sc.present)
			}
			if sc.rule == "" {
				return
			}
			f := firstCause(t, rep, sc.rule)
			if f == nil {
				t.Fatalf("no finding")
			}
			if f.Rule != sc.rule && (sc.also == "" || f.Rule != sc.also) {
				t.Fatalf("first finding is %s (%s), want %s", f.Rule, f.Title, sc.rule)
			}
			if sc.severity != "" && f.Severity != report.Severity(sc.severity) {
				t.Errorf("severity %s, want %s", f.Severity, sc.severity)
			}
			if !slices.ContainsFunc(f.Remedies, func(r string) bool { return strings.Contains(r, sc.lever) }) {
				t.Errorf("remedies lack %q: %q", sc.lever, f.Remedies)
			}
			for _, s := range sc.says {
				if !strings.Contains(f.Evidence, s) {
					t.Errorf("evidence lacks %q: %s", s, f.Evidence)
				}
			}
		})
	}
}

// runScenario runs bench for the scenario and reads the report back from
// its results folder, as `tokentrace report` would.
func runScenario(t *testing.T, sc scenario) *report.Report {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	args := append([]string{"bench", "--no-calibration", "--output-dir", dir, "--slo", sc.slo,
		"--scrape-interval", "250ms", "--seed", "11"}, sc.args...)
	if sc.network > 0 || sc.tail > 0 {
		args = append(args, "--url", delayProxy(t, sc.network, sc.tail))
	}
	console, err := tokentrace(t, args...)
	var ee *cli.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Code == cli.ExitSLOFailed) {
		t.Fatalf("bench: %v\n%s", err, console)
	}
	slos, err := latency.ParseSLOs(sc.slo)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.Load(context.Background(), []string{dir}, report.Options{SLOs: slos})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SLOs[0].Status != "fail" {
		t.Fatalf("the scenario's symptom is missing: %s is %s (%.1f ms)", sc.slo, rep.SLOs[0].Status, rep.SLOs[0].ValueMS)
	}
	return rep
}

// firstCause is the first finding, passing over the load generator's
// doubts about itself unless the scenario is about the client: on a busy
// machine bench's schedule can lag in any scenario, and it says so.
func firstCause(t *testing.T, rep *report.Report, want string) *report.Finding {
	for i := range rep.Findings {
		f := &rep.Findings[i]
		if f.Rule == report.RuleClientBottleneck && want != report.RuleClientBottleneck {
			t.Logf("passing over the load generator's doubts (the machine is busy): %s", f.Evidence)
			continue
		}
		return f
	}
	return nil
}

func findingOf(rep *report.Report, rule string) *report.Finding {
	for i := range rep.Findings {
		if rep.Findings[i].Rule == rule {
			return &rep.Findings[i]
		}
	}
	return nil
}

// checkCounters fails a finding that claims a cause the server's own
// evidence rules out: preemption (or KV-cache headroom as the lever) when
// its counters show none and its KV cache never filled; turning on what
// its configuration says is on.
func checkCounters(t *testing.T, rep *report.Report) {
	t.Helper()
	if len(rep.Runs) != 1 || rep.Runs[0].Server == nil || len(rep.Runs[0].Samples) < 2 {
		t.Fatalf("the run lacks the server's evidence: %+v", rep.Runs)
	}
	run := rep.Runs[0]
	first, last := run.Samples[0], run.Samples[len(run.Samples)-1]
	kvPeak := 0.0
	for _, s := range run.Samples {
		kvPeak = max(kvPeak, s.KVCacheUsage)
	}
	noPreemption := last.Preemptions == first.Preemptions && kvPeak < 0.95
	cfg := run.Server.Config
	for _, f := range rep.Findings {
		all := f.Title + " " + f.Evidence + " " + strings.Join(f.Remedies, " ")
		if noPreemption && (f.Rule == report.RuleKVCache || strings.Contains(all, "KV-cache headroom") ||
			strings.Contains(f.Title, "preempted") || strings.Contains(f.Evidence, "are preemptions")) {
			t.Errorf("%s claims preemption against the counters (none, KV peak %.0f%%): %s", f.Rule, 100*kvPeak, all)
		}
		if cfg["enable_prefix_caching"] == "true" && strings.Contains(all, "turn on prefix caching") {
			t.Errorf("%s advises prefix caching, which is on: %s", f.Rule, all)
		}
		if cfg["enable_chunked_prefill"] == "true" && (strings.Contains(all, "turn on chunked prefill") ||
			slices.ContainsFunc(f.Remedies, func(r string) bool { return strings.HasPrefix(r, "chunked prefill") })) {
			t.Errorf("%s advises chunked prefill, which is on: %s", f.Rule, all)
		}
	}
}

// delayProxy serves the default engine behind a reverse proxy that holds
// each completion request for network before passing it on, and each
// stream's [DONE] for tail; it returns the proxy's base URL. It is not an
// openaitest.Upstream: the scenario's diagnosis needs the real (simulated)
// engine's answers, Server-Timing and /metrics behind the added delay,
// which a fake upstream does not produce.
func delayProxy(t *testing.T, network, tail time.Duration) string {
	t.Helper()
	cfg, err := serve.DefaultOptions().Config()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.Start(context.Background(), cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	up, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	up.Path = ""
	rp := httputil.NewSingleHostReverseProxy(up)
	rp.Transport = &http.Transport{}
	rp.FlushInterval = -1 // pass each event on as it comes
	rp.ModifyResponse = func(resp *http.Response) error {
		if tail > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body = &holdDone{ReadCloser: resp.Body, d: tail}
		}
		return nil
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The body is read whole first: the server may close an inbound
		// body once the response starts, while the transport still reads
		// it to its end for the upstream.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		if r.Method == http.MethodPost {
			time.Sleep(network) // the way there
		}
		rp.ServeHTTP(w, r)
	})
	ps := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ln := listen(t)
	go func() { _ = ps.Serve(ln) }()
	t.Cleanup(func() { _ = ps.Close() })
	return "http://" + ln.Addr().String() + "/v1"
}

// holdDone delays a stream's [DONE] event: work done after the last
// token, before the answer is complete. Bytes that came in the same read
// before the event (the last tokens) pass on at once.
type holdDone struct {
	io.ReadCloser
	d    time.Duration
	held bool
	rest []byte // the read's bytes from the [DONE] event on, not yet passed on
	err  error  // the read's error, returned with the end of rest
}

func (h *holdDone) Read(p []byte) (int, error) {
	if len(h.rest) > 0 {
		if !h.held {
			h.held = true
			time.Sleep(h.d)
		}
		n := copy(p, h.rest)
		h.rest = h.rest[n:]
		if len(h.rest) > 0 {
			return n, nil
		}
		return n, h.err
	}
	n, err := h.ReadCloser.Read(p)
	i := bytes.Index(p[:n], []byte("data: [DONE]"))
	if h.held || i < 0 {
		return n, err
	}
	if i == 0 {
		h.held = true
		time.Sleep(h.d)
		return n, err
	}
	// The tokens before the [DONE] go now; the [DONE] waits for the next read.
	h.rest, h.err = append([]byte(nil), p[i:n]...), err
	return i, nil
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
