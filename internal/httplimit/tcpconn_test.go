package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestTCPConn: a request served by Limits.Server on Limits.Listener (with
// and without a connection cap) has its bare TCP connection; one served
// by a plain net/http server has none.
func TestTCPConn(t *testing.T) {
	found := func(w http.ResponseWriter, r *http.Request) {
		if _, rc, ok := TCPConn(r.Context()); ok && rc != nil {
			w.Header().Set("X-Tcp", "yes")
		}
	}
	plain := httptest.NewServer(http.HandlerFunc(found))
	defer plain.Close()
	for _, tc := range []struct {
		name string
		url  string
		want string
	}{
		{"limits", "http://" + serveLimits(t, Limits{}, http.HandlerFunc(found)), "yes"},
		{"limits, capped", "http://" + serveLimits(t, Limits{MaxConns: 4}, http.HandlerFunc(found)), "yes"},
		{"plain net/http", plain.URL, ""},
	} {
		resp, err := http.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Tcp"); got != tc.want {
			t.Errorf("%s: TCPConn found %q, want %q", tc.name, got, tc.want)
		}
	}
}
