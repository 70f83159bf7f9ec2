#!/usr/bin/env bash
# The example trainer on 3 hosts x 2 ranks of netns_hosts.sh (4 hosts: the fourth is a
# fresh one for a replacement) with an etcd cluster as the store: one etcd member on
# each of hosts 0-2 (10.77.0.1-3:2379), one `weftrun --external-store --store etcd://...`
# per node, --elastic. The same trainer command with and without failures ends bitwise
# equal (the trainer's own check, its exit status); here, with:
#
#   netns_hosts.sh 4 etcd_hosts.sh CASE BINDIR TRAINER [ARGS...]
#
#   kill_rank    --replace; member 3 kills itself (SIGKILL) at step 40: its weftrun
#                starts a replacement, which joins; at step 100 etcd holds at most one
#                lease per node (the ranks hold none)
#   lose_leader  the etcd leader is moved to host 2; once node 0 printed "step 50:",
#                host 2 is SIGKILLed whole (weftrun, ranks and the leader: etcd keeps
#                quorum with 2 of 3), and node 2's weftrun command is started again on
#                host 3
#   lose_node0   once node 0 printed "step 50:", node 0's weftrun is SIGKILLed (its ranks
#                die with it; host 0 and its etcd member stay), and the same command is
#                started again on host 0
#
# Passes when every weftrun but the killed one exits 0 and the job ends on 6 ranks.
# Every wait is bounded; everything started here is killed at the end. Exits 77 where
# etcd is not installed (netns_hosts.sh itself skips without root).
set -u
case=$1 bin=$2
shift 2
command -v etcd >/dev/null && command -v etcdctl >/dev/null ||
    { echo "etcd is not installed: skipped"; exit 77; }
nodes=3 per=2 world=6
out=$NSH_DIR/out
mkdir -p "$out"
token=$NSH_DIR/token
"$bin/weftrun" --new-token >"$token" && chmod 600 "$token"

ip_of() { "$NSH_BED" addr "$1"; }
endpoints="" initial=""
for h in 0 1 2; do
    endpoints+="${endpoints:+,}$(ip_of $h):2379"
    initial+="${initial:+,}m$h=http://$(ip_of $h):2380"
done
store="etcd://$endpoints"

pids=()  # nsenter processes of weftruns, by host
epids=() # nsenter processes of etcd members, by host
# The process nsenter started on the host (its only child).
child_of() { ps -o pid= --ppid "$1" 2>/dev/null | head -n 1 | tr -d ' '; }
cleanup() {
    local p c
    for p in "${pids[@]}" "${epids[@]}"; do
        c=$(child_of "$p")
        [ -z "$c" ] || kill -9 "$c" 2>/dev/null
        kill -9 "$p" 2>/dev/null
    done
    wait 2>/dev/null
}
trap cleanup EXIT

fail() {
    echo "etcd_hosts ($case): FAILED: $*"
    for f in "$out"/node*; do echo "--- $f"; tail -n 60 "$f"; done
    for f in "$out"/etcd*; do echo "--- $f"; tail -n 5 "$f"; done
    exit 1
}
etcdctl_() { "$NSH_BED" exec 0 etcdctl --endpoints "$endpoints" --dial-timeout 2s "$@"; }

for h in 0 1 2; do
    a=$(ip_of $h)
    "$NSH_BED" exec "$h" etcd --name "m$h" --data-dir "$NSH_DIR/etcd-m$h" \
        --listen-client-urls "http://$a:2379" --advertise-client-urls "http://$a:2379" \
        --listen-peer-urls "http://$a:2380" --initial-advertise-peer-urls "http://$a:2380" \
        --initial-cluster "$initial" --initial-cluster-state new \
        --initial-cluster-token "weft-hosts-$$" >"$out/etcd$h" 2>&1 &
    epids[h]=$!
done
healthy=0
for _ in $(seq 60); do
    etcdctl_ endpoint health >/dev/null 2>&1 && { healthy=1; break; }
    sleep 0.5
done
[ $healthy -eq 1 ] || fail "the etcd cluster did not become healthy in 30 s"

