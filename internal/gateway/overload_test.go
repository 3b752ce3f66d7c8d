package gateway

import (
	"bufio"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// overloadRun sends streaming requests open-loop at rate for dur and
// returns goodput (answers whose TTFT from the intended send instant met
// slo, per second) and the peak heap + stack.
func overloadRun(client *http.Client, base string, rate float64, dur, slo time.Duration) (goodput float64, ok, rejected, total int, peak uint64) {
	n := int(rate * dur.Seconds())
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				runtime.ReadMemStats(&ms)
				mu.Lock()
				peak = max(peak, ms.HeapInuse+ms.StackInuse)
				mu.Unlock()
			}
		}
	}()
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":16,"ignore_eos":true,"messages":[{"role":"user","content":"overload test prompt"}]}`, simModel)
	start := time.Now()
	for i := range n {
		intended := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		time.Sleep(time.Until(intended))
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				mu.Lock()
				rejected++
				mu.Unlock()
				return
			}
			var ttft time.Duration
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if ttft == 0 && strings.Contains(sc.Text(), `"content":"`) && !strings.Contains(sc.Text(), `"content":""`) {
					ttft = time.Since(intended)
				}
			}
			mu.Lock()
			if ttft > 0 && ttft <= slo {
				ok++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	return float64(ok) / time.Since(start).Seconds(), ok, rejected, n, peak
}

// BenchmarkOverloadGoodput offers tokentrace serve (8 sequences, 5 ms per
// step, 16-token answers: capacity ≈ 8 / (17 × 5 ms) ≈ 94 req/s) open-loop
// load at 0.9× and 2× capacity, directly and through the gateway with an
// adaptive concurrency limit starting at 8 and early rejection at a 100 ms
// TTFT deadline, and reports goodput (requests whose TTFT from the intended
// send met 100 ms, per second).
func BenchmarkOverloadGoodput(b *testing.B) {
	s := startServeSeqs(b, 5*time.Millisecond, 8)
	g := mustGateway(b, fmt.Sprintf(`
pools: [{name: sim, replicas: [{url: %q, kind: tokentrace}], queue: {concurrency: 8, min_concurrency: 2, max_concurrency: 16, adaptive: gradient, max_size: 256}}]
routes: [{model: "*", pool: sim, deadline_ttft: 100ms, early_reject: true}]
`, serveBase(s)))
	gw := startGatewayB(b, g)
	client := benchClient()
	const slo = 100 * time.Millisecond
	capacity := 8 / (17 * 0.005)
	overloadRun(client, gw, 0.5*capacity, time.Second, slo) // warm: teaches the predictor
	for b.Loop() {
		for _, m := range []float64{0.9, 2} {
			for _, path := range []struct{ name, url string }{{"direct", serveBase(s)}, {"gw", gw}} {
				gp, ok, rej, n, peak := overloadRun(client, path.url, m*capacity, 2*time.Second, slo)
				b.ReportMetric(gp, fmt.Sprintf("%s-goodput-at-%.1fx-req/s", path.name, m))
				b.Logf("%s at %.1f× capacity: goodput %.1f req/s (%d of %d met the SLO, %d rejected), peak heap+stack %d MiB",
					path.name, m, gp, ok, n, rej, peak>>20)
				time.Sleep(500 * time.Millisecond) // let the engine drain
			}
		}
	}
}

func startGatewayB(b *testing.B, g *Gateway) string {
	srv := startGateway(b, g)
	return srv.URL
}
