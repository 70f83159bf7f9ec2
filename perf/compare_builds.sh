#!/usr/bin/env bash
# compare_builds.sh [-n RANKS] [-C COLL] [-b MIN] [-e MAX] [-r REPEATS] [-s] [-x ARG]... OLD NEW
#
# The same weft-perf collective sweep from two builds of weft side by side, to check that
# a change left performance where it was: OLD and NEW are build directories (each with
# bin/weftrun and bin/weft-perf). Runs alternate OLD, NEW, OLD, ... REPEATS times each, so
# both see the same background load; the table shows the median time per size and the
# ratio NEW time / OLD time (1.00: no change; below 1: NEW is faster). -x passes an extra
# argument to both weft-perf runs (e.g. -x --inplace). Environment variables reach both.
# -s alternates size by size instead of whole sweeps: slower (a launch per size and run),
# but a machine whose speed drifts over seconds then treats both sides alike.
# Exit status: non-zero if a run failed or reported wrong results.
set -euo pipefail
ranks=2 coll=allreduce min=8 max=64M repeats=5
extra=()
per_size=0
while getopts "n:C:b:e:r:x:sh" opt; do
    case $opt in
    n) ranks=$OPTARG ;;
    C) coll=$OPTARG ;;
    b) min=$OPTARG ;;
    e) max=$OPTARG ;;
    r) repeats=$OPTARG ;;
    x) extra+=("$OPTARG") ;;
    s) per_size=1 ;;
    *) sed -n '2,10p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -eq 2 ]] || { sed -n '2,10p' "$0" >&2; exit 2; }
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd)
for b in "$old" "$new"; do
    for t in weftrun weft-perf; do
        [[ -x "$b/bin/$t" ]] || { echo "compare_builds.sh: $b/bin/$t is not built" >&2; exit 2; }
    done
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # run SIDE INDEX MIN MAX
    local dir=$old
    [[ $1 == new ]] && dir=$new
    "$dir/bin/weftrun" -n "$ranks" --timeout 600 -- "$dir/bin/weft-perf" "$coll" \
        -b "$3" -e "$4" --json ${extra[@]+"${extra[@]}"} >"$tmp/$1.$2.json"
}
if ((per_size)); then
    sizes=$("$new/bin/weftrun" -n 1 -- "$new/bin/weft-perf" "$coll" -b "$min" -e "$max" \
        -n 1 -w 0 --json | /usr/bin/python3 -c \
        'import json,sys; print(" ".join(str(r["size"]) for r in json.load(sys.stdin)["results"]))')
    k=0
    for size in $sizes; do
        for ((i = 1; i <= repeats; i++)); do
            k=$((k + 1))
            run old "$k" "$size" "$size"
            run new "$k" "$size" "$size"
        done
    done
    repeats=$k
else
    for ((i = 1; i <= repeats; i++)); do
        run old "$i" "$min" "$max"
        run new "$i" "$min" "$max"
    done
fi
/usr/bin/python3 - "$tmp" "$repeats" "$ranks" "$coll" "$old" "$new" <<'EOF'
import json, statistics, sys
tmp, repeats, ranks, coll, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
times = {"old": {}, "new": {}}
wrong = 0
for side in times:
    for i in range(1, repeats + 1):
        doc = json.load(open(f"{tmp}/{side}.{i}.json"))
        wrong += doc.get("total_wrong", 0)
        for r in doc["results"]:
            times[side].setdefault(r["size"], []).append(r["time_us"])
runs = {s: len(v) for s, v in times["old"].items()}
print(f"# {coll}, {ranks} ranks, median of {min(runs.values())} alternating runs per size")
print(f"# old: {old}\n# new: {new}")
print(f"# {'size':>10} {'old(us)':>10} {'new(us)':>10} {'new/old':>8}")
ratios = []
for size in sorted(times["old"]):
    o, n = statistics.median(times["old"][size]), statistics.median(times["new"][size])
    ratios.append(n / o)
    print(f"  {size:>10} {o:>10.2f} {n:>10.2f} {n / o:>8.2f}")
print(f"# new/old time: median {statistics.median(ratios):.2f}, "
      f"range {min(ratios):.2f} to {max(ratios):.2f}; wrong results: {wrong}")
sys.exit(1 if wrong else 0)
EOF
