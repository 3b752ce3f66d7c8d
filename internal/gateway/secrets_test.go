package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// The secrets these tests plant, and must find nowhere.
const (
	secretKey      = "sk-secret-123"
	secretPassword = "pw-secret"
	secretURL      = "http://admin:" + secretPassword + "@127.0.0.1:1"
	secretBasic    = "YWRtaW46cHctc2VjcmV0" // base64("admin:pw-secret"), as Basic authentication sends it
)

// assertNoSecrets fails for every text that carries a planted secret.
func assertNoSecrets(t *testing.T, what string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		for _, secret := range []string{secretKey, secretPassword, secretBasic} {
			if strings.Contains(s, secret) {
				t.Errorf("%s carries %q:\n%s", what, secret, s)
			}
		}
	}
}

// badConfigs are configurations holding both secrets, each with an error:
// YAML syntax on another line, on the api_key's own line, a type error,
// and validation errors naming the URL.
var badConfigs = map[string]string{
	"syntax on another line":          "pools:\n  - name: p\n    replicas:\n      - url: " + secretURL + "\n        api_key: " + secretKey + "\n    bogus: [\nroutes: []\n",
	"syntax on the key's line":        "pools:\n  - name: p\n    replicas:\n      - url: " + secretURL + "\n        api_key: " + secretKey + " : x\n",
	"unclosed flow on the key's line": "pools:\n  - name: p\n    replicas:\n      - {url: " + secretURL + ", api_key: [" + secretKey + "\n",
	"unknown field after the key":     "pools:\n  - name: p\n    replicas:\n      - url: " + secretURL + "\n        api_key: " + secretKey + "\n        nokey: 1\n",
	"quoted key, broken quote":        "pools:\n  - name: p\n    replicas:\n      - url: " + secretURL + "\n        api_key: \"" + secretKey + "\\x\"\n",
	"secret in a duration":            "pools: [{name: p, replicas: [{url: " + secretURL + ", api_key: " + secretKey + "}]}]\nroutes: [{model: m, pool: p, timeouts: {ttft: " + secretKey + "}}]\n",
	"invalid URL with userinfo":       "pools: [{name: p, replicas: [{url: \"http://admin:" + secretPassword + "@\", api_key: " + secretKey + "}]}]\n",
	"invalid kind":                    "pools: [{name: p, replicas: [{url: " + secretURL + ", api_key: " + secretKey + ", kind: bogus}]}]\n",
	"otlp endpoint with userinfo":     "otlp_endpoint: \"http://admin:" + secretPassword + "@\"\npools: [{name: p, replicas: [{url: " + secretURL + "}]}]\n",
}

func TestConfigErrorsCarryNoSecrets(t *testing.T) {
	for name, text := range badConfigs {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(text))
			if err == nil {
				t.Fatal("accepted")
			}
			assertNoSecrets(t, "the error", err.Error(), fmt.Sprintf("%+v", err))
			// The error still says where and what.
			if !strings.Contains(err.Error(), "config") {
				t.Errorf("error %q does not say it is about the config", err)
			}
		})
	}
}

