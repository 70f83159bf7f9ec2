#!/bin/bash
# weft vs Open MPI across "hosts" of the namespace test bed, over the same veth pairs and
# bridge: allreduce f32 sum, or COLL (reduce_scatter, allgather, broadcast, alltoall).
# Run it inside a bed of HOSTS + 1 hosts, as root:
#
#   tests/multinode/netns_hosts.sh 3 perf/peers/compare_ompi_hosts.sh [-H HOSTS]
#       [-p PER_HOST] [-C COLL] [-b MIN] [-e MAX] [-r REPEATS] [--startup] [--build DIR]
#
# Ranks run on hosts 0 .. HOSTS-1 (default 2), PER_HOST each (default 2). weft: one
# weftrun per host (node 0 serving the store) running weft-perf allreduce. Open MPI:
# mpirun runs in the last host's network namespace (so that it starts every rank through
# its agent) and starts its daemons through an agent that enters the hosts; TCP over
# eth0 for its control and data. Both measure alike (mean of -n blocking calls, slowest
# rank, rotated buffers, checked results), alternating, REPEATS times; the table shows
# the median time per size and Open MPI time / weft time (> 1: weft is faster).
# --startup instead times whole jobs, REPEATS of each, that start, run one 8-byte
# allreduce (no --settle) and end: the median wall times and their ratio.
#
# The link: before each round iperf3 (when installed) measures host 0 -> host 1 with 1,
# 2, 4 and 8 TCP streams; the table prints each library's allreduce bus bandwidth as a
# fraction of the best median of those (the streams it took are printed with it).
#
# The bed's hosts share this machine's cores. Neither library binds ranks to cores here
# (weft-perf --bind none, mpirun --bind-to none): each binds per host, so the ranks of
# every host would pile onto the same first cores of the machine (2 hosts x 1 rank bound:
# both ranks on core 0, 50x slower for both). When the hosts hold more ranks than the
# machine has cores, both are told to give the CPU up while they wait
# (WEFT_YIELD_SPINS=0, mpi_yield_when_idle), as each does by itself when it knows a host
# is oversubscribed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)/build
hosts=2
per=2
min=8
max=16M
coll=allreduce
repeats=3
startup=0
while [ $# -gt 0 ]; do
    case "$1" in
    -H) hosts=$2; shift 2 ;;
    -p) per=$2; shift 2 ;;
    -b) min=$2; shift 2 ;;
    -e) max=$2; shift 2 ;;
    -C) coll=$2; shift 2 ;;
    -r) repeats=$2; shift 2 ;;
    --startup) startup=1; shift ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "compare_ompi_hosts.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ "${NSH_HOSTS:-0}" -gt "$hosts" ] ||
    { echo "run it under tests/multinode/netns_hosts.sh $((hosts + 1))" >&2; exit 2; }
bin=$build/bin
ranks=$((hosts * per))
tmp=$NSH_DIR/cmp
mkdir -p "$tmp"
(umask 077 && "$bin/weftrun" --new-token >"$tmp/token") # --token-file wants it private
store="$("$NSH_BED" addr 0):29500"
for ((i = 0; i < hosts; i++)); do
    printf '%s slots=%d\n' "$("$NSH_BED" addr $i)" "$per"
