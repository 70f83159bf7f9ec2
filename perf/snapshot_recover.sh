#!/usr/bin/env bash
# snapshot_recover.sh [-n RANKS] [-s STATE_BYTES] [-r ROUNDS] [-b BINDIR]
#
# Time to recover a killed rank's state against restarting from a file checkpoint of
# the same step, over several jobs of `weft-perf snapshot` (default 8 ranks, 256M of state
# per rank): each round runs one job with the state on huge pages (weft_mem_alloc) and
# one with --small-pages, the order alternating. Every job kills its last rank after a committed
# snapshot and restores three ways after the same kill: from the copies into the even
# re-cut (recover), from the copies into the re-cut that keeps each survivor's shard
# (recover_keep) and from the live buffers (recover_live); then it re-reads the files
# (page cache dropped) and starts a fresh job of the survivors' size. Prints each job's
# figures (ms) and, per page size, the medians and the median ratios file restart /
# recover, re-reading only and full restart (detection + fresh job + re-reading).
set -euo pipefail
n=8 state=256M rounds=3 bin=build/bin
while getopts "n:s:r:b:" opt; do
    case $opt in
    n) n=$OPTARG ;;
    s) state=$OPTARG ;;
    r) rounds=$OPTARG ;;
    b) bin=$OPTARG ;;
    *) sed -n '2,13p' "$0" >&2; exit 2 ;;
    esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((r = 0; r < rounds; r++)); do
    order=(huge small)
    ((r % 2)) && order=(small huge) # drift of the machine and the disk falls on both
    for pages in "${order[@]}"; do
        extra=()
        [ "$pages" = small ] && extra=(--small-pages)
        "$bin/weftrun" -n "$n" --elastic --share-token --timeout 600 -- "$bin/weft-perf" snapshot --json \
            --state-bytes "$state" --step-ms 50 -n 2 -w 1 "${extra[@]}" \
            >"$tmp/$pages.$r.json" 2>/dev/null
    done
done
python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
keys = ("detect_us", "repair_us", "recover_us", "recover_keep_us", "recover_live_us",
        "file_restart_us", "file_restart_full_us")
for pages in ("huge", "small"):
    docs = [json.load(open("%s/%s.%d.json" % (tmp, pages, r))) for r in range(rounds)]
    for d in docs:
        assert d["verified"], d
        print("%-5s " % pages + "  ".join("%s %.1f" % (k[:-3], d[k] / 1e3) for k in keys)
              + " (ms)")
    med = {k: statistics.median(d[k] for d in docs) for k in keys}
    print("%s pages, %d jobs, medians (ms): " % (pages, rounds)
          + ", ".join("%s %.1f" % (k[:-3], med[k] / 1e3) for k in keys))
    for what in ("recover", "recover_keep", "recover_live"):
        ro = [d["file_restart_us"] / d[what + "_us"] for d in docs]
        rf = [d["file_restart_full_us"] / d[what + "_us"] for d in docs]
        print("  file restart / %-13s re-reading only %.1fx (%s), full restart %.1fx (%s)"
              % (what + ":", statistics.median(ro), " ".join("%.1f" % x for x in ro),
                 statistics.median(rf), " ".join("%.1f" % x for x in rf)))
PY
