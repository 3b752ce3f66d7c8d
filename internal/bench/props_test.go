package bench

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

// llama-server exposes its slots in /props, not /metrics: the first scrape
// of a llama.cpp target adds them to the run's server configuration, where
// verify finds a change of slots without --applied.
func TestLlamaCppPropsInServerConfig(t *testing.T) {
	metrics, err := os.ReadFile("../scrape/testdata/llamacpp.txt")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			_, _ = w.Write(metrics)
		case "/props":
			_, _ = w.Write([]byte(`{"default_generation_settings":{"n_ctx":1024},"total_slots":2}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	w := newServerWatch(Target{BaseURL: srv.URL + "/v1"}, func() int64 { return 0 })
	w.scrapeOnce(t.Context())
	_, info := w.result()
	if info.Engine != "llamacpp" || info.Config["max_num_seqs"] != "2" || info.Config["n_ctx"] != "1024" {
		t.Fatalf("server info %+v", info)
	}
}
