package perfmodel

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuiltinPrices: the embedded table parses, is dated, prices every GPU
// of the built-in catalog (not the CPU entries), and cites a source page and a date for each.
func TestBuiltinPrices(t *testing.T) {
	p, err := builtinPrices()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.DateOnly, p.Date); err != nil {
		t.Errorf("table date %q: %v", p.Date, err)
	}
	for _, g := range BuiltinGPUs().GPUs() {
		if g.Family == "cpu" {
			continue // a CPU thread has no public per-device hourly price: give --prices
		}
		pr, ok := p.Lookup(g.Name)
		if !ok {
			t.Errorf("%s has no price", g.Name)
			continue
		}
		if !strings.HasPrefix(pr.Source, "https://") || pr.AsOf == "" || pr.Basis == "" {
			t.Errorf("%s: price without a source URL, date or basis: %+v", g.Name, pr)
		}
	}
	if pr, ok := p.Lookup("h100"); !ok || pr.GPU != "H100-SXM" {
		t.Errorf("lookup by alias: %+v %v", pr, ok)
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoadPricesOverrides: a file's entries replace the built-in ones GPU by
// GPU, by alias too; the others stay.
func TestLoadPricesOverrides(t *testing.T) {
	path := writeFile(t, "date: 2027-01-02\nprices:\n  - gpu: h100\n    usd_per_gpu_hour: 2\n    basis: our contract\n")
	p, err := LoadPrices(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pr, _ := p.Lookup("H100-SXM"); pr.USDPerGPUHour != 2 || pr.Basis != "our contract" || pr.GPU != "H100-SXM" {
		t.Errorf("override: %+v", pr)
	}
	if pr, _ := p.Lookup("L4"); pr.USDPerGPUHour != BuiltinPrices().by[normName("L4")].USDPerGPUHour {
		t.Errorf("L4 changed: %+v", pr)
	}
	if p.Date != "2027-01-02" || len(p.Files) != 1 {
		t.Errorf("date %q files %v", p.Date, p.Files)
	}
	if pr, _ := BuiltinPrices().Lookup("H100-SXM"); pr.USDPerGPUHour == 2 {
		t.Error("the built-in table was modified")
	}
}

// TestLoadPricesRejects: each bad file is an error that names the problem.
func TestLoadPricesRejects(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"prices:\n  - gpu: Z9000\n    usd_per_gpu_hour: 1\n", `unknown GPU "Z9000"`},
		{"prices:\n  - gpu: L4\n    usd_per_gpu_hour: 1\n    cost: 3\n", "cost"},
		{"prices:\n  - gpu: L4\n    usd_per_gpu_hour: 0\n", "must be a positive number"},
		{"prices:\n  - gpu: L4\n    usd_per_gpu_hour: -1\n", "must be a positive number"},
		{"prices:\n  - gpu: L4\n    usd_per_gpu_hour: 1\n  - gpu: l4\n    usd_per_gpu_hour: 2\n", "priced twice"},
		{"prices:\n  - usd_per_gpu_hour: 1\n", "has no gpu"},
		{"currency: EUR\nprices:\n  - gpu: L4\n    usd_per_gpu_hour: 1\n", "only USD"},
		{"date: yesterday\nprices:\n  - gpu: L4\n    usd_per_gpu_hour: 1\n", "YYYY-MM-DD"},
		{"prices:\n  - gpu: L4\n    usd_per_gpu_hour: 1\n    as_of: 3/4/2026\n", "YYYY-MM-DD"},
		{"prices: []\n", "no prices"},
		{"- gpu: L4\n", "price table"},
	} {
		_, err := LoadPrices(writeFile(t, tc.body), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
	if _, err := LoadPrices(filepath.Join(t.TempDir(), "none.yaml"), nil); err == nil {
		t.Error("a missing file loaded")
	}
}

// TestCostOfByHand checks the cost formulas on numbers worked by hand: 2 GPUs
// at $3/GPU-hour = $6/h; batch 4, TTFT 0.5 s, E2E 10 s, 1,000 in + 200 out
// tokens. Each request costs 6/3600 × 10/4 = $0.0041667; its prefill share
// is 0.5/10 = 5 %: $/1M in = 0.0041667 × 0.05 / 1000 × 1e6 = $0.20833;
// $/1M out = 0.0041667 × 0.95 / 200 × 1e6 = $19.792; all-in $/1M out =
// 0.0041667 / 200 × 1e6 = $20.833 = 6 / (4 × 200 / 10 × 3600) × 1e6.
func TestCostOfByHand(t *testing.T) {
	e := Estimate{Batch: 4, TTFT: 500 * time.Millisecond, E2E: 10 * time.Second}
	c := CostOf(Price{USDPerGPUHour: 3}, 2, e, 1000, 200)
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-3*want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("usd/h", c.USDPerHour, 6)
	near("in", c.USDPer1MInput, 0.208333)
	near("out", c.USDPer1MOutput, 19.791667)
	near("all-in", c.USDPer1MOutputAllIn, 20.833333)
	near("USDPerMillion", USDPerMillion(6, 4*200/10.0), 20.833333)
	// A request pays for itself: input × $in + output × $out = its cost.
	near("sum", (1000*c.USDPer1MInput+200*c.USDPer1MOutput)/1e6, 6.0/3600*10/4)
	if v := USDPerMillion(6, 0); !math.IsInf(v, 1) {
		t.Errorf("no tokens: %v", v)
	}
	if c := CostOf(Price{USDPerGPUHour: 3}, 1, Estimate{}, 1, 1); !math.IsInf(c.USDPer1MOutput, 1) {
		t.Errorf("no E2E: %+v", c)
	}
}

// TestPlanPricesRows: estimate's rows carry costs at the TP in force, and an
// unknown GPU in the price file is a field error on prices.
func TestPlanPricesRows(t *testing.T) {
	res, err := Plan(Request{Model: "Llama-3.1-70B", GPU: "H100-SXM", Input: 1000, Output: 200, Batches: []int{1, 8}})
	if err != nil {
		t.Fatal(err)
	}
	tp := res.Est.Config().TP
	if res.Price == nil || len(res.Costs) != 2 || res.Costs[0].USDPerHour != res.Price.USDPerGPUHour*float64(tp) {
		t.Fatalf("price %+v costs %+v (TP %d)", res.Price, res.Costs, tp)
	}
	if !(res.Costs[1].USDPer1MOutput < res.Costs[0].USDPer1MOutput) {
		t.Errorf("batching did not lower the output price: %+v", res.Costs)
	}
	_, err = Plan(Request{Model: "Llama-3.1-8B", GPU: "L4", Input: 10, Output: 10, Batches: []int{1},
		Prices: writeFile(t, "prices:\n  - gpu: B9\n    usd_per_gpu_hour: 1\n")})
	if err == nil || !strings.Contains(err.Error(), "prices") || !strings.Contains(err.Error(), "B9") {
		t.Errorf("unknown GPU in price file: %v", err)
	}
}