# Start node $2's weftrun on host $1 (pid of its nsenter in pids[$1]).
start_node_on() {
    local h=$1 i=$2
    shift 2
    "$NSH_BED" exec "$h" "$bin/weftrun" --nnodes $nodes --node-rank "$i" --external-store \
        --store "$store" --token-file "$token" -n $per --timeout 200 --elastic "$@" \
        >>"$out/node$h" 2>&1 &
    pids[h]=$!
}
wait_node() {
    wait "${pids[$1]}"
    code=$?
}
# Wait up to 90 s until $out/$1 contains $2.
wait_for() {
    for _ in $(seq 900); do
        grep -q "$2" "$out/$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
# The host whose etcd member leads ("" if none does), from every member's status.
leader_host() {
    etcdctl_ endpoint status -w json 2>/dev/null | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["Status"]["leader"] == s["Status"]["header"]["member_id"]:
        print(int(s["Endpoint"].split(":")[0].split(".")[3]) - 1)' 2>/dev/null
}
# Make host 2's member the leader (etcdctl move-leader, asked of the current leader).
lead_from_host2() {
    local h id
    for _ in $(seq 20); do
        h=$(leader_host)
        [ "$h" = 2 ] && return 0
        id=$(etcdctl_ member list -w json | python3 -c '
import json, sys
print("%x" % [m["ID"] for m in json.load(sys.stdin)["members"] if m["name"] == "m2"][0])')
        [ -z "$h" ] || etcdctl_ --endpoints "$(ip_of "$h"):2379" move-leader "$id" >/dev/null 2>&1
        sleep 0.5
    done
    return 1
}

started=$(date +%s)
survivors="0 1 2"
case $case in
kill_rank)
    for i in 0 1 2; do
        start_node_on "$i" "$i" --replace -- "$@" --kill-rank 3 --kill-step 40
    done
    # One etcd lease per node, none per rank: the node's lease covers its ranks.
    wait_for node0 "step 100:" || fail "node 0 did not print \"step 100:\""
    leases=$(etcdctl_ lease list | sed -n "s/^found \([0-9]*\) leases$/\1/p")
    echo "etcd leases while the job runs: $leases"
    [ -n "$leases" ] && [ "$leases" -le $nodes ] || fail "$leases etcd leases for $nodes nodes"
    ;;
lose_leader)
    lead_from_host2 || fail "cannot make host 2's etcd member the leader"
    for i in 0 1 2; do start_node_on "$i" "$i" -- "$@"; done
    wait_for node0 "step 50:" || fail "node 0 did not print \"step 50:\""
    [ "$(leader_host)" = 2 ] || fail "the etcd leader moved away from host 2"
    echo "killing host 2 (node 2 and the etcd leader)"
    "$NSH_BED" kill 2
    wait_node 2
    [ $code -eq 137 ] || fail "the killed host's weftrun exited $code, not 137"
    wait "${epids[2]}" 2>/dev/null
    start_node_on 3 2 -- "$@"
    survivors="0 1 3"
    ;;
lose_node0)
    for i in 0 1 2; do start_node_on "$i" "$i" -- "$@"; done
    wait_for node0 "step 50:" || fail "node 0 did not print \"step 50:\""
    w=$(child_of "${pids[0]}")
    [ -n "$w" ] || fail "node 0's weftrun is not running"
    echo "killing node 0's weftrun (pid $w) and with it its ranks"
    kill -9 "$w"
    wait_node 0
    echo "--- node 0's first start ended" >>"$out/node0"
    sleep 0.5 # its ranks die with it (PR_SET_PDEATHSIG); then the same command again
    start_node_on 0 0 -- "$@"
    ;;
*)
    echo "etcd_hosts: unknown case $case" >&2
    exit 2
    ;;
esac
for h in $survivors; do
    wait_node "$h"
    [ $code -eq 0 ] || fail "the weftrun on host $h exited $code"
done
grep -h "done: " "$out"/node* | grep -q " on $world ranks" || fail "the job did not end on $world ranks"
grep -h "reference: " "$out"/node* | grep -q "bitwise equal" || fail "no bitwise-equal result"
cat "$out"/node*
echo "etcd_hosts ($case): passed in $(($(date +%s) - started)) s"
