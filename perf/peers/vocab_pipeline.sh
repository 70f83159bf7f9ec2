#!/usr/bin/env bash
# The pipeline trainer (examples/torch_pipeline_lm.py) at 4 stages with the baseline
# placement and the vocabulary layers sharded over every stage (vocab-1, vocab-2), the
# three alternating in one run for each vocabulary size, and the table of the paper for
# this machine: throughput (tokens/s, median step), the throughput projected for a core
# per stage from the measured pass times (Schedule.makespan), and the largest and
# smallest peak memory over the stages, both as peak RSS and as the peak above the runtime's RSS before
# the model was made (the model's own memory: parameters, optimizer state, activations).
#
#   perf/peers/vocab_pipeline.sh [-r ROUNDS] [-n STAGES] [-v "32768 65536 ..."] [-- ARGS]
#
# ARGS go to the trainer (defaults below: 8 layers, d 128, sequences of 64, 8 microbatches
# of 1 sequence, 3 steps). On a machine with fewer cores than stages the stages share the
# cores, so the throughput of a balanced pipeline cannot show its gain there: what idles
# on one stage runs another stage's process.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=1 stages=4 vocabs="32768 65536 131072 262144"
while getopts "r:n:v:" opt; do
    case "$opt" in
    r) rounds=$OPTARG ;; n) stages=$OPTARG ;; v) vocabs=$OPTARG ;;
    *) sed -n 9,9p "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
py=${WEFT_PYTHON:-/usr/bin/python3}
"$py" -c "import torch" 2>/dev/null || py=python3
if pgrep -f "weftrun" >/dev/null; then
    echo "vocab_pipeline: weftrun processes are running; measure on a quiet machine" >&2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(--layers 8 --d-model 128 --seq 64 --microbatches 8 --mb-size 1 --steps 3 "$@")
for V in $vocabs; do
    for r in $(seq 1 "$rounds"); do
        for k in 1f1b vocab-1 vocab-2; do
            "$root/build/bin/weftrun" -n "$stages" --timeout 1200 -- "$py" \
                "$root/examples/torch_pipeline_lm.py" --schedule "$k" --vocab "$V" \
                --out "$out/$V.$k.$r.json" "${args[@]}" >"$out/$V.$k.$r.log" 2>&1 ||
                { cat "$out/$V.$k.$r.log"; exit 1; }
        done
    done
done
"$py" - "$out" "$rounds" $vocabs <<'PY'
import json, statistics, sys
out, rounds, vocabs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("# %-7s %-8s %10s %9s %10s %9s %22s %22s %7s" % ("V", "schedule", "tokens/s",
      "vs 1f1b", "projected", "vs 1f1b", "peak RSS max/min MiB", "model mem max/min MiB",
      "spread"))
for V in vocabs:
    base = pbase = None
    for k in ("1f1b", "vocab-1", "vocab-2"):
        runs = [json.load(open("%s/%s.%s.%d.json" % (out, V, k, r))) for r in range(1, rounds + 1)]
        tps = statistics.median(r["tokens_per_s"] for r in runs)
        rss = [statistics.median(r["stage_peak_rss"][q] for r in runs)
               for q in range(len(runs[0]["stage_peak_rss"]))]
        mm = [statistics.median(r["stage_model_mem"][q] for r in runs)
              for q in range(len(runs[0]["stage_model_mem"]))]
        proj = statistics.median(r["projected_tokens_per_s"] for r in runs)
        base, pbase = base or tps, pbase or proj
        print("  %-7s %-8s %10.0f %9.2f %10.0f %9.2f %10.0f / %-9.0f %10.0f / %-9.0f %7.2f" % (
            V, k, tps, tps / base, proj, proj / pbase, max(rss) / 2**20, min(rss) / 2**20,
            max(mm) / 2**20, min(mm) / 2**20, max(mm) / max(min(mm), 1)))
PY
