#!/usr/bin/env bash
# A job over the hosts of netns_hosts.sh, one weftrun per host, node 0 serving the store
# on 10.77.0.1 with a token from a file, as a user would start them by hand:
#
#   netns_hosts.sh HOSTS run_hosts.sh SCENARIO BINDIR [PROGRAM ARGS...]
#
#   coll         test_coll on every host (-n PER_HOST, default 1; env PER_HOST)
#   paths        host_job paths: messages between hosts, shared memory within one
#   kill_rank    --elastic; the job's last rank kills itself: the others repair
#   kill_host    --elastic; once the job runs, every process of the last host is
#                SIGKILLed (its weftrun and its ranks): the others repair without them
#   grow         --elastic on every host but the last; once the job runs, a newcomer
#                started by hand on the last host (WEFT_JOIN=1) is admitted
#   prog         PROGRAM ARGS on every host: every weftrun exits 0
#   fault N      --elastic, PROGRAM ARGS on every host (its victims kill themselves):
#                every weftrun exits 0 and N ranks print SURVIVOR-OK, none SURVIVOR-FAIL
#   host_fault N --elastic, PROGRAM ARGS on every host; once each rank of the last host
#                has printed HOST-VICTIM, the whole host is SIGKILLed: the other weftruns
#                exit 0 and N ranks print SURVIVOR-OK, none SURVIVOR-FAIL
#   replace_host MARK
#                --elastic, PROGRAM ARGS on every host but the last; once node 0 printed
#                MARK, the host of the last node is SIGKILLed (its weftrun and ranks),
#                and the same weftrun command (the same --node-rank) is started on the
#                last, fresh host: its ranks join the job. Every weftrun but the killed
#                one exits 0 and node 0 says "on WORLD ranks" (the job's width: the
#                replacement's ranks joined) last (as the example trainer does)
#   pmix         no weftrun: Open MPI's mpirun, on the last host, starts PROGRAM ARGS
#                on PER_HOST slots of each other host (its launch agent enters them);
#                weft bootstraps through PMIx, rank 0 serving the store on its host's
#                address. Passes when mpirun exits 0 (skipped without mpirun)
#
# Passes when every weftrun that should exits 0 and each rank reported success.
set -u
scenario=$1 bin=$2
shift 2
hosts=$NSH_HOSTS per=${PER_HOST:-1}
nodes=$hosts # hosts running a weftrun of the job
[ "$scenario" = grow ] || [ "$scenario" = replace_host ] || [ "$scenario" = pmix ] &&
    nodes=$((hosts - 1))
world=$((nodes * per))
out=$NSH_DIR/out
mkdir -p "$out"
token=$NSH_DIR/token
"$bin/weftrun" --new-token >"$token" && chmod 600 "$token"
store="$("$NSH_BED" addr 0):29500"

fail() {
    echo "run_hosts ($scenario, $hosts x $per): FAILED: $*"
    for f in "$out"/*; do echo "--- $f"; cat "$f"; done
    exit 1
}

# Start node $2's weftrun on host $1 in the background (its pid in pids[$1], its output
# in $out/node$1).
pids=()
start_node_on() {
    local h=$1 i=$2
    shift 2
    "$NSH_BED" exec "$h" "$bin/weftrun" --nnodes "$nodes" --node-rank "$i" --store "$store" \
        --token-file "$token" -n "$per" --timeout 200 "$@" >"$out/node$h" 2>&1 &
    pids[$h]=$!
}
# Start node $1's weftrun on host $1.
start_node() {
    start_node_on "$1" "$@"
}
start_all() {
    for i in $(seq 0 $((nodes - 1))); do
        start_node "$i" "$@"
    done
}
# Wait for node $1's weftrun; its exit status in $code.
wait_node() {
    wait "${pids[$1]}"
    code=$?
}
count() { cat "$out"/node* "$out"/newcomer 2>/dev/null | grep -c "$1"; }
# Wait up to 60 s until $2 lines of $out/$1 contain $3.
wait_lines() {
    for _ in $(seq 600); do
        [ "$(grep -c "$3" "$out/$1" 2>/dev/null)" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

case $scenario in
coll)
    start_all -- "$bin/test_coll"
    for i in $(seq 0 $((hosts - 1))); do
        wait_node "$i"
        [ $code -eq 0 ] || fail "node $i's weftrun exited $code"
    done
    ;;
paths)
    start_all -- "$bin/host_job" paths "$hosts"
    for i in $(seq 0 $((hosts - 1))); do
        wait_node "$i"
        [ $code -eq 0 ] || fail "node $i's weftrun exited $code"
    done
    [ "$(count PATHS-OK)" -eq $world ] || fail "not every rank checked its paths"
    ;;
kill_rank)
    start_all --elastic -- "$bin/host_job" loss $((world - 1)) $((world - 1))
    for i in $(seq 0 $((hosts - 1))); do
        wait_node "$i"
        [ $code -eq 0 ] || fail "node $i's weftrun exited $code"
    done
    [ "$(count SURVIVOR-OK)" -eq $((world - 1)) ] || fail "not every survivor recovered"
    ;;
kill_host)
    last=$((hosts - 1))
    start_all --elastic -- "$bin/host_job" loss $((world - per))
    for _ in $(seq 600); do
        grep -q JOB-READY "$out/node0" && break
        sleep 0.1
    done
    grep -q JOB-READY "$out/node0" || fail "the job did not start"
    sleep 0.3 # into the allreduces, large ones most of the time
    killed=$(date +%s%3N)
    "$NSH_BED" kill "$last"
    for i in $(seq 0 $((hosts - 2))); do
        wait_node "$i"
        [ $code -eq 0 ] || fail "node $i's weftrun exited $code"
    done
    wait_node "$last"
    [ $code -eq 137 ] || fail "the killed host's weftrun exited $code, not 137"
    [ "$(count SURVIVOR-OK)" -eq $((world - per)) ] || fail "not every survivor recovered"
    # When each survivor's allreduce failed, after the kill (shown, not judged: the
    # failure timeout bounds it, and on a busy machine it is the scheduler's).
    echo "kill_host: survivors' errors $(cat "$out"/node* |
        sed -n 's/.*error at wall \([0-9]*\) ms in a \([a-z-]*\).*/\1 \2/p' |
        while read -r t k; do printf '%s ms (%s) ' $((t - killed)) "$k"; done)after the kill"
    grep -q "node $last was lost" "$out/node0" || fail "node 0 did not see node $last lost"
    ;;
