#!/usr/bin/env bash
# The store client's etcd backend against real etcd on loopback ports:
#
#   etcd_store.sh BIN_DIR WORK_DIR single   a 1-member etcd: weft-etcd-check basic, add
#                                           from 4 processes x 100 = 400, a disarmed lease
#                                           stays quiet, a lease whose holder is killed -9
#                                           is delivered to a watcher once and readable;
#                                           a notice set and a lease lapsed reach each of
#                                           20 watchers once (weft-etcd-check fanout)
#   etcd_store.sh BIN_DIR WORK_DIR cluster  a 3-member etcd: basic, then the leader is
#                                           killed -9 while 4 processes add 100 each: they
#                                           go on after the election and the count is 400
#   etcd_store.sh BIN_DIR WORK_DIR job      weftrun -n 4 --external-store --store etcd://
#                                           running weft-perf allreduce (results checked)
#
# Each member has its own data dir under WORK_DIR and free ports; all are killed at exit.
# Exits 77 (skipped) when etcd is not installed (scripts/install-deps.sh installs it).
set -euo pipefail
bin=$1
work=$2
mode=$3
command -v etcd >/dev/null || { echo "etcd is not installed: skipped"; exit 77; }
python3 -c 1 2>/dev/null || { echo "python3 is not installed: skipped"; exit 77; }
check=$bin/weft-etcd-check

dir=$(mktemp -d "$work/etcd-$mode.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

free_ports() { # N free TCP ports of 127.0.0.1
    python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# start_cluster N: members m0..m(N-1); client ports in cport[], their pids in epid[].
start_cluster() {
    local n=$1 ports initial="" i
    read -r -a ports <<<"$(free_ports $((2 * n)))"
    for ((i = 0; i < n; i++)); do
        cport[i]=${ports[2 * i]}
        pport[i]=${ports[2 * i + 1]}
        initial+="${initial:+,}m$i=http://127.0.0.1:${pport[i]}"
    done
    for ((i = 0; i < n; i++)); do
        etcd --name "m$i" --data-dir "$dir/m$i" \
            --listen-client-urls "http://127.0.0.1:${cport[i]}" \
            --advertise-client-urls "http://127.0.0.1:${cport[i]}" \
            --listen-peer-urls "http://127.0.0.1:${pport[i]}" \
            --initial-advertise-peer-urls "http://127.0.0.1:${pport[i]}" \
            --initial-cluster "$initial" --initial-cluster-state new \
            --initial-cluster-token "weft-test-$$" >"$dir/m$i.log" 2>&1 &
        epid[i]=$!
        pids+=("${epid[i]}")
    done
    addr="etcd://"
    for ((i = 0; i < n; i++)); do addr+="127.0.0.1:${cport[i]},"; done
    addr=${addr%,}
}

# The index of the leader member, from any member's status.
leader_index() {
    python3 - "${cport[@]}" <<'EOF'
import json, sys, urllib.request
ports = sys.argv[1:]
for attempt in range(100):
    ids = {}
    leader = None
    for i, p in enumerate(ports):
        try:
            r = urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{p}/v3/maintenance/status", data=b"{}"), timeout=2)
            s = json.load(r)
            ids[s["header"]["member_id"]] = i
            leader = s.get("leader", leader)
        except Exception:
            pass
    if leader in ids:
        print(ids[leader])
        sys.exit(0)
    import time; time.sleep(0.1)
sys.exit(1)
EOF
}

token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
declare -a cport pport epid

adders() { # 4 processes x 100 increments of KEY [pausing MS after each]; all must succeed
    local key=$1 pause=${2:-0} p rc=0 ps=()
    for p in 1 2 3 4; do
        "$check" add "$addr" "$token" "$key" 100 "$pause" &
        ps+=($!)
    done
    for p in "${ps[@]}"; do wait "$p" || rc=1; done
    return $rc
}

expect_count() {
    local got
    got=$("$check" get "$addr" "$token" "$1")
    [[ "$got" == "$2" ]] || { echo "FAIL: $1 is $got, not $2"; exit 1; }
    echo "$1 = $got: ok"
}

case $mode in
single)
    start_cluster 1
    "$check" basic "$addr" "$token"
    adders count
    expect_count count 400
    "$check" quiet "$addr" "$token"
    "$check" hold "$addr" "$token" failed/3 "member 3: lost" 1000 >"$dir/hold.out" &
    holder=$!
    pids+=("$holder")
    "$check" lapse "$addr" "$token" failed/ failed/3 "member 3: lost" 15 >"$dir/lapse.out" 2>&1 &
    watcher=$!
    for _ in $(seq 100); do
        grep -q held "$dir/hold.out" && grep -q watching "$dir/lapse.out" && break
        sleep 0.1
    done
    killed=$(date +%s%N)
    kill -9 "$holder"
    wait "$watcher" || { cat "$dir/lapse.out"; exit 1; }
    cat "$dir/lapse.out"
    echo "lease of a killed holder delivered within $((($(date +%s%N) - killed) / 1000000)) ms (incl. a 3 s wait for duplicates)"
    # weft-etcd-check fanout, which perf/store_scale.sh runs at scale: each of 20 watchers
    # has a notice set, then a lapsed lease's, once (a fresh token each: an empty root)
    "$check" fanout "$addr" "$token-fanout-set" 20 set
    "$check" fanout "$addr" "$token-fanout-lapse" 20 lapse
    ;;
cluster)
    start_cluster 3
    "$check" basic "$addr" "$token"
    lead=$(leader_index)
    adders count 10 >"$dir/adders.out" 2>&1 & # 100 adds, 10 ms apart: over a second
    adding=$!
    sleep 0.4
    kill -0 "$adding" 2>/dev/null || { echo "FAIL: the adds ended before the leader was killed"; exit 1; }
    echo "killing the leader, member m$lead, while the adds run"
    kill -9 "${epid[lead]}"
    wait "${epid[lead]}" 2>/dev/null || true
    wait "$adding" || { cat "$dir/adders.out"; exit 1; }
    expect_count count 400
    adders after
    expect_count after 400
    ;;
job)
    start_cluster 1
    "$bin/weftrun" -n 4 --external-store --store "$addr" --token "$token" --timeout 120 -- \
        "$bin/weft-perf" allreduce -c 1 -b 8 -e 64K -n 5 -w 2 --settle 0 --bind none
    ;;
*)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac
echo "etcd_store $mode: ok"
