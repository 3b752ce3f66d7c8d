package calibrate

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

var (
	updateFits           = flag.Bool("update-fits", false, "refit every group's constants on the fit half of the public rows and rewrite "+fitsFile+", then every deployment's (-update-deployment-fits)")
	updateDeploymentFits = flag.Bool("update-deployment-fits", false, "refit every deployment's constants on the fit half of the public rows, from its group's fit, and rewrite "+deploymentFitsFile)
)

const (
	publicRows         = "../perfmodel/testdata/loaded.csv"
	fitsFile           = "../perfmodel/testdata/loaded-fits.yaml"
	deploymentFitsFile = "../perfmodel/testdata/loaded-deployment-fits.yaml"
)

func defaultEff(r PublicRow) (perfmodel.Efficiency, error) {
	g, err := perfmodel.LookupGPU(r.GPU)
	if err != nil {
		return perfmodel.Efficiency{}, err
	}
	return perfmodel.DefaultEfficiency(g), nil
}

// TestPublicHeldOut is the twin's accuracy on public closed-loop
// measurements it was not fitted on: the rows are split by Split, each
// engine-and-GPU group's constants are fitted on its fit half (kept in
// loaded-fits.yaml; -update-fits refits), each deployment's from its
// group's fit on its own fit rows (kept in loaded-deployment-fits.yaml;
// -update-deployment-fits refits those alone), and the predict half is
// predicted with the default constants, the group's fit, the engine
// family's shipped constants and the deployment's fit. It fails
// when a median error of the rows with concurrency ≥ 8 passes its bound
// (the figures of docs/performance.md plus a margin).
func TestPublicHeldOut(t *testing.T) {
	rows, err := LoadPublic(publicRows)
	if err != nil {
		t.Fatal(err)
	}
	fit, predict := Split(rows)
	if *updateFits {
		refit(t, fit)
	}
	fits, err := LoadPublicFits(fitsFile)
	if err != nil {
		t.Fatal(err)
	}
	def, err := Evaluate(predict, defaultEff)
	if err != nil {
		t.Fatal(err)
	}
	groupEff := groupFitEff(fits, fittable(fit, FitGroup))
	cal, err := Evaluate(predict, groupEff)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := Evaluate(predict, FamilyEff)
	if err != nil {
		t.Fatal(err)
	}
	if *updateFits || *updateDeploymentFits {
		refitDeployments(t, fit, groupEff)
	}
	depFits, err := LoadPublicFits(deploymentFitsFile)
	if err != nil {
		t.Fatal(err)
	}
	deployed := fittable(fit, Deployment)
	dep, err := Evaluate(predict, func(r PublicRow) (perfmodel.Efficiency, error) {
		f, ok := depFits.For(Deployment(r))
		switch {
		case ok:
			return f.Efficiency(), nil
		case !deployed[Deployment(r)]:
			return groupEff(r) // too few rows to fit the deployment: its group's fit stands
		}
		return perfmodel.Efficiency{}, fmt.Errorf("no fit for %s (run with -update-deployment-fits)", Deployment(r))
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("\n| engine on GPU | held-out rows (c ≥ 8) | default TTFT | TPOT | E2E | calibrated TTFT | TPOT | E2E | --engine TTFT | TPOT | E2E | calibrated per deployment TTFT | TPOT | E2E |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	ds, cs, fs, ps := Summarize(def, 8), Summarize(cal, 8), Summarize(shipped, 8), Summarize(dep, 8)
	for i := range ds {
		d, c, f, p := ds[i], cs[i], fs[i], ps[i]
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", d.Group, d.NRows, pct(d.TTFT), pct(d.TPOT), pct(d.E2E),
			pct(c.TTFT), pct(c.TPOT), pct(c.E2E), pct(f.TTFT), pct(f.TPOT), pct(f.E2E), pct(p.TTFT), pct(p.TPOT), pct(p.E2E))
	}
	b.WriteString("\nPer deployment, constants fitted on its fit half (of 7; the rest its group's fit):\n")
	for _, f := range depFits.Groups {
		fmt.Fprintf(&b, "%s: %d rows, %d constants %v, leave-one-sweep-out loss %.2f\n", f.Group, f.FitRows, len(f.Fitted), f.Fitted, f.CVLoss)
	}
	t.Log(b.String())
	for _, c := range []struct {
		name string
		acc  []Accuracy
		b    bound
	}{{"default", ds, defaultBound}, {"calibrated", cs, calibratedBound}, {"engine family", fs, familyBound}, {"calibrated per deployment", ps, deploymentBound}} {
		all := c.acc[len(c.acc)-1]
		for _, m := range []struct {
			metric     string
			got, bound float64
		}{{"TTFT", all.TTFT, c.b.TTFT}, {"TPOT", all.TPOT, c.b.TPOT}, {"E2E", all.E2E, c.b.E2E}} {
			if !(m.got <= m.bound) {
				t.Errorf("%s constants: held-out median |error| of %s %.1f%%, bound %.0f%%", c.name, m.metric, 100*m.got, 100*m.bound)
			}
		}
	}
}

// bound is a pinned median |error| per metric on the held-out rows with
// concurrency ≥ 8, all groups together: the achieved figure
// (docs/performance.md) plus about two points.
type bound struct{ TTFT, TPOT, E2E float64 }

var (
	// Achieved: TTFT 15.0 %, TPOT 12.0 %, E2E 11.8 % with Predict's
	// steady state (2026-12-06; before: 16.9 %, 16.2 %, 11.6 % with the
	// rows' engines' 16,384 tokens a step; before that: 19.9 %, 16.0 %, 11.7 % with
	// TensorRT-LLM's admission and NIM's intake in Predict; 19.4 %,
	// 14.6 %, 11.2 % before those; before the default sequence overhead,
	// the ring steps of an all-reduce and the FP8 rows' 16-bit KV cache:
	// 19.2 %, 34.2 %, 29.8 %).
	defaultBound = bound{TTFT: 0.17, TPOT: 0.14, E2E: 0.135}
	// Achieved: TTFT 13.7 %, TPOT 5.9 %, E2E 5.4 % with Predict's steady
	// state, refitted (2026-12-06; before: 15.8 %, 6.0 %, 5.4 % with the
	// rows' engines' 16,384 tokens a step, refitted; before that: 18.3 %, 6.1 %, 5.4 % with
	// TensorRT-LLM's admission and NIM's intake; 17.0 %, 6.6 %, 5.6 % with
	// a fitted ring step; 16.9 %, 7.9 %, 6.7 % with FP8 weights fitted
	// apart and the context overhead; before that 17.9 %, 10.8 %, 7.7 %,
	// and 18.2 %, 12.0 %, 8.2 %).
	calibratedBound = bound{TTFT: 0.155, TPOT: 0.08, E2E: 0.075}
	// The engine families' shipped constants (engine.Family.ConstantsFor
	// through FamilyEff), each group's where its family ships them for
	// the GPU and weights: the fits above (achieved TTFT 12.7 %, TPOT
	// 5.9 %, E2E 5.6 % with Predict's steady state, refitted).
	familyBound = bound{TTFT: 0.145, TPOT: 0.08, E2E: 0.075}
	// Per deployment (FitDeployment from each group's fit, the constants
	// it moves chosen by leave-one-sweep-out inside the fit half; rows of
	// a deployment too small to fit take their group's): achieved TTFT
	// 12.1 %, TPOT 4.9 %, E2E 4.8 % with Predict's steady state, refitted
	// with folds at the final fit's budget (2026-12-06; before: 15.2 %,
	// 5.7 %, 5.0 %).
	deploymentBound = bound{TTFT: 0.14, TPOT: 0.07, E2E: 0.07}
)

// The constants the trtllm family ships are the public-rows fits of its
// groups, value for value: the family's held-out figures are the fits'.
func TestFamilyConstantsAreTheFits(t *testing.T) {
	fits, err := LoadPublicFits(fitsFile)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fits.Groups {
		gpu := f.Group[strings.LastIndex(f.Group, " on ")+len(" on "):]
		var wd perfmodel.DType
		if g, d, ok := strings.Cut(gpu, ", "); ok {
			gpu, wd = g, perfmodel.DType(d)
		}
		fam, ok := engine.FamilyOf(f.Group)
		if !ok {
			t.Errorf("%s: no engine family", f.Group)
			continue
		}
		got, ok := fam.ConstantsFor(gpu, wd)
		if !ok {
			t.Errorf("%s: family %s ships no constants for %s", f.Group, fam.Name, gpu)
			continue
		}
		if want := f.Efficiency(); got != want {
			t.Errorf("%s: family %s ships %+v, the fit is %+v", f.Group, fam.Name, got, want)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no fits")
	}
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.1f %%", 100*v)
}

// groupFitEff is the constants the calibrated columns predict a row with:
// its group's fit, or the GPU family's defaults where the group has too
// few fit rows (fitted reports which groups have enough).
func groupFitEff(fits *PublicFits, fitted map[string]bool) func(PublicRow) (perfmodel.Efficiency, error) {
	return func(r PublicRow) (perfmodel.Efficiency, error) {
		f, ok := fits.For(FitGroup(r))
		switch {
		case ok:
			return f.Efficiency(), nil
		case !fitted[FitGroup(r)]:
			return defaultEff(r) // too few rows to fit: the defaults stand
		}
		return perfmodel.Efficiency{}, fmt.Errorf("no fit for %s (run with -update-fits)", FitGroup(r))
	}
}

// minFitRows is how many fit rows with a published TPOT a group needs to
// be calibrated: five constants are not pinned down by a few TTFTs.
const minFitRows = 10

// fittable reports, per group (key names a row's), whether its fit rows
// suffice to calibrate it.
func fittable(fit []PublicRow, key func(PublicRow) string) map[string]bool {
	n := map[string]int{}
	for _, r := range fit {
		if r.TPOT > 0 {
			n[key(r)]++
		}
	}
	out := map[string]bool{}
	for g, k := range n {
		out[g] = k >= minFitRows
	}
	return out
}

// refit fits each group with enough rows on its fit rows, the groups side
// by side, and rewrites the fits file. A group starts from the constants
// the file held for it, or for its engine on its GPU (an FP8 group's
// 16-bit fit), else from the GPU family's defaults; refitEvals bounds
// each group's predictions of its rows.
func refit(t *testing.T, fit []PublicRow) {
	t.Helper()
	groups, by := fittableGroups(fit, FitGroup)
	old, err := LoadPublicFits(fitsFile)
	if err != nil {
		t.Fatal(err)
	}
	out := PublicFits{Groups: make([]PublicFit, len(groups))}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		start, err := defaultEff(by[g][0])
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := old.For(g); ok {
			start = f.Efficiency()
		} else if f, ok := old.For(Group(by[g][0])); ok {
			start = f.Efficiency()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			eff, n, err := FitPublic(context.Background(), by[g], start, refitEvals)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", g, err)
				return
			}
			t.Logf("%s: %d rows, %d evaluations: %+v", g, len(by[g]), n, eff)
			out.Groups[i] = NewPublicFit(g, len(by[g]), n, eff)
		}()
	}
	wg.Wait()
	writeFits(t, fitsFile, "# Constants fitted on the fit half of loaded.csv (calibrate.Split), one set per\n# engine, GPU and weight precision group (calibrate.FitGroup): go test ./internal/calibrate -run TestPublicHeldOut -update-fits\n", out, errs)
}

// writeFits fails the test on the first of errs, else writes out behind
// head to file.
func writeFits(t *testing.T, file, head string, out PublicFits, errs []error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	data, err := yaml.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append([]byte(head), data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fittableGroups splits rows by key, keeping only the groups fittable
// admits, the groups in the order their first rows come.
func fittableGroups(rows []PublicRow, key func(PublicRow) string) ([]string, map[string][]PublicRow) {
	by := map[string][]PublicRow{}
	var names []string
	ok := fittable(rows, key)
	for _, r := range rows {
		k := key(r)
		if !ok[k] {
			continue
		}
		if _, seen := by[k]; !seen {
			names = append(names, k)
		}
		by[k] = append(by[k], r)
	}
	return names, by
}

// refitEvals is how many predictions of its rows a group's refit may run.
const refitEvals = 200

// refitDeployments fits each deployment with enough fit rows
// (FitDeployment: the constants it moves chosen by leave-one-sweep-out
// inside its fit rows), from its group's fit (start gives it), the
// deployments side by side, and rewrites the deployment fits file.
func refitDeployments(t *testing.T, fit []PublicRow, start func(PublicRow) (perfmodel.Efficiency, error)) {
	t.Helper()
	deps, by := fittableGroups(fit, Deployment)
	out := PublicFits{Groups: make([]PublicFit, len(deps))}
	errs := make([]error, len(deps))
	var wg sync.WaitGroup
	for i, d := range deps {
		eff, err := start(by[d][0])
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := FitDeployment(context.Background(), by[d], eff, DeploymentCandidates(by[d][0].TP), deploymentCVEvals, deploymentEvals)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", d, err)
				return
			}
			t.Logf("%s: %d rows, %d evaluations, fitted %v (leave-one-sweep-out loss %.2f): %+v", d, len(by[d]), f.Evaluations, f.Fitted, f.CVLoss, f.Eff)
			out.Groups[i] = NewPublicFit(d, len(by[d]), f.Evaluations, f.Eff)
			out.Groups[i].Fitted, out.Groups[i].CVLoss = f.Fitted, f.CVLoss
		}()
	}
	wg.Wait()
	writeFits(t, deploymentFitsFile, "# Constants fitted on the fit half of loaded.csv (calibrate.Split), one set per deployment\n# (calibrate.Deployment: engine, model, GPU, TP, weight precision), each from its group's fit in\n# loaded-fits.yaml, the constants moved chosen by leave-one-sweep-out inside the fit half\n# (calibrate.FitDeployment): go test ./internal/calibrate -run TestPublicHeldOut -update-deployment-fits\n", out, errs)
}

// deploymentCVEvals and deploymentEvals are how many predictions of its
// rows a deployment's refit may run per left-out sweep and per candidate
// (choosing the constants) and for the chosen candidate's fit: the same
// budget, as the protocol fixed before the refit of the steady state
// (docs/performance.md, "Under load"), so that the choice is not biased
// toward fitting nothing by a smaller search than the final fit's.
const (
	deploymentCVEvals = 150
	deploymentEvals   = 150
)

// Split alternates the concurrency points of each sweep, whatever the
// rows' order: of 1, 2, 5, 10, 25 the 1st, 3rd and 5th are fitted.
func TestSplitAlternatesWithinSweeps(t *testing.T) {
	var rows []PublicRow
	for _, c := range []int{25, 1, 10, 5, 2} {
		rows = append(rows, PublicRow{ID: fmt.Sprint("a", c), Engine: "e", Model: "m", GPU: "g", TP: 1, Input: 100, Output: 10, Concurrency: c})
		rows = append(rows, PublicRow{ID: fmt.Sprint("b", c), Engine: "e", Model: "m", GPU: "g", TP: 2, Input: 100, Output: 10, Concurrency: c})
	}
	fit, predict := Split(rows)
	ids := func(rs []PublicRow) string {
		var s []string
		for _, r := range rs {
			s = append(s, r.ID)
		}
		return strings.Join(s, " ")
	}
	if got, want := ids(fit), "a1 a5 a25 b1 b5 b25"; got != want {
		t.Errorf("fit %s, want %s", got, want)
	}
	if got, want := ids(predict), "a2 a10 b2 b10"; got != want {
		t.Errorf("predict %s, want %s", got, want)
	}
}

// Predict averages the requests the row's client measured: where the
// source says how many (from a simultaneous start), that many; where it
// does not, the closed loop's steady state, the requests sent in rounds 3
// to 6 of 16 clients (requests 32 to 95 of 96), whose TTFT is well under
// the first round's (one cohort of 16 × 2,000 prompt tokens queued for
// four 8,192-token steps; later rounds come back spread out).
func TestPredictFollowsTheClient(t *testing.T) {
	row := PublicRow{ID: "r", Engine: "vLLM", Model: "Llama-3.1-8B", GPU: "H100-SXM", TP: 1, DType: "bf16", KVDType: "bf16",
		Input: 2000, Output: 50, Concurrency: 16}
	eff, cfg := engineForDefaults(t, row)
	steady, err := Predict(row, eff)
	if err != nil {
		t.Fatal(err)
	}
	tls, err := RunClosedLoop(cfg, ClosedLoop{Clients: 16, Requests: 96, Input: 2000, Output: 50, Intake: intakeOf(row)})
	if err != nil {
		t.Fatal(err)
	}
	want := Prediction{Requests: 64}
	for _, tl := range tls[32:] {
		ttft, e2e := ms(tl.FirstToken.Sub(tl.Arrival)), ms(tl.Finished.Sub(tl.Arrival))
		want.TTFT += ttft / 64
		want.E2E += e2e / 64
		want.TPOT += (e2e - ttft) / 49 / 64
	}
	if d := cmp.Diff(want, steady, cmpopts.EquateApprox(1e-9, 0)); d != "" {
		t.Errorf("no request count published: want rounds 3–6 (-want +got):\n%s", d)
	}
	row.Requests = 16
	first, err := Predict(row, eff)
	if err != nil {
		t.Fatal(err)
	}
	if first.Requests != 16 {
		t.Fatalf("16 requests published: the mean is over %d", first.Requests)
	}
	if !(first.TTFT > 1.5*steady.TTFT) {
		t.Errorf("first-round TTFT %.1f ms, steady state %.1f ms: the cohort's prefill should dominate the first round", first.TTFT, steady.TTFT)
	}
}
