package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/live"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/workload"
	"github.com/tokentrace/tokentrace/internal/workload/workloadtest"
)

// startSim starts the embedded engine as `bench` does without --url, with
// prefix caching on; mod, when set, changes its options.
func startSim(t *testing.T, mod func(*serve.Options)) *serve.Server {
	t.Helper()
	opts := serve.DefaultOptions()
	opts.Engine.EnablePrefixCaching = true
	if mod != nil {
		mod(&opts)
	}
	cfg, err := opts.Config()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.Start(context.Background(), cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func readRecords(t *testing.T, path string) []latency.Record {
	t.Helper()
	recs, err := results.ReadRecords(path)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// An end-to-end run against the embedded engine: every request succeeds,
// the token counts the client recorded reconcile with the engine's own,
// input lengths are exact, and every request carries the server's split.
func TestEndToEndAgainstEmbeddedEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	srv := startSim(t, nil)
	dir := filepath.Join(t.TempDir(), "run")
	src := &workload.Synthetic{Chat: true, Input: workload.Fixed(64), Output: workload.Fixed(8),
		PrefixTokens: 32, PrefixGroups: 2, Turns: 1, Seed: 3}
	cfg := Config{
		Target: Target{BaseURL: srv.URL(), Endpoint: EndpointChat, Stream: true, IgnoreEOS: true,
			ContinuousUsage: true, Timeout: time.Minute},
		Workload: src,
		Load:     workload.Load{Rate: 40, Arrival: workload.Poisson, Requests: 24, WarmupRequests: 4, Seed: 1},
		SLOs:     mustSLOs(t, "ttft:p99<=1ms"),
		OutDir:   dir, Command: []string{"tokentrace", "bench", "(test)"}, SkipCalibration: true,
	}
	var out bytes.Buffer
	res, err := Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, filepath.Join(dir, results.RequestsFile))
	if len(recs) != 28 {
		t.Fatalf("%d records, want 24 + 4 warm-up", len(recs))
	}
	var outTok int64
	warm := 0
	for _, r := range recs {
		if !r.OK() {
			t.Fatalf("request %s failed: %s %s", r.ID, r.ErrorKind, r.Error)
		}
		if r.Warmup {
			warm++
		}
		outTok += int64(r.OutputTokens)
		if r.InputTokens != 64 || r.InputSource != latency.SourceUsage {
			t.Errorf("%s: input %d from %s; the engine should see exactly 64", r.ID, r.InputTokens, r.InputSource)
		}
		if r.OutputTokens != 8 || len(r.ITLs(nil)) != 7 {
			t.Errorf("%s: %d output tokens, %d ITLs", r.ID, r.OutputTokens, len(r.ITLs(nil)))
		}
		if r.Server == nil || r.Server.Source != "server-timing" {
			t.Errorf("%s: no server split", r.ID)
		}
		if r.Model != "Llama-3.1-8B" {
			t.Errorf("model %q, want the first of /v1/models", r.Model)
		}
	}
	if st := srv.Engine().Stats(); st.GenerationTokens != outTok {
		t.Errorf("client counted %d output tokens, the engine generated %d", outTok, st.GenerationTokens)
	}
	if warm != 4 {
		t.Errorf("%d warm-up records, want 4", warm)
	}
	s := res.Summary
	if s.Report.Summary.Requests != 24 || s.Report.Summary.OutputTokens != 24*8 || s.Report.Summary.InputTokens != 24*64 {
		t.Errorf("report summary %+v", s.Report.Summary)
	}
	if !res.SLOsFailed() {
		t.Error("a 1 ms P99 TTFT cannot hold against a simulated 8B model")
	}
	if s.Compat == nil || s.Compat.VLLM.TTFT.Count != 24 {
		t.Errorf("compatibility views: %+v", s.Compat)
	}
	for _, f := range []string{results.SummaryFile, results.CommandFile, results.ConfigFile, "run.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("results folder lacks %s", f)
		}
	}
	if !strings.Contains(out.String(), "ttft") || !strings.Contains(out.String(), "WHERE THE TIME GOES") {
		t.Errorf("console summary lacks the latency table:\n%s", out.String())
	}
	// A second run into the same folder is refused, keeping the first.
	if _, err := Run(context.Background(), cfg, &out); err == nil || !strings.Contains(err.Error(), "already holds a run") {
		t.Errorf("second run into the same folder: %v", err)
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

// Faulty requests are counted by kind and leave the successful requests'
// numbers alone. serve draws each request's faults from its seed and the
// request's id, so the run's ids are fixed (RunID): the same requests fail
// in every run.
func TestFaultsDoNotSkewSuccesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	srv := startSim(t, func(o *serve.Options) {
		o.Engine.EnablePrefixCaching = false
		o.Faults.Rate500, o.Faults.ResetRate, o.Faults.Seed = 0.2, 0.2, 5
	})
	dir := filepath.Join(t.TempDir(), "run")
	cfg := Config{
		Target:   Target{BaseURL: srv.URL(), Endpoint: EndpointChat, Stream: true, IgnoreEOS: true, ContinuousUsage: true, Timeout: time.Minute},
		Workload: &workload.Synthetic{Chat: true, Input: workload.Fixed(32), Output: workload.Fixed(6), Turns: 1, Seed: 1},
		Load:     workload.Load{Concurrency: 4, Requests: 40},
		OutDir:   dir, SkipCalibration: true, RunID: "faults",
	}
	res, err := Run(context.Background(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	sum := res.Report.Summary
	if sum.Requests != 40 || sum.Failed == 0 || sum.Succeeded == 0 || sum.Failed+sum.Succeeded != 40 {
		t.Fatalf("summary %+v", sum)
	}
	t.Logf("failed %d: %v", sum.Failed, sum.Errors)
	if sum.Errors[string(latency.FailHTTP5xx)] == 0 || sum.Errors[string(latency.FailReset)]+sum.Errors[string(latency.FailStreamCut)] == 0 {
		t.Errorf("errors by kind %v: want 5xx and resets", sum.Errors)
	}
	if sum.OutputTokens != int64(sum.Succeeded)*6 {
		t.Errorf("output tokens %d from %d successes: failed requests leaked into the totals", sum.OutputTokens, sum.Succeeded)
	}
}

// A stop (SIGINT) ends sending, lets requests in flight finish within the
// grace, and still writes the summary of what finished.
func TestStopWritesSummary(t *testing.T) {
	res, dir := runStopped(t, 8, 20*time.Millisecond, 20*time.Millisecond, 400*time.Millisecond, Config{
		Load:  workload.Load{Rate: 50, Arrival: workload.Constant, Duration: time.Minute},
		Grace: 5 * time.Second,
	})
	recs := readRecords(t, filepath.Join(dir, results.RequestsFile))
	if !res.Summary.Interrupted || len(recs) == 0 || len(recs) > 30 {
		t.Fatalf("interrupted %v with %d records", res.Summary.Interrupted, len(recs))
	}
	for _, r := range recs {
		if !r.OK() {
			t.Errorf("%s: %s — requests in flight should finish within the grace", r.ID, r.ErrorKind)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, results.SummaryFile))
	if err != nil || !strings.Contains(string(b), `"interrupted": true`) {
		t.Errorf("summary.json: %v", err)
	}
}

// Requests still in flight when the grace runs out are recorded as canceled.
func TestGraceRunsOut(t *testing.T) {
	res, dir := runStopped(t, 2, 10*time.Second, time.Millisecond, 200*time.Millisecond, Config{
		Load:  workload.Load{Concurrency: 3, Requests: 100},
		Grace: 100 * time.Millisecond,
	})
	recs := readRecords(t, filepath.Join(dir, results.RequestsFile))
	if len(recs) != 3 || res.Report.Summary.Errors[string(latency.FailCanceled)] != 3 {
		t.Fatalf("%d records, errors %v: want the 3 in flight, canceled", len(recs), res.Report.Summary.Errors)
	}
}

// runStopped runs cfg (its load and grace) against a loopback server whose
// streams carry tokens tokens, the first after first and the others gap
// apart, and stops the run after stop as Ctrl-C would. It returns the
// result and the results folder.
func runStopped(t *testing.T, tokens int, first, gap, stop time.Duration, cfg Config) (*Result, string) {
	t.Helper()
	clock := NewRealClock()
	lb, err := startLoopback(tokens, first, gap, func() int64 { return int64(clock.Now()) }, false)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	cfg.Target = Target{BaseURL: lb.URL(), Endpoint: EndpointChat, Model: "m", Stream: true, Timeout: time.Minute}
	cfg.Workload = &workload.Synthetic{Chat: true, Input: workload.Fixed(8), Output: workload.Fixed(tokens), Turns: 1, Seed: 1}
	cfg.OutDir, cfg.SkipCalibration = filepath.Join(t.TempDir(), "run"), true
	// The loopback streams on every path, /tokenize too (for first): no
	// probe for a tokenizer before the stop.
	cfg.PromptTokenizer = PromptTokenizerBuiltin
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(stop, cancel)
	res, err := Run(ctx, cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	return res, cfg.OutDir
}

// A Mooncake trace replayed against the embedded engine with prefix
// caching on: half the requests share 80 % of their blocks, the engine
// serves from its cache the share of input tokens the hash_ids imply, and
// the report's summary names both shares.
func TestMooncakeTraceAgainstEmbeddedEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	srv := startSim(t, nil)
	m := workloadtest.Mooncake{Requests: 60, Blocks: 10, Shared: 8, BlockSize: 32, Output: 3, GapMS: 20}
	o := workload.DefaultOptions()
	o.Trace, o.TraceBlockSize = m.Write(t, t.TempDir()), m.BlockSize
	src, load, err := o.Build(true, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	cfg := Config{
		Target: Target{BaseURL: srv.URL(), Endpoint: EndpointChat, Stream: true, IgnoreEOS: true,
			ContinuousUsage: true, Timeout: time.Minute},
		Workload: src, Load: load, OutDir: dir, SkipCalibration: true,
	}
	var out bytes.Buffer
	res, err := Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	var in, cached, shared int
	for _, r := range readRecords(t, filepath.Join(dir, results.RequestsFile)) {
		if !r.OK() {
			t.Fatalf("request %s failed: %s %s", r.ID, r.ErrorKind, r.Error)
		}
		in, cached, shared = in+r.InputTokens, cached+r.CachedTokens, shared+r.SharedPrefixTokens
	}
	want := m.ImpliedShare(true)
	if got := float64(shared) / float64(in); math.Abs(got-want) > 1e-9 {
		t.Errorf("records say %.4f of input tokens are shared, the hash_ids %.4f", got, want)
	}
	got := float64(cached) / float64(in)
	t.Logf("cached share %.4f, implied by hash_ids %.4f", got, want)
	if math.Abs(got-want) > 0.05*want {
		t.Errorf("cached share %.4f, want the hash_ids' %.4f within 5%%", got, want)
	}
	line := fmt.Sprintf("prompt tokens shared with an earlier request %.1f%% (shared_prefix_tokens)  served from the prefix cache %.1f%%",
		100*want, 100*got)
	if !strings.Contains(out.String(), line) {
		t.Errorf("report summary lacks %q:\n%s", line, out.String())
	}
	// The server's prompt counter (vLLM's, cached tokens included) agrees
	// with the records: no note blames other work for a difference.
	if st := res.Summary.Report.Summary.ServerTokens; st == nil || st.RecordsPromptTokens != int64(in) ||
		!slices.ContainsFunc(res.Summary.Report.Notes, func(n string) bool { return strings.Contains(n, "they agree") }) {
		t.Errorf("server tokens %+v, notes %q: want the server's prompt counter to agree with the records' %d", st, res.Summary.Report.Notes, in)
	}
	if s := res.Summary.Report.Summary; s.SharedPrefixTokens != int64(shared) || s.CachedTokens != int64(cached) {
		t.Errorf("report summary shared %d cached %d, records %d and %d", s.SharedPrefixTokens, s.CachedTokens, shared, cached)
	}
}

// A reasoning model on the embedded engine: every answer streams 20
// reasoning tokens before its 10 answer tokens, and bench's time to first
// answer token is the first reasoning token plus the reasoning tokens'
// decode, within one step; TTFT is the first reasoning token; the report
// leads with both.
//
// Per request, whatever the machine's load: the server's reasoning decode
// (server_reasoning in its Server-Timing trailer) is 20 of its decode
// steps; the client saw neither token before the server made it (its time
// from the send to each covers the server's from the receipt to that
// token); and the first answer stamp is the event that carried the first
// answer token (every reasoning event before it, all 10 answer tokens
// from it on; both tokens share a stamp when they arrive in one read).
// What the client adds to the server's gap is the two tokens' delivery
// delays, which a loaded host stretches apart: the median request is held
// to one step where the host delivered on time, as the server's own write
// lateness says.
func TestReasoningModelTimesFirstAnswerToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	for _, field := range []string{openai.ReasoningField, openai.ReasoningContentField} {
		srv := startSim(t, func(o *serve.Options) {
			o.Engine.ReasoningTokens = "20"
			o.ReasoningField = field
		})
		dir := filepath.Join(t.TempDir(), "run")
		cfg := Config{
			Target: Target{BaseURL: srv.URL(), Endpoint: EndpointChat, Stream: true, IgnoreEOS: true,
				ContinuousUsage: true, Timeout: time.Minute},
			Workload: &workload.Synthetic{Chat: true, Input: workload.Fixed(64), Output: workload.Fixed(30), Turns: 1, Seed: 1},
			Load:     workload.Load{Concurrency: 1, Requests: 8},
			SLOs:     mustSLOs(t, "ttft_answer:p99<=1ms"),
			OutDir:   dir, SkipCalibration: true,
		}
		res, err := Run(context.Background(), cfg, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		var offs []float64
		var step time.Duration // the server's mean decode step
		for _, r := range readRecords(t, filepath.Join(dir, results.RequestsFile)) {
			// The first answer token may share the first reasoning token's
			// stamp, never precede it: a host that holds the server's
			// goroutines off the CPU for the 20 reasoning steps (~160 ms;
			// seen at load 13-17 on 2 cores) has the engine catch up on its
			// schedule and the handler's Recv merge what piled up, so the
			// role, reasoning and first answer chunks leave back to back,
			// and the client reads them in one Read, whose instant stamps
			// every event it delivered (sse.Event.At).
			if !r.OK() || r.ReasoningTokens != 20 || r.OutputTokens != 10 || r.FirstReasonNS == 0 || r.FirstTokenNS < r.FirstReasonNS {
				t.Fatalf("%s: %s reasoning %d answer %d, first reasoning %d, first answer %d", field, r.ID,
					r.ReasoningTokens, r.OutputTokens, r.FirstReasonNS, r.FirstTokenNS)
			}
			if r.Server == nil {
				t.Fatalf("%s: %s has no server split", field, r.ID)
			}
			if ttft, _ := r.TTFT(); ttft != time.Duration(r.FirstReasonNS-r.SentNS) {
				t.Errorf("%s: TTFT %v is not the first reasoning token's", field, ttft)
			}
			off, st := checkReasoningRecord(t, field, &r)
			offs, step = append(offs, off), max(step, st)
		}
		slices.Sort(offs)
		t.Logf("%s: first answer − first reasoning − server_reasoning, in steps: %.2f", field, offs)
		// The median gap is judged where the host delivered on time. A host
		// that delays the process's goroutines by steps (two CPU hogs, load
		// 10-17 on 2 cores) delays the two tokens by different amounts —
		// the first reasoning token most, behind the engine loop's idle
		// wake-up, which its step clock leaves out as a GPU's would — and
		// shows it in how late serve wrote its chunks after their engine
		// instants. Measured with -race (step 7.9 ms): at load 6-8 the
		// P90 was 2.5-3.2 ms and the medians within 0.1 step; beside the
		// hogs the P90 was 4.8-8 ms and the medians −1 to −3 steps.
		late := srv.WriteLateness().Quantile(0.9)
		med := offs[len(offs)/2]
		switch {
		case late > step/2:
			t.Logf("%s: median %.2f steps not judged: the server wrote 10 %% of its chunks more than half a step (%v) late (P90 %v), the host's delays", field, med, step/2, late)
		case math.Abs(med) > 1:
			t.Errorf("%s: the median request's first answer is %.2f steps off the first reasoning token + the server's reasoning decode (the server's write lateness P90 %v)", field, med, late)
		}
		var names []string
		for _, m := range res.Summary.Report.Metrics {
			names = append(names, m.Metric)
		}
		if !slices.Contains(names, "ttft") || !slices.Contains(names, "ttft_answer") {
			t.Errorf("%s: report metrics %v, want ttft and ttft_answer side by side", field, names)
		}
		if !res.SLOsFailed() {
			t.Errorf("%s: an SLO on ttft_answer of 1 ms held", field)
		}
		// The compat views say what each peer would print: AIPerf's TTFT
		// counts the reasoning, its TTFO is the first answer token.
		if c := res.Summary.Compat; c == nil || c.AIPerf.TTFO.Count != 8 || c.AIPerf.TTFO.P50 <= c.AIPerf.TTFT.P50 {
			t.Errorf("%s: compat views %+v", field, c)
		}
	}
}

// checkReasoningRecord holds one request of a reasoning answer (20
// reasoning tokens, then 10 answer tokens) to what the server's
// Server-Timing says, in ways no load on the machine can break, and
// returns the client's gap from the first reasoning token to the first
// answer token less the server's reasoning decode, in decode steps, and
// the server's mean decode step.
func checkReasoningRecord(t *testing.T, field string, r *latency.Record) (float64, time.Duration) {
	t.Helper()
	stage := map[string]int64{}
	for _, s := range r.Timing {
		if s.Hop == latency.HopServer {
			stage[s.Name] = s.NS
		}
	}
	reasoning, ok := stage[string(latency.TimingServerReasoning)]
	if !ok || r.Server.DecodeNS == 0 {
		t.Fatalf("%s: %s: no server_reasoning or server_decode in Server-Timing %+v", field, r.ID, r.Timing)
	}
	// The server's mean decode step: its decode runs from the first of
	// the 30 tokens to the last. Its reasoning decode is 20 of them, on
	// the engine's step clock (a step's time grows with the context, by
	// far less than a step over 10 tokens).
	step := r.Server.DecodeNS / 29
	if d := reasoning - 20*step; d < -step || d > step {
		t.Errorf("%s: %s: server_reasoning %v is not 20 steps of %v", field, r.ID, time.Duration(reasoning), time.Duration(step))
	}
	// Causality: the client sent before the server received, and read a
	// token after the server wrote it, which it did at or after the
	// engine's instant of it. Each Server-Timing figure is rounded to a
	// microsecond.
	const rounding = 2 * time.Microsecond
	toFirst := time.Duration(stage[string(latency.TimingFrontend)] + r.Server.QueueNS + r.Server.PrefillNS)
	if got := time.Duration(r.FirstReasonNS - r.SentNS); got < toFirst-rounding {
		t.Errorf("%s: %s: first reasoning token %v after the send, the server's first token %v after the receipt", field, r.ID, got, toFirst)
	}
	toAnswer := toFirst + time.Duration(reasoning)
	if got := time.Duration(r.FirstTokenNS - r.SentNS); got < toAnswer-rounding {
		t.Errorf("%s: %s: first answer token %v after the send, the server's %v after the receipt", field, r.ID, got, toAnswer)
	}
	// The first answer stamp is the event with the first answer token:
	// no reasoning (or other) event after it, and every answer token from
	// it on.
	answer := 0
	for _, n := range r.ChunkTokens {
		answer += int(n)
	}
	if len(r.ChunkNS) == 0 || r.ChunkNS[0] != r.FirstTokenNS || answer != 10 {
		t.Errorf("%s: %s: first answer at %d, content chunks at %v carrying %d tokens, want the first of them with all 10",
			field, r.ID, r.FirstTokenNS, r.ChunkNS, answer)
	}
	if last := slices.Max(r.OtherNS); last > r.FirstTokenNS {
		t.Errorf("%s: %s: a non-content event at %d, after the first answer token at %d", field, r.ID, last, r.FirstTokenNS)
	}
	return float64(r.FirstTokenNS-r.FirstReasonNS-reasoning) / float64(step), time.Duration(step)
}

// The same stop with the live page served and the table drawn: the
// results folder is as complete, the table was drawn and erased, and the
// report is the one the board computed.
func TestStopWithLiveViewWritesSummary(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	res, dir := runStopped(t, 8, 20*time.Millisecond, 20*time.Millisecond, 1500*time.Millisecond, Config{
		Load:  workload.Load{Rate: 50, Arrival: workload.Constant, Duration: time.Minute},
		Grace: 5 * time.Second, Live: ln, Progress: &table, ProgressView: live.ProgressTable,
	})
	recs := readRecords(t, filepath.Join(dir, results.RequestsFile))
	if !res.Summary.Interrupted || len(recs) == 0 || res.Report.Summary.Requests != len(recs) {
		t.Fatalf("interrupted %v with %d records, the report counts %d", res.Summary.Interrupted, len(recs), res.Report.Summary.Requests)
	}
	for _, f := range []string{results.SummaryFile, "run.json", results.CommandFile, results.ConfigFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("results folder lacks %s", f)
		}
	}
	if s := table.String(); !strings.Contains(s, "TTFT") || !strings.HasSuffix(s, "\033[J") {
		t.Errorf("the table was not drawn, or not erased at the end: %q", s[max(0, len(s)-200):])
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("the live page is still served after the run")
	}
}
