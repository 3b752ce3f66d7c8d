package perfmodel

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
)

// Price is one GPU's on-demand price per GPU-hour, with where it comes from.
type Price struct {
	GPU           string  `yaml:"gpu" json:"gpu"`
	USDPerGPUHour float64 `yaml:"usd_per_gpu_hour" json:"usd_per_gpu_hour"`
	// Basis says what was priced (provider, instance, region).
	Basis string `yaml:"basis" json:"basis,omitempty"`
	// Source is the public page the figure was read from.
	Source string `yaml:"source" json:"source,omitempty"`
	// AsOf is the date of the figure, YYYY-MM-DD.
	AsOf string `yaml:"as_of" json:"as_of,omitempty"`
}

// priceFile is the price table's schema (prices.yaml and --prices files).
type priceFile struct {
	Date     string  `yaml:"date"`
	Currency string  `yaml:"currency"`
	Prices   []Price `yaml:"prices"`
}

// Prices is a price table: a Price per GPU of a catalog.
type Prices struct {
	// Date is the table's date (the built-in table's compilation date, or
	// an override file's date when it gives one).
	Date string
	// Files lists the override files applied over the built-in table.
	Files []string
	by    map[string]Price // normName(catalog name) -> price
	cat   *GPUCatalog      // resolves aliases
}

//go:embed prices.yaml
var pricesYAML []byte

var builtinPrices = sync.OnceValues(func() (*Prices, error) {
	return parsePrices(pricesYAML, BuiltinGPUs(), &Prices{by: map[string]Price{}})
})

// BuiltinPrices is the embedded price table (prices.yaml).
func BuiltinPrices() *Prices {
	p, err := builtinPrices()
	if err != nil {
		panic("perfmodel: embedded prices.yaml is invalid: " + err.Error()) // caught by TestBuiltinPrices
	}
	return p
}

