#!/usr/bin/env bash
# repair_builds.sh [-n RANKS] [-r ROUNDS] [-k KILLS] OLD NEW
#
# Repair time of two builds of weft side by side, with shared-memory collectives on, and
# NEW with them off as the reference: `weftrun -n RANKS --elastic --share-token --
# weft-perf group -n KILLS --json` (each run SIGKILLs a rank KILLS times; repair = weft_group_repair + the
# first allreduce of the new epoch, the maximum over survivors; rebuild = a new context,
# its world and first allreduce). OLD and NEW are build directories (bin/weftrun,
# bin/weft-perf). Rounds alternate OLD-on, NEW-on, NEW-off, so all three see the same
# background load; the table gives the median over rounds of each run's median, and the
# ratios rebuild/repair and NEW/OLD.
set -euo pipefail
ranks=8 rounds=3 kills=10
while getopts "n:r:k:h" opt; do
    case $opt in
    n) ranks=$OPTARG ;;
    r) rounds=$OPTARG ;;
    k) kills=$OPTARG ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -eq 2 ]] || { sed -n '2,12p' "$0" >&2; exit 2; }
old=$1 new=$2
py=$(command -v python3)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
one() { # label build shm round
    local f="$out/$1.$4.json"
    # weft-perf starts the replacements itself: the ranks need the token (a weftrun that
    # does not know --share-token hands it on anyway).
    local share=()
    case $("$2/bin/weftrun" --help) in *--share-token*) share=(--share-token) ;; esac
    WEFT_COLL_SHM=$3 "$2/bin/weftrun" -n "$ranks" --elastic "${share[@]}" --timeout 300 -- \
        "$2/bin/weft-perf" group -n "$kills" --json >"$f" 2>"$out/$1.$4.err" ||
        { echo "repair_builds: $1 round $4 failed:" >&2; tail -5 "$out/$1.$4.err" >&2; exit 1; }
}
for ((i = 0; i < rounds; i++)); do
    one old-on "$old" on "$i"
    one new-on "$new" on "$i"
    one new-off "$new" off "$i"
done
"$py" - "$out" "$rounds" "$ranks" <<'PY'
import json, sys, statistics as st, glob, os
d, rounds, ranks = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def runs(label):
    rows = []
    for f in sorted(glob.glob(os.path.join(d, label + ".*.json"))):
        for line in open(f):
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows
res = {}
print(f"# repair at {ranks} ranks, {rounds} alternating rounds (medians over rounds of each run's median)")
print(f"# {'build':8} {'repair(us)':>11} {'per round':>26} {'rebuild(us)':>12} {'rebuild/repair':>15}")
for label in ("old-on", "new-on", "new-off"):
    r = runs(label)
    rep = [x["repair_us"]["median"] for x in r]
    reb = [x["rebuild_us"]["median"] for x in r]
    res[label] = (st.median(rep), st.median(reb))
    print(f"  {label:8} {st.median(rep):11.0f} {' '.join('%.0f' % v for v in rep):>26} "
          f"{st.median(reb):12.0f} {st.median(reb) / st.median(rep):14.0f}x")
print(f"# repair new/old with shared memory on: {res['new-on'][0] / res['old-on'][0]:.2f}")
PY