// TestBadConfigFileCarriesNoSecrets: the error NewServer returns when started on
// a bad file (what the command prints to stderr), and the log of a reload
// that fails, carry no secret.
func TestBadConfigFileCarriesNoSecrets(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	dir := t.TempDir()
	for name, text := range badConfigs {
		path := filepath.Join(dir, "start.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		var logs lockedBuffer
		_, err := NewServer(RunConfig{ConfigPath: path, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err == nil {
			t.Fatalf("%s: started", name)
		}
		assertNoSecrets(t, name+": Run's error", err.Error(), logs.String())
	}

	// A reload to each bad file is logged without the secret.
	path := filepath.Join(dir, "gateway.yaml")
	good := fmt.Sprintf("pools: [{name: p, replicas: [{url: %q, api_key: %s}]}]\nroutes: [{model: \"*\", pool: p}]\n", up.URL(), secretKey)
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, loaded, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Watch(ctx, path, loaded, 2*time.Millisecond, g.SetConfig, slog.New(slog.NewTextHandler(&logs, nil)))
	n := 0
	for name, text := range badConfigs {
		replaceFile(t, path, text+"# "+name+"\n")
		n++
		waitFor(t, "reload "+name+" to be refused", func() bool { return strings.Count(logs.String(), "keeping the running configuration") >= n })
	}
	assertNoSecrets(t, "the reload log", logs.String())
}

// TestFailingUpstreamLeaksNoSecrets: a replica whose URL carries a
// password and whose key is configured, unreachable; and a replica that
// echoes its credentials in error answers. Every response body and header
// and every log line is free of both secrets.
func TestFailingUpstreamLeaksNoSecrets(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A careless upstream quoting the credentials it was sent.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"bad credentials: Authorization: %s","type":"auth","code":"x"}}`, r.Header.Get("Authorization"))
	}))
	defer echo.Close()
	echoURL := strings.Replace(echo.URL, "http://", "http://admin:"+secretPassword+"@", 1)
	var logs lockedBuffer
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
pools:
  - {name: dead, balancer: queue_aware, scrape_interval: 5ms, replicas: [{url: %q, api_key: %s, models: [dead-model]}]}
  - {name: echo, replicas: [{url: %q}]}
  - {name: echokey, replicas: [{url: %q, api_key: %s}]}
routes: [{model: dead, pool: dead}, {model: echo, pool: echo}, {model: echokey, pool: echokey}]
`, secretURL, secretKey, echoURL, echo.URL, secretKey)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := newWithLog(cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, g)
	var texts []string
	for _, model := range []string{"dead", "echo", "echokey"} {
		for _, stream := range []bool{false, true} {
			resp := post(t, context.Background(), gw.URL, chatBody(model, stream, "x", ""), nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("%s: status 200", model)
			}
			texts = append(texts, string(b), fmt.Sprint(resp.Header), fmt.Sprint(resp.Trailer))
		}
	}
	resp, err := http.Get(gw.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	texts = append(texts, string(b))
	resp, err = http.Get(gw.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	texts = append(texts, string(b))
	waitFor(t, "the scrape failure to be logged", func() bool { return strings.Contains(logs.String(), "scrape failing") })
	assertNoSecrets(t, "a response", texts...)
	assertNoSecrets(t, "the log", logs.String())
	if !strings.Contains(logs.String(), "127.0.0.1:1") {
		t.Errorf("the log does not name the failing replica: %s", logs.String())
	}
}

// TestReplicaUserinfoIsBasicAuth: credentials in a replica's URL are sent
// as HTTP Basic authentication on every upstream request (completions,
// model lists, scrapes), and api_key wins over them.
func TestReplicaUserinfoIsBasicAuth(t *testing.T) {
	got := make(chan string, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.URL.Path + " " + r.Header.Get("Authorization"):
		default:
		}
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"data":[]}`)
		case "/metrics":
			fmt.Fprint(w, "vllm:num_requests_waiting 0\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":1}}`)
		}
	}))
	defer up.Close()
	u := strings.Replace(up.URL, "http://", "http://admin:"+secretPassword+"@", 1)
	g := mustGateway(t, fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\n", u))
	gw := startGateway(t, g)
	want := "Basic " + secretBasic
	if s, _, body := do(t, gw.URL, chatBody("m", false, "x", ""), nil); s != 200 {
		t.Fatalf("status %d: %s", s, body)
	}
	if a := <-got; a != chatPath+" "+want {
		t.Errorf("completion sent %q, want %q", a, want)
	}
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, modelsPath, nil))
	if a := <-got; a != modelsPath+" "+want {
		t.Errorf("model list sent %q, want %q", a, want)
	}
	if r := g.rt.Load().pools["p"].replicas[0]; strings.Contains(r.URL(), secretPassword) {
		t.Errorf("Replica.URL() = %q", r.URL())
	}
}
