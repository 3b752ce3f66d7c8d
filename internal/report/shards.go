package report

import (
	"errors"
	"fmt"
	"github.com/tokentrace/tokentrace/internal/results"
	"path/filepath"
	"slices"
	"strings"
)

// ErrShards is returned (wrapped) when inputs that hold shards of a run
// (bench --shard) do not make up one whole run.
var ErrShards = errors.New("shards do not make up one run")

// input is one records file with its run.json, if any, and what the merge
// of a sharded run adds to its instants.
type input struct {
	file  string
	info  results.RunInfo
	has   bool // info was read
	shift int64
}

// shardPlan is how the shards of one run are read as one: in shard order,
// each with the shift that puts its instants on the common clock, under
// one source name, with a note saying how the clocks were joined.
type shardPlan struct {
	parts []input
	name  string
	note  string
}

// planShards looks at the inputs' run.json. When none is a shard it
// returns nil. Otherwise every input must be a shard of the same run: the
// same shard count and workload, each index once, none missing; anything
// else is an error wrapping ErrShards. Each shard's instants count from
// its own start; the plan shifts them onto one clock: the shards' wall
// clocks at their starts, corrected between hosts by their measured
// offsets to the target's clock (shards on one host share a clock).
func planShards(ins []input) (*shardPlan, error) {
	var shards []input
	for _, in := range ins {
		if in.has && in.info.Shard != nil {
			shards = append(shards, in)
		}
	}
	if len(shards) == 0 {
		return nil, nil
	}
	if err := checkShards(ins, shards); err != nil {
		return nil, err
	}
	slices.SortFunc(shards, func(a, b input) int { return a.info.Shard.Index - b.info.Shard.Index })
	ref := shards[0].info.Shard
	common := make([]int64, len(shards))
	var joins []string
	for i, s := range shards {
		sh := s.info.Shard
		corr, how := clockCorrection(ref, sh)
		common[i] = sh.StartUnixNS + corr
		if i > 0 {
			joins = append(joins, fmt.Sprintf("shard %d %s", sh.Index, how))
		}
	}
	base := slices.Min(common)
	for i := range shards {
		shards[i].shift = common[i] - base
		si := *shards[i].info.Shard
		si.ShiftNS = shards[i].shift
		shards[i].info.Shard = &si
	}
	note := fmt.Sprintf("%d shards of one run (workload %s) merged onto shard 0's clock: %s; shifts %s",
		ref.Count, ref.Workload, strings.Join(joins, "; "), shiftList(shards))
	return &shardPlan{parts: shards, name: shardSetName(shards), note: note}, nil
}

// checkShards refuses inputs that are not exactly the shards of one run.
func checkShards(ins, shards []input) error {
	ref := shards[0]
	for _, in := range ins {
		if !in.has || in.info.Shard == nil {
			return fmt.Errorf("%w: %s is shard %d/%d of a run but %s is not a shard: report shards of one run together, or each folder alone",
				ErrShards, results.SourceName(ref.file), ref.info.Shard.Index, ref.info.Shard.Count, results.SourceName(in.file))
		}
	}
	seen := map[int]string{}
	for _, s := range shards {
		sh, r := s.info.Shard, ref.info.Shard
		switch {
		case sh.Count != r.Count:
			return fmt.Errorf("%w: %s is one of %d shards, %s one of %d", ErrShards, results.SourceName(ref.file), r.Count, results.SourceName(s.file), sh.Count)
		case sh.Workload != r.Workload:
			return fmt.Errorf("%w: %s and %s split different workloads (%s and %s: other settings or seed)",
				ErrShards, results.SourceName(ref.file), results.SourceName(s.file), r.Workload, sh.Workload)
		case sh.Index < 0 || sh.Index >= sh.Count:
			return fmt.Errorf("%w: %s says it is shard %d of %d", ErrShards, results.SourceName(s.file), sh.Index, sh.Count)
		case seen[sh.Index] != "":
			return fmt.Errorf("%w: %s and %s are both shard %d/%d", ErrShards, seen[sh.Index], results.SourceName(s.file), sh.Index, sh.Count)
		}
		seen[sh.Index] = results.SourceName(s.file)
	}
	if n := ref.info.Shard.Count; len(shards) != n {
		var missing []string
		for i := range n {
			if seen[i] == "" {
				missing = append(missing, fmt.Sprint(i))
			}
		}
		return fmt.Errorf("%w: %d of %d shards given, shard %s missing: their union is not the workload (report each folder alone, or all %d together)",
			ErrShards, len(shards), n, strings.Join(missing, ", "), n)
	}
	return nil
}

