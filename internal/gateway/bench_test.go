package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// benchEpoch is the shared clock origin: the upstream stamps each chunk
// with its send instant (ns since benchEpoch) and the client, in the same
// process, subtracts it from the arrival instant.
var benchEpoch = time.Now()

// benchUpstream streams chunks gap apart, each stamped with its send
// instant; non-streaming requests get a small answer at once.
func benchUpstream(chunks int, gap time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"b","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
		buf := make([]byte, 0, 160)
		t := time.NewTicker(gap)
		defer t.Stop()
		for i := range chunks {
			if i > 0 {
				select {
				case <-t.C:
				case <-r.Context().Done():
					return
				}
			}
			buf = append(buf[:0], `data: {"choices":[{"index":0,"delta":{"content":"tok "}}],"ts":`...)
			buf = strconv.AppendInt(buf, int64(time.Since(benchEpoch)), 10)
			buf = append(buf, "}\n\n"...)
			if _, err := w.Write(buf); err != nil {
				return
			}
			fl.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		fl.Flush()
	})
}

type streamStats struct {
	ttfb   []time.Duration // request start → first content chunk
	chunks []time.Duration // upstream send → client arrival, per chunk
	errors int
	peak   uint64 // heap + stack in use mid-run minus before the run, both after a GC
}

// add folds o's samples and errors into s, keeping the larger peak.
func (s *streamStats) add(o streamStats) {
	s.ttfb = append(s.ttfb, o.ttfb...)
	s.chunks = append(s.chunks, o.chunks...)
	s.errors += o.errors
	s.peak = max(s.peak, o.peak)
}

// pct is the nearest-rank percentile p (0..100) of d.
func pct(d []time.Duration, p float64) time.Duration {
	return stats.Percentile(slices.Sorted(slices.Values(d)), p)
}

// runStreams opens n concurrent streams against base and measures them.
func runStreams(client *http.Client, base string, n int, sampleMem bool) streamStats {
	return runStreamsSpread(client, base, n, sampleMem, 0)
}