done >"$tmp/hostfile"
# Open MPI's launch agent: "agent [options] HOST command", run outside the hosts.
cat >"$tmp/agent" <<EOF
#!/bin/bash
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1
shift
exec "$NSH_BED" exec \$((\${host##*.} - 1)) /bin/sh -c "\$*"
EOF
chmod +x "$tmp/agent"
yield=()
ompi_yield=()
if [ "$ranks" -gt "$(nproc)" ]; then
    yield=(env WEFT_YIELD_SPINS=0)
    ompi_yield=(--mca mpi_yield_when_idle 1)
fi

weft_run() { # LO HI ITERS WARMUP OUT [options]
    local pids=()
    for ((i = hosts - 1; i >= 0; i--)); do
        "$NSH_BED" exec $i "${yield[@]}" "$bin/weftrun" --nnodes "$hosts" --node-rank $i \
            --store "$store" --token-file "$tmp/token" -n "$per" -- "$bin/weft-perf" \
            "$coll" -b "$1" -e "$2" -n "$3" -w "$4" --bind none --json "${@:6}" \
            >"$5.$i" &
        pids+=($!)
    done
    wait "${pids[@]}"
    mv "$5.0" "$5"
}
ompi_run() { # LO HI ITERS WARMUP OUT [options]
    ip netns exec "${NSH_PREFIX}h$hosts" mpirun --allow-run-as-root -n "$ranks" \
        --hostfile "$tmp/hostfile" --mca plm_rsh_agent "$tmp/agent" \
        --bind-to none --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        "${ompi_yield[@]}" \
        "$bin/mpi-allreduce-perf" -C "$coll" -b "$1" -e "$2" -n "$3" -w "$4" --json "${@:6}" \
        >"$5"
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

if [ "$startup" = 1 ]; then
    for ((rep = 0; rep < repeats; rep++)); do
        t0=$(now_ms)
        weft_run 8 8 1 0 "$tmp/start-weft.json" --settle 0
        echo "weft $(($(now_ms) - t0))" >>"$tmp/start"
        t0=$(now_ms)
        ompi_run 8 8 1 0 "$tmp/start-ompi.json" --settle 0
        echo "ompi $(($(now_ms) - t0))" >>"$tmp/start"
    done
    exec python3 - "$tmp/start" "$hosts" "$per" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    t.setdefault(k, []).append(int(v))
w, o = statistics.median(t["weft"]), statistics.median(t["ompi"])
print(f"# a job of {sys.argv[2]} hosts x {sys.argv[3]} ranks: start, one 8-byte allreduce, end")
print(f"weft (one weftrun per host): median {w:.0f} ms, runs {sorted(t['weft'])}")
print(f"Open MPI (mpirun + agent):   median {o:.0f} ms, runs {sorted(t['ompi'])}")
print(f"Open MPI / weft: {o / w:.2f}")
PY
fi

# iperf3 from host 0 to host 1 with STREAMS streams for 2 s: bytes per second received.
iperf_run() {
    local port=$((5201 + RANDOM % 1000))
    "$NSH_BED" exec 1 timeout 20 iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
    local server=$!
    local ok=0
    for ((try = 0; try < 50; try++)); do
        if "$NSH_BED" exec 0 iperf3 -c "$("$NSH_BED" addr 1)" -p "$port" -P "$1" -t 2 -J \
            >"$tmp/iperf.json" 2>/dev/null; then
            ok=1
            break
        fi
        sleep 0.1
    done
    wait "$server" 2>/dev/null # at most 20 s when no client got through
    [ "$ok" = 1 ] && python3 -c 'import json, sys
got = json.load(open(sys.argv[1])).get("end", {}).get("sum_received")
sys.exit(1) if not got else print(got["bits_per_second"] / 8)' "$tmp/iperf.json"
}

to_bytes() { numfmt --from=iec "$1"; }
sweeps=()
if [ "$(to_bytes "$min")" -le $((1 << 20)) ]; then
    small_max=1M
    [ "$(to_bytes "$max")" -ge $((1 << 20)) ] || small_max=$max
    sweeps+=("$min $small_max 200 20")
fi
if [ "$(to_bytes "$max")" -ge $((2 << 20)) ]; then
    big_min=2M
    [ "$(to_bytes "$min")" -le $((2 << 20)) ] || big_min=$min
    sweeps+=("$big_min $max 10 2")
fi
for ((rep = 0; rep < repeats; rep++)); do
    if command -v iperf3 >/dev/null; then
        for streams in 1 2 4 8; do
            bps=$(iperf_run "$streams") && echo "$streams $bps" >>"$tmp/link"
        done
    fi
    for s in "${sweeps[@]}"; do
        read -r lo hi iters warm <<<"$s"
        weft_run "$lo" "$hi" "$iters" "$warm" "$tmp/weft-$rep-$lo.json"
        ompi_run "$lo" "$hi" "$iters" "$warm" "$tmp/ompi-$rep-$lo.json"
    done
done

python3 - "$tmp" "$hosts" "$per" "$coll" <<'PY'
import glob, json, os, statistics, sys
tmp, hosts, per, coll = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
n = hosts * per
factor = {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(coll, (n - 1) / n)
link, streams = None, {}
if os.path.exists(os.path.join(tmp, "link")):
    for line in open(os.path.join(tmp, "link")):
        k, v = line.split()
        streams.setdefault(int(k), []).append(float(v))
    med = {k: statistics.median(v) for k, v in streams.items()}
    best = max(med, key=med.get)
    link = med[best]
    print("# iperf3 host 0 -> host 1, median GB/s by streams: " +
          ", ".join(f"{k}: {med[k] / 1e9:.2f}" for k in sorted(med)) +
          f"; the link: {link / 1e9:.2f} GB/s ({best} streams)")
def load(prefix):
    by, wrong = {}, 0
    for path in sorted(glob.glob(os.path.join(tmp, prefix + "-*.json"))):
        for r in json.load(open(path))["results"]:
            by.setdefault(r["size"], []).append(r["time_us"])
            wrong += r["wrong"] or 0
    return by, wrong
weft, ww = load("weft")
ompi, ow = load("ompi")
print(f"# {coll}, {hosts} hosts x {per} ranks over veth: median time per size")
print("#%11s %11s %11s %10s %10s %8s %8s %8s" % ("size(B)", "weft(us)", "ompi(us)", "weft GB/s",
      "ompi GB/s", "weft/link", "ompi/link", "ratio"))
for size in sorted(set(weft) & set(ompi)):
    wt, ot = statistics.median(weft[size]), statistics.median(ompi[size])
    wbw = size / wt / 1e3 * factor
    obw = size / ot / 1e3 * factor
    frac = lambda bw: "%8.2f" % (bw * 1e9 / link) if link else "%8s" % "-"
    print(" %11d %11.2f %11.2f %10.3f %10.3f %s %s %8.2f" %
          (size, wt, ot, wbw, obw, frac(wbw), frac(obw), ot / wt))
print(f"# wrong results: weft {ww}, ompi {ow}")
sys.exit(1 if ww or ow else 0)
PY
