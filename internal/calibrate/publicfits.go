package calibrate

import (
	"fmt"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// PublicFit is one group's constants fitted on the fit half of the public
// rows (FitPublic), as kept in internal/perfmodel/testdata/loaded-fits.yaml.
type PublicFit struct {
	Group              string  `yaml:"group"`
	FitRows            int     `yaml:"fit_rows"`
	Evaluations        int     `yaml:"evaluations"`
	Compute            float64 `yaml:"compute"`
	Memory             float64 `yaml:"memory"`
	Interconnect       float64 `yaml:"interconnect"`
	StepOverheadUS     float64 `yaml:"step_overhead_us"`
	LayerOverheadUS    float64 `yaml:"layer_overhead_us"`
	SeqOverheadUS      float64 `yaml:"seq_overhead_us"`
	AllReduceLatencyUS float64 `yaml:"all_reduce_latency_us"`
}

// NewPublicFit records eff as group's fit.
func NewPublicFit(group string, rows, evals int, eff perfmodel.Efficiency) PublicFit {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return PublicFit{Group: group, FitRows: rows, Evaluations: evals, Compute: eff.Compute, Memory: eff.Memory, Interconnect: eff.Interconnect,
		StepOverheadUS: us(eff.StepOverhead), LayerOverheadUS: us(eff.LayerOverhead), SeqOverheadUS: us(eff.SeqOverhead), AllReduceLatencyUS: us(eff.AllReduceLatency)}
}

// Efficiency is the fit as the model's constants.
func (f PublicFit) Efficiency() perfmodel.Efficiency {
	d := func(us float64) time.Duration { return time.Duration(us * 1e3) }
	return perfmodel.Efficiency{Compute: f.Compute, Memory: f.Memory, Interconnect: f.Interconnect, StepOverhead: d(f.StepOverheadUS),
		LayerOverhead: d(f.LayerOverheadUS), SeqOverhead: d(f.SeqOverheadUS), AllReduceLatency: d(f.AllReduceLatencyUS)}
}

// PublicFits is the file of every group's fit.
type PublicFits struct {
	Groups []PublicFit `yaml:"groups"`
}

// LoadPublicFits reads the fits file (strict: an unknown key is an error).
func LoadPublicFits(path string) (*PublicFits, error) {
	data, err := field.ReadFile(path, 0)
	if err != nil {
		return nil, err
	}
	var f PublicFits
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, g := range f.Groups {
		if err := g.Efficiency().Validate(); err != nil {
			return nil, fmt.Errorf("%s: group %s: %w", path, g.Group, err)
		}
	}
	return &f, nil
}

// For returns the fit of group.
func (f *PublicFits) For(group string) (PublicFit, bool) {
	for _, g := range f.Groups {
		if g.Group == group {
			return g, true
		}
	}
	return PublicFit{}, false
}
