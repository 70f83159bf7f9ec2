#!/usr/bin/env bash
# A large migration between two ranks against weft-perf sendrecv at the same chunk size,
# alternating in one script.
#
#   perf/peers/migrate_vs_sendrecv.sh [-r ROUNDS] [-m MODEL_BYTES] [-o OLD_BUILD] [CHUNK...]
#
# For each chunk size (default 256K 1M) and round: the handover scenario of weft-perf
# migrate (the whole model from one rank to the other, checksummed chunks of
# WEFT_MIGRATE_CHUNK, 5 runs, median), then weft-perf sendrecv of that size twice: with
# --rotate (each message in its own place of a pool larger than the cache: cold memory,
# like the migration's stream of distinct bytes) and as osu_bw (one reused buffer,
# cache-warm). Prints every round and the medians, and the ratios migration / sendrecv.
# With -o, each round also runs the migration from OLD_BUILD (a build directory of
# another version, with bin/weftrun and bin/weft-perf) right after this build's, and the
# medians give the ratio this build / OLD_BUILD.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=5 model=256M old=
while getopts "r:m:o:" opt; do
    case "$opt" in
    r) rounds=$OPTARG ;;
    m) model=$OPTARG ;;
    o) old=$(cd "$OPTARG" && pwd) ;;
    *) echo "usage: $0 [-r ROUNDS] [-m MODEL_BYTES] [-o OLD_BUILD] [CHUNK...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
chunks=("$@")
[ $# -eq 0 ] && chunks=(256K 1M)
weftrun="$root/build/bin/weftrun" perf="$root/build/bin/weft-perf"
py=/usr/bin/python3

# The handover's GB/s of the build in directory $1 (bin/weftrun, bin/weft-perf).
handover() {
    WEFT_MIGRATE_CHUNK=$chunk "$1/bin/weftrun" -n 2 -- "$1/bin/weft-perf" migrate \
        --scenario handover --no-baselines -n 5 --model-bytes "$model" |
        awk '$1 == "handover" { print $5 }'
}

for chunk in "${chunks[@]}"; do
    mig=() cold=() warm=() mold=()
    for ((r = 0; r < rounds; r++)); do
        m=$(handover "$root/build")
        if [ -n "$old" ]; then
            o=$(handover "$old")
            mold+=("$o")
            echo "# chunk $chunk round $r: migration of $old $o GB/s"
        fi
        c=$("$weftrun" -n 2 -- "$perf" sendrecv -b "$chunk" -e "$chunk" -n 20 -w 3 --rotate \
            | awk '$1 ~ /^[0-9]+$/ { print $7; exit }')
        w=$("$weftrun" -n 2 -- "$perf" sendrecv -b "$chunk" -e "$chunk" -n 20 -w 3 \
            | awk '$1 ~ /^[0-9]+$/ { print $7; exit }')
        mig+=("$m") cold+=("$c") warm+=("$w")
        echo "# chunk $chunk round $r: migration $m GB/s, sendrecv --rotate $c GB/s, sendrecv $w GB/s"
    done
    "$py" - "$chunk" "$model" "${mig[*]}" "${cold[*]}" "${warm[*]}" "${mold[*]}" <<'PY'
import statistics, sys
chunk, model = sys.argv[1], sys.argv[2]
m, c, w = ([float(v) for v in a.split()] for a in sys.argv[3:6])
o = [float(v) for v in sys.argv[6].split()]
mm, mc, mw = statistics.median(m), statistics.median(c), statistics.median(w)
print("chunk %s, %s handed over, %d rounds: migration %.2f GB/s (medians); "
      "sendrecv --rotate %.2f GB/s: %.2fx (per round %s); sendrecv (one buffer) %.2f GB/s: "
      "%.2fx" % (chunk, model, len(m), mm, mc, mm / mc,
                 " ".join("%.2f" % (a / b) for a, b in zip(m, c)), mw, mm / mw))
if o:
    mo = statistics.median(o)
    print("chunk %s: this build %.2f GB/s, the old build %.2f GB/s (medians): %.3fx "
          "(per round %s)" % (chunk, mm, mo, mm / mo,
                              " ".join("%.2f" % (a / b) for a, b in zip(m, o))))
PY
done
