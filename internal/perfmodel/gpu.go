package perfmodel

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/goccy/go-yaml"

	"github.com/tokentrace/tokentrace/internal/field"
)

// GPU is one accelerator's public figures. All rates are per GPU.
type GPU struct {
	Name string `json:"name"`
	// Family groups GPUs that share efficiency defaults ("ampere", "hopper",
	// "blackwell", "ada", "cdna3").
	Family string `json:"family"`
	// MemoryBytes is the device memory capacity.
	MemoryBytes int64 `json:"memory_bytes"`
	// HBMBandwidth is the peak device-memory bandwidth in bytes per second.
	HBMBandwidth float64 `json:"hbm_bandwidth"`
	// PeakFLOPS is the dense (not 2:4 sparse) tensor-core peak per precision
	// in operations per second. A precision the GPU lacks is absent.
	PeakFLOPS map[DType]float64 `json:"peak_flops"`
	// Interconnect names the link tensor parallelism uses ("nvlink4", "pcie4", ...).
	Interconnect string `json:"interconnect"`
	// InterconnectBW is the per-GPU, per-direction bandwidth of that link in
	// bytes per second.
	InterconnectBW float64 `json:"interconnect_bandwidth"`
	// CacheBytes and CacheBandwidth are the last-level cache a step's
	// weights and KV cache can stay in between steps, and its read
	// bandwidth in bytes per second: a step whose bytes per forward pass
	// fit in it reads them at CacheBandwidth instead of HBMBandwidth. Set
	// for a CPU device, whose L3 holds a small model (docs/perfmodel.md,
	// "A CPU as the device"); 0 for the GPU entries, whose models' weights
	// are many times their L2.
	CacheBytes     int64   `json:"cache_bytes,omitempty"`
	CacheBandwidth float64 `json:"cache_bandwidth,omitempty"`
	// Source names the public document the figures come from.
	Source  string   `json:"source"`
	Aliases []string `json:"-"`
}

// ComputeDType is the precision whose peak FLOPs a matmul with weights in w
// runs at: FP8 and INT8 weights use their own tensor-core rate when the GPU
// has it (W8A8), MXFP4 and NVFP4 the GPU's FP4 rate (Blackwell), and
// otherwise, like INT4 (weight-only W4A16), are dequantized and computed
// in 16-bit.
func (g GPU) ComputeDType(w DType) DType {
	switch w {
	case FP8, INT8:
		if g.PeakFLOPS[w] > 0 {
			return w
		}
	case MXFP4, NVFP4:
		if g.PeakFLOPS[NVFP4] > 0 {
			return NVFP4
		}
	case FP16:
		if g.PeakFLOPS[FP16] > 0 {
			return FP16
		}
	}
	return BF16
}

// gpuYAML is the catalog file's schema, in the units datasheets use.
type gpuYAML struct {
	Name       string   `yaml:"name"`
	Aliases    []string `yaml:"aliases"`
	Family     string   `yaml:"family"`
	MemoryGiB  float64  `yaml:"memory_gib"`
	HBMGBs     float64  `yaml:"hbm_gb_s"`
	BF16TFLOPS float64  `yaml:"bf16_tflops"`
	FP16TFLOPS float64  `yaml:"fp16_tflops"`
	FP8TFLOPS  float64  `yaml:"fp8_tflops"`
	INT8TOPS   float64  `yaml:"int8_tops"`
	// FP4TFLOPS is the dense FP4 tensor-core peak (MXFP4 and NVFP4
	// weights); 0 where the GPU has none.
	FP4TFLOPS       float64 `yaml:"fp4_tflops"`
	Interconnect    string  `yaml:"interconnect"`
	InterconnectGBs float64 `yaml:"interconnect_gb_s"`
	// CacheMiB and CacheGBs are the last-level cache and its read
	// bandwidth (GPU.CacheBytes, GPU.CacheBandwidth): both or neither.
	CacheMiB float64 `yaml:"cache_mib"`
	CacheGBs float64 `yaml:"cache_gb_s"`
	Source   string  `yaml:"source"`
}

func (y gpuYAML) gpu() (GPU, error) {
	if strings.TrimSpace(y.Name) == "" {
		return GPU{}, errors.New("a GPU entry has no name")
	}
	need := []struct {
		field string
		v     float64
	}{{"memory_gib", y.MemoryGiB}, {"hbm_gb_s", y.HBMGBs}, {"bf16_tflops", y.BF16TFLOPS}, {"interconnect_gb_s", y.InterconnectGBs}}
	for _, n := range need {
		if !(n.v > 0) {
			return GPU{}, fmt.Errorf("GPU %q: field %s must be > 0", y.Name, n.field)
		}
	}
	for _, v := range []float64{y.FP16TFLOPS, y.FP8TFLOPS, y.INT8TOPS, y.FP4TFLOPS} {
		if v < 0 {
			return GPU{}, fmt.Errorf("GPU %q: negative peak", y.Name)
		}
	}
	if y.CacheMiB < 0 || y.CacheGBs < 0 || (y.CacheMiB > 0) != (y.CacheGBs > 0) {
		return GPU{}, fmt.Errorf("GPU %q: cache_mib and cache_gb_s must both be > 0 or both absent", y.Name)
	}
	peak := map[DType]float64{BF16: y.BF16TFLOPS * 1e12}
	if y.FP16TFLOPS > 0 {
		peak[FP16] = y.FP16TFLOPS * 1e12
	}
	if y.FP8TFLOPS > 0 {
		peak[FP8] = y.FP8TFLOPS * 1e12
	}
	if y.INT8TOPS > 0 {
		peak[INT8] = y.INT8TOPS * 1e12
	}
	if y.FP4TFLOPS > 0 {
		peak[NVFP4] = y.FP4TFLOPS * 1e12
	}
	fam := y.Family
	if fam == "" {
		fam = "other"
	}
	return GPU{
		Name:           y.Name,
		Family:         strings.ToLower(fam),
		MemoryBytes:    int64(y.MemoryGiB * (1 << 30)),
		HBMBandwidth:   y.HBMGBs * 1e9,
		PeakFLOPS:      peak,
		Interconnect:   y.Interconnect,
		InterconnectBW: y.InterconnectGBs * 1e9,
		CacheBytes:     int64(y.CacheMiB * (1 << 20)),
		CacheBandwidth: y.CacheGBs * 1e9,
		Source:         y.Source,
		Aliases:        y.Aliases,
	}, nil
}

