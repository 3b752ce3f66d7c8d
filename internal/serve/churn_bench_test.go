package serve

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// The churn case: closed-loop streams that come and go. Each of -churn-
// streams connections sends a request, reads its answer of -churn-tokens
// tokens to the end and sends the next, until -churn-requests answers
// were asked for; the connections start spread over one answer's life, so
// that new requests arrive at (nearly) every engine step while the others
// decode. The token-gap jitter is each answer's own: |gap between the
// reads that brought its token chunks − that answer's median gap|.
//
//	go test ./internal/serve -run '^$' -bench 'StreamsChurn$' -benchtime 1x -count 5
//	  -args -churn-streams 200 -churn-requests 1000 -churn-tokens 32 -churn-step 20ms
var (
	churnStreams  = flag.Int("churn-streams", 200, "closed-loop streams for BenchmarkStreamsChurn")
	churnRequests = flag.Int("churn-requests", 1000, "requests in all for BenchmarkStreamsChurn")
	churnTokens   = flag.Int("churn-tokens", 32, "tokens per answer for BenchmarkStreamsChurn")
	churnStep     = flag.Duration("churn-step", 20*time.Millisecond, "engine step time (and the null server's tick) for BenchmarkStreamsChurn")
	churnNull1st  = flag.Bool("churn-null-first", false, "BenchmarkStreamsChurn runs the null server before serve (a harness alternates the order)")
)

const churnClientEnv = "TOKENTRACE_CHURN_CLIENT"

// churnSpec is the churn client's work: "ADDR N REQUESTS TOKENS LIFE_NS
// BODYFILE".
type churnSpec struct {
	addr, body      string
	n, requests, tk int
	life            time.Duration
}

// runChurnClient is the churn case's child process: it runs the closed
// loop of churnSpec and prints "jitter P50 P99 P99.9 MAX COUNT ANSWERS"
// (ns) once every answer ended; 1 if an answer was cut short or did not
// hold its tokens.
func runChurnClient(spec string) int {
	var c churnSpec
	var lifeNS int64
	if _, err := fmt.Sscan(spec, &c.addr, &c.n, &c.requests, &c.tk, &lifeNS, &c.body); err != nil {
		fmt.Fprintln(os.Stderr, "churn client spec:", err)
		return 2
	}
	c.life = time.Duration(lifeNS)
	body, err := os.ReadFile(c.body)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	req := fmt.Appendf(nil, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", c.addr, len(body), body)
	var left, answers atomic.Int64
	left.Store(int64(c.requests))
	var jitter stats.Concurrent
	var failed atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	for j := range c.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(t0.Add(c.life * time.Duration(j) / time.Duration(c.n))))
			if err := churnConn(c, req, &left, &answers, &jitter); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		fmt.Fprintln(os.Stderr, "churn client:", err)
		return 1
	}
	h := jitter.Snapshot(nil)
	fmt.Println("jitter", h.Percentile(50), h.Percentile(99), h.Percentile(99.9), h.Max(), h.Count(), answers.Load())
	return 0
}

// churnConn is one closed-loop connection: request, answer to its end,
// next request, while left lasts.
func churnConn(c churnSpec, req []byte, left, answers *atomic.Int64, jitter *stats.Concurrent) error {
	conn, err := net.Dial("tcp", c.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, 4096)
	resp := make([]byte, 0, 16<<10)
	arrivals := make([]time.Time, 0, c.tk+4)
	gaps := make([]time.Duration, 0, c.tk+4) // each answer's jitter
	for left.Add(-1) >= 0 {
		if _, err := conn.Write(req); err != nil {
			return err
		}
		resp, arrivals = resp[:0], arrivals[:0]
		for !answerEnded(resp) {
			k, err := conn.Read(buf)
			if k > 0 {
				now := time.Now()
				from := max(0, len(resp)-6) // a chunk's "data: {" split over two reads
				resp = append(resp, buf[:k]...)
				if bytes.Contains(resp[from:], []byte("data: {")) {
					arrivals = append(arrivals, now)
				}
			}
			if err != nil {
				return fmt.Errorf("answer cut short: %w", err)
			}
		}
		// A handler that fell a step behind sends two steps' tokens in one
		// chunk (engine.Stream.Recv merges them): fewer chunks, a long gap.
		if got := bytes.Count(resp, []byte("data: {")); got < 1 || got > c.tk {
			return fmt.Errorf("an answer held %d token chunks, want 1 to %d", got, c.tk)
		}
		gaps = medianGapJitter(gaps[:0], arrivals)
		for _, j := range gaps {
			jitter.Add(int64(j))
		}
		answers.Add(1)
	}
	return nil
}

// medianGapJitter appends to dst the token-gap jitter of one answer whose
// token chunks arrived at arrivals: for each gap between successive
// arrivals, |gap − the answer's median gap| (the upper median of an even
// count), docs/metrics.md.
func medianGapJitter(dst []time.Duration, arrivals []time.Time) []time.Duration {
	if len(arrivals) < 2 {
		return dst
	}
	from := len(dst)
	for i := 1; i < len(arrivals); i++ {
		dst = append(dst, arrivals[i].Sub(arrivals[i-1]))
	}
	sorted := slices.Clone(dst[from:])
	slices.Sort(sorted)
	med := sorted[len(sorted)/2]
	for i := from; i < len(dst); i++ {
		dst[i] = (dst[i] - med).Abs()
	}
	return dst
}

