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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// The many-streams benchmarks run the server in this process and the load
// in a child process (this test binary re-executed as a minimal client), so
// neither side hits the per-process file limit and the client's work is
// not counted in the server's memory. Both share the machine's cores, as in
// the project's 2-core set-up.
//
//	go test -run ^$ -bench Streams -benchtime 1x ./internal/serve
//
// Flags (after -args): -streams N (default 10000), -step D (engine step
// time, default 50ms), -window D (measurement window once every stream is
// open, default 3s), -max-num-seqs M (0: all N run in every step; else at
// most M run and the rest wait in the engine's queue, idle).
var (
	benchStreams = flag.Int("streams", 10000, "concurrent streams for BenchmarkStreams")
	benchStep    = flag.Duration("step", 50*time.Millisecond, "engine step time for BenchmarkStreams")
	benchWindow  = flag.Duration("window", 3*time.Second, "measurement window for BenchmarkStreams")
	benchSeqs    = flag.Int("max-num-seqs", 0, "engine max_num_seqs for BenchmarkStreams (0: all streams run at once)")
)

const clientEnv = "TOKENTRACE_STREAMS_CLIENT"

func TestMain(m *testing.M) {
	if spec := os.Getenv(clientEnv); spec != "" {
		os.Exit(runStreamsClient(spec))
	}
	if spec := os.Getenv(churnClientEnv); spec != "" {
		os.Exit(runChurnClient(spec))
	}
	os.Exit(m.Run())
}

// runStreamsClient is the child process: "ADDR N BODYFILE STEP_NS" opens N
// connections (500 at a time), sends the request on each and reads every
// response to its end, discarding it. It prints "ready" once every
// request is sent and exits when stdin closes or every response ended.
// Between the lines "start" and "stop" on its stdin it records the
// token-gap jitter of every stream (|gap between successive reads that
// brought bytes − STEP|) and, at "stop", prints "jitter P50 P99 P99.9 MAX
// COUNT" in nanoseconds.
func runStreamsClient(spec string) int {
	var addr, bodyPath string
	var n int
	var stepNS int64
	if _, err := fmt.Sscan(spec, &addr, &n, &bodyPath, &stepNS); err != nil {
		fmt.Fprintln(os.Stderr, "client spec:", err)
		return 2
	}
	step := time.Duration(stepNS)
	body, err := os.ReadFile(bodyPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	req := fmt.Appendf(nil, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var recording atomic.Bool
	var jitter stats.Concurrent
	for i := 0; i < n; i++ {
		var c net.Conn
		for try := 0; ; try++ {
			c, err = net.Dial("tcp", addr)
			if err == nil || try == 50 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			return 1
		}
		if _, err := c.Write(req); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			return 1
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			buf := make([]byte, 4096)
			var tail []byte
			var last time.Time
			for {
				k, err := c.Read(buf)
				if k > 0 {
					now := time.Now()
					if recording.Load() && !last.IsZero() {
						jitter.Add(int64((now.Sub(last) - step).Abs()))
					}
					last = now
				}
				tail = append(tail[:0], buf[max(0, k-32):k]...)
				if bytes.Contains(tail, []byte("[DONE]")) {
					return
				}
				if err != nil {
					failed.Add(1)
					return
				}
			}
		}()
		if i%500 == 499 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	fmt.Println("ready")
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "start":
				jitter.Reset()
				recording.Store(true)
			case "stop":
				recording.Store(false)
				h := jitter.Snapshot(nil)
				fmt.Println("jitter", h.Percentile(50), h.Percentile(99), h.Percentile(99.9), h.Max(), h.Count())
			}
		}
		os.Exit(0)
	}()
	<-done
	if f := failed.Load(); f > 0 {
		fmt.Fprintf(os.Stderr, "%d streams ended without [DONE]\n", f)
		return 1
	}
	return 0
}

// startClient runs the child client against addr (tokens every step);
// cpu reads the child's CPU time so far; the client's token-gap jitter is
// recorded between window's start and its end, which returns it.
func startClient(b *testing.B, addr string, n int, body string, step time.Duration) (cpu func() time.Duration, window func() (end func() gapJitter), stop func()) {
	b.Helper()
	path := fmt.Sprintf("%s/body.json", b.TempDir())
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s %d", clientEnv, addr, n, path, int64(step)))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := process.StartCmd(cmd); err != nil {
		b.Fatal(err)
	}
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "jitter ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	pid := cmd.Process.Pid
	window = func() func() gapJitter {
		fmt.Fprintln(stdin, "start")
		return func() gapJitter {
			fmt.Fprintln(stdin, "stop")
			var j gapJitter
			if _, err := fmt.Sscan(strings.TrimPrefix(<-lines, "jitter "), &j.p50, &j.p99, &j.p999, &j.max, &j.n); err != nil {
				b.Errorf("client's jitter line: %v", err)
			}
			return j
		}
	}
	return func() time.Duration { return process.CPU(pid) }, window, func() { stdin.Close(); _ = cmd.Wait() }
}

