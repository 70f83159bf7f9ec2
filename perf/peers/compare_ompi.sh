#!/bin/bash
# Allreduce of weft vs Open MPI side by side on the same sizes, plus two memcpy
# ceilings: one core alone, and each of N processes copying at once (every rank of an
# allreduce reads its input and writes its output while the others do the same, so algbw
# cannot exceed the latter).
#
#   perf/peers/compare_ompi.sh [-n RANKS] [-C COLL] [-b MIN] [-e MAX] [-r REPEATS]
#                              [-d DTYPE] [-o OP] [--build DIR] [--inplace]
#
# COLL is allreduce (the default), reduce_scatter, allgather, broadcast or alltoall.
#
# Both run with default settings: `weftrun -n N weft-perf allreduce` and
# `mpirun --allow-run-as-root --oversubscribe -n N mpi-allreduce-perf`, which measure the
# same way (same sizes, rotated buffers, mean of -n blocking calls, slowest rank, checked
# results). Each sweep runs REPEATS times, alternating weft and Open MPI so that both see
# the same background load; the table shows the median time per size. Sizes up to 1 MiB
# use more iterations than the large ones.
#
# Columns: weft and Open MPI time (us) and busbw (GB/s), the ratio weft busbw / Open MPI
# busbw (> 1: weft is faster), weft busbw as a fraction of single-core memcpy bandwidth,
# and weft and Open MPI algbw as fractions of the N-process memcpy bound.
# Exit status: non-zero if any run failed or reported wrong results.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build"
ranks=2
coll=allreduce
min=8
max=64M
repeats=3
dtype=float
op=sum
inplace=()

while [ $# -gt 0 ]; do
    case "$1" in
    -n) ranks=$2; shift 2 ;;
    -C) coll=$2; shift 2 ;;
    -b) min=$2; shift 2 ;;
    -e) max=$2; shift 2 ;;
    -r) repeats=$2; shift 2 ;;
    -d) dtype=$2; shift 2 ;;
    -o) op=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --inplace) inplace=(--inplace); shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "compare_ompi.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

weftrun="$build/bin/weftrun"
weftperf="$build/bin/weft-perf"
mpiperf="$build/bin/mpi-allreduce-perf"
for f in "$weftrun" "$weftperf" "$mpiperf"; do
    [ -x "$f" ] || { echo "compare_ompi.sh: $f not built (cmake --build $build)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "compare_ompi.sh: mpirun not found" >&2; exit 2; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Two sweeps per library: small sizes need many iterations for stable latencies.
sweeps=("$min 1M 2000 200" "2M $max 20 5")

status=0
for ((rep = 0; rep < repeats; rep++)); do
    for s in "${sweeps[@]}"; do
        read -r lo hi iters warm <<<"$s"
        tag="$rep-$lo"
        "$weftrun" -n "$ranks" -- "$weftperf" "$coll" -b "$lo" -e "$hi" -f 2 -n "$iters" \
            -w "$warm" -d "$dtype" -o "$op" "${inplace[@]}" --json >"$tmp/weft-$tag.json" ||
            status=1
        mpirun --allow-run-as-root --oversubscribe -n "$ranks" "$mpiperf" -C "$coll" -b "$lo" -e "$hi" \
            -f 2 -n "$iters" -w "$warm" -d "$dtype" -o "$op" "${inplace[@]}" --json \
            >"$tmp/ompi-$tag.json" || status=1
    done
done
"$mpiperf" --memcpy 64M >"$tmp/memcpy.txt" || status=1
"$mpiperf" --memcpy 64M "$ranks" >"$tmp/memcpy-n.txt" || status=1

"$py" - "$tmp" "$ranks" "$coll" <<'EOF' || status=1
import glob, json, os, re, statistics, sys

tmp, ranks, coll = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def load(prefix):
    by_size, wrong = {}, 0
    for path in sorted(glob.glob(os.path.join(tmp, prefix + "-*.json"))):
        with open(path) as f:
            text = f.read()
        if not text.strip():
            continue
        doc = json.loads(text)
        for r in doc["results"]:
            by_size.setdefault(r["size"], []).append(r)
            wrong += r["wrong"] or 0
    return by_size, wrong

weft, weft_wrong = load("weft")
ompi, ompi_wrong = load("ompi")
m = re.search(r"([0-9.]+) GB/s", open(os.path.join(tmp, "memcpy.txt")).read())
memcpy = float(m.group(1)) if m else float("nan")
m = re.search(r"([0-9.]+) GB/s per process", open(os.path.join(tmp, "memcpy-n.txt")).read())
bound = float(m.group(1)) if m else float("nan")
if coll == "allreduce":
    factor = 2.0 * (ranks - 1) / ranks
elif coll == "broadcast":
    factor = 1.0
else:
    factor = (ranks - 1) / ranks

def median(rows, key):
    return statistics.median(r[key] for r in rows)

print(f"# {coll}, {ranks} ranks: weft vs Open MPI (median of the runs per size)")
print(f"# single-core memcpy bandwidth: {memcpy:.2f} GB/s; per process with {ranks} "
      f"copying at once (algbw bound): {bound:.2f} GB/s")
print("#%11s %11s %11s %10s %10s %8s %10s %9s %9s" %
      ("size(B)", "weft(us)", "ompi(us)", "weft GB/s", "ompi GB/s", "ratio", "of memcpy",
       "weft/bnd", "ompi/bnd"))
for size in sorted(set(weft) & set(ompi)):
    wt, ot = median(weft[size], "time_us"), median(ompi[size], "time_us")
    wb = size / wt / 1e3 * factor if wt > 0 else 0.0
    ob = size / ot / 1e3 * factor if ot > 0 else 0.0
    ratio = ot / wt if wt > 0 else float("nan")
    frac = wb / memcpy if memcpy > 0 else float("nan")
    wbnd = size / wt / 1e3 / bound if wt > 0 and bound > 0 else float("nan")
    obnd = size / ot / 1e3 / bound if ot > 0 and bound > 0 else float("nan")
    print(" %11d %11.2f %11.2f %10.3f %10.3f %8.2f %10.2f %9.2f %9.2f" %
          (size, wt, ot, wb, ob, ratio, frac, wbnd, obnd))
print(f"# wrong results: weft {weft_wrong}, ompi {ompi_wrong}")
sys.exit(1 if weft_wrong or ompi_wrong else 0)
EOF
exit $status
