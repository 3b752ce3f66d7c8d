package scrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func parseFile(t *testing.T, name string) Families {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fams, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// Each engine's exposition read with its names: sums over label sets,
// counters, the configuration, and what it lacks.
func TestReadEngines(t *testing.T) {
	tests := []struct {
		file   string
		engine string
		want   Sample
		config map[string]string
	}{
		{"vllm.txt", "vllm", Sample{Running: 5, Waiting: 7, KVUsage: 0.375, Preemptions: 12,
			PrefixQueries: 40000, PrefixHits: 36000,
			Has: []string{FigRunning, FigWaiting, FigKVUsage, FigPreemptions, FigPrefixCache}},
			map[string]string{"block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "False",
				"gpu_memory_utilization": "0.9", "num_gpu_blocks": "27000"}},
		{"sglang.txt", "sglang", Sample{Running: 162, Waiting: 2826, KVUsage: 0.28, Preemptions: 48, PrefixHitRate: 0.0075,
			Has: []string{FigRunning, FigWaiting, FigKVUsage, FigPreemptions, FigPrefixHitRate}},
			map[string]string{"max_prefill_tokens": "16384"}},
		{"tgi.txt", "tgi", Sample{Running: 4, Waiting: 7, Has: []string{FigRunning, FigWaiting}},
			map[string]string{"max_batch_total_tokens": "2048"}},
		{"llamacpp.txt", "llamacpp", Sample{PromptTokens: 36, GenerationTokens: 32, PromptSeconds: 0.2, GenerationSeconds: 0.277,
			Has: []string{FigRunning, FigWaiting, FigTokens, FigEngineTime}}, nil},
	}
	for _, tt := range tests {
		fams := parseFile(t, tt.file)
		e, ok := Detect(fams)
		if !ok || e.Name != tt.engine {
			t.Fatalf("%s: detected %q (%v), want %s", tt.file, e.Name, ok, tt.engine)
		}
		if diff := cmp.Diff(tt.want, e.Read(fams)); diff != "" {
			t.Errorf("%s: sample (-want +got):\n%s", tt.file, diff)
		}
		if tt.engine == "llamacpp" {
			want := []string{"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:prompt_seconds_total", "llamacpp:tokens_predicted_seconds_total"}
			if diff := cmp.Diff(want, e.TokenCounters(fams)); diff != "" {
				t.Errorf("token counters (-want +got):\n%s", diff)
			}
		}
		if diff := cmp.Diff(tt.config, e.Config(fams)); diff != "" {
			t.Errorf("%s: config (-want +got):\n%s", tt.file, diff)
		}
	}
}

func TestDetectTokentraceServe(t *testing.T) {
	text := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running 1
# TYPE tokentrace:scheduler_config_info gauge
tokentrace:scheduler_config_info{enable_chunked_prefill="true",max_num_batched_tokens="8192"} 1
`
	fams, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	e, ok := Detect(fams)
	if !ok || e.Name != "tokentrace" {
		t.Fatalf("detected %q, want tokentrace", e.Name)
	}
	want := map[string]string{"enable_chunked_prefill": "true", "max_num_batched_tokens": "8192"}
	if diff := cmp.Diff(want, e.Config(fams)); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if _, ok := Detect(Families{}); ok {
		t.Error("an empty exposition names an engine")
	}
}

func TestSum(t *testing.T) {
	text := `# TYPE a gauge
a{x="1"} 3
a{x="2"} 4
a_other 100
# TYPE c_total counter
c_total 5
# TYPE old counter
old 9
h_bucket{le="1"} 1
`
	fams, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		want float64
		ok   bool
	}{{"a", 7, true}, {"c_total", 5, true}, {"old_total", 9, true}, {"missing", 0, false}} {
		if v, ok := fams.Sum(tt.name); v != tt.want || ok != tt.ok {
			t.Errorf("Sum(%s) = %v, %v; want %v, %v", tt.name, v, ok, tt.want, tt.ok)
		}
	}
	if v, ok := fams.First([]string{"missing", "a"}); v != 7 || !ok {
		t.Errorf("First = %v, %v", v, ok)
	}
}

// TestHistogram: counts and sums add over label sets (2 + 3 samples,
// 0.5 + 1.25 s); a gauge or a missing name is no histogram.
func TestHistogram(t *testing.T) {
	text := `# TYPE h histogram
h_bucket{p="a",le="1"} 2
h_bucket{p="a",le="+Inf"} 2
h_sum{p="a"} 0.5
h_count{p="a"} 2
h_bucket{p="b",le="1"} 1
h_bucket{p="b",le="+Inf"} 3
h_sum{p="b"} 1.25
h_count{p="b"} 3
# TYPE g gauge
g 1
`
	fams, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if n, sum, ok := fams.Histogram("h"); n != 5 || sum != 1.75 || !ok {
		t.Errorf("Histogram(h) = %d, %v, %v; want 5, 1.75, true", n, sum, ok)
	}
	for _, name := range []string{"g", "missing"} {
		if n, sum, ok := fams.Histogram(name); n != 0 || sum != 0 || ok {
			t.Errorf("Histogram(%s) = %d, %v, %v; want none", name, n, sum, ok)
		}
	}
}

func TestParseRejectsBadValues(t *testing.T) {
	for _, text := range []string{"vllm:num_requests_waiting{a=\"b\"} x\n", "a{x=\"1\" 3\n", "# TYPE a gauge\n# TYPE a counter\n"} {
		if _, err := Parse(strings.NewReader(text)); err == nil {
			t.Errorf("%q parsed", text)
		}
	}
}

func TestMetricsURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:8000":           "http://h:8000/metrics",
		"http://h:8000/":          "http://h:8000/metrics",
		"http://h:8000/v1":        "http://h:8000/metrics",
		"https://h/api/v1/":       "https://h/api/metrics",
		"http://u:p@h:1/v1?x=1#y": "http://u:p@h:1/metrics",
	} {
		if got, err := MetricsURL(in); err != nil || got != want {
			t.Errorf("MetricsURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "h:8000", "ftp://h/", "http://"} {
		if _, err := MetricsURL(bad); err == nil {
			t.Errorf("MetricsURL(%q) accepted", bad)
		}
	}
}

// Get sends the given headers, parses a 200 and names any other status;
// its errors never carry the URL (which may hold credentials).
func TestGet(t *testing.T) {
	body, _ := os.ReadFile("testdata/vllm.txt")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://user:secret@", 1) + "/metrics"
	fams, err := Get(context.Background(), srv.Client(), u, http.Header{"Authorization": {"Bearer k"}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := fams.Sum("vllm:num_requests_running"); v != 5 {
		t.Errorf("running %v", v)
	}
	_, err = Get(context.Background(), srv.Client(), u, nil)
	if err == nil || !strings.Contains(err.Error(), "status 401") || strings.Contains(err.Error(), "secret") {
		t.Errorf("err = %v, want status 401 without the URL", err)
	}
	srv.Close()
	_, err = Get(context.Background(), http.DefaultClient, u, nil)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("err = %v, want an error without the URL", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"vllm.txt", "sglang.txt", "tgi.txt", "llamacpp.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("a{x=\"\\\"\"} NaN\n")
	f.Fuzz(func(t *testing.T, text string) {
		fams, err := Parse(strings.NewReader(text))
		if err != nil {
			return
		}
		for _, e := range Engines {
			s := e.Read(fams)
			_ = e.Config(fams)
			if len(s.Has) > 8 {
				t.Fatalf("%d figures", len(s.Has))
			}
		}
		Detect(fams)
	})
}