// gapJitter is the client's token-gap jitter over a window (ns).
type gapJitter struct{ p50, p99, p999, max, n int64 }

func (j gapJitter) report(b *testing.B) {
	b.ReportMetric(float64(j.p50)/1e6, "p50-gap-jitter-ms")
	b.ReportMetric(float64(j.p99)/1e6, "p99-gap-jitter-ms")
	b.ReportMetric(float64(j.p999)/1e6, "p999-gap-jitter-ms")
}

func streamsConfig(n, seqs int, step time.Duration) Config {
	if seqs == 0 {
		seqs = n + 16
	}
	return Config{Engine: engine.Config{
		Model:               testModel,
		StepTimer:           engine.StepTimerFunc(func(*perfmodel.Batch) time.Duration { return step }),
		BlockSize:           16,
		NumBlocks:           n*8 + 1024,
		MaxModelLen:         4096,
		MaxNumSeqs:          seqs,
		MaxNumBatchedTokens: n + 1024,
		Seed:                1,
	}}
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// BenchmarkStreams holds -streams concurrent streams on the in-process
// server and reports, over a window in which all of them run, how late
// each chunk was written relative to its engine step's end (p50/p99/max,
// ms) and the chunk rate; then the same load against a null server (one
// goroutine per connection writing a same-sized chunk on a shared ticker,
// no HTTP, engine or JSON) gives the floor of this machine.
func BenchmarkStreams(b *testing.B) {
	n, step, window, seqs := *benchStreams, *benchStep, *benchWindow, *benchSeqs
	running := n
	if seqs > 0 && seqs < n {
		running = seqs
	}
	tokens := int((window+10*time.Second)/step) + 20 // outlasts ramp-up and the window
	body := fmt.Sprintf(`{"model":%q,"prompt":"one two three four five six seven eight","max_tokens":%d,"ignore_eos":true,"stream":true}`, testModel, tokens)
	b.ReportAllocs()
	for range b.N {
		b.Run("serve", func(b *testing.B) {
			s, err := Start(context.Background(), streamsConfig(n, seqs, step), "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			clientCPU, jitterWindow, stop := startClient(b, s.Addr().String(), n, body, step)
			defer stop()
			if !waitFor(60*time.Second, func() bool { st := s.Engine().Stats(); return st.Running == running && st.Running+st.Waiting == n }) {
				b.Fatalf("only %+v streams open", s.Engine().Stats())
			}
			s.WriteLateness().Reset()
			cpu0, ccpu0, m0 := process.SelfCPU(), clientCPU(), mallocs()
			end := jitterWindow()
			time.Sleep(window)
			end().report(b)
			l := s.WriteLateness()
			report(b, l, window, process.SelfCPU()-cpu0, clientCPU()-ccpu0)
			b.ReportMetric(float64(mallocs()-m0)/float64(max(l.Count(), 1)), "allocs/chunk")
			if st := s.Engine().Stats(); st.Running+st.Waiting != n {
				b.Errorf("streams ended during the window: %+v", st)
			}
		})
		b.Run("null", func(b *testing.B) {
			if running != n {
				b.Skip("the null server has no queue: compare it with all streams running")
			}
			ns := startNullServer(b, step, tokens)
			defer ns.close()
			clientCPU, jitterWindow, stop := startClient(b, ns.ln.Addr().String(), n, body, step)
			defer stop()
			if !waitFor(60*time.Second, func() bool { return ns.conns.Load() == int64(n) }) {
				b.Fatalf("only %d null streams", ns.conns.Load())
			}
			ns.late.Reset()
			cpu0, ccpu0 := process.SelfCPU(), clientCPU()
			end := jitterWindow()
			time.Sleep(window)
			end().report(b)
			report(b, &ns.late, window, process.SelfCPU()-cpu0, clientCPU()-ccpu0)
		})
	}
}

func report(b *testing.B, l *Lateness, window, cpu, clientCPU time.Duration) {
	b.ReportMetric(float64(cpu)/1e3/float64(max(l.Count(), 1)), "server-cpu-us/chunk")
	b.ReportMetric(float64(clientCPU)/1e3/float64(max(l.Count(), 1)), "client-cpu-us/chunk")
	b.ReportMetric(float64(l.Quantile(0.5))/1e6, "p50-late-ms")
	b.ReportMetric(float64(l.Quantile(0.99))/1e6, "p99-late-ms")
	b.ReportMetric(float64(l.Max())/1e6, "max-late-ms")
	b.ReportMetric(float64(l.Count())/window.Seconds(), "chunks/s")
}

// nullServer is the floor: per connection one goroutine that, on every
// tick of a shared ticker, writes a pre-encoded chunk of a real chunk's
// size and records its lateness behind the tick. Ticks form a lock-free
// chain, so waking the writers costs no more than the engine's delivery.
type nullServer struct {
	ln       net.Listener
	late     Lateness
	stepLate Lateness // the ticker goroutine's wake-up behind each tick
	conns    atomic.Int64
	first    atomic.Pointer[nullTick]
	stop     chan struct{}
}

type nullTick struct {
	done chan struct{}
	at   time.Time
	next *nullTick
}

func startNullServer(b *testing.B, step time.Duration, tokens int) *nullServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ns := &nullServer{ln: ln, stop: make(chan struct{})}
	ns.first.Store(&nullTick{done: make(chan struct{})})
	chunk := []byte("data: " + `{"id":"cmpl-0123456789-1","object":"text_completion","created":1700000000,"model":"sim-model","choices":[{"index":0,"text":" token","logprobs":null,"finish_reason":null}]}` + "\n\n")
	chunk = fmt.Appendf(nil, "%x\r\n%s\r\n", len(chunk), chunk)
	go func() {
		t := time.NewTicker(step)
		defer t.Stop()
		for {
			select {
			case <-ns.stop:
				return
			case now := <-t.C: // the tick's due time (time.Ticker)
				ns.stepLate.Observe(time.Since(now))
				cur := ns.first.Load()
				cur.at, cur.next = now, &nullTick{done: make(chan struct{})}
				ns.first.Store(cur.next)
				close(cur.done)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReaderSize(c, 4096)
				for readRequest(r) && ns.answer(c, chunk, tokens) {
				}
			}()
		}
	}()
	return ns
}

// answer writes one answer on c: the headers, then chunk on each of the
// next tokens ticks, then [DONE] and the last chunk; false once c failed
// or the server stopped.
func (ns *nullServer) answer(c net.Conn, chunk []byte, tokens int) bool {
	if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")); err != nil {
		return false
	}
	ns.conns.Add(1)
	t := ns.first.Load()
	for range tokens {
		select {
		case <-t.done:
		case <-ns.stop:
			return false
		}
		if _, err := c.Write(chunk); err != nil {
			return false
		}
		ns.late.Observe(time.Since(t.at))
		t = t.next
	}
	_, err := c.Write([]byte("e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"))
	return err == nil
}

