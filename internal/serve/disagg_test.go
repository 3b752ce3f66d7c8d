package serve

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// pdConfig is testConfig in a role, pulling 1,000 bytes per token over a
// 1 MB/s link with 1 ms latency.
func pdConfig(role string) Config {
	c := testConfig(2 * time.Millisecond)
	c.Role = role
	c.Engine.KVBytesPerToken = 1000
	c.Engine.KVLink = perfmodel.Link{Name: "test", BytesPerSecond: 1e6, Latency: time.Millisecond}
	return c
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestKVTransferConformance drives a prefill-role and a decode-role server
// as vLLM's example proxy drives vLLM's: the prefill request of the
// fixture, its answer's kv_transfer_params (the fixture's keys and
// meanings), then the client's request with them to the decode side.
func TestKVTransferConformance(t *testing.T) {
	p := startServer(t, pdConfig(RolePrefill))
	d := startServer(t, pdConfig(RoleDecode))
	ctx := context.Background()

	resp := post(t, ctx, p.URL()+"/completions", mustJSON(t, openaitest.KVFixture(t, "prefill_request.json")), RequestIDHeader, "pd-1")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("prefill: %d %s", resp.StatusCode, body)
	}
	var ans struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage            openai.Usage   `json:"usage"`
		KVTransferParams map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Usage.CompletionTokens != 1 || ans.Choices[0].FinishReason != "length" {
		t.Errorf("prefill answered %d tokens, finish %q; want 1, length", ans.Usage.CompletionTokens, ans.Choices[0].FinishReason)
	}
	want := openaitest.KVFixture(t, "prefill_answer_params.json")
	for k, v := range want {
		got, ok := ans.KVTransferParams[k]
		if !ok {
			t.Errorf("the answer's kv_transfer_params lack %q", k)
			continue
		}
		switch k {
		case "do_remote_prefill", "do_remote_decode":
			if got != v {
				t.Errorf("%s = %v, want %v", k, got, v)
			}
		case "remote_block_ids":
			if n := len(got.([]any)); n != 2 { // 40 tokens: two full blocks of 16
				t.Errorf("remote_block_ids lists %d blocks, want 2", n)
			}
		case "remote_host", "remote_port":
			host, port, _ := net.SplitHostPort(p.Addr().String())
			if w := map[string]any{"remote_host": host, "remote_port": port}[k]; k == "remote_host" && got != w ||
				k == "remote_port" && strconv.Itoa(int(got.(float64))) != w {
				t.Errorf("%s = %v, want %v (the prefill instance's address)", k, got, w)
			}
		case "remote_engine_id":
			if s, _ := got.(string); s == "" {
				t.Errorf("remote_engine_id = %v, want the engine's id", got)
			}
		}
	}

	dec := openaitest.KVFixture(t, "client_request.json")
	dec["kv_transfer_params"] = ans.KVTransferParams
	resp = post(t, ctx, d.URL()+"/completions", mustJSON(t, dec), RequestIDHeader, "pd-1")
	evs := events(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(evs) < 2 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("decode: %d, %d events", resp.StatusCode, len(evs))
	}
	stages := latency.ParseServerTiming(resp.Trailer.Values(ServerTimingHeader))
	// Two full blocks pulled: 32 tokens × 1,000 bytes over 1 MB/s + 1 ms.
	if got := stages[latency.TimingKVTransfer]; got != 33*time.Millisecond {
		t.Errorf("kv_transfer %v, want 33ms (trailer %q)", got, resp.Trailer.Values(ServerTimingHeader))
	}
	for _, n := range []latency.TimingName{latency.TimingDecodeQueue, latency.TimingFirstDecode, latency.TimingServerDecode} {
		if _, ok := stages[n]; !ok {
			t.Errorf("the decode side's Server-Timing lacks %s", n)
		}
	}
	if _, ok := stages[latency.TimingServerQueue]; ok {
		t.Errorf("a decode request reported server_queue beside decode_queue")
	}
}

