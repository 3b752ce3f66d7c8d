package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(goProxyEnv); spec != "" {
		os.Exit(runGoProxy(spec)) // the Go floor proxy's process
	}
	if spec := os.Getenv(rawProxyEnv); spec != "" {
		os.Exit(runRawProxy(spec)) // the raw floor proxy's process
	}
	os.Exit(m.Run())
}

// TestCountMarks counts token marks whole in a read and split across two.
func TestCountMarks(t *testing.T) {
	ev := "data: {\"x\":1}\n\n"
	for _, tc := range []struct {
		name        string
		carry, read string
		want        int
	}{
		{"two whole", "", ev + ev, 2},
		{"none", "", ": keep-alive\n\n", 0},
		{"split after 'da'", "\n\nda", "ta: {\"x\":1}\n\n", 1},
		{"split before '{'", "data: ", "{\"x\":1}\n\n", 1},
		{"a mark that ended the last read is not counted again", "ata: {", "\"x\":1}\n\n", 0},
	} {
		if got := countMarks([]byte(tc.carry), []byte(tc.read)); got != tc.want {
			t.Errorf("%s: countMarks = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestRecordJitter: the jitter of gaps 5, 7, 0 ms against a 5 ms schedule
// is 0, 2 and 5 ms; a request with too few tokens is an error.
func TestRecordJitter(t *testing.T) {
	var r result
	ms := time.Millisecond
	r.record(&timing{ttft: 21 * ms, gaps: []time.Duration{5 * ms, 7 * ms, 0}, tokens: 4}, 5*ms, 4, nil)
	r.record(&timing{tokens: 3}, 5*ms, 4, nil)
	if r.requests != 1 || r.errors != 1 || r.tokens != 4 {
		t.Fatalf("requests %d, errors %d, tokens %d; want 1, 1, 4", r.requests, r.errors, r.tokens)
	}
	// The histogram reads a percentile back within 1/2048 of it.
	if got := []int64{r.jitter.Percentile(1), r.jitter.Percentile(50), r.jitter.Percentile(100)}; got[0] != 0 || got[1] < int64(2*ms) || got[1] > int64(2*ms)+int64(2*ms)/2048 || got[2] != int64(5*ms) {
		t.Errorf("jitter min/P50/max = %v, want 0, 2 ms, 5 ms", got)
	}
	if got := r.ttft.Percentile(50); got != int64(21*ms) {
		t.Errorf("TTFT P50 = %v, want 21 ms", got)
	}
}

// TestChecksOnly: with no concurrency (-streams 0) the harness starts no
// upstream or proxy and runs serve's jitter checks alone (steady and
// under churn); no figure is checked.
func TestChecksOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve's BenchmarkStreams")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to run serve's benchmark")
	}
	var out bytes.Buffer
	cfg := config{Requests: 1, PerRound: 1, Sched: schedule{TTFT: 5 * time.Millisecond, Gap: 2 * time.Millisecond, Tokens: 4},
		Serve: serveCheck{Streams: 2, Windows: 1, Step: 20 * time.Millisecond},
		Churn: churnCheck{Runs: 1, Streams: 2, Requests: 4, Tokens: 4}, Out: &out}
	if err := run(context.Background(), cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if strings.Contains(out.String(), "upstream:") {
		t.Error("a proxy table's upstream was started without a concurrency")
	}
	if !strings.Contains(out.String(), "serve: token-gap jitter at 2 streams") || !strings.Contains(out.String(), "within it in") {
		t.Error("no serve check in the output")
	}
	if !strings.Contains(out.String(), "serve under churn: 2 closed-loop streams, 4 answers of 4 tokens") {
		t.Error("no churn check in the output")
	}
}

// TestSmoke runs the harness briefly: every path answers every request
// with every token; no figure is checked (timing is the machine's).
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tokentrace and starts the proxies")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to build tokentrace")
	}
	var out bytes.Buffer
	cfg := config{Streams: []int{4}, Requests: 8, PerRound: 1, Sched: schedule{TTFT: 5 * time.Millisecond, Gap: 2 * time.Millisecond, Tokens: 4}, Out: &out}
	if err := run(context.Background(), cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	want := []string{"direct ", "go-floor ", "raw-floor ", "gateway "}
	if !strings.Contains(out.String(), "nginx skipped") {
		want = append(want, "nginx ")
	}
	for _, name := range want {
		line := ""
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, name) {
				line = l
			}
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "8" || f[2] != "0" {
			t.Errorf("%s: want 8 requests and 0 errors, got %q", name, line)
		}
	}
}