// runStreamsSpread is runStreams with the streams' starts spread evenly
// over spread (stream i starts i × spread / n after the first), as
// bench/floor spreads them, so that their tokens do not all arrive at
// the same instant.
func runStreamsSpread(client *http.Client, base string, n int, sampleMem bool, spread time.Duration) streamStats {
	var mu sync.Mutex
	var st streamStats
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var memBase uint64
	if sampleMem {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		memBase = ms.HeapInuse + ms.StackInuse
	}
	memDone := make(chan struct{})
	go func() { // live memory mid-run: every stream open, garbage collected
		defer close(memDone)
		if !sampleMem {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond): // streams last 20 × 20 ms
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		if live := ms.HeapInuse + ms.StackInuse; live > memBase {
			st.peak = live - memBase
		}
		mu.Unlock()
	}()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"benchmark prompt"}]}`
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if spread > 0 {
				time.Sleep(time.Until(start.Add(spread * time.Duration(i) / time.Duration(n))))
			}
			var ttfb time.Duration
			lats := make([]time.Duration, 0, 64)
			t0 := time.Now()
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil || resp.StatusCode != 200 {
				mu.Lock()
				st.errors++
				mu.Unlock()
				if err == nil {
					resp.Body.Close()
				}
				return
			}
			rd := bufio.NewReaderSize(resp.Body, 4096)
			for {
				line, err := rd.ReadSlice('\n')
				if err != nil {
					break
				}
				i := bytes.Index(line, []byte(`"ts":`))
				if i < 0 {
					continue
				}
				now := time.Since(benchEpoch)
				if ttfb == 0 {
					ttfb = time.Since(t0)
				}
				j := i + 5
				k := j
				for k < len(line) && line[k] >= '0' && line[k] <= '9' {
					k++
				}
				sent, _ := strconv.ParseInt(string(line[j:k]), 10, 64)
				lats = append(lats, now-time.Duration(sent))
			}
			resp.Body.Close()
			mu.Lock()
			st.ttfb = append(st.ttfb, ttfb)
			st.chunks = append(st.chunks, lats...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	<-memDone
	return st
}

// floorProxy is the least a proxy can do on this machine: the standard
// library's ReverseProxy flushing every write (FlushInterval −1), with the
// request body read whole first as the gateway must (to route on it). It
// is the floor the gateway's own overhead is measured against.
func floorProxy(target string) http.Handler {
	return floorProxyVia(target, &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true})
}

// floorProxyVia is floorProxy sending through tr (an upstream in memory,
// for a benchmark of the handler alone).
func floorProxyVia(target string, tr http.RoundTripper) http.Handler {
	u, _ := url.Parse(target)
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		FlushInterval: -1,
		Transport:     tr,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		rp.ServeHTTP(w, r)
	})
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}}
}

// benchPaths starts an upstream from h, the gateway and the floor proxy in
// front of it, all closed when b ends, and returns their URLs and a client.
func benchPaths(b *testing.B, h http.Handler) (direct, gateway, floor string, client *http.Client) {
	up := httptest.NewServer(h)
	b.Cleanup(up.Close)
	g := quickGateway(b, up.URL)
	gw := newLimitsServer(g) // as it serves: streamed answers below net/http's writer
	gw.Start()
	b.Cleanup(gw.Close)
	b.Cleanup(g.Close)
	fl := httptest.NewServer(floorProxy(up.URL))
	b.Cleanup(fl.Close)
	return up.URL, gw.URL, fl.URL, benchClient()
}

// BenchmarkStreamsAddedLatency runs n concurrent streams (20 chunks, 20 ms
// apart) directly against an upstream and through the gateway, side by
// side in the same process, and reports the P50/P99 time to first byte
// and per-chunk delivery latency of each, and the gateway's added live
// heap + stack per open stream (measured mid-run after a GC).
func BenchmarkStreamsAddedLatency(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			upURL, gwURL, flURL, client := benchPaths(b, benchUpstream(20, 20*time.Millisecond))
			// warm the paths' connection pools
			runStreams(client, upURL, min(n, 100), false)
			runStreams(client, gwURL, min(n, 100), false)
			runStreams(client, flURL, min(n, 100), false)
			b.ReportAllocs()
			var direct, proxied, floor streamStats
			for b.Loop() {
				runtime.GC()
				d := runStreams(client, upURL, n, true)
				runtime.GC()
				f := runStreams(client, flURL, n, true)
				floor.add(f)
				runtime.GC()
				p := runStreams(client, gwURL, n, true)
				direct.add(d)
				proxied.add(p)
			}
			if direct.errors+proxied.errors+floor.errors > 0 {
				b.Fatalf("errors: direct %d, gateway %d, floor proxy %d", direct.errors, proxied.errors, floor.errors)
			}
			reportP50P99(b, "direct-ttfb", direct.ttfb)
			reportP50P99(b, "floor-ttfb", floor.ttfb)
			reportP50P99(b, "floor-chunk", floor.chunks)
			reportP50P99(b, "gw-ttfb", proxied.ttfb)
			reportP50P99(b, "direct-chunk", direct.chunks)
			reportP50P99(b, "gw-chunk", proxied.chunks)
			if proxied.peak > direct.peak {
				b.ReportMetric(float64(proxied.peak-direct.peak)/float64(n), "gw-bytes/stream")
			}
		})
	}
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// reportP50P99 reports the P50 and P99 of d in µs as name-p50-µs and
// name-p99-µs.
func reportP50P99(b *testing.B, name string, d []time.Duration) {
	b.ReportMetric(us(pct(d, 50)), name+"-p50-µs")
	b.ReportMetric(us(pct(d, 99)), name+"-p99-µs")
}

// BenchmarkLargeBodyAddedLatency sends non-streaming requests with a
// 256 KB prompt directly and through the gateway, alternating, and reports
// P50/P99 of each.
func BenchmarkLargeBodyAddedLatency(b *testing.B) {
	upURL, gwURL, flURL, client := benchPaths(b, benchUpstream(1, 0))
	prompt := strings.Repeat("lorem ipsum dolor sit amet, ", 256<<10/28)
	body := []byte(fmt.Sprintf(`{"model":"m","max_tokens":16,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":%q}]}`, prompt))
	one := func(base string) time.Duration {
		t0 := time.Now()
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(t0)
	}
	for range 20 {
		one(upURL)
		one(gwURL)
		one(flURL)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var direct, proxied, floor []time.Duration
	for b.Loop() {
		direct = append(direct, one(upURL))
		floor = append(floor, one(flURL))
		proxied = append(proxied, one(gwURL))
	}
	reportP50P99(b, "floor", floor)
	reportP50P99(b, "direct", direct)
	reportP50P99(b, "gw", proxied)
}

// BenchmarkScanRequest is the gateway's parse of a 256 KB chat body: the
// part of the added latency that grows with the prompt.
func BenchmarkScanRequest(b *testing.B) {
	prompt := strings.Repeat("lorem ipsum dolor sit amet, ", 256<<10/28)
	body := []byte(fmt.Sprintf(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":%q}]}`, prompt))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ScanRequest(body, openai.APIChat, 512); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFirstByteSequential sends one streaming request at a time,
// alternating direct, floor proxy and gateway, and reports P50/P99 time to
// the first content chunk of each: the gateway's added latency without
// contention from other streams.
func BenchmarkFirstByteSequential(b *testing.B) {
	upURL, gwURL, flURL, client := benchPaths(b, benchUpstream(2, time.Millisecond))
	for range 20 {
		runStreams(client, upURL, 1, false)
		runStreams(client, flURL, 1, false)
		runStreams(client, gwURL, 1, false)
	}
	b.ReportAllocs()
	var direct, floor, proxied []time.Duration
	for b.Loop() {
		direct = append(direct, runStreams(client, upURL, 1, false).ttfb...)
		floor = append(floor, runStreams(client, flURL, 1, false).ttfb...)
		proxied = append(proxied, runStreams(client, gwURL, 1, false).ttfb...)
	}
	reportP50P99(b, "direct", direct)
	reportP50P99(b, "floor", floor)
	reportP50P99(b, "gw", proxied)
}

// BenchmarkStreamsCPU runs 1,000 concurrent streams × 20 chunks through
// one path per sub-benchmark and reports the whole process's CPU time
// (user + system: client, proxy and upstream together) per chunk. On a
// machine where the streams saturate the cores, CPU per chunk is what sets
// latency; gw minus floor is the gateway's own cost per chunk.
func BenchmarkStreamsCPU(b *testing.B) {
	for _, path := range []string{"direct", "floor", "gw"} {
		b.Run("path="+path, func(b *testing.B) {
			up := httptest.NewServer(benchUpstream(20, 20*time.Millisecond))
			defer up.Close()
			target := up.URL
			switch path {
			case "floor":
				fl := httptest.NewServer(floorProxy(up.URL))
				defer fl.Close()
				target = fl.URL
			case "gw":
				g := quickGateway(b, up.URL)
				gw := newLimitsServer(g)
				gw.Start()
				defer gw.Close()
				defer g.Close()
				target = gw.URL
			}
			client := benchClient()
			runStreams(client, target, 1000, false)
			var cpu time.Duration
			chunks := 0
			for b.Loop() {
				runtime.GC()
				c0 := process.SelfCPU()
				st := runStreams(client, target, 1000, false)
				cpu += process.SelfCPU() - c0
				chunks += len(st.chunks)
				if st.errors > 0 {
					b.Fatalf("%d errors", st.errors)
				}
			}
			b.ReportMetric(float64(cpu)/1e3/float64(chunks), "cpu-µs/chunk")
		})
	}
}

// BenchmarkStreamsTokenCPU is issue 24's per-token gap as one number:
// 50 concurrent streams of 32 tokens 5 ms apart (bench/floor's shape,
// the starts spread over one gap) through the gateway, the floor proxy
// and directly, the three paths taking turns within every iteration (the
// machine's load falls on all of them). Per path it reports the whole
// process's CPU time (user + system: client, proxy and upstream in this
// process) and its allocations per token delivered; gw−floor-cpu-µs/token
// is the gateway's CPU per token over the floor proxy's, the client's and
// the upstream's the same on both paths.
func BenchmarkStreamsTokenCPU(b *testing.B) {
	const streams, tokens, gap = 50, 32, 5 * time.Millisecond
	upURL, gwURL, flURL, client := benchPaths(b, benchUpstream(tokens, gap))
	paths := []struct {
		name, url string
		cpu       time.Duration
		mallocs   uint64
		tokens    int
	}{{name: "gw", url: gwURL}, {name: "floor", url: flURL}, {name: "direct", url: upURL}}
	for i := range paths { // warm the connection pools
		runStreamsSpread(client, paths[i].url, streams, false, gap)
	}
	b.ReportAllocs()
	var ms runtime.MemStats
	turn := 0
	for b.Loop() {
		for k := range paths {
			p := &paths[(turn+k)%len(paths)]
			runtime.GC()
			runtime.ReadMemStats(&ms)
			m0, c0 := ms.Mallocs, process.SelfCPU()
			st := runStreamsSpread(client, p.url, streams, false, gap)
			p.cpu += process.SelfCPU() - c0
			runtime.ReadMemStats(&ms)
			p.mallocs += ms.Mallocs - m0
			p.tokens += len(st.chunks)
			if st.errors > 0 || len(st.chunks) != streams*tokens {
				b.Fatalf("path %s: %d errors, %d of %d tokens", p.name, st.errors, len(st.chunks), streams*tokens)
			}
		}
		turn++
	}
	perToken := func(p int) float64 { return float64(paths[p].cpu) / 1e3 / float64(paths[p].tokens) }
	for i, p := range paths {
		b.ReportMetric(perToken(i), p.name+"-cpu-µs/token")
		b.ReportMetric(float64(p.mallocs)/float64(p.tokens), p.name+"-allocs/token")
	}
	b.ReportMetric(perToken(0)-perToken(1), "gw−floor-cpu-µs/token")
}

// BenchmarkInspectEvent is the gateway's per-event reading (framing the
// event out of the upstream's bytes) and classification of a content
// chunk: compact (as tokentrace serve and vLLM send it), with
// "usage":null on every chunk (OpenAI-style include_usage), and with
// continuous usage.
func BenchmarkInspectEvent(b *testing.B) {
	for _, c := range []struct{ name, ev string }{
		{"plain", `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"logprobs":null,"finish_reason":null}]}` + "\n\n"},
		{"usage-null", `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"},
		{"usage", `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}` + "\n\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			raw := strings.NewReader(c.ev)
			rd := newEventReader(raw)
			var p chunkProbe
			b.ReportAllocs()
			for b.Loop() {
				raw.Reset(c.ev)
				rd.Reset(raw, nil)
				ev, err := rd.Next()
				if err != nil || p.inspect(ev) != eventContent {
					b.Fatal("not content", err)
				}
			}
		})
	}
}

// BenchmarkEventPath is the gateway's per-event work on a stream after
// the socket: framing each event out of the upstream's bytes (with its
// raw bytes, to pass on) and classifying it, for 64 content chunks with
// continuous usage.
func BenchmarkEventPath(b *testing.B) {
	var buf bytes.Buffer
	for i := 1; i <= 64; i++ {
		fmt.Fprintf(&buf, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":512,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", i, 512+i)
	}
	payload := buf.Bytes()
	r := bytes.NewReader(payload)
	rd := newEventReader(r)
	var p chunkProbe
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		r.Reset(payload)
		rd.Reset(r, nil)
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			if p.inspect(ev) != eventContent {
				b.Fatal("not content")
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/64, "ns/event")
}

// BenchmarkStreamRequest is one streaming request of 32 chunks at a time
// through the gateway (client, gateway and upstream in this process), so
// that its allocations per request (b.ReportAllocs: the client's and the
// upstream's included, the same on every build) show what the gateway's
// own per-request work allocates; and the same through the floor proxy
// and directly: a path's allocs/op minus direct's is the proxy's own.
func BenchmarkStreamRequest(b *testing.B) {
	upURL, gwURL, flURL, client := benchPaths(b, benchUpstream(32, 100*time.Microsecond))
	for _, p := range []struct{ name, url string }{{"gw", gwURL}, {"floor", flURL}, {"direct", upURL}} {
		b.Run("path="+p.name, func(b *testing.B) {
			for range 20 {
				runStreams(client, p.url, 1, false)
			}
			b.ReportAllocs()
			var chunks []time.Duration
			for b.Loop() {
				st := runStreams(client, p.url, 1, false)
				if st.errors > 0 {
					b.Fatalf("%d errors", st.errors)
				}
				chunks = append(chunks, st.chunks...)
			}
			reportP50P99(b, "chunk", chunks)
		})
	}
}

// BenchmarkRequestCPU is the per-request cost of each path, the tokens
// aside: one streaming request of one token (role chunk, one content
// chunk, [DONE]) at a time through the gateway, the floor proxy and
// directly, reporting the whole process's CPU time per request (user +
// system: client, proxy and upstream in this process) and its
// allocations. A path's cpu-µs/req minus direct's is its proxy's own CPU
// from the request's arrival to its answer's end: for the gateway, the
// body's inspection, admission, stage clocks, the upstream request, the
// first token's headers and write, the final Server-Timing and metrics.
func BenchmarkRequestCPU(b *testing.B) {
	upURL, gwURL, flURL, client := benchPaths(b, benchUpstream(1, time.Second))
	for _, p := range []struct{ name, url string }{{"gw", gwURL}, {"floor", flURL}, {"direct", upURL}} {
		b.Run("path="+p.name, func(b *testing.B) {
			for range 50 {
				runStreams(client, p.url, 1, false)
			}
			runtime.GC()
			b.ReportAllocs()
			c0 := process.SelfCPU()
			for b.Loop() {
				if st := runStreams(client, p.url, 1, false); st.errors > 0 || len(st.ttfb) != 1 {
					b.Fatalf("%d errors", st.errors)
				}
			}
			b.ReportMetric(float64(process.SelfCPU()-c0)/1e3/float64(b.N), "cpu-µs/req")
		})
	}
}
