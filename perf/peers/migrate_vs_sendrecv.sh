#!/usr/bin/env bash
# A large migration between two ranks against weft-perf sendrecv at the same chunk size,
# alternating in one script.
#
#   perf/peers/migrate_vs_sendrecv.sh [-r ROUNDS] [-m MODEL_BYTES] [CHUNK...]
#
# For each chunk size (default 256K 1M) and round: the handover scenario of weft-perf
# migrate (the whole model from one rank to the other, checksummed chunks of
# WEFT_MIGRATE_CHUNK, 5 runs, median), then weft-perf sendrecv of that size twice: with
# --rotate (each message in its own place of a pool larger than the cache: cold memory,
# like the migration's stream of distinct bytes) and as osu_bw (one reused buffer,
# cache-warm). Prints every round and the medians, and the ratios migration / sendrecv.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=5 model=256M
while getopts "r:m:" opt; do
    case "$opt" in
    r) rounds=$OPTARG ;;
    m) model=$OPTARG ;;
    *) echo "usage: $0 [-r ROUNDS] [-m MODEL_BYTES] [CHUNK...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
chunks=("$@")
[ $# -eq 0 ] && chunks=(256K 1M)
weftrun="$root/build/bin/weftrun" perf="$root/build/bin/weft-perf"
py=/usr/bin/python3

for chunk in "${chunks[@]}"; do
    mig=() cold=() warm=()
    for ((r = 0; r < rounds; r++)); do
        m=$(WEFT_MIGRATE_CHUNK=$chunk "$weftrun" -n 2 -- "$perf" migrate --scenario handover \
            --no-baselines -n 5 --model-bytes "$model" | awk '$1 == "handover" { print $5 }')
        c=$("$weftrun" -n 2 -- "$perf" sendrecv -b "$chunk" -e "$chunk" -n 20 -w 3 --rotate \
            | awk '$1 ~ /^[0-9]+$/ { print $7; exit }')
        w=$("$weftrun" -n 2 -- "$perf" sendrecv -b "$chunk" -e "$chunk" -n 20 -w 3 \
            | awk '$1 ~ /^[0-9]+$/ { print $7; exit }')
        mig+=("$m") cold+=("$c") warm+=("$w")
        echo "# chunk $chunk round $r: migration $m GB/s, sendrecv --rotate $c GB/s, sendrecv $w GB/s"
    done
    "$py" - "$chunk" "$model" "${mig[*]}" "${cold[*]}" "${warm[*]}" <<'PY'
import statistics, sys
chunk, model = sys.argv[1], sys.argv[2]
m, c, w = ([float(v) for v in a.split()] for a in sys.argv[3:6])
mm, mc, mw = statistics.median(m), statistics.median(c), statistics.median(w)
print("chunk %s, %s handed over, %d rounds: migration %.2f GB/s (medians); "
      "sendrecv --rotate %.2f GB/s: %.2fx (per round %s); sendrecv (one buffer) %.2f GB/s: "
      "%.2fx" % (chunk, model, len(m), mm, mc, mm / mc,
                 " ".join("%.2f" % (a / b) for a, b in zip(m, c)), mw, mm / mw))
PY
done
