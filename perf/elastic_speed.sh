#!/usr/bin/env bash
# elastic_speed.sh [-n RANKS] [-r RUNS] [-s STEPS] [-k KILL_STEP] [-b BINDIR]
#
# Training speed of the example trainer after a replacement joins, against its speed
# before the failure, in the same run: member 1 kills itself at KILL_STEP, weftrun
# --elastic --replace starts a replacement, the survivors repair and wait for it. The
# trainer prints the median step time before the first edit and after the last, both
# with RANKS ranks. Prints each run's figures and the median ratio (after/before speed).
set -euo pipefail
n=4 runs=5 steps=20000 kill_step=8000 bin=build/bin
while getopts "n:r:s:k:b:" opt; do
    case $opt in
    n) n=$OPTARG ;;
    r) runs=$OPTARG ;;
    s) steps=$OPTARG ;;
    k) kill_step=$OPTARG ;;
    b) bin=$OPTARG ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
    esac
done
ratios=()
for ((i = 1; i <= runs; i++)); do
    out=$("$bin/weftrun" -n "$n" --elastic --replace --max-restarts 2 --timeout 300 -- \
        "$bin/weft-example-trainer" --steps "$steps" --kill-rank 1 --kill-step "$kill_step" \
        --wait-replacement 30000 2>&1) || { echo "$out" >&2; exit 1; }
    line=$(grep '^step time:' <<<"$out") || { echo "$out" >&2; exit 1; }
    echo "run $i: $line"
    ratios+=("$(sed -E 's/.*speed ([0-9.]+)x.*/\1/' <<<"$line")")
done
printf '%s\n' "${ratios[@]}" | sort -g | awk -v n="$n" '
    { r[NR] = $1 }
    END { m = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2;
          printf "%d ranks: speed after the replacement / before the failure: median %.2fx " \
                 "(min %.2f, max %.2f, %d runs)\n", n, m, r[1], r[NR], NR }'
