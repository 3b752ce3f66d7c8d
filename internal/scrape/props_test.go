package scrape

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProps(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/props" || r.Header.Get("Authorization") != "Bearer k" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"default_generation_settings":{"n_ctx":2048,"temperature":0.8},"total_slots":4,"chat_template":"{{x}}"}`))
	}))
	defer srv.Close()
	u, err := MetricsURL(srv.URL + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Props(t.Context(), srv.Client(), u, http.Header{"Authorization": {"Bearer k"}})
	if err != nil || got["max_num_seqs"] != "4" || got["n_ctx"] != "2048" || len(got) != 2 {
		t.Fatalf("Props = %v, %v", got, err)
	}
	if _, err := Props(t.Context(), srv.Client(), u, nil); err == nil || strings.Contains(err.Error(), srv.URL) {
		t.Errorf("a refused /props: %v (want an error without the URL)", err)
	}
}

func TestParseProps(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"total_slots":2}`, "max_num_seqs=2"},
		{`{"total_slots":0,"default_generation_settings":{"n_ctx":-1}}`, ""},
		{`{}`, ""},
	} {
		got, err := ParseProps(strings.NewReader(tt.in))
		var kv []string
		for k, v := range got {
			kv = append(kv, k+"="+v)
		}
		if err != nil || strings.Join(kv, ",") != tt.want {
			t.Errorf("ParseProps(%s) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if _, err := ParseProps(strings.NewReader(`{"total_slots":"two"}`)); err == nil {
		t.Error("a string of slots: no error")
	}
}

func FuzzParseProps(f *testing.F) {
	f.Add(`{"total_slots":4,"default_generation_settings":{"n_ctx":4096}}`)
	f.Add(`{"total_slots":1e99}`)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseProps(strings.NewReader(s))
		if err == nil {
			for k, v := range got {
				if v == "" || v[0] == '-' || v == "0" {
					t.Fatalf("%s = %q from %q", k, v, s)
				}
			}
		}
	})
}
