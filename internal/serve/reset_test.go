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

	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// TestResetPrefixCache: a repeated prompt hits the prefix cache; after
// POST /reset_prefix_cache (200, empty body) it hits nothing, and
// /metrics counts the reset.
func TestResetPrefixCache(t *testing.T) {
	cfg := testConfig(time.Millisecond)
	cfg.Engine.EnablePrefixCaching = true
	s := startServer(t, cfg)
	ctx := context.Background()
	root := strings.TrimSuffix(s.URL(), "/v1")
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":2,"ignore_eos":true}`, testModel, tokenizer.Filler(200, 3))
	cached := func() int {
		t.Helper()
		resp := post(t, ctx, s.URL()+"/completions", body)
		defer resp.Body.Close()
		var out struct {
			Usage struct {
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out.Usage.PromptTokensDetails.CachedTokens
	}
	if c := cached(); c != 0 {
		t.Fatalf("first request: %d cached tokens, want 0", c)
	}
	if c := cached(); c == 0 {
		t.Fatal("repeat: no cached tokens")
	}
	resp := post(t, ctx, root+"/reset_prefix_cache", "")
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(raw) != 0 {
		t.Fatalf("reset: status %d body %q; want 200, empty", resp.StatusCode, raw)
	}
	if c := cached(); c != 0 {
		t.Fatalf("after reset: %d cached tokens, want 0", c)
	}
	get, err := http.Get(root + "/reset_prefix_cache")
	if err != nil {
		t.Fatal(err)
	}
	get.Body.Close()
	if get.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: status %d, want 405", get.StatusCode)
	}
	m, err := http.Get(root + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if !strings.Contains(string(text), `tokentrace:prefix_cache_resets_total{engine="0",model_name="sim-model"} 1`) {
		t.Fatal("/metrics lacks tokentrace:prefix_cache_resets_total 1")
	}
}
