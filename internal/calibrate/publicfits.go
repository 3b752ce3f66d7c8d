package calibrate

import (
	"fmt"

	"github.com/goccy/go-yaml"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// PublicFit is one group's constants fitted on the fit half of the public
// rows (FitPublic), as kept in internal/perfmodel/testdata/loaded-fits.yaml.
type PublicFit struct {
	Group       string `yaml:"group"`
	FitRows     int    `yaml:"fit_rows"`
	Evaluations int    `yaml:"evaluations"`
	// Fitted names the constants a per-deployment fit moved from its
	// group's fit (FitDeployment), CVLoss each candidate's
	// leave-one-sweep-out loss; both empty for a group's fit, which moves
	// every constant of publicFitted.
	Fitted              []string  `yaml:"fitted,omitempty"`
	CVLoss              []float64 `yaml:"cv_loss,omitempty"`
	perfmodel.Constants `yaml:",inline"`
}

// NewPublicFit records eff as group's fit.
func NewPublicFit(group string, rows, evals int, eff perfmodel.Efficiency) PublicFit {
	return PublicFit{Group: group, FitRows: rows, Evaluations: evals, Constants: perfmodel.ConstantsOf(eff)}
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
