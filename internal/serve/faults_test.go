package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/sse"
)

func TestFaultPlanDeterministic(t *testing.T) {
	f := Faults{Seed: 42, Rate429: 0.1, Rate500: 0.1, Rate503: 0.1, RateContextLength: 0.1,
		SlowFirstTokenRate: 0.2, StallRate: 0.3, ResetRate: 0.25}.withDefaults()
	counts := map[string]int{}
	const n = 10000
	for i := range n {
		key := fmt.Sprint("req-", i)
		p, err := f.plan(key, 100, "")
		if err != nil {
			t.Fatal(err)
		}
		again, _ := f.plan(key, 100, "")
		if p != again {
			t.Fatalf("plan of %s differs between calls: %+v vs %+v", key, p, again)
		}
		if p.status != 0 {
			counts[fmt.Sprint(p.status)]++
		}
		if p.slowFirstToken > 0 {
			counts["slow"]++
		}
		if p.stall > 0 {
			counts["stall"]++
			if p.stallAt < 1 || p.stallAt >= 100 {
				t.Fatalf("stall position %d outside [1, 100)", p.stallAt)
			}
		}
		if p.resetAt > 0 {
			counts["reset"]++
		}
	}
	want := map[string]float64{"429": 0.1, "500": 0.1, "503": 0.1, "400": 0.1, "slow": 0.2, "stall": 0.3, "reset": 0.25}
	for k, rate := range want {
		// 5 standard deviations of a binomial proportion at n = 10,000.
		if got := float64(counts[k]) / n; got < rate-0.025 || got > rate+0.025 {
			t.Errorf("%s: rate %.3f, want %.2f", k, got, rate)
		}
	}
	other := f
	other.Seed = 43
	same := 0
	for i := range 1000 {
		a, _ := f.plan(fmt.Sprint(i), 100, "")
		b, _ := other.plan(fmt.Sprint(i), 100, "")
		if a == b {
			same++
		}
	}
	if same == 1000 {
		t.Error("a different seed gives the same faults")
	}
}

func TestFaultHeader(t *testing.T) {
	f := Faults{}.withDefaults()
	tests := []struct {
		header string
		want   faultPlan
		err    bool
	}{
		{"429", faultPlan{status: 429}, false},
		{"none", faultPlan{}, false},
		{"slow-first-token=250ms", faultPlan{slowFirstToken: 250 * time.Millisecond}, false},
		{"slow-first-token", faultPlan{slowFirstToken: DefaultSlowFirstTokenDelay}, false},
		{"stall=1s, 503", faultPlan{stall: time.Second, stallAt: 1, status: 503}, false},
		{"reset", faultPlan{resetAt: 1}, false},
		{"explode", faultPlan{}, true},
		{"stall=forever", faultPlan{}, true},
	}
	for _, tt := range tests {
		got, err := f.plan("k", 1, tt.header)
		if (err != nil) != tt.err {
			t.Errorf("%q: error %v", tt.header, err)
			continue
		}
		if !tt.err && got != tt.want {
			t.Errorf("%q: %+v, want %+v", tt.header, got, tt.want)
		}
	}
}

