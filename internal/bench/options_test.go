package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/workload"
)

func cfgOf(t *testing.T, mod func(*Options), set ...string) (Config, error) {
	t.Helper()
	o := DefaultOptions()
	if mod != nil {
		mod(&o)
	}
	changed := func(name string) bool {
		for _, s := range set {
			if s == name {
				return true
			}
		}
		return false
	}
	return o.Config(changed, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

func TestOptionsDefaults(t *testing.T) {
	c, err := cfgOf(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := []any{c.Target.BaseURL, c.Target.IgnoreEOS, c.Target.ContinuousUsage, c.Load.Rate, c.Load.Requests, c.Load.Arrival, c.OutDir}
	want := []any{"", true, true, float64(workload.DefaultRate), workload.DefaultRequests, workload.Poisson, filepath.Join("results", "20260102-030405")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("embedded defaults (-want +got):\n%s", diff)
	}
	// A real server gets neither extension unless asked.
	c, err = cfgOf(t, func(o *Options) { o.URL = "http://h:8000"; o.Workload.Concurrency = 4 }, "url", "concurrency")
	if err != nil {
		t.Fatal(err)
	}
	if c.Target.IgnoreEOS || c.Target.ContinuousUsage || c.Load.Rate != 0 || c.Load.Concurrency != 4 {
		t.Errorf("external target %+v load %+v", c.Target, c.Load)
	}
	t.Setenv("OPENAI_API_KEY", "sk-env")
	c, _ = cfgOf(t, func(o *Options) { o.Headers = []string{"X-A: 1", "X-A: 2"}; o.Workload.Warmup = "5s" })
	if c.Target.APIKey != "sk-env" || !cmp.Equal(c.Target.Headers["X-A"], []string{"1", "2"}) || c.Load.WarmupDuration != 5*time.Second {
		t.Errorf("key %q headers %v warm-up %s", c.Target.APIKey, c.Target.Headers, c.Load.WarmupDuration)
	}
}

func TestOptionsTraceAndPrompts(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(trace, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,2\n1.5,20,3\n3,30,4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := cfgOf(t, func(o *Options) { o.Workload.Trace = trace; o.Workload.TimeScale = 2 })
	if err != nil {
		t.Fatal(err)
	}
	if c.Load.Requests != 3 || c.Load.Arrivals == nil {
		t.Fatalf("trace load %+v", c.Load)
	}
	a := c.Load.Arrivals()
	var at []time.Duration
	for x, ok := a.Next(); ok; x, ok = a.Next() {
		at = append(at, x)
	}
	if diff := cmp.Diff([]time.Duration{0, 3 * time.Second, 6 * time.Second}, at); diff != "" {
		t.Errorf("arrivals (-want +got):\n%s", diff)
	}
	for _, given := range []string{"rate", "sweep"} {
		_, err := cfgOf(t, func(o *Options) { o.Workload.Trace = trace; o.Workload.Rate = 5; o.Sweep = "1,2" }, given)
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Field != "trace" || !slices.Contains(fe.Refs, given) {
			t.Errorf("a trace with a %s: err %v, want a field error about trace naming %s", given, err, given)
		}
	}
	prompts := filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(prompts, []byte(`{"prompt":"a b c","max_tokens":7}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = cfgOf(t, func(o *Options) { o.Workload.Prompts = prompts })
	if err != nil {
		t.Fatal(err)
	}
	r, _ := c.Workload.Session(0).Next(0)
	if r.MaxTokens != 7 || r.InputTokens != 4 {
		t.Errorf("prompt request %+v", r)
	}
}

func TestMeasureClientFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a loopback server")
	}
	c, err := MeasureClientFloor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Requests != 200 || c.Errors != 0 || c.TTFTErrP50MS < 0 || c.TTFTErrP50MS > c.TTFTErrP99MS || c.FloorMS != c.TTFTErrP50MS {
		t.Errorf("%+v", c)
	}
}
