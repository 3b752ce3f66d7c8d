package perfmodel

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/tokentrace/tokentrace/internal/field"
)

// ProfileSchema is the version of the profile file format.
const ProfileSchema = 1

// Profile is a set of performance-model constants fitted to one server
// (`tokentrace calibrate`): the model, GPU, TP and precisions it holds for,
// each constant with its confidence interval, the range of batch sizes and
// lengths it was fitted on, and the fit's residuals. serve, simulate,
// estimate and bench --sim-* load it with --profile.
type Profile struct {
	Schema int    `yaml:"schema"`
	Model  string `yaml:"model"`
	GPU    string `yaml:"gpu"`
	// GPUFile is the hardware catalog the GPU came from when it is not a
	// built-in one (calibrate's --gpu-file), so the profile carries it.
	GPUFile       string `yaml:"gpu_file,omitempty"`
	TP            int    `yaml:"tp"`
	DType         string `yaml:"dtype"`
	KVDType       string `yaml:"kv_dtype"`
	Engine        string `yaml:"engine,omitempty"`
	EngineVersion string `yaml:"engine_version,omitempty"`
	// Source names what the constants were fitted on (a results folder).
	Source   string `yaml:"source,omitempty"`
	Requests int    `yaml:"requests,omitempty"`
	// Scheduler is the scheduler the records were replayed with
	// (max_num_seqs, max_num_batched_tokens, enable_prefix_caching,
	// enable_chunked_prefill, by vLLM's names): a twin takes them where
	// the server's evidence does not say. Absent from older profiles.
	Scheduler map[string]string `yaml:"scheduler,omitempty"`

	Constants ProfileConstants `yaml:"constants"`
	Range     FitRange         `yaml:"range"`
	// Residuals are the fit's relative errors (simulated − measured) /
	// measured per metric ("ttft", "tpot", "e2e") at P50, P90 and P99 of
	// their absolute values.
	Residuals map[string]Residual `yaml:"residuals,omitempty"`
}

// ProfileConstants are the performance model's constants (Efficiency's
// fields), fractions as fractions and durations in microseconds.
type ProfileConstants struct {
	Compute            Constant `yaml:"compute"`
	Memory             Constant `yaml:"memory"`
	Interconnect       Constant `yaml:"interconnect"`
	AllReduceLatencyUS Constant `yaml:"all_reduce_latency_us"`
	StepOverheadUS     Constant `yaml:"step_overhead_us"`
	LayerOverheadUS    Constant `yaml:"layer_overhead_us"`
	// SeqOverheadUS is absent from profiles written before it existed
	// (then 0: no per-sequence cost).
	SeqOverheadUS Constant `yaml:"seq_overhead_us"`
	// RingStepUS (Efficiency.RingStep) is absent from profiles that hold
	// none (then 0: the link's NCCL figure).
	RingStepUS Constant `yaml:"ring_step_us,omitempty"`
	// ContextOverheadNS (Efficiency.ContextOverheadNS) is absent from
	// profiles that hold none (then 0).
	ContextOverheadNS Constant `yaml:"context_overhead_ns,omitempty"`
}

// Constant is one fitted (or held) value with its confidence interval.
type Constant struct {
	Value float64 `yaml:"value"`
	// Low and High bound the confidence interval (equal to Value when the
	// constant was held, not fitted).
	Low  float64 `yaml:"low"`
	High float64 `yaml:"high"`
	// Fitted is false for a constant held at its starting value (one the
	// data cannot separate from another, e.g. layer overhead from step
	// overhead for one model).
	Fitted bool `yaml:"fitted"`
}

// FitRange is the span of workloads a profile was fitted on.
type FitRange struct {
	BatchMin  int `yaml:"batch_min"`
	BatchMax  int `yaml:"batch_max"`
	InputMin  int `yaml:"input_min"`
	InputMax  int `yaml:"input_max"`
	OutputMin int `yaml:"output_min"`
	OutputMax int `yaml:"output_max"`
}

// Residual is a metric's absolute relative error at three percentiles.
type Residual struct {
	P50 float64 `yaml:"p50"`
	P90 float64 `yaml:"p90"`
	P99 float64 `yaml:"p99"`
}

// held is a constant not fitted: its interval is the value itself.
func held(v float64) Constant { return Constant{Value: v, Low: v, High: v} }

// ProfileFromEfficiency returns the constants of eff, every one held.
func ProfileFromEfficiency(eff Efficiency) ProfileConstants {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return ProfileConstants{
		Compute: held(eff.Compute), Memory: held(eff.Memory), Interconnect: held(eff.Interconnect),
		AllReduceLatencyUS: held(us(eff.AllReduceLatency)), StepOverheadUS: held(us(eff.StepOverhead)),
		LayerOverheadUS: held(us(eff.LayerOverhead)), SeqOverheadUS: held(us(eff.SeqOverhead)),
		RingStepUS: held(us(eff.RingStep)), ContextOverheadNS: held(eff.ContextOverheadNS),
	}
}

