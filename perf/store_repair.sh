#!/usr/bin/env bash
# store_repair.sh [-n RANKS] [-k KILLS] [-r ROUNDS] [-m MEMBERS] [--build DIR]
#
# Repair time with weft's own store against an etcd cluster, back to back on this host:
# `weftrun -n RANKS --elastic --replace [--external-store --store etcd://...] --
# weft-perf group -n KILLS --no-spawn --json` (each run SIGKILLs a rank KILLS times, and
# weftrun starts each replacement, so every victim is its child; detect = kill to the last
# survivor's failed operation, repair = weft_group_repair + the first allreduce of the
# new epoch, grow = admitting the replacement; maxima over survivors, medians over the
# kills). etcd: MEMBERS members (default 3) on loopback ports, started here and killed
# at the end, with etcd's defaults (fsync on). A killed rank is reported by weftrun when
# it reaps it on either store, so no lease lapse is in these figures. Rounds alternate
# native, etcd, so both see the same background load; prints each round and the medians
# over rounds, and the ratio etcd/native. Needs etcd and python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/.." && pwd)/build
ranks=4 kills=10 rounds=3 members=3
while [ $# -gt 0 ]; do
    case "$1" in
    -n) ranks=$2; shift 2 ;;
    -k) kills=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -m) members=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    *) sed -n '2,15p' "$0" >&2; exit 2 ;;
    esac
done
command -v etcd >/dev/null || { echo "store_repair.sh: etcd is not installed" >&2; exit 2; }
bin=$build/bin
out=$(mktemp -d)
epids=()
cleanup() {
    for p in "${epids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT

read -r -a ports <<<"$(python3 - "$((2 * members))" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)"
initial="" addr=""
for ((i = 0; i < members; i++)); do
    initial+="${initial:+,}m$i=http://127.0.0.1:${ports[2 * i + 1]}"
    addr+="${addr:+,}127.0.0.1:${ports[2 * i]}"
done
for ((i = 0; i < members; i++)); do
    c=${ports[2 * i]} p=${ports[2 * i + 1]}
    etcd --name "m$i" --data-dir "$out/m$i" --listen-client-urls "http://127.0.0.1:$c" \
        --advertise-client-urls "http://127.0.0.1:$c" --listen-peer-urls "http://127.0.0.1:$p" \
        --initial-advertise-peer-urls "http://127.0.0.1:$p" --initial-cluster "$initial" \
        --initial-cluster-state new --initial-cluster-token "weft-repair-$$" \
        >"$out/m$i.log" 2>&1 &
    epids+=($!)
done
for _ in $(seq 100); do # up to 20 s for a leader
    python3 - "$addr" <<'EOF' && break
import json, sys, urllib.request
for ep in sys.argv[1].split(","):
    try:
        s = json.load(urllib.request.urlopen(urllib.request.Request(
            "http://%s/v3/maintenance/status" % ep, data=b"{}"), timeout=1))
        if s.get("leader", "0") != "0":
            sys.exit(0)
    except Exception:
        pass
sys.exit(1)
EOF
    sleep 0.2
done
one() { # label round [weftrun options...]
    local label=$1 round=$2
    shift 2
    "$bin/weftrun" -n "$ranks" --elastic --replace --timeout 300 "$@" -- \
        "$bin/weft-perf" group -n "$kills" --no-spawn --json >"$out/$label.$round.json" \
        2>"$out/$label.$round.err" ||
        { echo "store_repair: $label round $round failed:" >&2; tail -5 "$out/$label.$round.err" >&2; exit 1; }
}
for ((r = 0; r < rounds; r++)); do
    one native "$r"
    # A token per job: its keys live under a root derived from it, and one job's keys
    # (its closed world) would turn the next job's ranks away.
    (umask 077 && "$bin/weftrun" --new-token >"$out/token.$r")
    one etcd "$r" --external-store --store "etcd://$addr" --token-file "$out/token.$r"
done
python3 - "$out" "$ranks" "$kills" "$rounds" "$members" <<'PY'
import glob, json, os, statistics as st, sys
d, ranks, kills, rounds, members = sys.argv[1:]
def rows(label):
    r = []
    for f in sorted(glob.glob(os.path.join(d, label + ".*.json"))):
        r += [json.loads(l) for l in open(f) if l.startswith("{")]
    return r
print(f"# weft-perf group at {ranks} ranks, {kills} kills a run, {rounds} alternating rounds; "
      f"etcd: {members} member(s) on loopback")
print(f"# {'store':7} {'detect(us)':>11} {'repair(us)':>11} {'repair per round':>24} {'grow(us)':>10}")
med = {}
for label in ("native", "etcd"):
    r = rows(label)
    det = st.median(x["detect_us"]["median"] for x in r)
    rep = [x["repair_us"]["median"] for x in r]
    grow = st.median(x["grow_us"]["median"] for x in r)
    med[label] = st.median(rep)
    print(f"  {label:7} {det:11.0f} {med[label]:11.0f} {' '.join('%.0f' % v for v in rep):>24} "
          f"{grow:10.0f}")
print(f"# repair etcd/native: {med['etcd'] / med['native']:.1f}x "
      f"({med['etcd'] / 1000:.1f} ms on etcd; goal under 50 ms)")
PY
