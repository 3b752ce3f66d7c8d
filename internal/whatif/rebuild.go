package whatif

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Twin is the baseline the twin runs, with the seed of the run.
type Twin struct {
	Baseline
	Seed uint64
}

// Recorded is a run's configuration as its folder's config.json holds it:
// Run, typed (nil when the folder has none), and Err, why it could not be
// read (an older folder's flags that no longer parse), which TwinOf
// reports only when the twin needs the run's configuration.
type Recorded struct {
	Run *simulate.RunConfig
	Err error
}

// ReadRecorded decodes dir's config.json typed run (version 2) itself:
// ok is false when the folder holds none (no config.json, or an older
// one of flags only, which the caller, owner of the flags, adapts). A run
// that does not parse is the Recorded's Err.
func ReadRecorded(dir string) (rec Recorded, ok bool) {
	var rc simulate.RunConfig
	ok, err := results.ReadTypedConfig(dir, &rc)
	if !ok && err == nil {
		return Recorded{}, false
	}
	return Recorded{Run: &rc, Err: err}, true
}

// runFlags is a recorded run as the twin reads it.
type runFlags struct {
	Options   simulate.Options
	SimEngine engine.Options
	Given     func(field string) bool
	Recorded  bool
}

// flagsOf is rec with the defaults of a run that recorded nothing.
func flagsOf(rec Recorded, sim bool) runFlags {
	if rec.Run == nil {
		p := runFlags{Options: simulate.DefaultOptions(), SimEngine: engine.DefaultOptions(), Given: func(string) bool { return false }}
		if sim {
			p.Options.Engine.Seed = p.Options.Workload.Seed
		}
		return p
	}
	p := runFlags{Options: rec.Run.Options, SimEngine: engine.DefaultOptions(), Given: rec.Run.GivenFunc(), Recorded: true}
	if rec.Run.SimEngine != nil {
		p.SimEngine = *rec.Run.SimEngine
	}
	return p
}

// InputError marks an error as the caller's input to fix (a profile for
// another model or GPU, a GPU file that does not load), not the run's.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }

// Unwrap returns the error marked.
func (e *InputError) Unwrap() error { return e.Err }

