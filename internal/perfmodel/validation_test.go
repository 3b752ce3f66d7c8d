package perfmodel

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// measurement is one published number (testdata/measurements.yaml).
type measurement struct {
	ID      string  `yaml:"id"`
	Metric  string  `yaml:"metric"`
	Model   string  `yaml:"model"`
	GPU     string  `yaml:"gpu"`
	TP      int     `yaml:"tp"`
	DType   string  `yaml:"dtype"`
	KVDType string  `yaml:"kv_dtype"`
	Engine  string  `yaml:"engine"`
	Input   int     `yaml:"input"`
	Output  int     `yaml:"output"`
	Batch   int     `yaml:"batch"`
	Value   float64 `yaml:"value"`
	Source  string  `yaml:"source"`
	// MissReason explains a row the defaults miss by more than 30 %.
	MissReason string `yaml:"miss_reason"`
	// StaticSession marks a row measured by a bare static-batch session
	// (TensorRT-LLM's gptSessionBenchmark, TurboMind's profile_generation):
	// no in-flight batching loop and no per-request sampling, bookkeeping or
	// streamed response, so no per-sequence overhead (SeqOverhead 0).
	StaticSession bool `yaml:"static_session"`
}

func loadMeasurements(t *testing.T) []measurement {
	t.Helper()
	data, err := os.ReadFile("testdata/measurements.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ms []measurement
	if err := yaml.UnmarshalWithOptions(data, &ms, yaml.DisallowUnknownField()); err != nil {
		t.Fatal(err)
	}
	return ms
}

// predict returns the model's value for m with the default efficiencies.
func predict(m measurement) (float64, error) {
	model, err := LookupModel(m.Model)
	if err != nil {
		return 0, err
	}
	gpu, err := LookupGPU(m.GPU)
	if err != nil {
		return 0, err
	}
	wd, err := ParseDType(m.DType)
	if err != nil {
		return 0, err
	}
	kd, err := ParseDType(m.KVDType)
	if err != nil {
		return 0, err
	}
	eff := DefaultEfficiency(gpu)
	if m.StaticSession {
		eff.SeqOverhead = 0
	}
	e, err := New(Config{Model: model, GPU: gpu, TP: m.TP, WeightDType: wd, KVDType: kd, Eff: eff})
	if err != nil {
		return 0, err
	}
	ms := func(d interface{ Seconds() float64 }) float64 { return d.Seconds() * 1e3 }
	switch m.Metric {
	case "ttft":
		return ms(e.PrefillStep(m.Input).Total), nil
	case "tpot":
		return ms(e.TPOT(m.Batch, m.Input, m.Output)), nil
	case "e2e":
		return ms(e.StaticBatchTime(m.Batch, m.Input, m.Output)), nil
	case "throughput":
		return float64(m.Batch*m.Output) / e.StaticBatchTime(m.Batch, m.Input, m.Output).Seconds(), nil
	}
	return 0, fmt.Errorf("unknown metric %q", m.Metric)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Bounds the defaults must stay within. The aims are TPOT ≤ 15 % and TTFT
// ≤ 25 % median absolute error; the bounds leave a little room so that an
// honest improvement elsewhere does not fail the build, while a drift does.
const (
	boundDecodeMedian = 0.15 // tpot, e2e and throughput rows (decode-dominated)
	boundTTFTMedian   = 0.25
	// boundRow: a row missed by more than this must carry a miss_reason
	// (which docs/performance.md repeats); boundExplained caps even those.
	boundRow       = 0.30
	boundExplained = 1.00
)

func TestValidation(t *testing.T) {
	ms := loadMeasurements(t)
	if len(ms) < 12 {
		t.Fatalf("%d measurements, want ≥ 12", len(ms))
	}
	var decode, ttft []float64
	var report strings.Builder
	fmt.Fprintf(&report, "\n%-34s %-10s %10s %10s %8s\n", "row", "metric", "measured", "model", "error")
	for _, m := range ms {
		if m.Source == "" || !strings.HasPrefix(m.Source, "https://") {
			t.Errorf("%s: no source URL", m.ID)
		}
		got, err := predict(m)
		if err != nil {
			t.Errorf("%s: %v", m.ID, err)
			continue
		}
		e := (got - m.Value) / m.Value
		fmt.Fprintf(&report, "%-34s %-10s %10.1f %10.1f %+7.1f%%\n", m.ID, m.Metric, m.Value, got, 100*e)
		if m.Metric == "ttft" {
			ttft = append(ttft, math.Abs(e))
		} else {
			decode = append(decode, math.Abs(e))
		}
		if math.Abs(e) > boundRow && m.MissReason == "" {
			t.Errorf("%s: model %.1f vs measured %.1f (%+.0f%%) is past the %.0f%% bound and has no miss_reason", m.ID, got, m.Value, 100*e, 100*boundRow)
		}
		if math.Abs(e) > boundExplained {
			t.Errorf("%s: model %.1f vs measured %.1f (%+.0f%%) is past the %.0f%% bound", m.ID, got, m.Value, 100*e, 100*boundExplained)
		}
	}
	md, mt := median(decode), median(ttft)
	fmt.Fprintf(&report, "median |error|: decode (tpot/e2e/throughput, %d rows) %.1f%%, unloaded TTFT (%d rows) %.1f%%\n", len(decode), 100*md, len(ttft), 100*mt)
	t.Log(report.String())
	if md > boundDecodeMedian {
		t.Errorf("median decode error %.1f%% > %.0f%%", 100*md, 100*boundDecodeMedian)
	}
	if mt > boundTTFTMedian {
		t.Errorf("median TTFT error %.1f%% > %.0f%%", 100*mt, 100*boundTTFTMedian)
	}
}
