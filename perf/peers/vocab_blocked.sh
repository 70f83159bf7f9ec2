#!/usr/bin/env bash
# The output layer that never holds its logits against the one that does, alternating in
# one script: weft-perf vocab with --block 0 and --block ROWS, each in its own process
# (the memory the run adds is a process's), ROUNDS times, one algorithm.
#
#   perf/peers/vocab_blocked.sh [-r ROUNDS] [-n RANKS] [-a ALGO] [-b ROWS] [-t TOKENS]
#                               [-H HIDDEN] [-s SHARD_ROWS]
#
# Defaults: 3 rounds, 2 ranks, alg2, blocks of 4096 rows, 256 tokens, hidden 512 and a
# shard of 65536 rows (V = ranks x shard). Prints every run, then the medians and the
# ratios blocked / whole: time per microbatch (forward + backward, slowest rank), the
# working memory the library accounts for (weft_vocab_mb_memory), and the memory the run
# added to the process (VmHWM). The floor beside them: the blocked layer computes the
# logits once more in backward, so with GEMMs dominating its time is bounded below by
# (GEMMs + 1) / GEMMs of the whole one's (alg2: 4/3, alg1: 4/3).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=3 ranks=2 algo=alg2 block=4096 tokens=256 hidden=512 shard=65536
while getopts "r:n:a:b:t:H:s:" opt; do
    case "$opt" in
    r) rounds=$OPTARG ;; n) ranks=$OPTARG ;; a) algo=$OPTARG ;; b) block=$OPTARG ;;
    t) tokens=$OPTARG ;; H) hidden=$OPTARG ;; s) shard=$OPTARG ;;
    *) sed -n 5,6p "$0" >&2; exit 2 ;;
    esac
done
bin=$root/build/bin
if pgrep -f "weftrun|weft-perf" >/dev/null; then
    echo "vocab_blocked: other weftrun or weft-perf processes are running; measure on a quiet machine" >&2
fi
V=$((ranks * shard))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { # run BLOCK ROUND
    OPENBLAS_NUM_THREADS=1 "$bin/weftrun" -n "$ranks" -- "$bin/weft-perf" vocab --json -n 3 -w 1 \
        --tokens "$tokens" --hidden "$hidden" --vocab "$V" --algos "$algo" --block "$1" \
        >"$out/$1.$2.json"
}
echo "# vocab_blocked: $ranks ranks, $algo, n=$tokens h=$hidden V/P=$shard, block $block rows, $rounds rounds"
for r in $(seq 1 "$rounds"); do
    for b in 0 "$block"; do
        run "$b" "$r"
        python3 - "$out/$b.$r.json" "$b" "$r" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); row = d["rows"][0]
print("round %s block %6s: total %8.1f ms  fwd %8.1f  bwd %8.1f  working %8.1f MiB  added %8.1f MiB"
      % (sys.argv[3], sys.argv[2], row["total_ms"], row["fwd_ms"], row["bwd_ms"],
         row["peak_act_bytes"] / 2**20, d["rss_growth_bytes"] / 2**20))
PY
    done
done
python3 - "$out" "$block" "$rounds" <<'PY'
import json, statistics, sys
out, block, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def med(b, key):
    vals = []
    for r in range(1, rounds + 1):
        d = json.load(open("%s/%s.%d.json" % (out, b, r)))
        vals.append(d["rss_growth_bytes"] if key == "added" else d["rows"][0][key])
    return statistics.median(vals)
print("# medians        %12s %12s %8s" % ("whole", "blocked", "ratio"))
for key, unit, scale in (("total_ms", "ms", 1), ("peak_act_bytes", "MiB", 2**20),
                         ("added", "MiB", 2**20)):
    w, b = med("0", key) / scale, med(block, key) / scale
    print("  %-14s %9.1f %s %9.1f %s %8.3f" % (key, w, unit, b, unit, b / w if w else 0))
PY