// TwinOf rebuilds the run's deployment and workload from its folder and
// its recorded configuration (rec, config.json's, typed): a simulated or
// embedded run from that configuration; a measured
// one from --profile (the engine) and the workload bench's flags describe,
// or its records' arrivals and lengths. A GPU file given to report (for a
// profile calibrated on a custom hardware entry) replaces the run's. skip
// says why there is no twin.
func TwinOf(dir string, rec Recorded, profile, gpuFile string) (Twin, string, error) {
	info, _, _ := results.ReadRunInfo(dir)
	sim := info.Simulated
	embedded := !sim && (info.Target == "embedded" || rec.Run != nil && rec.Run.SimEngine != nil)
	if !sim && !embedded && profile == "" {
		return Twin{}, "the run came from a real server: what-if needs its calibrated profile (--profile FILE, from tokentrace calibrate)", nil
	}
	if rec.Run == nil && rec.Err == nil && (sim || embedded) && profile == "" {
		return Twin{}, "the folder has no config.json to rebuild the run's engine from (give --profile)", nil
	}
	if rec.Err != nil {
		return Twin{}, "", fmt.Errorf("what-if: %s: %w", results.ConfigPath(dir), rec.Err)
	}
	p := flagsOf(rec, sim)
	t := Twin{Seed: p.Options.Workload.Seed}
	t.Deployment = capacity.Deployment{Engine: p.Options.Engine, Replicas: p.Options.Replicas, Balancer: p.Options.Balancer,
		PrefillReplicas: p.Options.PrefillReplicas, KVLink: p.Options.KVLink, PrefillGPU: p.Options.PrefillGPU,
		PrefillTP: p.Options.PrefillTensorParallelSize}
	switch {
	case sim:
		t.Basis = "the run's engine"
		t.Notes = append(t.Notes, SimulateLeftOut(p.Options)...)
		// The run's front end, as simulate added it (--front-end, or its
		// --engine release's).
		fe, err := p.Options.FrontEndOf(p.Given)
		if err != nil {
			return Twin{}, "", &InputError{err}
		}
		t.Deployment.FrontEnd = &fe
	case embedded:
		t.Basis = "the embedded engine's settings"
		t.Deployment.Engine = p.SimEngine
		none := time.Duration(0) // serve's engine: its HTTP front end is its own
		t.Deployment.FrontEnd = &none
	default:
		t.Basis = "profile " + filepath.Base(profile)
		eng, notes, err := EngineOfProfile(profile, info)
		if err != nil {
			return Twin{}, "", &InputError{err}
		}
		none := time.Duration(0) // the profile was fitted on the server's own TTFT, its front end inside
		t.Deployment = capacity.Deployment{Engine: eng, Replicas: 1, FrontEnd: &none}
		t.Notes = append(t.Notes, notes...)
	}
	if err := t.withFiles(profile, gpuFile, sim || embedded); err != nil {
		return Twin{}, "", err
	}
	if !sim && !embedded {
		if err := t.disaggregatedOf(dir, info); err != nil {
			return Twin{}, "", err
		}
	}
	w, skip, notes, err := workloadOf(dir, p, sim || embedded || p.Options.IgnoreEOS)
	if err != nil || skip != "" {
		return Twin{}, skip, err
	}
	t.Workload = w
	t.Notes = append(t.Notes, notes...)
	if run, err := results.ReadRun(dir); err == nil {
		for _, r := range run.Requests {
			if !r.Warmup {
				t.Inputs = append(t.Inputs, r.Input)
				t.Outputs = append(t.Outputs, r.Output)
			}
		}
	}
	return t, "", nil
}

// withFiles applies a GPU catalog file and a calibrated profile given for
// the twin's engine (rebuilt says the engine came from the run's own
// configuration, which the profile then replaces as its basis).
func (t *Twin) withFiles(profile, gpuFile string, rebuilt bool) error {
	if gpuFile != "" {
		if _, err := perfmodel.GPUCatalogFor(gpuFile); err != nil {
			return &InputError{field.Wrap("gpu_file", err)}
		}
		t.Deployment.Engine.GPUFile = gpuFile
	}
	if profile == "" {
		return nil
	}
	t.Deployment.Engine.Profile = profile
	if rebuilt {
		t.Basis = "profile " + filepath.Base(profile)
	}
	if _, _, err := t.Deployment.Engine.Config(); err != nil {
		var fe *field.Error
		if errors.As(err, &fe) && fe.Field == "gpu" && gpuFile == "" {
			err = field.Invalid("profile", profile, "is for GPU %s, not in the catalog: give its --gpu-file (%v)", t.Deployment.Engine.GPU, fe.Err)
		}
		return &InputError{field.Wrap("profile", unwrapField(err))}
	}
	return nil
}

// unwrapField keeps a profile error's own words ("profile is for model X,
// not Y") rather than the nested field's.
func unwrapField(err error) error {
	var fe *field.Error
	if errors.As(err, &fe) && fe.Field == "profile" && fe.Err != nil {
		return fe.Err
	}
	return err
}

