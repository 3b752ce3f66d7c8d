package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is one parsed exposition, by metric family name.
type Families map[string]*dto.MetricFamily

// Parse reads a Prometheus text exposition (format 0.0.4). Names may use
// any UTF-8 (vLLM's and SGLang's carry colons).
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics exposition: %w", err)
	}
	return Families(fams), nil
}

// value is a series' value: a gauge's, a counter's or an untyped one's;
// ok is false for histograms and summaries.
func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// Sum is the sum over label sets of the named gauge, counter or untyped
// metric; ok is false when the exposition has no such series. A counter
// is also found under its name without "_total" (older exporters declare
// the family so).
func (f Families) Sum(name string) (sum float64, ok bool) {
	for _, n := range []string{name, strings.TrimSuffix(name, "_total")} {
		fam := f[n]
		if fam == nil {
			continue
		}
		for _, m := range fam.Metric {
			if v, isValue := value(m); isValue && !math.IsNaN(v) {
				sum += v
				ok = true
			}
		}
		if ok {
			return sum, true
		}
	}
	return 0, false
}

// Histogram is the sample count and sum of the named histogram over its
// label sets; ok is false when the exposition has no such histogram.
func (f Families) Histogram(name string) (count uint64, sum float64, ok bool) {
	fam := f[name]
	if fam == nil {
		return 0, 0, false
	}
	for _, m := range fam.Metric {
		if h := m.GetHistogram(); h != nil {
			count += h.GetSampleCount()
			sum += h.GetSampleSum()
			ok = true
		}
	}
	return count, sum, ok
}

// First is the sum of the first of names the exposition has.
func (f Families) First(names []string) (v float64, ok bool) {
	for _, n := range names {
		if v, ok := f.Sum(n); ok {
			return v, true
		}
	}
	return 0, false
}

// Labels returns the labels of the named metric's first series (an info
// metric such as vllm:cache_config_info), or nil.
func (f Families) Labels(name string) map[string]string {
	fam := f[name]
	if fam == nil || len(fam.Metric) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, lp := range fam.Metric[0].Label {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// UpstreamMetricsPath is where a tokentrace gateway answers its engines'
// own /metrics (each series labelled by replica).
const UpstreamMetricsPath = "/upstream/metrics"

// MetricsURL is the /metrics address of a server whose API base URL is
// base (with or without the trailing /v1).
func MetricsURL(base string) (string, error) {
	u, err := RootURL(base, "/metrics")
	if err != nil {
		return "", fmt.Errorf("metrics: %w", err)
	}
	return u, nil
}

// RootURL is path at the root of a server whose API base URL is base
// (with or without the trailing /v1): its /metrics, llama-server's /props,
// an engine's admin endpoints.
func RootURL(base, path string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", errors.New("base URL is not http(s)://host[:port][/path]")
	}
	p := strings.TrimSuffix(u.Path, "/")
	p = strings.TrimSuffix(p, "/v1")
	u.Path, u.RawQuery, u.Fragment = p+path, "", ""
	return u.String(), nil
}

// MaxBytes bounds what Get reads of an exposition.
const MaxBytes = 8 << 20

// Get fetches and parses the exposition at metricsURL (see MetricsURL),
// sending header with the request. A status other than 200 is an error
// that names it. The URL is never part of an error (it may carry
// credentials); the caller names the target.
func Get(ctx context.Context, client *http.Client, metricsURL string, header http.Header) (Families, error) {
	body, err := get(ctx, client, metricsURL, "/metrics", "text/plain;version=0.0.4", header)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return Parse(io.LimitReader(body, MaxBytes))
}

// get GETs u (the server's path) with header, and Accept when not "",
// and returns the body of a 200 answer for the caller to close. Errors
// name path, never the URL.
func get(ctx context.Context, client *http.Client, u, path, accept string, header http.Header) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s request: %w", strings.TrimPrefix(path, "/"), reason(err))
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, reason(err))
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		return nil, fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return resp.Body, nil
}

// reason drops the *url.Error wrapper, whose message quotes the URL,
// keeping its reason.
func reason(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