func TestInjectedErrors(t *testing.T) {
	s := startServer(t, testConfig(time.Millisecond))
	for _, tt := range []struct {
		fault      string
		status     int
		typ, code  string
		retryAfter string
	}{
		{"429", 429, openai.TypeRateLimit, "rate_limit_exceeded", "1"},
		{"500", 500, openai.TypeServer, "internal_error", ""},
		{"503", 503, openai.TypeOverloaded, "overloaded", "1"},
		{"400", 400, openai.TypeInvalidRequest, "context_length_exceeded", ""},
		{"bogus", 400, openai.TypeInvalidRequest, "", ""},
	} {
		t.Run(tt.fault, func(t *testing.T) {
			resp := post(t, context.Background(), s.URL()+"/chat/completions",
				`{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, FaultHeader, tt.fault)
			defer resp.Body.Close()
			var e openai.ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			code := ""
			if e.Error.Code != nil {
				code = *e.Error.Code
			}
			if resp.StatusCode != tt.status || e.Error.Type != tt.typ || code != tt.code || resp.Header.Get("Retry-After") != tt.retryAfter {
				t.Errorf("status %d type %q code %q Retry-After %q", resp.StatusCode, e.Error.Type, code, resp.Header.Get("Retry-After"))
			}
		})
	}
}

func TestInjectedDelays(t *testing.T) {
	s := startServer(t, testConfig(time.Millisecond))
	body := `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":20,"ignore_eos":true,"stream":true,"return_metrics":true}`
	start := time.Now()
	resp := post(t, context.Background(), s.URL()+"/chat/completions", body, FaultHeader, "slow-first-token=150ms,stall=100ms")
	defer resp.Body.Close()
	rd := sse.NewReader(resp.Body, func() int64 { return int64(time.Since(start)) }, 0)
	var firstContent int64 = -1
	var gaps []time.Duration
	var prev int64
	var final openai.ChatCompletionChunk
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		d := string(ev.Data)
		if d == "[DONE]" {
			continue
		}
		if strings.Contains(d, `"usage"`) {
			if err := json.Unmarshal(ev.Data, &final); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if strings.Contains(d, `"role"`) {
			continue
		}
		if firstContent < 0 {
			firstContent = ev.At
		} else {
			gaps = append(gaps, time.Duration(ev.At-prev))
		}
		prev = ev.At
	}
	if time.Duration(firstContent) < 150*time.Millisecond {
		t.Errorf("first token after %v, want at least the injected 150ms", time.Duration(firstContent))
	}
	longest := time.Duration(0)
	for _, g := range gaps {
		longest = max(longest, g)
	}
	if longest < 100*time.Millisecond {
		t.Errorf("longest gap %v, want a stall of at least 100ms (gaps %v)", longest, gaps)
	}
	if final.Metrics == nil || final.Metrics.FaultDelayMs != 250 {
		t.Errorf("metrics %+v, want fault_delay_ms 250", final.Metrics)
	}
	if st := resp.Trailer.Get(ServerTimingHeader); !strings.Contains(st, "fault;dur=250.000") {
		t.Errorf("Server-Timing %q lacks the fault stage", st)
	}
	if final.Usage == nil || final.Usage.CompletionTokens != 20 {
		t.Errorf("usage %+v: tokens lost under stalls", final.Usage)
	}
}

func TestInjectedReset(t *testing.T) {
	s := startServer(t, testConfig(time.Millisecond))
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"sim-model","prompt":"hi","max_tokens":30,"ignore_eos":true,"stream":%t}`, stream)
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/completions", strings.NewReader(body))
			req.Header.Set(FaultHeader, "reset")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // reset before the headers: the client saw the reset
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("read the whole body without error: %s", b)
			}
			if strings.Contains(string(b), "[DONE]") {
				t.Errorf("stream completed despite the reset: %s", b)
			}
		})
	}
	// The server keeps serving.
	resp := post(t, context.Background(), s.URL()+"/completions", `{"model":"sim-model","prompt":"hi","max_tokens":2}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after resets: status %d", resp.StatusCode)
	}
}

func TestRandomFaultsReproducible(t *testing.T) {
	cfg := testConfig(time.Millisecond)
	cfg.Faults = Faults{Seed: 7, Rate429: 0.3, Rate503: 0.2}
	run := func() []int {
		s := startServer(t, cfg)
		var got []int
		for i := range 30 {
			resp := post(t, context.Background(), s.URL()+"/completions", `{"model":"sim-model","prompt":"hi","max_tokens":1}`,
				RequestIDHeader, fmt.Sprint("r", i))
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got = append(got, resp.StatusCode)
		}
		return got
	}
	a, b := run(), run()
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("the same seed and ids gave different faults (-first +second):\n%s", diff)
	}
	n := map[int]int{}
	for _, c := range a {
		n[c]++
	}
	if n[429] == 0 || n[503] == 0 || n[200] == 0 {
		t.Errorf("statuses %v: want a mix of 200, 429 and 503", n)
	}
}

// TestClientLeavesDuringInjectedDelay: a client that gives up during a
// slow first token is an abort (blocks freed), not an injected reset.
func TestClientLeavesDuringInjectedDelay(t *testing.T) {
	s := startServer(t, testConfig(time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, s.URL()+"/chat/completions",
		`{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":50,"ignore_eos":true,"stream":true}`,
		FaultHeader, "slow-first-token=10s")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	time.Sleep(50 * time.Millisecond) // the engine finishes meanwhile; the handler sleeps
	cancel()
	resp.Body.Close()
	if !waitFor(5*time.Second, func() bool { return testutil.ToFloat64(s.metrics.successAbrt) == 1 }) {
		t.Fatal("the abandoned request was not counted as an abort")
	}
	if n := testutil.ToFloat64(s.metrics.httpErrors.WithLabelValues("reset")); n != 0 {
		t.Errorf("%g resets counted for a client that left", n)
	}
	if st := s.Engine().Stats(); st.KVUsage != 0 || st.Running != 0 {
		t.Errorf("engine still holds the request: %+v", st)
	}
}