// workloadOf is the run's workload: an open-loop run's bench or simulate
// flags rebuilt (the same prompts, shared prefixes, sessions and arrivals,
// by the run's seed), else the run replayed from its records
// (simulate.LikeRun: a closed loop as a closed loop, with the client's
// measured transport).
//
// A measured run's flags are used only when its answers ran to max_tokens
// (--ignore-eos): otherwise their lengths are the server's, which the
// records hold.
func workloadOf(dir string, p runFlags, lengthsKnown bool) (capacity.Workload, string, []string, error) {
	o := p.Options.Workload
	chat := p.Options.Endpoint != "completions"
	closed := o.Concurrency > 0 && o.Rate == 0
	if p.Recorded && lengthsKnown && o.Trace == "" && o.Prompts == "" && !closed {
		if o.Duration > 0 && !p.Given("requests") {
			rate := o.Rate
			if rate == 0 {
				rate = workload.DefaultRate
			}
			// The twin sends a count, not a span: the duration given is
			// spent on the number of requests it stood for.
			o.Requests, o.Duration = max(1, int(math.Round(rate*o.Duration.Seconds()))), 0
		}
		o.Concurrency = 0
		src, load, err := o.Build(chat, func(f string) bool { return f == "requests" || f != "duration" && p.Given(f) })
		if err != nil {
			return capacity.Workload{}, "", nil, fmt.Errorf("what-if: the run's workload: %w", err)
		}
		w, err := capacity.NewWorkload(src, load, p.Options.IgnoreEOS, workload.Describe(o, load))
		if err != nil {
			return capacity.Workload{}, "", nil, fmt.Errorf("what-if: the run's workload: %w", err)
		}
		return w, "", nil, nil
	}
	return workloadOfRecords(dir, chat, max(o.Seed, 1))
}

// workloadOfRecords replays the run's records: simulate --like's
// workload.
func workloadOfRecords(dir string, chat bool, seed uint64) (capacity.Workload, string, []string, error) {
	lk, err := simulate.LikeRun(dir, chat, seed)
	switch {
	case errors.Is(err, simulate.ErrNoArrivals):
		return capacity.Workload{}, "what-if needs an open-loop run with arrival times or a closed loop (" + err.Error() + ")", nil, nil
	case err != nil:
		return capacity.Workload{}, "", nil, fmt.Errorf("what-if: %w", err)
	}
	var w capacity.Workload
	if lk.Closed {
		desc := fmt.Sprintf("%s: %d requests replayed as the run's closed loop of %d workers", dir, lk.Source.Len(), lk.Load.Concurrency)
		w, err = capacity.ClosedWorkload(lk.Source, lk.Load, lk.Rate, lk.Network, true, desc)
	} else {
		desc := fmt.Sprintf("%s: %d requests replayed at their arrival times", dir, lk.Source.Len())
		w, err = capacity.NewWorkload(lk.Source, lk.Load, true, desc)
		w.Network = lk.Network
	}
	if err != nil {
		return w, "", nil, fmt.Errorf("what-if: the run's workload: %w", err)
	}
	return w, "", lk.Notes, nil
}

// disaggregatedOf makes a measured run's twin disaggregated when its
// records show a prefill hop (pdOfRecords): its pools' sizes from the
// gateway's configuration evidence in run.json when bench ran through the
// P/D router (poolsOf), else 1P:1D.
func (t *Twin) disaggregatedOf(dir string, info results.RunInfo) error {
	ec, _, err := t.Deployment.Engine.Config()
	if err != nil {
		return &InputError{field.Wrap("profile", err)}
	}
	pd, err := pdOfRecords(dir, ec)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no records to read: an aggregated twin
	}
	if err != nil || pd.requests == 0 {
		return err
	}
	t.Deployment.PrefillReplicas, t.Deployment.KVLink = 1, cmp.Or(pd.link, perfmodel.DefaultLink)
	if info.Server != nil {
		pd.prefill, pd.decode = poolsOf(info.Server.Config)
	}
	if pd.prefill > 0 {
		t.Deployment.PrefillReplicas, t.Deployment.Replicas = pd.prefill, pd.decode
	}
	for i, n := range t.Notes {
		if _, rest, ok := strings.Cut(n, oneReplica); ok {
			t.Notes[i] = strings.TrimPrefix(rest, "; ") // one replica per pool, said by pd.note
		}
	}
	t.Notes = append(t.Notes, pd.note())
	return nil
}
