package bench

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"time"

	"github.com/tokentrace/tokentrace/internal/stats"
)

// gcPauses reads the runtime's GC pause histogram.
func gcPauses() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// keptRateShare is the share of its scheduled rate an open-loop phase
// must achieve for health to say the client kept its schedule (below it,
// a warning).
const keptRateShare = 0.99

// health judges the client over the run and words its warnings.
func health(cpu, wall time.Duration, gc0, gc1 *metrics.Float64Histogram, phases []PhaseResult, cal *ClientFloor) ClientHealth {
	h := ClientHealth{Cores: runtime.NumCPU()}
	if wall > 0 {
		h.CPUUtil = cpu.Seconds() / (wall.Seconds() * float64(h.Cores))
	}
	if gc0 != nil && gc1 != nil && len(gc0.Counts) == len(gc1.Counts) {
		var n uint64
		diff := make([]uint64, len(gc1.Counts))
		for i := range gc1.Counts {
			diff[i] = gc1.Counts[i] - gc0.Counts[i]
			n += diff[i]
		}
		h.GCPauses = int64(n)
		var c uint64
		k := uint64(stats.Rank(99, int64(n))) // nearest rank of the P99 pause
		for i, d := range diff {
			if d == 0 {
				continue
			}
			c += d
			hi := gc1.Buckets[i+1]
			if hi > 1e9 {
				hi = gc1.Buckets[i]
			}
			h.GCPauseMaxMS = hi * 1e3
			if c >= k && h.GCPauseP99MS == 0 {
				h.GCPauseP99MS = hi * 1e3
			}
		}
	}
	for _, p := range phases {
		h.SendLagP99MS = max(h.SendLagP99MS, p.SendLagP99MS)
		h.SendLagMaxMS = max(h.SendLagMaxMS, p.SendLagMaxMS)
		if p.Mode == "open" && p.ScheduledRPS > 0 && p.AchievedRPS > 0 && p.AchievedRPS < keptRateShare*p.ScheduledRPS {
			h.Warnings = append(h.Warnings, fmt.Sprintf("phase %q: achieved %.1f req/s of %.1f scheduled (%.1f%%)",
				nameOr(p.Name), p.AchievedRPS, p.ScheduledRPS, 100*p.AchievedRPS/p.ScheduledRPS))
		}
	}
	if h.SendLagP99MS > 5 {
		h.Warnings = append(h.Warnings, fmt.Sprintf("schedule lag: P99 %.1f ms between the intended and the actual send of requests only the schedule held", h.SendLagP99MS))
	}
	if h.CPUUtil > 0.9 {
		h.Warnings = append(h.Warnings, fmt.Sprintf("CPU saturated: the process used %.0f%% of %d cores", 100*h.CPUUtil, h.Cores))
	}
	if h.GCPauseMaxMS > 5 {
		h.Warnings = append(h.Warnings, fmt.Sprintf("GC pauses up to %.1f ms during the run", h.GCPauseMaxMS))
	}
	if cal != nil && cal.TTFTErrP99MS > 5 {
		h.Warnings = append(h.Warnings, fmt.Sprintf("calibration: this client's TTFT error reached %.1f ms at P99 on this host", cal.TTFTErrP99MS))
	}
	return h
}

func nameOr(s string) string {
	if s == "" {
		return "run"
	}
	return s
}
