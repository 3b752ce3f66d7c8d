package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/tokentrace/tokentrace/internal/report"
)

// writeBenchText adds what only bench knows under the report's text.
func writeBenchText(w io.Writer, s *Summary, dir string) {
	fmt.Fprintln(w)
	for _, p := range s.Phases {
		if p.Mode == "open" && p.ScheduledRPS > 0 {
			fmt.Fprintf(w, "schedule %-14s scheduled %.2f req/s, achieved %.2f req/s (%.2f%%), send lag P50 %.3f ms P99 %.3f ms max %.3f ms\n",
				nameOr(p.Name), p.ScheduledRPS, p.AchievedRPS, 100*p.AchievedRPS/p.ScheduledRPS, p.SendLagP50MS, p.SendLagP99MS, p.SendLagMaxMS)
		}
	}
	if c := s.Calibration; c != nil {
		fmt.Fprintf(w, "client    overhead floor %.3f ms (TTFT error P50; P99 %.3f ms), ITL jitter P99 %.3f ms; CPU %.0f%% of %d cores; GC pauses %d (max %.2f ms)\n",
			c.FloorMS, c.TTFTErrP99MS, c.ITLErrP99MS, 100*s.Client.CPUUtil, s.Client.Cores, s.Client.GCPauses, s.Client.GCPauseMaxMS)
	} else {
		fmt.Fprintf(w, "client    no calibration; CPU %.0f%% of %d cores; GC pauses %d (max %.2f ms)\n",
			100*s.Client.CPUUtil, s.Client.Cores, s.Client.GCPauses, s.Client.GCPauseMaxMS)
	}
	if tk := s.Client.Timekeeping; tk.Ticks > 0 {
		fmt.Fprintf(w, "timekeep  %s ticker late P50 %.3f ms P99 %.3f ms max %.3f ms; %d interval(s) over %.0f ms late\n",
			time.Duration(tk.TickPeriodMS*1e6), tk.TickLateP50MS, tk.TickLateP99MS, tk.TickLateMaxMS, tk.StallCount, tk.StallThreshold)
	}
	if n := len(s.Client.Warnings); n > 0 {
		fmt.Fprintf(w, "warnings  %d, weighed against the latencies in the diagnosis (client-bottleneck)\n", n)
	}
	if s.Evidence != nil {
		fmt.Fprintln(w, evidenceLine(s.Evidence))
	}
	report.WriteCompat(w, "compat", s.Compat)
	if s.Sweep != nil && s.Sweep.Line != "" {
		fmt.Fprintln(w, s.Sweep.Line)
	}
	if s.Sweep != nil {
		writeBeforeCells(w, s.Sweep.Points)
	}
	if s.Interrupted {
		fmt.Fprintln(w, "interrupted: the summary covers the requests that finished")
	}
	fmt.Fprintf(w, "results   %s (%d records)\n", dir, s.Records)
}
