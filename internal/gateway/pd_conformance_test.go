package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// pdFake is a fake prefill or decode instance that records what it was
// sent, in the order of calls across instances (log).
type pdFake struct {
	name   string
	status int            // answer this status instead (0: 200)
	params map[string]any // a prefill answer's kv_transfer_params (nil: none)
	log    *callLog
}

type callLog struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	who, requestID string
	body           map[string]any
}

func (l *callLog) all() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]call(nil), l.calls...)
}

func (f *pdFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	f.log.mu.Lock()
	f.log.calls = append(f.log.calls, call{who: f.name, requestID: r.Header.Get("X-Request-Id"), body: body})
	f.log.mu.Unlock()
	if f.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `{"error":{"message":"%s says %d","type":"invalid_request_error","param":null,"code":null}}`, f.name, f.status)
		return
	}
	if strings.HasPrefix(f.name, "p") {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Server-Timing", "frontend;dur=0.100, server_queue;dur=1.000, prefill;dur=2.000, server_decode;dur=0.000")
		ans := map[string]any{"id": "cmpl-1", "object": "text_completion", "model": "sim-model",
			"choices": []any{map[string]any{"index": 0, "text": "a", "finish_reason": "length"}},
			"usage":   map[string]any{"prompt_tokens": 40, "completion_tokens": 1, "total_tokens": 41}}
		if f.params != nil {
			ans["kv_transfer_params"] = f.params
		}
		_ = json.NewEncoder(w).Encode(ans)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Trailer", "Server-Timing")
	for _, tok := range []string{"b", "c"} {
		fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"sim-model\",\"choices\":[{\"index\":0,\"text\":%q,\"finish_reason\":null}]}\n\n", tok)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	w.Header().Set("Server-Timing", "frontend;dur=0.100, kv_transfer;dur=1.000, decode_queue;dur=0.500, first_decode;dur=1.000, server_decode;dur=1.000")
}

// pdGateway starts the fakes and a gateway whose route "*" prefills on
// the p* fakes and decodes on the d* ones, one retry each.
func pdGateway(t *testing.T, fakes ...*pdFake) string {
	t.Helper()
	var pre, dec []string
	for _, f := range fakes {
		s := httptest.NewServer(f)
		t.Cleanup(s.Close)
		r := fmt.Sprintf("{url: %q}", s.URL)
		if strings.HasPrefix(f.name, "p") {
			pre = append(pre, r)
		} else {
			dec = append(dec, r)
		}
	}
	url, _ := gatewaytest.Start(t, fmt.Sprintf(`pools:
  - name: prefill
    balancer: round_robin
    replicas: [%s]
  - name: decode
    balancer: round_robin
    replicas: [%s]
routes:
  - {model: "*", pool: decode, prefill_pool: prefill, timeouts: {retries: 1}}
`, strings.Join(pre, ", "), strings.Join(dec, ", ")))
	return url
}

// dropNulls removes an object's null-valued top-level keys: a key the
// proxy nulled reads as one it removed.
func dropNulls(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if v != nil {
			out[k] = v
		}
	}
	return out
}

func sendClientRequest(t *testing.T, url string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(openaitest.KVFixture(t, "client_request.json"))
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "pd-conformance")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestPDRouterConformance: the gateway drives the two halves as vLLM's
// example proxy does (the fixtures): the prefill request first, then the
// client's request with the prefill answer's kv_transfer_params, one
// request id for both; and the failure of either half goes through the
// attempt state machine.
func TestPDRouterConformance(t *testing.T) {
	answer := openaitest.KVFixture(t, "prefill_answer_params.json")
	for _, tt := range []struct {
		name      string
		fakes     []*pdFake
		status    int
		wantCalls []string // who was called, in order
		plain     bool     // the decode half gets the client's request as it came
	}{
		{"both halves", []*pdFake{{name: "p0", params: answer}, {name: "d0"}}, 200, []string{"p0", "d0"}, false},
		{"prefill retried on another replica", []*pdFake{{name: "p0", status: 503}, {name: "p1", params: answer}, {name: "d0"}}, 200,
			[]string{"p0", "p1", "d0"}, false},
		{"decode retried on another replica", []*pdFake{{name: "p0", params: answer}, {name: "d0", status: 503}, {name: "d1"}}, 200,
			[]string{"p0", "d0", "d1"}, false},
		{"prefill refused: no decode", []*pdFake{{name: "p0", status: 400}, {name: "d0"}}, 400, []string{"p0"}, false},
		{"prefill answer without parameters", []*pdFake{{name: "p0"}, {name: "d0"}}, 200, []string{"p0", "d0"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			log := &callLog{}
			for _, f := range tt.fakes {
				f.log = log
			}
			status, body := sendClientRequest(t, pdGateway(t, tt.fakes...))
			if status != tt.status {
				t.Fatalf("status %d (%s), want %d", status, body, tt.status)
			}
			calls := log.all()
			var who []string
			for _, c := range calls {
				who = append(who, c.who)
				if c.requestID != "pd-conformance" {
					t.Errorf("%s got request id %q, want the client's", c.who, c.requestID)
				}
				switch {
				case strings.HasPrefix(c.who, "p"):
					if diff := cmp.Diff(openaitest.KVFixture(t, "prefill_request.json"), dropNulls(c.body)); diff != "" {
						t.Errorf("%s's request differs from the fixture (-want +got):\n%s", c.who, diff)
					}
				case tt.plain:
					if diff := cmp.Diff(openaitest.KVFixture(t, "client_request.json"), c.body); diff != "" {
						t.Errorf("%s's request differs from the client's (-want +got):\n%s", c.who, diff)
					}
				default:
					if diff := cmp.Diff(openaitest.KVFixture(t, "decode_request.json"), c.body); diff != "" {
						t.Errorf("%s's request differs from the fixture (-want +got):\n%s", c.who, diff)
					}
				}
			}
			if !cmp.Equal(who, tt.wantCalls) {
				t.Errorf("calls %v, want %v", who, tt.wantCalls)
			}
			if status == 200 && !strings.Contains(body, "[DONE]") {
				t.Errorf("the client's stream did not end: %q", body)
			}
		})
	}
}