func TestKVTransferRefusals(t *testing.T) {
	p := startServer(t, pdConfig(RolePrefill))
	d := startServer(t, pdConfig(RoleDecode))
	ctx := context.Background()
	prefill := openaitest.KVFixture(t, "prefill_request.json")
	decode := openaitest.KVFixture(t, "decode_request.json")
	with := func(m map[string]any, k string, v any) map[string]any {
		out := map[string]any{}
		for a, b := range m {
			out[a] = b
		}
		out[k] = v
		return out
	}
	params := func(edit func(map[string]any)) map[string]any {
		kv := map[string]any{}
		for a, b := range decode["kv_transfer_params"].(map[string]any) {
			kv[a] = b
		}
		edit(kv)
		return with(decode, "kv_transfer_params", kv)
	}
	for _, tt := range []struct {
		name  string
		url   string
		body  map[string]any
		param string
	}{
		{"prefill request to a decode instance", d.URL(), prefill, "kv_transfer_params.do_remote_decode"},
		{"decode request to a prefill instance", p.URL(), decode, "kv_transfer_params.do_remote_prefill"},
		{"streamed prefill request", p.URL(), with(prefill, "stream", true), "stream"},
		{"no engine id", d.URL(), params(func(kv map[string]any) { kv["remote_engine_id"] = nil }), "kv_transfer_params.remote_engine_id"},
		{"no port", d.URL(), params(func(kv map[string]any) { delete(kv, "remote_port") }), "kv_transfer_params.remote_port"},
		{"blocks of another prompt", d.URL(), params(func(kv map[string]any) { kv["remote_block_ids"] = []int{0, 1, 2} }), "kv_transfer_params.remote_block_ids"},
		{"misspelt key", d.URL(), params(func(kv map[string]any) { kv["Remote_Host"] = "x" }), "kv_transfer_params.Remote_Host"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, ctx, tt.url+"/completions", mustJSON(t, tt.body))
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error openai.Error `json:"error"`
			}
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != tt.param {
				t.Errorf("got %d %s, want 400 about %s", resp.StatusCode, body, tt.param)
			}
		})
	}
}

// A prefill instance of TP 2 answers tp_size 2; a decode instance of TP 2
// then pulls its 32 tokens' KV (32 kB at 1 MB/s per link) as two shards
// at once, in 1 + 16 ms, and from a prefill instance that says tp_size 1
// as one, in 1 + 32 ms.
func TestKVTransferTPSize(t *testing.T) {
	pc, dc := pdConfig(RolePrefill), pdConfig(RoleDecode)
	pc.Engine.TP, dc.Engine.TP = 2, 2
	p, d := startServer(t, pc), startServer(t, dc)
	ctx := context.Background()
	resp := post(t, ctx, p.URL()+"/completions", mustJSON(t, openaitest.KVFixture(t, "prefill_request.json")), RequestIDHeader, "tp-1")
	var ans struct {
		KVTransferParams map[string]any `json:"kv_transfer_params"`
	}
	err := json.NewDecoder(resp.Body).Decode(&ans)
	resp.Body.Close()
	if err != nil || ans.KVTransferParams["tp_size"] != float64(2) {
		t.Fatalf("prefill answer's kv_transfer_params %v (%v), want tp_size 2", ans.KVTransferParams, err)
	}
	for _, tt := range []struct {
		tpSize float64
		want   time.Duration
	}{{2, 17 * time.Millisecond}, {1, 33 * time.Millisecond}} {
		dec := openaitest.KVFixture(t, "client_request.json")
		ans.KVTransferParams["tp_size"] = tt.tpSize
		dec["kv_transfer_params"] = ans.KVTransferParams
		resp = post(t, ctx, d.URL()+"/completions", mustJSON(t, dec), RequestIDHeader, "tp-1")
		_ = events(t, resp.Body)
		resp.Body.Close()
		stages := latency.ParseServerTiming(resp.Trailer.Values(ServerTimingHeader))
		if got := stages[latency.TimingKVTransfer]; resp.StatusCode != http.StatusOK || got != tt.want {
			t.Errorf("tp_size %v: %d, kv_transfer %v, want %v", tt.tpSize, resp.StatusCode, got, tt.want)
		}
	}
}
