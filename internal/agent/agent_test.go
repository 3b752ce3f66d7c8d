package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// recordingWait answers at once and notes each latency asked for.
type recordingWait struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (w *recordingWait) wait(_ context.Context, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waits = append(w.waits, d)
	return nil
}

func clock() func() int64 {
	start := time.Now()
	return func() int64 { return int64(time.Since(start)) }
}

func TestSimulatorAnswersTheCallAsDrawn(t *testing.T) {
	rw := &recordingWait{}
	srv, err := StartSimulator(&Simulator{Wait: rw.wait})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := NewCaller(srv.URL(), time.Second, nil, clock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	calls := []workload.ToolCall{{Name: "search", Latency: 120 * time.Millisecond, ResultTokens: 30},
		{Name: "calc", Latency: 7500 * time.Microsecond, ResultTokens: 3}}
	for _, parallel := range []bool{false, true} {
		rw.waits = nil
		spans, results, err := c.Step(context.Background(), 4, 2, calls, parallel)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) != 2 || spans[0].Name != "search" || spans[1].Name != "calc" {
			t.Fatalf("spans %+v", spans)
		}
		for i, s := range spans {
			if s.ResultTokens != calls[i].ResultTokens || tokenizer.Count(results[i]) != calls[i].ResultTokens || s.EndNS < s.StartNS || s.ErrorKind != "" {
				t.Errorf("parallel %v call %d: %+v, result %q", parallel, i, s, results[i])
			}
		}
		got := map[time.Duration]bool{}
		for _, w := range rw.waits {
			got[w] = true
		}
		if diff := cmp.Diff(map[time.Duration]bool{120 * time.Millisecond: true, 7500 * time.Microsecond: true}, got); diff != "" {
			t.Errorf("the simulator waited (-want +got):\n%s", diff)
		}
		if !parallel && spans[1].StartNS < spans[0].EndNS {
			t.Errorf("sequential calls overlap: %+v", spans)
		}
	}
}

func TestFailingToolFailsTheStep(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "bad-json") {
			_, _ = w.Write([]byte("not json"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte(`{"error":{"message":"search index down","type":"server_error"}}`))
	}))
	defer failing.Close()
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hanging.Close()
	defer close(release)
	calls := []workload.ToolCall{{Name: "search"}, {Name: "fetch"}}
	for _, tc := range []struct {
		name, url string
		parallel  bool
		kind      latency.ErrorKind
		msg       string
		spans     int
	}{
		{"failing, sequential", failing.URL, false, latency.FailTool, "step 3: tool call 0 (search): status 502: search index down", 1},
		{"failing, parallel", failing.URL, true, latency.FailTool, "step 3: tool call 0 (search): status 502", 2},
		{"not a result", failing.URL + "/bad-json", false, latency.FailTool, `answer is not {"content"`, 1},
		{"hanging", hanging.URL, false, latency.FailToolTimeout, "step 3: tool call 0 (search): no answer within 150ms", 1},
		{"refused", "http://127.0.0.1:1/", false, latency.FailTool, "step 3: tool call 0 (search):", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCaller(tc.url, 150*time.Millisecond, nil, clock())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			spans, _, err := c.Step(context.Background(), 1, 3, calls, tc.parallel)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want one containing %q", err, tc.msg)
			}
			if len(spans) != tc.spans || spans[0].ErrorKind != tc.kind || spans[0].Error == "" {
				t.Fatalf("spans %+v, want %d with kind %s first", spans, tc.spans, tc.kind)
			}
		})
	}
}

func TestSimulatorRefusesBadCalls(t *testing.T) {
	h := &Simulator{Wait: (&recordingWait{}).wait}
	for _, body := range []string{"{", `{"latency_ms": -1}`, `{"result_tokens": 99999999}`} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/tools/call", strings.NewReader(body)))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"type":"invalid_request_error"`) {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/tools/call", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", rec.Code)
	}
}
