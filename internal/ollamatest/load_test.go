package ollamatest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/ollamatest"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// TestColdLoadNamedByReport: after OLLAMA_KEEP_ALIVE expires Ollama
// unloads the model, and the next request pays its load again. Ten
// requests to Ollama's native /api/chat, the first after the expiry, are
// recorded with Ollama's durations read by latency.SplitFromOllama (as
// bench reads them) and the report names the first's TTFT as the model's
// load, quoting its load_duration.
func TestColdLoadNamedByReport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama")
	}
	s := ollamatest.Start(t, ollamatest.Options{Parallel: 1, KeepAlive: 2 * time.Second})
	client := &http.Client{Timeout: time.Minute}
	chat(t, client, s, 0, time.Now(), "") // loads the model for OLLAMA_KEEP_ALIVE's 2 s
	deadline := time.Now().Add(time.Minute)
	for loaded(t, client, s) {
		if time.Now().After(deadline) {
			t.Fatal("the model is still loaded a minute after its 2 s keep-alive")
		}
		time.Sleep(250 * time.Millisecond)
	}
	dir := filepath.Join(t.TempDir(), "cold")
	if err := results.Prepare(dir); err != nil {
		t.Fatal(err)
	}
	w, err := results.CreateRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	var first *latency.Record
	zero := time.Now() // the run's clock
	for i := range 10 {
		rec := chat(t, client, s, i+1, zero, "10m") // loaded again, now kept while the run lasts
		if first == nil {
			first = rec
		}
		w.Write(rec)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := report.Load(context.Background(), []string{dir}, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logFindings(t, rep)
	k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == report.RuleModelLoad })
	if k < 0 {
		t.Fatalf("no %s finding; the first request's load_duration was %.1f ms of %.1f ms", report.RuleModelLoad,
			float64(first.Server.LoadNS)/1e6, float64(first.EndNS-first.SentNS)/1e6)
	}
	f := rep.Findings[k]
	if f.Numbers["loaded_requests"] != 1 || f.Numbers["first_load_ms"] != float64(first.Server.LoadNS)/1e6 {
		t.Errorf("the finding's numbers %v; the first request's load %d ns", f.Numbers, first.Server.LoadNS)
	}
	if !strings.Contains(f.Evidence, "Ollama") || !strings.Contains(strings.Join(f.Remedies, " "), "OLLAMA_KEEP_ALIVE") {
		t.Errorf("the finding does not name Ollama and its keep-alive: %s", f.Evidence)
	}
}

// chat sends one whole (unstreamed) native chat request of 64 filler
// words and 16 answer tokens, with keepAlive as its keep_alive unless
// empty, and returns its record, its instants since zero.
func chat(t *testing.T, client *http.Client, s *ollamatest.Server, i int, zero time.Time, keepAlive string) *latency.Record {
	t.Helper()
	keep := ""
	if keepAlive != "" {
		keep = fmt.Sprintf(`,"keep_alive":%q`, keepAlive)
	}
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"stream":false,"options":{"num_predict":16}%s}`,
		s.Model, tokenizer.Filler(64, uint64(i)), keep)
	rec := &latency.Record{Schema: latency.RecordSchema, ID: fmt.Sprintf("cold-%d", i), Model: s.Model, MaxTokens: 16}
	rec.SentNS = int64(time.Since(zero))
	rec.IntendedNS = rec.SentNS
	resp, err := client.Post(s.URL+"/api/chat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	rec.EndNS = int64(time.Since(zero))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/chat: %d %v\n%s", resp.StatusCode, err, b)
	}
	if rec.Server = latency.SplitFromOllama(b); rec.Server == nil {
		t.Fatalf("no durations in Ollama's answer: %s", b)
	}
	var counts struct {
		Prompt int `json:"prompt_eval_count"`
		Eval   int `json:"eval_count"`
	}
	if err := json.Unmarshal(b, &counts); err != nil {
		t.Fatal(err)
	}
	rec.InputTokens, rec.OutputTokens = counts.Prompt, counts.Eval
	return rec
}

// loaded says whether Ollama has the model in memory (/api/ps).
func loaded(t *testing.T, client *http.Client, s *ollamatest.Server) bool {
	t.Helper()
	resp, err := client.Get(s.URL + "/api/ps")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), s.Model)
}