//go:embed gpus.yaml
var gpusYAML []byte

// ParseGPUCatalog reads a hardware catalog in the schema of the embedded
// gpus.yaml (a YAML list of GPUs with memory_gib, hbm_gb_s, bf16_tflops,
// fp16_tflops, fp8_tflops, int8_tops, interconnect_gb_s, source; a CPU
// device's cache_mib and cache_gb_s).
func ParseGPUCatalog(data []byte) ([]GPU, error) {
	var ys []gpuYAML
	if err := unmarshalYAML(data, &ys); err != nil {
		return nil, fmt.Errorf("GPU catalog: %w", err)
	}
	if len(ys) == 0 {
		return nil, errors.New("GPU catalog: no GPUs")
	}
	out := make([]GPU, 0, len(ys))
	for _, y := range ys {
		g, err := y.gpu()
		if err != nil {
			return nil, fmt.Errorf("GPU catalog: %w", err)
		}
		out = append(out, g)
	}
	return out, nil
}

// GPUCatalog is a set of GPUs looked up by name or alias, case- and
// separator-insensitively.
type GPUCatalog struct {
	gpus  []GPU
	index map[string]int
}

// NewGPUCatalog indexes gpus; a later GPU with the same name replaces an
// earlier one, which is how an override file wins over the built-in list.
func NewGPUCatalog(gpus ...[]GPU) *GPUCatalog {
	c := &GPUCatalog{index: map[string]int{}}
	pos := map[string]int{} // normalized name -> slot
	for _, list := range gpus {
		for _, g := range list {
			k := normName(g.Name)
			if i, ok := pos[k]; ok {
				c.gpus[i] = g
			} else {
				pos[k] = len(c.gpus)
				c.gpus = append(c.gpus, g)
			}
		}
	}
	for i, g := range c.gpus {
		for _, a := range g.Aliases {
			c.index[normName(a)] = i
		}
	}
	for i, g := range c.gpus { // names win over aliases
		c.index[normName(g.Name)] = i
	}
	return c
}

// Lookup finds a GPU by name or alias.
func (c *GPUCatalog) Lookup(name string) (GPU, error) {
	if i, ok := c.index[normName(name)]; ok {
		return c.gpus[i], nil
	}
	known := c.Names()
	return GPU{}, &UnknownNameError{Kind: "GPU", Name: name, Known: known, Nearest: nearest(name, known)}
}

// Names lists the catalog's GPU names in catalog order.
func (c *GPUCatalog) Names() []string {
	out := make([]string, len(c.gpus))
	for i, g := range c.gpus {
		out[i] = g.Name
	}
	return out
}

// GPUs returns the catalog's GPUs in catalog order.
func (c *GPUCatalog) GPUs() []GPU { return append([]GPU(nil), c.gpus...) }

var builtinGPUs = sync.OnceValues(func() (*GPUCatalog, error) {
	gs, err := ParseGPUCatalog(gpusYAML)
	if err != nil {
		return nil, err
	}
	return NewGPUCatalog(gs), nil
})

// BuiltinGPUs is the embedded hardware catalog.
func BuiltinGPUs() *GPUCatalog {
	c, err := builtinGPUs()
	if err != nil {
		panic("perfmodel: embedded gpus.yaml is invalid: " + err.Error()) // caught by TestBuiltinCatalogs
	}
	return c
}

// LookupGPU finds a GPU in the embedded catalog. An unknown name gives an
// *UnknownNameError listing the known names and the nearest one.
func LookupGPU(name string) (GPU, error) { return BuiltinGPUs().Lookup(name) }

// LoadGPUCatalogFile returns the embedded catalog extended (and overridden,
// name by name) by the GPUs in the YAML file at path.
func LoadGPUCatalogFile(path string) (*GPUCatalog, error) {
	data, err := field.ReadFile(path, 0)
	if err != nil {
		return nil, fmt.Errorf("GPU file: %w", err)
	}
	gs, err := ParseGPUCatalog(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return NewGPUCatalog(BuiltinGPUs().gpus, gs), nil
}

// unmarshalYAML decodes strictly (unknown fields are errors) and turns a
// panic inside the YAML decoder — go-yaml v1.19.2 panics on some malformed
// input, e.g. a tagged flow mapping where a list is expected — into an error.
func unmarshalYAML(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed YAML (decoder failed: %v)", r)
		}
	}()
	return yaml.UnmarshalWithOptions(data, v, yaml.DisallowUnknownField())
}