// LoadPrices is the built-in price table with the entries of the YAML file
// at path (prices.yaml's schema) replacing the built-in ones GPU by GPU. Keys
// are strict; a GPU that cat does not know, a price that is not a positive
// number, a date that is not YYYY-MM-DD or a currency other than USD is an
// error naming the file. An empty path gives the built-in table.
func LoadPrices(path string, cat *GPUCatalog) (*Prices, error) {
	base := BuiltinPrices()
	if path == "" {
		return base, nil
	}
	data, err := field.ReadFile(path, 0)
	if err != nil {
		return nil, fmt.Errorf("price file: %w", err)
	}
	if cat == nil {
		cat = BuiltinGPUs()
	}
	out := &Prices{Date: base.Date, Files: append(append([]string(nil), base.Files...), path), by: map[string]Price{}}
	for k, v := range base.by {
		out.by[k] = v
	}
	if _, err := parsePrices(data, cat, out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// parsePrices decodes a price table into into, naming GPUs by cat.
func parsePrices(data []byte, cat *GPUCatalog, into *Prices) (*Prices, error) {
	var f priceFile
	if err := unmarshalYAML(data, &f); err != nil {
		return nil, fmt.Errorf("price table: %w", err)
	}
	if f.Currency != "" && !strings.EqualFold(f.Currency, "USD") {
		return nil, fmt.Errorf("price table: currency %q: only USD is supported", f.Currency)
	}
	if f.Date != "" {
		if _, err := time.Parse(time.DateOnly, f.Date); err != nil {
			return nil, fmt.Errorf("price table: date %q: want YYYY-MM-DD", f.Date)
		}
		into.Date = f.Date
	}
	if len(f.Prices) == 0 {
		return nil, errors.New("price table: no prices (want a prices: list of gpu and usd_per_gpu_hour)")
	}
	into.cat = cat
	seen := map[string]bool{}
	for i, p := range f.Prices {
		if strings.TrimSpace(p.GPU) == "" {
			return nil, fmt.Errorf("price table: entry %d has no gpu", i+1)
		}
		g, err := cat.Lookup(p.GPU)
		if err != nil {
			return nil, fmt.Errorf("price table: entry %d: %w", i+1, err)
		}
		if !(p.USDPerGPUHour > 0) || math.IsInf(p.USDPerGPUHour, 0) {
			return nil, fmt.Errorf("price table: %s: usd_per_gpu_hour %v must be a positive number", g.Name, p.USDPerGPUHour)
		}
		if p.AsOf != "" {
			if _, err := time.Parse(time.DateOnly, p.AsOf); err != nil {
				return nil, fmt.Errorf("price table: %s: as_of %q: want YYYY-MM-DD", g.Name, p.AsOf)
			}
		}
		k := normName(g.Name)
		if seen[k] {
			return nil, fmt.Errorf("price table: %s is priced twice", g.Name)
		}
		seen[k] = true
		p.GPU = g.Name
		into.by[k] = p
	}
	return into, nil
}

// Lookup returns the price of a GPU by its catalog name (or alias, as the
// catalog spells it); ok is false when the table has none.
func (p *Prices) Lookup(gpu string) (Price, bool) {
	if p == nil {
		return Price{}, false
	}
	if g, err := p.cat.Lookup(gpu); err == nil {
		gpu = g.Name
	}
	pr, ok := p.by[normName(gpu)]
	return pr, ok
}

// All returns the table's prices sorted by GPU name.
func (p *Prices) All() []Price {
	out := make([]Price, 0, len(p.by))
	for _, v := range p.by {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GPU < out[j].GPU })
	return out
}

// PerHour is the price of gpus of this GPU for an hour.
func (p Price) PerHour(gpus int) float64 { return p.USDPerGPUHour * float64(gpus) }

// USDPerMillion is what a million tokens cost when a deployment costing
// usdPerHour serves tokPerSec tokens a second: usdPerHour ÷ (tokPerSec ×
// 3600) × 10⁶ (docs/metrics.md, "Cost"). It is +Inf for no tokens.
func USDPerMillion(usdPerHour, tokPerSec float64) float64 {
	if !(tokPerSec > 0) {
		return math.Inf(1)
	}
	return usdPerHour / (tokPerSec * 3600) * 1e6
}

// Cost is what an estimate's batch costs (docs/metrics.md, "Cost").
type Cost struct {
	// USDPerHour is the deployment's price: GPUs × price per GPU-hour.
	USDPerHour float64 `json:"usd_per_hour"`
	// USDPer1MInput and USDPer1MOutput split a request's cost between its
	// prefill and its decode in proportion to their time (TTFT and E2E −
	// TTFT), per token of each; input × the one plus output × the other is
	// the request's cost.
	USDPer1MInput  float64 `json:"usd_per_1m_input"`
	USDPer1MOutput float64 `json:"usd_per_1m_output"`
	// USDPer1MOutputAllIn charges the whole cost to output tokens.
	USDPer1MOutputAllIn float64 `json:"usd_per_1m_output_all_in"`
}

// CostOf prices one batch of an estimate on a deployment of gpus GPUs at
// price: Batch requests of input and output tokens finish every E2E, so
// each costs usdPerHour/3600 × E2E/Batch.
func CostOf(price Price, gpus int, e Estimate, input, output int) Cost {
	c := Cost{USDPerHour: price.PerHour(gpus)}
	if e.E2E <= 0 || e.Batch < 1 || input < 1 || output < 1 {
		inf := math.Inf(1)
		c.USDPer1MInput, c.USDPer1MOutput, c.USDPer1MOutputAllIn = inf, inf, inf
		return c
	}
	perRequest := c.USDPerHour / 3600 * e.E2E.Seconds() / float64(e.Batch)
	pre := min(e.TTFT, e.E2E).Seconds() / e.E2E.Seconds()
	c.USDPer1MInput = perRequest * pre / float64(input) * 1e6
	c.USDPer1MOutput = perRequest * (1 - pre) / float64(output) * 1e6
	c.USDPer1MOutputAllIn = perRequest / float64(output) * 1e6
	return c
}
