#!/bin/bash
# A weft setting swept across "hosts" of the namespace test bed: weft-perf COLL with each
# value of the setting in turn, REPEATS rounds, alternating values within each round;
# prints the median time per size and value and, per size, the fastest value. The rule
# tables of docs/perf.md come from runs of it. Run it inside a bed of HOSTS hosts, as root:
#
#   tests/multinode/netns_hosts.sh HOSTS perf/sweep_hosts.sh [-H HOSTS] [-p PER_HOST]
#       [-C COLL] [-b MIN] [-e MAX] [-n ITERS] [-r REPEATS] [-x ARG]... SETTING VALUE...
#
#   e.g. tests/multinode/netns_hosts.sh 2 perf/sweep_hosts.sh -p 2 -b 256K -e 16M \
#            WEFT_COLL_HIER_SEGMENT 0 256K 1M 4M
#
# -x passes an argument to every weft-perf run (e.g. -x -r -x 1: broadcast's root 1).
# SETTING BUILD compares builds instead: each VALUE is a build directory (bin/weftrun,
# bin/weft-perf), e.g. BUILD /tmp/old/build build.
#
# Ranks are not bound to cores (the bed's hosts share the machine's cores) and give the
# CPU up while they wait when the hosts hold more ranks than the machine has cores, as
# in perf/peers/compare_ompi_hosts.sh.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "$here/.." && pwd)/build/bin
hosts=${NSH_HOSTS:-2}
per=2
coll=allreduce
lo=256K
hi=16M
iters=10
repeats=3
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
    -H) hosts=$2; shift 2 ;;
    -p) per=$2; shift 2 ;;
    -C) coll=$2; shift 2 ;;
    -b) lo=$2; shift 2 ;;
    -e) hi=$2; shift 2 ;;
    -n) iters=$2; shift 2 ;;
    -r) repeats=$2; shift 2 ;;
    -x) extra+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "sweep_hosts.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "usage: sweep_hosts.sh [options] SETTING VALUE..." >&2; exit 2; }
setting=$1
shift
[ "${NSH_HOSTS:-0}" -ge "$hosts" ] ||
    { echo "run it under tests/multinode/netns_hosts.sh $hosts" >&2; exit 2; }
tmp=$NSH_DIR/sweep
mkdir -p "$tmp"
(umask 077 && "$bin/weftrun" --new-token >"$tmp/token")
store="$("$NSH_BED" addr 0):29500"
yield=()
[ $((hosts * per)) -le "$(nproc)" ] || yield=(WEFT_YIELD_SPINS=0)

for ((rep = 0; rep < repeats; rep++)); do
    k=0
    for value in "$@"; do
        run_bin=$bin
        set_env=("$setting=$value")
        if [ "$setting" = BUILD ]; then
            run_bin=$(cd "$value" && pwd)/bin
            set_env=()
        fi
        pids=()
        for ((i = hosts - 1; i >= 0; i--)); do
            "$NSH_BED" exec $i env "${yield[@]}" "${set_env[@]}" "$run_bin/weftrun" \
                --nnodes "$hosts" --node-rank $i --store "$store" --token-file "$tmp/token" \
                -n "$per" -- "$run_bin/weft-perf" "$coll" -b "$lo" -e "$hi" -n "$iters" -w 2 \
                --bind none --json "${extra[@]}" >"$tmp/out.$i" &
            pids+=($!)
        done
        wait "${pids[@]}"
        mv "$tmp/out.0" "$tmp/r$rep-v$k.json"
        k=$((k + 1))
    done
done

python3 - "$tmp" "$setting" "$hosts" "$per" "$coll" "$@" <<'PY'
import json, statistics, sys
tmp, setting, hosts, per, coll, values = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
t, wrong = {}, 0
import glob, os
for k, v in enumerate(values):
    for path in glob.glob(os.path.join(tmp, f"r*-v{k}.json")):
        for r in json.load(open(path))["results"]:
            t.setdefault((r["size"], v), []).append(r["time_us"])
            wrong += r["wrong"] or 0
sizes = sorted({s for s, _ in t})
print(f"# {coll}, {hosts} hosts x {per} ranks, {setting}: median time (us) per size")
print("#%11s " % "size(B)" + " ".join("%11s" % v for v in values) + "  fastest")
for s in sizes:
    med = {v: statistics.median(t[(s, v)]) for v in values if (s, v) in t}
    best = min(med, key=med.get)
    print(" %11d " % s + " ".join("%11.1f" % med[v] for v in values) + f"  {best}")
print(f"# wrong results: {wrong}")
sys.exit(1 if wrong else 0)
PY
