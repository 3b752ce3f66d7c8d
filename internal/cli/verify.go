package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/verify"
	"github.com/tokentrace/tokentrace/internal/whatif"
)

func newVerifyCmd() *cobra.Command {
	v := verifyFlags{draws: 5}
	var slo, output, format, profile, gpuFile string
	format = "text"
	var g *flagGroup
	cmd := &cobra.Command{
		Use:   "verify BEFORE AFTER | verify --ledger FILE",
		Short: "Check a remedy: the twin's prediction for the change beside what the run after it measured",
		Long: `verify reads two results folders, a run before a remedy and one after it,
finds what changed — the server's configuration evidence (run.json: vLLM's
cache_config_info, serve's scheduler_config_info, a tokentrace gateway's
config info: its admission limit, balancer and replicas, as gateway apply
sets them), the embedded engine's
settings, bench's own load — or takes --applied LEVER=VALUE where the
evidence cannot tell, re-simulates the first run's twin with exactly that
change, and sets the prediction beside the measurement: TTFT, TPOT, ITL and
E2E at P50/P95/P99, throughput and (with --slo) goodput, each with the
twin's 80 % interval, the error and a verdict (docs/report.md, "Verify").
A change the twin cannot model is named, not ignored.

--ledger FILE appends the verify to a JSONL file; 3 or more verifies of the
lever there widen each row's interval to the 80th percentile of their
|error| at that row where larger (verify says so). verify --ledger FILE
alone summarises the twin's track record per lever.

Formats: text (default), md, json, html (--output/-o; html defaults to
verify.html in AFTER). Exit status: 0 when written, 2 for bad flags or
results that cannot be read, 1 when the output cannot be written.`,
		Example: `  tokentrace verify results/before results/after
  tokentrace verify results/before results/after --applied max-num-seqs=4 --profile h100.yaml --ledger twin.jsonl
  tokentrace verify --ledger twin.jsonl`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && v.ledger != "" || len(args) == 2 {
				return nil
			}
			return fmt.Errorf("verify takes two results folders, BEFORE and AFTER (or --ledger FILE alone)")
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return trackRecord(v.ledger, format, cmd.OutOrStdout())
			}
			slos, err := latency.ParseSLOs(slo)
			if err != nil {
				return usageError(fmt.Errorf("verify: %w", field.Wrap("slo", err)), g)
			}
			cfg, err := verifyConfig(args[0], args[1], v, profile, gpuFile, slos)
			if err != nil {
				return usageError(fmt.Errorf("verify: %w", err), g)
			}
			res, err := verify.Verify(cmd.Context(), cfg)
			if err != nil {
				return usageError(fmt.Errorf("verify: %w", err), g)
			}
			if v.ledger != "" {
				if err := verify.AppendLedger(v.ledger, res, time.Now()); err != nil {
					return fmt.Errorf("verify: %w", err)
				}
			}
			def := ""
			if format == "html" {
				def = filepath.Join(args[1], "verify.html")
			}
			if err := writeReport(verifyOutput{res, format}, output, def, cmd.OutOrStdout()); err != nil {
				return fmt.Errorf("verify: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	g = newFlagGroup(f, "", "")
	bindSLOFlag(g, &slo, `objectives goodput is judged on, e.g. "ttft:p99<=1.5s,tpot:p99<=50ms"`)
	g.bind("format", "output format: "+strings.Join(verify.Formats, ", "), func(fs *pflag.FlagSet, n, u string) {
		fs.StringVarP(&format, n, "f", format, u)
	})
	bindOutputFile(g, &output, "write to this file, - for standard output (html defaults to verify.html in AFTER)")
	g.stringVar(&profile, "profile", "a measured BEFORE's performance profile (tokentrace calibrate, calibrated on BEFORE)")
	bindGPUFileFlag(g, &gpuFile)
	bindVerifyFlags(g, &v)
	return cmd
}

// verifyOutput writes a verify in its format.
type verifyOutput struct {
	r      *verify.Result
	format string
}

func (o verifyOutput) Write(w io.Writer) error { return o.r.Write(w, o.format) }

// verifyConfig reads both folders, rebuilds BEFORE's twin (and AFTER's
// workload, for a change of load) and parses --applied.
func verifyConfig(before, after string, v verifyFlags, profile, gpuFile string, slos []latency.SLO) (verify.Config, error) {
	cfg := verify.Config{SLOs: slos, Draws: v.draws}
	var err error
	if cfg.Past, err = pastVerifies(v.ledger); err != nil {
		return cfg, err
	}
	for _, p := range []struct {
		dir string
		run *verify.Run
	}{{before, &cfg.Before}, {after, &cfg.After}} {
		if st, err := os.Stat(p.dir); err != nil || !st.IsDir() {
			return cfg, fmt.Errorf("%s: not a results folder", p.dir)
		}
		rec, err := recordedRun(p.dir)
		if err != nil {
			return cfg, err
		}
		if *p.run, err = verify.ReadRun(p.dir, rec.Run); err != nil {
			return cfg, err
		}
	}
	for _, a := range v.applied {
		c, err := verify.ParseApplied(a)
		if err != nil {
			return cfg, err
		}
		cfg.Applied = append(cfg.Applied, c)
	}
	rb, err := recordedRun(before)
	if err != nil {
		return cfg, err
	}
	t, skip, err := whatif.TwinOf(before, rb, profile, gpuFile)
	if err != nil {
		return cfg, err
	}
	if skip != "" {
		return cfg, errors.New("no twin of " + before + ": " + skip)
	}
	cfg.Twin = verify.Twin{Deployment: t.Deployment, Workload: t.Workload, Basis: t.Basis, Notes: t.Notes, Seed: max(t.Seed, 1)}
	if ra, err := recordedRun(after); err == nil {
		if ta, skip, err := whatif.TwinOf(after, ra, profile, gpuFile); err == nil && skip == "" {
			cfg.AfterWorkload, cfg.AfterSeed = &ta.Workload, max(ta.Seed, 1)
			cfg.AfterPD = verify.PDOf(ta.Deployment)
		}
	}
	if net := measuredTransport(cfg.Before); net > 0 && cfg.Twin.Workload.Network == 0 {
		cfg.Twin.Workload.Network = net
		if cfg.AfterWorkload != nil && cfg.AfterWorkload.Network == 0 {
			cfg.AfterWorkload.Network = net
		}
		cfg.Twin.Notes = append(cfg.Twin.Notes, fmt.Sprintf("the twin adds the first run's measured client transport, %v each way (as simulate --like)", net))
	}
	return cfg, nil
}

// measuredTransport is a measured run's one-way client transport, as
// simulate --like measures it (0 for a simulated run, or none known).
func measuredTransport(r verify.Run) time.Duration {
	if r.Info.Simulated {
		return 0
	}
	lk, err := simulate.LikeRun(r.Dir, r.Config == nil || r.Config.Options.Endpoint != simulate.EndpointCompletions, 1)
	if err != nil {
		return 0
	}
	return lk.Network
}

// pastVerifies are the ledger's entries at path before this verify (none
// without a ledger or where the file does not exist yet).
func pastVerifies(path string) ([]verify.Entry, error) {
	if path == "" {
		return nil, nil
	}
	entries, err := readLedger(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}

// trackRecord summarises a ledger.
func trackRecord(path, format string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("verify: ledger: %w", err)}
	}
	defer func() { _ = f.Close() }() // read only
	entries, err := verify.ReadLedger(f)
	if err != nil {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("verify: %s: %w", path, err)}
	}
	return verify.WriteTrackRecord(w, verify.TrackRecord(entries), format)
}