// Efficiency returns the profile's constants as the model's factors.
func (c ProfileConstants) Efficiency() Efficiency {
	d := func(us float64) time.Duration { return time.Duration(math.Round(us * 1e3)) }
	return Efficiency{
		Compute: c.Compute.Value, Memory: c.Memory.Value, Interconnect: c.Interconnect.Value,
		AllReduceLatency: d(c.AllReduceLatencyUS.Value), StepOverhead: d(c.StepOverheadUS.Value),
		LayerOverhead: d(c.LayerOverheadUS.Value), SeqOverhead: d(c.SeqOverheadUS.Value),
		RingStep: d(c.RingStepUS.Value), ContextOverheadNS: c.ContextOverheadNS.Value,
	}
}

// Efficiency is the profile's constants as the model's factors.
func (p *Profile) Efficiency() Efficiency { return p.Constants.Efficiency() }

// Validate reports the first field that makes the profile unusable.
func (p *Profile) Validate() error {
	switch {
	case p.Schema != ProfileSchema:
		return fmt.Errorf("profile: schema %d is not %d (written by another version of tokentrace)", p.Schema, ProfileSchema)
	case p.Model == "":
		return errors.New("profile: no model")
	case p.GPU == "":
		return errors.New("profile: no gpu")
	case p.TP < 1:
		return fmt.Errorf("profile: tp must be ≥ 1 (got %d)", p.TP)
	}
	for _, d := range []struct{ name, v string }{{"dtype", p.DType}, {"kv_dtype", p.KVDType}} {
		if _, err := ParseDType(d.v); err != nil {
			return fmt.Errorf("profile: %s: %w", d.name, err)
		}
	}
	if err := p.Efficiency().Validate(); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	r := p.Range
	if r.BatchMin < 1 || r.BatchMax < r.BatchMin || r.InputMin < 1 || r.InputMax < r.InputMin || r.OutputMin < 1 || r.OutputMax < r.OutputMin {
		return fmt.Errorf("profile: range %+v is not a range of batch sizes ≥ 1 and lengths ≥ 1", r)
	}
	return nil
}

// Matches reports, as an error naming the difference, whether the profile
// was fitted for this model, GPU, TP and precisions: constants fitted on
// one configuration say nothing reliable about another.
func (p *Profile) Matches(model ModelSpec, gpu GPU, tp int, wd, kd DType) error {
	pm, err := ResolveModel(p.Model)
	if err != nil {
		pm = ModelSpec{Name: p.Model}
	}
	pwd, _ := ParseDType(p.DType)
	pkd, _ := ParseDType(p.KVDType)
	var diffs []string
	if !strings.EqualFold(pm.Name, model.Name) {
		diffs = append(diffs, fmt.Sprintf("model %s, not %s", p.Model, model.Name))
	}
	if !strings.EqualFold(p.GPU, gpu.Name) {
		diffs = append(diffs, fmt.Sprintf("GPU %s, not %s", p.GPU, gpu.Name))
	}
	if p.TP != max(tp, 1) {
		diffs = append(diffs, fmt.Sprintf("TP %d, not %d", p.TP, max(tp, 1)))
	}
	if orDType(wd, BF16) != pwd {
		diffs = append(diffs, fmt.Sprintf("weights %s, not %s", pwd, orDType(wd, BF16)))
	}
	if orDType(kd, BF16) != pkd {
		diffs = append(diffs, fmt.Sprintf("KV cache %s, not %s", pkd, orDType(kd, BF16)))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("profile is for %s", strings.Join(diffs, ", "))
	}
	return nil
}

func orDType(d, def DType) DType {
	if d == "" {
		return def
	}
	return d
}

// OutOfRange says, one phrase per dimension, where a workload of batch
// concurrent requests of input and output tokens lies outside the range the
// profile was fitted on; nil when inside.
func (p *Profile) OutOfRange(batch, input, output int) []string {
	r := p.Range
	var out []string
	check := func(what string, v, lo, hi int) {
		if v < lo || v > hi {
			out = append(out, fmt.Sprintf("%s %d is outside the fitted %d–%d", what, v, lo, hi))
		}
	}
	check("batch", batch, r.BatchMin, r.BatchMax)
	check("input", input, r.InputMin, r.InputMax)
	check("output", output, r.OutputMin, r.OutputMax)
	return out
}

// LoadProfile reads and validates a profile file. An unknown key is an
// error (a typo would otherwise silently keep a default).
func LoadProfile(path string) (*Profile, error) {
	data, err := field.ReadFile(path, 0)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	var p Profile
	if err := yaml.UnmarshalWithOptions(data, &p, yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("profile %s: %s", path, firstLine(err.Error()))
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &p, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// WriteFile writes the profile to path atomically (a temporary file in the
// same folder, then a rename), so a failed write leaves nothing half-written.
func (p *Profile) WriteFile(path string) error {
	if err := p.Validate(); err != nil {
		return err
	}
	data, err := yaml.Marshal(p)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	var b bytes.Buffer
	b.WriteString("# tokentrace performance profile (tokentrace calibrate); load with --profile\n")
	b.Write(data)
	f, err := os.CreateTemp(filepath.Dir(path), ".profile-*.yaml")
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	tmp := f.Name()
	// On failure the temporary file goes (best effort) and the first
	// error is the one reported; path is untouched.
	if _, err := f.Write(b.Bytes()); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("profile: %w", err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("profile: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("profile: %w", err)
	}
	return nil
}