grow)
    start_all --elastic -- "$bin/host_job" grow
    for _ in $(seq 600); do
        grep -q JOB-READY "$out/node0" && break
        sleep 0.1
    done
    "$NSH_BED" exec "$nodes" env WEFT_STORE="$store" WEFT_JOB_TOKEN="$(cat "$token")" \
        WEFT_JOIN=1 WEFT_WORLD_SIZE="$world" "$bin/host_job" grow >"$out/newcomer" 2>&1 ||
        fail "the newcomer failed"
    for i in $(seq 0 $((nodes - 1))); do
        wait_node "$i"
        [ $code -eq 0 ] || fail "node $i's weftrun exited $code"
    done
    [ "$(count SURVIVOR-OK)" -eq $((world + 1)) ] || fail "not every member verified the newcomer"
    ;;
prog | fault)
    opts=()
    if [ "$scenario" = fault ]; then
        want=$1
        shift
        opts=(--elastic)
    fi
    start_all "${opts[@]}" -- "$@"
    for i in $(seq 0 $((hosts - 1))); do
        wait_node "$i"
        [ $code -eq 0 ] || fail "node $i's weftrun exited $code"
    done
    if [ "$scenario" = fault ]; then
        [ "$(count SURVIVOR-OK)" -eq "$want" ] && [ "$(count SURVIVOR-FAIL)" -eq 0 ] ||
            fail "$(count SURVIVOR-OK) survivor(s) verified, $want expected"
    fi
    ;;
host_fault)
    want=$1 last=$((hosts - 1))
    shift
    start_all --elastic -- "$@"
    wait_lines "node$last" "$per" HOST-VICTIM || fail "the ranks of host $last did not get ready"
    "$NSH_BED" kill "$last"
    for i in $(seq 0 $((hosts - 2))); do
        wait_node "$i"
        [ $code -eq 0 ] || fail "node $i's weftrun exited $code"
    done
    wait_node "$last"
    [ $code -eq 137 ] || fail "the killed host's weftrun exited $code, not 137"
    [ "$(count SURVIVOR-OK)" -eq "$want" ] && [ "$(count SURVIVOR-FAIL)" -eq 0 ] ||
        fail "$(count SURVIVOR-OK) survivor(s) verified, $want expected"
    grep -q "node $last was lost" "$out/node0" || fail "node 0 did not see node $last lost"
    ;;
replace_host)
    mark=$1 last=$((nodes - 1))
    shift
    start_all --elastic -- "$@"
    wait_lines node0 1 "$mark" || fail "node 0 did not print \"$mark\""
    "$NSH_BED" kill "$last"
    wait_node "$last"
    [ $code -eq 137 ] || fail "the killed host's weftrun exited $code, not 137"
    start_node_on "$nodes" "$last" --elastic -- "$@"
    for i in $(seq 0 $((nodes - 2))) "$nodes"; do
        wait_node "$i"
        [ $code -eq 0 ] || fail "the weftrun on host $i exited $code"
    done
    grep -q "node $last was lost" "$out/node0" || fail "node 0 did not see node $last lost"
    grep -q "node $last was lost before" "$out/node$nodes" ||
        fail "the replacement did not start as node $last started again"
    ! grep -q "node $last was lost:" "$out/node$nodes" ||
        fail "the replacement reported its own earlier start as a new loss"
    tail -n 3 "$out/node0" | grep -q " on $world ranks" ||
        fail "the job did not end on $world ranks"
    ;;
pmix)
    command -v mpirun >/dev/null || { echo "run_hosts: no mpirun; skipped"; exit 77; }
    for i in $(seq 0 $((nodes - 1))); do
        printf '%s slots=%d\n' "$("$NSH_BED" addr "$i")" "$per"
    done >"$NSH_DIR/hostfile"
    # Open MPI's launch agent, "agent [options] HOST command": runs it on that host.
    cat >"$NSH_DIR/agent" <<EOF
#!/bin/bash
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1
shift
exec "$NSH_BED" exec \$((\${host##*.} - 1)) /bin/sh -c "\$*"
EOF
    chmod +x "$NSH_DIR/agent"
    # mpirun in the last host's network only: the agent enters the hosts from outside.
    ip netns exec "${NSH_PREFIX}h$nodes" mpirun --allow-run-as-root -n "$world" \
        --hostfile "$NSH_DIR/hostfile" --mca plm_rsh_agent "$NSH_DIR/agent" \
        --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        -x WEFT_YIELD_SPINS=0 "$@" >"$out/mpirun" 2>&1 ||
        fail "mpirun exited $?"
    ;;
*)
    echo "run_hosts: unknown scenario $scenario" >&2
    exit 2
    ;;
esac
cat "$out"/*
echo "run_hosts ($scenario, $hosts x $per): passed"
