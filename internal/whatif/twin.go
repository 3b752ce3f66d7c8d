package whatif

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/simulate"
)

// SimulateLeftOut names what a simulated run had around its engines that
// a what-if deployment does not carry.
func SimulateLeftOut(o simulate.Options) []string {
	var out []string
	if o.LengthPools != "" {
		out = append(out, "the run's length pools ("+o.LengthPools+") are not re-simulated: every replica serves every request")
	}
	if o.Queue.Concurrency > 0 || o.DeadlineTTFT > 0 {
		out = append(out, "the run's admission queue is not re-simulated")
	}
	if o.NetworkLatency > 0 {
		out = append(out, fmt.Sprintf("the run's network latency (%v each way) is not re-simulated", o.NetworkLatency))
	}
	return out
}

// oneReplica begins the note of a measured run's twin of one replica.
const oneReplica = "the twin runs one replica of the profiled engine"

// EngineOfProfile is a measured server's engine: the profile's model, GPU,
// TP and precisions, with the batch settings the server exposed (else
// vLLM's defaults). A run whose recorded model is a catalog model other
// than the profile's is bad input.
func EngineOfProfile(path string, info results.RunInfo) (engine.Options, []string, error) {
	prof, err := perfmodel.LoadProfile(path)
	if err != nil {
		return engine.Options{}, nil, field.Wrap("profile", err)
	}
	if info.Model != "" {
		if m, err := perfmodel.ResolveModel(info.Model); err == nil {
			if pm, err := perfmodel.ResolveModel(prof.Model); err == nil && !strings.EqualFold(m.Name, pm.Name) {
				return engine.Options{}, nil, field.Invalid("profile", path, "is for model %s, but the run served %s", prof.Model, info.Model)
			}
		}
	}
	e := engine.DefaultOptions()
	e.Model, e.GPU, e.TensorParallelSize, e.DType, e.KVCacheDType = prof.Model, prof.GPU, prof.TP, prof.DType, prof.KVDType
	e.Profile = path
	var notes []string
	cfg := map[string]string{}
	if info.Server != nil {
		cfg = info.Server.Config
	}
	// The engine's own defaults stand for what the server did not expose:
	// its family's, by the profile's engine or the run's metric names.
	defaults := "vLLM's default for the GPU"
	fam, ok := engine.FamilyOf(prof.Engine)
	if !ok && info.Server != nil {
		fam, ok = engine.FamilyOf(info.Server.Engine)
	}
	if ok {
		e.Engine = fam.Name
		if fe, err := e.WithEngine(nil); err == nil {
			e, defaults = fe, fam.Title+"'s default"
		} else { // a GPU of a --gpu-file: its memory, which some defaults follow, is not known here
			notes = append(notes, fmt.Sprintf("%s's scheduler defaults are not applied (%v)", fam.Title, err))
		}
	}
	// What the server did not expose: the scheduler the profile was
	// fitted with (calibrate's engine flags), else the defaults.
	setInt := func(key string, p *int) {
		if n, err := strconv.Atoi(cfg[key]); err == nil && n > 0 {
			*p = n
		} else if n, err := strconv.Atoi(prof.Scheduler[key]); err == nil && n > 0 {
			*p = n
			notes = append(notes, fmt.Sprintf("the server did not expose %s: the twin takes the profile's %d (the scheduler it was fitted with)", key, n))
		} else {
			notes = append(notes, fmt.Sprintf("the server did not expose %s: the twin takes %s", key, defaults))
		}
	}
	setBool := func(key string, p *bool) {
		if b, err := strconv.ParseBool(cfg[key]); err == nil {
			*p = b
		} else if b, err := strconv.ParseBool(prof.Scheduler[key]); err == nil {
			*p = b
			notes = append(notes, fmt.Sprintf("the server did not expose %s: the twin takes the profile's %v (the scheduler it was fitted with)", key, b))
		} else {
			notes = append(notes, fmt.Sprintf("the server did not expose %s: the twin takes %v", key, *p))
		}
	}
	setInt("max_num_seqs", &e.MaxNumSeqs)
	setInt("max_num_batched_tokens", &e.MaxNumBatchedTokens)
	setBool("enable_prefix_caching", &e.EnablePrefixCaching)
	setBool("enable_chunked_prefill", &e.EnableChunkedPrefill)
	e.NaturalOutputTokens = "max"
	notes = append(notes, oneReplica+"; each answer runs to its measured output length")
	return e, notes, nil
}
