#!/usr/bin/env python3
"""Judge a simulated run by Splitwise's SLOs: percentiles of per-request
slowdown against the same request alone on a DGX-A100 (docs/performance.md,
"A published result").

Each request's baseline is read off a run of requests alone (ALONE, one
at a time on the A100 replica) by linear interpolation over the prompt's
length, as the artifact reads its performance model (notebooks/plots.ipynb,
get_data; perf_model.py, add_baseline_perf): its TTFT and its time per
decode step; the baseline E2E is TTFT + TBT x (output tokens - 1). The
slowdowns are TTFT, TBT and E2E (timing) over their baselines; each of P50/P90/P99 of each must stay
under Splitwise's limits (TTFT 2/3/6, TBT and E2E 1.25/1.5/5).

Usage: slowdown.py ALONE_DIR RUN_DIR   (prints the nine percentiles and
PASS or FAIL; exit status 0 on PASS, 1 on FAIL)
"""
import bisect
import json
import sys

LIMITS = {"ttft": (2, 3, 6), "tbt": (1.25, 1.5, 5), "e2e": (1.25, 1.5, 5)}
QS = (0.5, 0.9, 0.99)


def records(folder):
    with open(folder + "/requests.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("status") == 200 and r.get("first_token_ns") and r.get("output_tokens", 0) >= 1:
                yield r


def timing(r):
    """Splitwise's TTFT, time between tokens and E2E of a record, in s.

    The artifact ends TTFT when the prompt phase ends (task.py, PromptTask
    complete: the prompt machine emits the first token) and takes TBT as
    (E2E - TTFT) / output tokens (scheduler.py, tbt_times). A disaggregated
    record's prompt phase is its prefill hop (prefill_queue + prefill); the
    KV transfer and the decode side's first step then count in TBT, as the
    artifact counts them. Under vLLM's protocol the client's first token
    comes from the decode side's first step instead (first_token_ns)."""
    e2e = (r["end_ns"] - r["sent_ns"]) / 1e9
    pre = [s["ns"] for s in r.get("timing") or [] if s.get("hop") == "prefill"]
    ttft = sum(pre) / 1e9 if pre else (r["first_token_ns"] - r["sent_ns"]) / 1e9
    return ttft, (e2e - ttft) / r["output_tokens"], e2e


def alone_tbt(r):
    """A request alone: its time per decode step, in s (None for one token)."""
    n = r["output_tokens"]
    return (r["end_ns"] - r["first_token_ns"]) / 1e9 / (n - 1) if n > 1 else None


class Curve:
    """Median of ys at each x, linearly interpolated, flat beyond the ends."""

    def __init__(self, pairs):
        by = {}
        for x, y in pairs:
            by.setdefault(x, []).append(y)
        self.xs = sorted(by)
        self.ys = [sorted(by[x])[len(by[x]) // 2] for x in self.xs]

    def at(self, x):
        i = bisect.bisect_left(self.xs, x)
        if i == 0:
            return self.ys[0]
        if i == len(self.xs):
            return self.ys[-1]
        x0, x1, y0, y1 = self.xs[i - 1], self.xs[i], self.ys[i - 1], self.ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def quantile(vs, q):
    """Linear interpolation between closest ranks (pandas' default)."""
    vs = sorted(vs)
    pos = q * (len(vs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(vs) - 1)
    return vs[lo] + (vs[hi] - vs[lo]) * (pos - lo)


def main(alone, run):
    alone_recs = list(records(alone))
    b_ttft = Curve((r["input_tokens"], timing(r)[0]) for r in alone_recs)
    b_tbt = Curve((r["input_tokens"], alone_tbt(r)) for r in alone_recs if alone_tbt(r) is not None)
    slow = {"ttft": [], "tbt": [], "e2e": []}
    for r in records(run):
        ttft, tbt, e2e = timing(r)
        p, n = r["input_tokens"], r["output_tokens"]
        slow["ttft"].append(ttft / b_ttft.at(p))
        slow["tbt"].append(tbt / b_tbt.at(p))
        slow["e2e"].append(e2e / (b_ttft.at(p) + b_tbt.at(p) * (n - 1)))
    ok = True
    out = []
    for m, lims in LIMITS.items():
        for q, lim in zip(QS, lims):
            v = quantile(slow[m], q)
            ok = ok and v < lim
            out.append("%s:p%d=%.2f<%g%s" % (m, round(q * 100), v, lim, "" if v < lim else "!"))
    print(("PASS" if ok else "FAIL") + " slowdown " + " ".join(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
