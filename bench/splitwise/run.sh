#!/bin/sh
# Splitwise's homogeneous comparison on the twin (docs/performance.md, "A
# published result"): Llama-2-70B on DGX-H100 (TP8 per instance), the Azure
# code trace's lengths at 130 req/s (Poisson, two minutes), SLOs as
# multiples of each percentile run alone on a DGX-A100. Prints the SLOs and,
# for the deployments either side of the fewest machines each way, PASS/FAIL
# by those latency SLOs and by Splitwise's own, percentiles of per-request
# slowdown (bench/splitwise/slowdown, built with go). CASES="P:D …" picks
# others (0 prefill replicas is aggregated); EXTRA adds flags to the
# DGX-H100 runs, e.g. EXTRA="--num-gpu-blocks-override 13165"; OUT=DIR
# keeps the runs there.
# Usage: bench/splitwise/run.sh [TOKENTRACE] [TRACE_DIR] [PROFILE_DIR|defaults]
set -eu
tt=${1:-tokentrace}
data=${2:-../shared/data/azure-llm-2023}
here=$(dirname "$0")
prof=${3:-$here}
if [ -n "${OUT:-}" ]; then # keep the runs there
	out=$OUT
	mkdir -p "$out"
	rm -rf "$out/alone"
else
	out=$(mktemp -d)
	trap 'rm -rf "$out"' EXIT
fi
judge=$(cd "$out" && pwd)/slowdown # Splitwise's slowdown judge, built once
(cd "$here/slowdown" && go build -o "$judge" .)
lengths="--input-tokens trace:$data/code.csv --output-tokens trace:$data/code.csv --max-model-len 16384"
with() { # GPU
	if [ "$prof" = defaults ]; then return; fi
	case $1 in H100-SXM) echo "--profile $prof/llama2-70b-h100-tp8.yaml" ;; *) echo "--profile $prof/llama2-70b-a100-tp8.yaml" ;; esac
}
# shellcheck disable=SC2086
"$tt" simulate --model Llama-2-70B --gpu A100-80GB-SXM --tensor-parallel-size 8 $(with A100) $lengths \
	--rate 0.01 --requests 2000 --output-dir "$out/alone" >/dev/null 2>&1
# ms at a percentile of a metric of the run alone, times a multiplier
at() { "$tt" report "$out/alone" --format json 2>/dev/null | python3 -c "
import json,sys
m={x['metric']:x for x in json.load(sys.stdin)['metrics']}
print('%.1fms' % (m['$1']['$2_ms']*$3))"; }
slo="ttft:p50<=$(at ttft p50 2),ttft:p90<=$(at ttft p90 3),ttft:p99<=$(at ttft p99 6)"
slo="$slo,tpot:p50<=$(at tpot p50 1.25),tpot:p90<=$(at tpot p90 1.5),tpot:p99<=$(at tpot p99 5)"
slo="$slo,e2e:p50<=$(at e2e p50 1.25),e2e:p90<=$(at e2e p90 1.5),e2e:p99<=$(at e2e p99 5)"
echo "SLOs: $slo"
run() { # PREFILL DECODE
	pd=""
	if [ "$1" -gt 0 ]; then pd="--prefill-replicas $1 --kv-link rdma-400g"; fi
	lat=PASS
	rm -rf "${out:?}/$1-$2"
	# shellcheck disable=SC2086
	"$tt" simulate --model Llama-2-70B --gpu H100-SXM --tensor-parallel-size 8 $(with H100-SXM) $lengths \
		--rate 130 --requests 15600 --replicas "$2" $pd ${EXTRA:-} --slo "$slo" --output-dir "$out/$1-$2" >"$out/$1-$2.txt" 2>&1 || lat=FAIL
	sd=$("$judge" "$out/alone" "$out/$1-$2" || true)
	echo "prefill $1 decode $2 ($(($1 + $2)) machines): latency $lat; $sd"
}
for pd in ${CASES:-0:43 0:44 21:4 22:3 22:4 20:3}; do
	run "${pd%%:*}" "${pd##*:}"
done