// TestParseStreamsBench reads serve's and the null server's metrics from
// the output of BenchmarkStreams and of BenchmarkStreamsChurn, each by its
// own name.
func TestParseStreamsBench(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkStreams/serve-2         	       1	3012345678 ns/op	         0.41 p50-gap-jitter-ms	         6.20 p99-gap-jitter-ms	        9.10 p999-gap-jitter-ms	        12.5 server-cpu-us/chunk	         1.50 p99-late-ms
BenchmarkStreams/null-2          	       1	3001234567 ns/op	         0.30 p50-gap-jitter-ms	         4.00 p99-gap-jitter-ms	        7.00 p999-gap-jitter-ms	         9.6 server-cpu-us/chunk
BenchmarkStreamsChurn/null-2     	       1	3885036692 ns/op	         0.79 p50-gap-jitter-ms	         1.22 p99-gap-jitter-ms	         9.1 server-cpu-us/chunk
BenchmarkStreamsChurn/serve-2    	       1	3954107077 ns/op	         2.00 GCs	        84.42 allocs/request	         0.73 p50-gap-jitter-ms	         0.96 p99-gap-jitter-ms
PASS
`)
	for _, c := range []struct {
		prefix                 string
		serveP99, nullP99, key float64
		keyName                string
	}{
		{"BenchmarkStreams/", 6.2, 4, 1.5, "p99-late-ms"},
		{"BenchmarkStreamsChurn/", 0.96, 1.22, 84.42, "allocs/request"},
	} {
		s, n, ok := parseStreamsBench(out, c.prefix)
		if !ok {
			t.Fatalf("%s: not parsed", c.prefix)
		}
		if s["p99-gap-jitter-ms"] != c.serveP99 || n["p99-gap-jitter-ms"] != c.nullP99 || s[c.keyName] != c.key {
			t.Errorf("%s: serve %v, null %v", c.prefix, s, n)
		}
	}
	if _, _, ok := parseStreamsBench([]byte("BenchmarkStreams/serve-2 1 5 ns/op\n"), "BenchmarkStreams/"); ok {
		t.Error("parsed without a null line")
	}
}

// TestParseSelfTest reads bench --self-test's two TTFT error lines.
func TestParseSelfTest(t *testing.T) {
	out := []byte(`TTFT error at 100 concurrent streams, a token every 50ms each (client arrival − server flush):
  bench client     P50 0.038 ms  P99 15.084 ms  max 15.171 ms  (errors 0; ITL error P99 15.090 ms)
  minimal client   P50 0.058 ms  P99 0.570 ms  max 0.576 ms  (errors 0)  ← floor of this host
memory per in-flight stream (live heap + stacks, client and null server together):
  bench client     41.0 KiB
  minimal client   13.9 KiB  → bench's client above a minimal one: 27.1 KiB
`)
	st, ok := parseSelfTest(out)
	if !ok {
		t.Fatal("not parsed")
	}
	if st.bench != [3]float64{0.038, 15.084, 15.171} || st.floor != [3]float64{0.058, 0.570, 0.576} {
		t.Errorf("got %+v", st)
	}
	if _, ok := parseSelfTest([]byte("  bench client     P50 0.038 ms  P99 15.084 ms  max 15.171 ms\n")); ok {
		t.Error("parsed without the minimal client's line")
	}
}

// TestCPUPressure: the "some" total of a /proc/pressure/cpu text, and the
// share of a run's wall time it grew by, computed by hand: 250,000 µs of
// waiting in a 2 s run is 12.5 %; a text without the line, or a reading
// missing, gives -1.
func TestCPUPressure(t *testing.T) {
	text := "some avg10=97.56 avg60=94.27 avg300=96.91 total=25984869437\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	if got := parseCPUStall(text); got != 25984869437 {
		t.Errorf("parseCPUStall = %d, want 25984869437", got)
	}
	for _, c := range []struct {
		text string
		want int64
	}{
		{"full avg10=0.00 total=5\n", -1},
		{"some avg10=1.00 total=x\n", -1},
		{"", -1},
	} {
		if got := parseCPUStall(c.text); got != c.want {
			t.Errorf("parseCPUStall(%q) = %d, want %d", c.text, got, c.want)
		}
	}
	if got := cpuPressure(1_000_000, 1_250_000, 2*time.Second); got != 12.5 {
		t.Errorf("cpuPressure = %v, want 12.5", got)
	}
	if got := cpuPressure(-1, 5, time.Second); got != -1 {
		t.Errorf("cpuPressure with a missing reading = %v, want -1", got)
	}
}

// FuzzParseCPUStall: any text gives -1 or a non-negative total, never a
// panic.
func FuzzParseCPUStall(f *testing.F) {
	f.Add("some avg10=0.00 avg60=0.00 avg300=0.00 total=12\n")
	f.Add("some total=\nfull total=3")
	f.Fuzz(func(t *testing.T, text string) {
		if got := parseCPUStall(text); got < -1 {
			t.Fatalf("parseCPUStall(%q) = %d", text, got)
		}
	})
}