// answerEnded reports a chunked answer read to its end: the [DONE] event,
// then the last chunk "0\r\n" and the blank line after any trailers.
func answerEnded(resp []byte) bool {
	d := bytes.Index(resp, []byte("data: [DONE]"))
	if d < 0 {
		return false
	}
	z := bytes.Index(resp[d:], []byte("\r\n0\r\n"))
	return z >= 0 && bytes.Contains(resp[d+z+3:], []byte("\r\n\r\n"))
}

// churnJitter is the churn client's report (ns, and counts) and its CPU
// time.
type churnJitter struct {
	p50, p99, p999, max, n, answers int64
	cpu                             time.Duration
}

// runChurn runs the churn client against addr to its end.
func runChurn(b *testing.B, addr string, n, requests, tokens int, life time.Duration, body string) churnJitter {
	b.Helper()
	path := b.TempDir() + "/body.json"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %d %d %s", churnClientEnv, addr, n, requests, tokens, int64(life), path))
	cmd.Stderr = os.Stderr
	out, err := process.Output(cmd)
	if err != nil {
		b.Fatalf("churn client: %v", err)
	}
	j := churnJitter{cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "jitter "); ok {
			if _, err := fmt.Sscan(rest, &j.p50, &j.p99, &j.p999, &j.max, &j.n, &j.answers); err != nil {
				b.Fatalf("churn client's line %q: %v", line, err)
			}
			return j
		}
	}
	b.Fatalf("no jitter line from the churn client:\n%s", out)
	return j
}

func (j churnJitter) report(b *testing.B) {
	b.ReportMetric(float64(j.p50)/1e6, "p50-gap-jitter-ms")
	b.ReportMetric(float64(j.p99)/1e6, "p99-gap-jitter-ms")
	b.ReportMetric(float64(j.p999)/1e6, "p999-gap-jitter-ms")
	b.ReportMetric(float64(j.max)/1e6, "max-gap-jitter-ms")
}

// BenchmarkStreamsChurn is the churn case against serve (an engine whose
// step is -churn-step at any batch) and then against the null server
// answering each request on its shared ticker (first token at the next
// tick, one per tick after it): each side's token-gap jitter, its write
// lateness behind the step, its step lateness (the engine's step loop or
// the null server's ticker woken behind the step's end: the host's share,
// common to every stream of the step), its CPU per chunk and, for serve,
// its heap
// allocations per request (its chunks' included) and the garbage
// collections during the run.
func BenchmarkStreamsChurn(b *testing.B) {
	n, requests, tokens, step := *churnStreams, *churnRequests, *churnTokens, *churnStep
	life := time.Duration(tokens+1) * step
	body := fmt.Sprintf(`{"model":%q,"prompt":"one two three four five six seven eight","max_tokens":%d,"ignore_eos":true,"stream":true}`, testModel, tokens)
	b.ReportAllocs()
	serveRun := func(b *testing.B) {
		s, err := Start(context.Background(), streamsConfig(n, 0, step), "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		cpu0, m0, gc0 := process.SelfCPU(), mallocs(), numGC()
		start := time.Now()
		j := runChurn(b, s.Addr().String(), n, requests, tokens, life, body)
		j.report(b)
		l := s.WriteLateness()
		report(b, l, time.Since(start), process.SelfCPU()-cpu0, j.cpu)
		b.ReportMetric(float64(s.StepLateness().Quantile(0.99))/1e6, "p99-step-late-ms")
		b.ReportMetric(float64(mallocs()-m0)/float64(max(j.answers, 1)), "allocs/request")
		b.ReportMetric(float64(numGC()-gc0), "GCs")
	}
	nullRun := func(b *testing.B) {
		ns := startNullServer(b, step, tokens)
		defer ns.close()
		cpu0 := process.SelfCPU()
		start := time.Now()
		j := runChurn(b, ns.ln.Addr().String(), n, requests, tokens, life, body)
		j.report(b)
		report(b, &ns.late, time.Since(start), process.SelfCPU()-cpu0, j.cpu)
		b.ReportMetric(float64(ns.stepLate.Quantile(0.99))/1e6, "p99-step-late-ms")
	}
	for range b.N {
		if *churnNull1st {
			b.Run("null", nullRun)
		}
		b.Run("serve", serveRun)
		if !*churnNull1st {
			b.Run("null", nullRun)
		}
	}
}

// numGC is the number of garbage collections this process completed.
func numGC() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumGC
}

// readRequest reads one HTTP/1.1 request with a Content-Length body from
// r; false at the connection's end or on a request it cannot read.
func readRequest(r *bufio.Reader) bool {
	length := -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return false
		}
		s := strings.TrimSpace(string(line))
		if s == "" {
			break
		}
		if k, v, ok := strings.Cut(s, ":"); ok && strings.EqualFold(k, "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if length < 0 {
		return false
	}
	_, err := r.Discard(length)
	return err == nil
}

// TestMedianGapJitter computes the churn case's jitter by hand: arrivals
// at 0, 20, 40, 65 and 80 ms have gaps 20, 20, 25 and 15 ms, whose (upper)
// median is 20 ms, so the jitter is 0, 0, 5 and 5 ms; one arrival has no
// gap.
func TestMedianGapJitter(t *testing.T) {
	t0 := time.Unix(0, 0)
	ms := func(v ...float64) []time.Time {
		var out []time.Time
		for _, f := range v {
			out = append(out, t0.Add(time.Duration(f*float64(time.Millisecond))))
		}
		return out
	}
	for _, c := range []struct {
		name     string
		arrivals []time.Time
		want     []time.Duration
	}{
		{"five", ms(0, 20, 40, 65, 80), []time.Duration{0, 0, 5 * time.Millisecond, 5 * time.Millisecond}},
		{"one", ms(7), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := medianGapJitter(nil, c.arrivals); !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}