func (ns *nullServer) close() { close(ns.stop); ns.ln.Close() }

// BenchmarkIdleStreamMemory reports the server's Go heap and stack per
// open stream that waits for its first token (the engine's first step
// never ends during the measurement).
func BenchmarkIdleStreamMemory(b *testing.B) {
	b.ReportAllocs()
	const n = 2000
	body := fmt.Sprintf(`{"model":%q,"prompt":"one two three four five six seven eight","max_tokens":16,"ignore_eos":true,"stream":true}`, testModel)
	for range b.N {
		s, err := Start(context.Background(), streamsConfig(n, 0, time.Hour), "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		heap0, stack0 := memInUse()
		_, _, stop := startClient(b, s.Addr().String(), n, body, time.Hour)
		if !waitFor(60*time.Second, func() bool { st := s.Engine().Stats(); return st.Running+st.Waiting == n }) {
			b.Fatalf("only %+v streams open", s.Engine().Stats())
		}
		time.Sleep(200 * time.Millisecond) // let every handler reach Recv
		heap1, stack1 := memInUse()
		b.ReportMetric(float64(heap1-heap0+stack1-stack0)/n, "bytes/idle-stream")
		b.ReportMetric(float64(heap1-heap0)/n, "heap-bytes/idle-stream")
		b.ReportMetric(float64(stack1-stack0)/n, "stack-bytes/idle-stream")
		b.ReportMetric(float64(runtime.NumGoroutine())/n, "goroutines/idle-stream")
		stop()
		_ = s.Close()
	}
}

func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// memInUse returns the heap and goroutine stack bytes in use after two
// GCs (each GC may halve an idle goroutine's oversized stack, as a
// long-running server's periodic GCs do).
func memInUse() (heap, stack int64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse), int64(m.StackInuse)
}