// clockCorrection is what to add to shard sh's wall-clock start to put it
// on shard ref's clock, and how that was found.
func clockCorrection(ref, sh *results.ShardInfo) (int64, string) {
	switch {
	case sh == ref:
		return 0, ""
	case sh.Host != "" && sh.Host == ref.Host:
		return 0, "on the same host (one clock)"
	case sh.ClockUncertaintyNS > 0 && ref.ClockUncertaintyNS > 0:
		corr := sh.ClockOffsetNS - ref.ClockOffsetNS
		return corr, fmt.Sprintf("on host %s, clock %s ± %.3f ms from shard %d's (both measured against the target's Date header)",
			sh.Host, signedMS(corr), float64(sh.ClockUncertaintyNS+ref.ClockUncertaintyNS)/1e6, ref.Index)
	default:
		why := sh.ClockError
		if why == "" {
			why = ref.ClockError
		}
		if why == "" {
			why = "offsets not recorded"
		}
		return 0, fmt.Sprintf("on host %s, clock assumed to agree with shard %d's (%s)", sh.Host, ref.Index, why)
	}
}

func shiftList(shards []input) string {
	parts := make([]string, len(shards))
	for i, s := range shards {
		parts[i] = signedMS(s.shift)
	}
	return strings.Join(parts, ", ")
}

func signedMS(ns int64) string {
	return fmt.Sprintf("%+.3f ms", float64(ns)/1e6)
}

// shardSetName names the merged run: the folder that holds all the
// shards' folders, or their names joined.
func shardSetName(shards []input) string {
	dirs := make([]string, len(shards))
	for i, s := range shards {
		dirs[i] = filepath.Dir(results.SourceName(s.file))
	}
	suffix := fmt.Sprintf(" (%d shards)", len(shards))
	if d := dirs[0]; !slices.ContainsFunc(dirs, func(x string) bool { return x != d }) {
		return d + suffix
	}
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = results.SourceName(s.file)
	}
	return strings.Join(names, " + ") + suffix
}

// shifted is run.json of a shard set on the common clock: its scraped
// samples moved by shift, its warnings naming the shard.
func (in input) shifted() results.RunInfo {
	info := in.info
	info.Samples = slices.Clone(info.Samples)
	for i := range info.Samples {
		info.Samples[i].AtNS += in.shift
	}
	info.Warnings = slices.Clone(info.Warnings)
	for i, w := range info.Warnings {
		info.Warnings[i] = fmt.Sprintf("shard %d/%d: %s", info.Shard.Index, info.Shard.Count, w)
	}
	return info
}

// shift moves a row's instants by d (those that are set: 0 is absent,
// except the intended send, which is always set).
func (r *row) shift(d int64) {
	r.intended += d
	r.sent = shiftSet(r.sent, d)
	r.wrote = shiftSet(r.wrote, d)
	r.firstTok = shiftSet(r.firstTok, d)
	r.end = shiftSet(r.end, d)
	r.stallAt = shiftSet(r.stallAt, d)
}

func shiftSet(t, d int64) int64 {
	if t == 0 {
		return 0
	}
	return t + d
}

// ErrUnrelated is returned (wrapped) when the inputs given together are
// different runs: pooling their records would describe neither.
var ErrUnrelated = errors.New("different runs cannot be reported as one")

// checkRelated refuses inputs whose run.json say they ran differently: on
// another target or model, or under another load (mode; rate and
// concurrency too unless both are sweep points, which differ by them).
// Inputs without run.json are not judged.
func checkRelated(ins []input) error {
	var first *input
	for i := range ins {
		in := &ins[i]
		if !in.has {
			continue
		}
		if first == nil {
			first = in
			continue
		}
		if d := runDiffers(first.info, in.info); d != "" {
			return fmt.Errorf("%s and %s: %w (%s): compare them with report --compare %s %s",
				filepath.Dir(first.file), filepath.Dir(in.file), ErrUnrelated, d, filepath.Dir(first.file), filepath.Dir(in.file))
		}
	}
	return nil
}

// runDiffers names the first setting in which two runs differ; "" when
// none does.
func runDiffers(a, b results.RunInfo) string {
	type setting struct {
		name string
		a, b any
	}
	ds := []setting{{"target", a.Target, b.Target}, {"model", a.Model, b.Model}, {"load", a.Mode, b.Mode}}
	if len(a.Points) == 0 || len(b.Points) == 0 {
		ds = append(ds, setting{"rate (req/s)", a.OfferedRate, b.OfferedRate}, setting{"concurrency", a.Concurrency, b.Concurrency})
	}
	for _, d := range ds {
		if d.a != d.b {
			return fmt.Sprintf("%s %v against %v", d.name, d.a, d.b)
		}
	}
	return ""
}
