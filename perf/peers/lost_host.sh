#!/bin/bash
# A host lost from a job over the namespace test bed: in-place repair against a full
# rebuild, as root:
#
#   tests/multinode/netns_hosts.sh 3 perf/peers/lost_host.sh [-p PER_HOST] [-r RUNS]
#       [--build DIR]
#
# Each of RUNS jobs runs weft-perf group once over every host of the bed (PER_HOST
# ranks each, default 2, one weftrun --elastic per host): the ranks of the last host die
# together, the first of them killing its weftrun first (--victims PER_HOST
# --kill-launcher), and the survivors on the other hosts measure the detection, the
# repair (weft_group_repair and the first allreduce at the new epoch) and a full rebuild
# (a new context over the survivors: transport, address exchange, world group, first
# allreduce). Prints each job's figures and the medians over the jobs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)/build
per=2
runs=5
while [ $# -gt 0 ]; do
    case "$1" in
    -p) per=$2; shift 2 ;;
    -r) runs=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "lost_host.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ "${NSH_HOSTS:-0}" -ge 2 ] || { echo "run it under tests/multinode/netns_hosts.sh" >&2; exit 2; }
bin=$build/bin
hosts=$NSH_HOSTS
tmp=$NSH_DIR/lost
mkdir -p "$tmp"
(umask 077 && "$bin/weftrun" --new-token >"$tmp/token") # --token-file wants it private
store="$("$NSH_BED" addr 0):29500"
yield=()
if [ $((hosts * per)) -gt "$(nproc)" ]; then
    yield=(env WEFT_YIELD_SPINS=0) # the bed's hosts share this machine's cores
fi

for ((r = 0; r < runs; r++)); do
    pids=()
    for ((i = hosts - 1; i >= 0; i--)); do
        "$NSH_BED" exec $i "${yield[@]}" "$bin/weftrun" --nnodes "$hosts" --node-rank $i \
            --store "$store" --token-file "$tmp/token" -n "$per" --elastic -- \
            "$bin/weft-perf" group -n 1 --victims "$per" --kill-launcher --no-grow --json \
            >"$tmp/run$r.$i" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p" || true
    done
    grep '^{' "$tmp/run$r.0" >"$tmp/run$r.json" || { cat "$tmp/run$r".*; exit 1; }
done

python3 - "$tmp" "$runs" "$hosts" "$per" <<'PY'
import json, statistics, sys
tmp, runs, hosts, per = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
keys = ["detect_us", "repair_us", "rebuild_us"]
got = {k: [] for k in keys}
print(f"# {hosts} hosts x {per} ranks, the last host lost (its weftrun and ranks): "
      f"{runs} jobs")
for r in range(runs):
    doc = json.load(open(f"{tmp}/run{r}.json"))
    row = [doc[k]["median"] for k in keys]
    for k, v in zip(keys, row):
        got[k].append(v)
    print("  job %d: detect %8.1f us, repair %8.1f us, rebuild %9.1f us, rebuild/repair %6.1f"
          % (r, row[0], row[1], row[2], row[2] / row[1]))
med = {k: statistics.median(v) for k, v in got.items()}
ratios = sorted(b / a for a, b in zip(got["repair_us"], got["rebuild_us"]))
print("medians: detect %.1f us, repair %.1f us, rebuild %.1f us: rebuild / repair %.1f "
      "(per job %.1f-%.1f)" % (med["detect_us"], med["repair_us"], med["rebuild_us"],
                               med["rebuild_us"] / med["repair_us"], ratios[0], ratios[-1]))
PY
