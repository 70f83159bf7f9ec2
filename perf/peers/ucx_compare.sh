#!/bin/sh
# ucx_compare.sh: unidirectional bandwidth between two local processes, weft against UCX.
#
#   perf/peers/ucx_compare.sh [-B BUILD_DIR] [-s SIZE] [-r ROUNDS] [-t MIN_RATIO]
#
# Runs, ROUNDS times and interleaved so all see the same machine load:
#   ucx_perftest -t tag_bw -s SIZE (server and client on localhost, UCX defaults);
#   the same with UCX_ALLOC_PRIO=heap: buffers from malloc like weft-perf's, instead of
#   UCX's default System V shared memory segments (for information);
#   weftrun -n 2 -- weft-perf sendrecv -b SIZE -e SIZE (window of 16 sends),
# and prints each figure in GB/s (1e9 bytes/s), the medians and weft/ucx. Exits 1 when the
# median ratio against the default ucx_perftest is below MIN_RATIO (default 0.8). SIZE
# takes K/M/G suffixes (default 16M). ucx_perftest reports MB/s of 2^20 bytes; the script
# converts.
set -eu

build=build
size=16M
rounds=3
min_ratio=0.8
while getopts B:s:r:t:h opt; do
    case $opt in
    B) build=$OPTARG ;;
    s) size=$OPTARG ;;
    r) rounds=$OPTARG ;;
    t) min_ratio=$OPTARG ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done

weftrun=$build/bin/weftrun
weftperf=$build/bin/weft-perf
for f in "$weftrun" "$weftperf"; do
    [ -x "$f" ] || { echo "ucx_compare: $f not found (build first, or pass -B)" >&2; exit 2; }
done
command -v ucx_perftest >/dev/null || { echo "ucx_compare: ucx_perftest not found" >&2; exit 2; }

bytes=$(echo "$size" | awk '{ n = $0 + 0; u = toupper(substr($0, length(n) + 1, 1));
    m = u == "K" ? 1024 : u == "M" ? 1048576 : u == "G" ? 1073741824 : 1; printf "%d", n * m }')
port=$((20000 + $$ % 20000))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ucx_round [VAR=VALUE...]: one ucx_perftest run with that environment.
ucx_round() {
    env "$@" ucx_perftest -t tag_bw -s "$bytes" -n 200 -w 20 -p "$port" >"$tmp/server" 2>&1 &
    server=$!
    sleep 1
    env "$@" ucx_perftest localhost -t tag_bw -s "$bytes" -n 200 -w 20 -p "$port" \
        >"$tmp/client" 2>&1 ||
        { cat "$tmp/client" >&2; kill "$server" 2>/dev/null; return 1; }
    wait "$server" || true
    port=$((port + 1))
    # Final: iters p50 avg overall bw_avg bw_overall rate_avg rate_overall
    awk '/^Final:/ { printf "%.3f\n", $7 * 1048576 / 1e9 }' "$tmp/client"
}

weft_round() {
    "$weftrun" -n 2 --timeout 300 -- "$weftperf" sendrecv -b "$bytes" -e "$bytes" -n 10 -w 2 \
        -W 16 -c 0 --json >"$tmp/weft" 2>"$tmp/weft.err" ||
        { cat "$tmp/weft.err" >&2; return 1; }
    /usr/bin/python3 -c 'import json, sys; print("%.3f" % json.load(sys.stdin)["results"][0]["algbw_gbs"])' \
        <"$tmp/weft"
}

median() {
    sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "# ucx_compare: $bytes-byte messages, 2 local processes, $rounds rounds"
echo "# $(ucx_info -v | head -1 | sed 's/^# *//'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "# %-6s %14s %18s %14s\n" round "ucx (GB/s)" "ucx heap (GB/s)" "weft (GB/s)"
: >"$tmp/u"
: >"$tmp/h"
: >"$tmp/w"
i=1
while [ "$i" -le "$rounds" ]; do
    u=$(ucx_round COMPARE_RUN=default)
    h=$(ucx_round UCX_ALLOC_PRIO=heap)
    w=$(weft_round)
    echo "$u" >>"$tmp/u"
    echo "$h" >>"$tmp/h"
    echo "$w" >>"$tmp/w"
    printf "  %-6s %14s %18s %14s\n" "$i" "$u" "$h" "$w"
    i=$((i + 1))
done
mu=$(median <"$tmp/u")
mh=$(median <"$tmp/h")
mw=$(median <"$tmp/w")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
printf "  %-6s %14s %18s %14s\n" median "$mu" "$mh" "$mw"
r=$(ratio "$mw" "$mu")
echo "weft/ucx = $r (required >= $min_ratio); weft/ucx-heap = $(ratio "$mw" "$mh")"
awk -v r="$r" -v m="$min_ratio" 'BEGIN { exit !(r >= m) }'
