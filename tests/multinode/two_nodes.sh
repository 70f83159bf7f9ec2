#!/usr/bin/env bash
# Two or three weftruns on this host make one job (--nnodes, a store on 127.0.0.1): the
# launcher's side of multi-node jobs, without namespaces or root.
#
#   two_nodes.sh CASE BINDIR
#
#   env       each node's ranks get global ranks, the world size, their node's local
#             ranks and size, and one store and token; node 1 may start before node 0
#   stop      a rank of node 1 exits 3: node 1 stops, and so does node 0 (both exit 3)
#   lost      node 1's weftrun is SIGKILLed: node 0 stops its ranks and exits 1
#   elastic   the same with --elastic: node 0's ranks go on and it exits 0
#   lost0     node 0's weftrun (and the store with it) is SIGKILLed: node 1 stops its
#             ranks and exits 1
#   wait      node 0's ranks end first: node 0 keeps the store until node 1 has ended
#   usage     options refused: no --store, no token, a short token, a token file others
#             can read, --node-rank too
#             large, a node started twice, a node started again without --elastic
#   rejoin    --elastic: node 1 is lost, then started again with the same command: its
#             ranks join as replacements (WEFT_JOIN=1, ids from N x PER_NODE up)
#   fence     --elastic, real ranks: a rank of node 1 is stopped (SIGSTOP); its lease
#             lapses in node 0's store, and node 1's weftrun kills it; the others repair
#   fence_ns  the same with WEFT_NAMESPACE set: weftrun fences under the job's namespace
#   jobfailed --elastic: a rank of node 1 exits 86 (WEFT_EXIT_JOB_FAILED): not a death to
#             go on without, the job failed: both nodes stop and exit 86
#   jobfailed_late  the same once node 0's ranks have ended 0 (node 0 waits for node 1):
#             node 0 still exits 86
set -u
what=$1 bin=$2
w=$bin/weftrun
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
store=127.0.0.1:$port
export WEFT_JOB_TOKEN
WEFT_JOB_TOKEN=$("$w" --new-token)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "two_nodes ($what): FAILED: $*"
    for f in "$dir"/node*; do [ -e "$f" ] && { echo "--- $f"; cat "$f"; }; done
    exit 1
}
# node R NNODES [weftrun options] -- program...: start node R's weftrun in the background.
node() {
    local r=$1 nn=$2
    shift 2
    "$w" --nnodes "$nn" --node-rank "$r" --store "$store" --timeout 60 "$@" >>"$dir/node$r" 2>&1 &
    pids[$r]=$!
}
# Wait for node R's weftrun; its exit status in $code.
finish() {
    wait "${pids[$1]}"
    code=$?
}
expect_code() {
    finish "$1"
    [ "$code" -eq "$2" ] || fail "node $1's weftrun exited $code, not $2"
}
wait_for() {
    for _ in $(seq 200); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    fail "never saw '$2' in $1"
}
show='echo "R=$WEFT_RANK W=$WEFT_WORLD_SIZE L=$WEFT_LOCAL_RANK LS=$WEFT_LOCAL_SIZE $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $WEFT_STORE ${WEFT_JOB_TOKEN:-none} ${WEFT_MEMBER_SECRET_FD:+pipe} J=${WEFT_JOIN:-0}"'

case $what in
env)
    node 1 2 -n 2 -- sh -c "$show"
    sleep 0.3
    node 0 2 -n 2 -- sh -c "$show"
    expect_code 0 0
    expect_code 1 0
    for r in 0 1 2 3; do
        n=$((r / 2))
        # No rank holds the token: each has its own secret's pipe.
        want="R=$r W=4 L=$((r % 2)) LS=2 $r 4 $((r % 2)) 2 $store none pipe J=0"
        grep -qx "$want" "$dir/node$n" || fail "rank $r: no line '$want'"
    done
    ;;
stop)
    node 0 2 -n 2 -- sleep 30
    node 1 2 -n 2 -- sh -c '[ "$WEFT_RANK" = 3 ] && { sleep 0.5; exit 3; }; sleep 30'
    expect_code 1 3
    expect_code 0 3
    grep -q "node 1 stopped the job" "$dir/node0" || fail "node 0 did not say why it stopped"
    ;;
lost | elastic)
    opt=()
    [ "$what" = elastic ] && opt=(--elastic)
    node 0 2 -n 2 -v "${opt[@]}" -- sh -c 'sleep 2; echo done $WEFT_RANK'
    node 1 2 -n 2 "${opt[@]}" -- sleep 30
    wait_for "$dir/node0" "node 1 is up"
    sleep 0.3
    kill -9 "${pids[1]}"
    if [ "$what" = lost ]; then
        expect_code 0 1
        grep -q "done" "$dir/node0" && fail "node 0's ranks were not stopped"
    else
        expect_code 0 0
        [ "$(grep -c done "$dir/node0")" -eq 2 ] || fail "node 0's ranks did not finish"
    fi
    grep -q "node 1 was lost" "$dir/node0" || fail "node 0 did not see node 1 lost"
    ;;
lost0)
    node 0 2 -n 1 -v -- sleep 30
    node 1 2 -n 1 -- sh -c 'sleep 30; echo done'
    wait_for "$dir/node0" "node 1 is up"
    kill -9 "${pids[0]}"
    expect_code 1 1
    grep -q "lost the store.*stopping this node's ranks" "$dir/node1" ||
        fail "node 1 did not stop for the lost store"
    grep -q done "$dir/node1" && fail "node 1's rank was not stopped"
    ;;
wait)
    node 0 2 -n 1 -v -- true
    node 1 2 -n 1 -- sh -c 'sleep 1.5; touch "$0"' "$dir/late"
    expect_code 0 0
    [ -e "$dir/late" ] || fail "node 0 ended before node 1's rank"
    expect_code 1 0
    grep -q "waiting for node(s) 1" "$dir/node0" || fail "node 0 did not say it waited"
    ;;
usage)
    for args in "--nnodes 2 --node-rank 0" "--nnodes 2 --node-rank 2 --store $store" \
        "--nnodes 2 --store $store --token short" "--nnodes 2 --store $store --port 5"; do
        "$w" $args -n 1 -- true >"$dir/out" 2>&1
        [ $? -eq 2 ] || fail "weftrun $args was not refused: $(cat "$dir/out")"
    done
    env -u WEFT_JOB_TOKEN "$w" --nnodes 2 --store "$store" -n 1 -- true >"$dir/out" 2>&1
    [ $? -eq 2 ] && grep -q "job token" "$dir/out" || fail "a job without a token was not refused"
    # A token file that others can read is refused, naming the fix; a private one works.
    echo "$WEFT_JOB_TOKEN" >"$dir/token" && chmod 644 "$dir/token"
    env -u WEFT_JOB_TOKEN "$w" --nnodes 2 --store "$store" --token-file "$dir/token" -n 1 \
        -- true >"$dir/out" 2>&1
    [ $? -eq 2 ] && grep -q "mode 0644): chmod 600" "$dir/out" ||
        fail "a token file others can read was not refused: $(cat "$dir/out")"
    # --token is wiped from weftrun's command line (others read it in /proc) and warned of.
    # shellcheck disable=SC2016  # expanded by the rank's shell
    env -u WEFT_JOB_TOKEN "$w" --token "$WEFT_JOB_TOKEN" -n 1 -- \
        sh -c 'tr "\0" " " </proc/$PPID/cmdline' >"$dir/out" 2>&1
    grep -q -- "--token \*\*\*\*" "$dir/out" && ! grep -qF "$WEFT_JOB_TOKEN" "$dir/out" &&
        grep -q "warning: --token puts the job token on the command line" "$dir/out" ||
        fail "--token stayed in weftrun's command line: $(cat "$dir/out")"
    node 0 2 -n 1 -v -- sleep 30
    node 1 2 -n 1 -- sleep 30
    wait_for "$dir/node0" "node 1 is up"
    "$w" --nnodes 2 --node-rank 1 --store "$store" -n 1 -- true >"$dir/again" 2>&1
    [ $? -eq 1 ] && grep -q "running already" "$dir/again" || fail "node 1 started twice: $(cat "$dir/again")"
    kill -9 "${pids[1]}"
    expect_code 0 1
    ;;
rejoin)
    node 0 2 -n 2 --elastic -v -- sh -c 'sleep 3'
    node 1 2 -n 2 --elastic -- sh -c "$show; sleep 30"
    wait_for "$dir/node1" "R=3"
    kill -9 "${pids[1]}"
    wait_for "$dir/node0" "node 1 was lost"
    node 1 2 -n 2 --elastic -- sh -c "$show"
    expect_code 1 0
    expect_code 0 0
    grep -q "J=1" "$dir/node1" || fail "the node started again did not start joiners"
    for l in 0 1; do
        grep -qE "^R=[45] W=4 L=$l LS=2 .* J=1$" "$dir/node1" || fail "no joiner of local rank $l with a new id"
    done
    grep -q "join the job as replacements" "$dir/node1" || fail "node 1 did not say it rejoined"
    ;;
fence | fence_ns)
    # The ranks' leases lapse after 2 s; weftrun itself would fence a stopped rank
    # only after 30 s (its own WEFT_FAILURE_TIMEOUT_MS): node 0's store must tell. (A
    # 0.5 s lease let a running rank's lease lapse too once, on a machine this loaded.)
    # fence_ns: the same under a key namespace of the job's own (WEFT_NAMESPACE).
    export WEFT_FAILURE_TIMEOUT_MS=30000
    [ "$what" = fence_ns ] && export WEFT_NAMESPACE=job7
    rank='echo $$ >"$0/pid.$WEFT_RANK"; WEFT_FAILURE_TIMEOUT_MS=2000 exec "$1" loss 3'
    node 0 2 -n 2 --elastic -- sh -c "$rank" "$dir" "$bin/host_job"
    node 1 2 -n 2 --elastic -- sh -c "$rank" "$dir" "$bin/host_job"
    wait_for "$dir/node0" JOB-READY
    kill -STOP "$(cat "$dir/pid.3")"
    expect_code 0 0
    expect_code 1 0
    grep -q "rank 3 .* declared failed; killing it" "$dir/node1" || fail "node 1 did not kill its stopped rank"
    [ "$(cat "$dir"/node* | grep -c SURVIVOR-OK)" -eq 3 ] || fail "the others did not repair"
    ;;
jobfailed)
    node 0 2 -n 2 --elastic -- sleep 30
    node 1 2 -n 2 --elastic -- sh -c '[ "$WEFT_RANK" = 3 ] && { sleep 0.5; exit 86; }; sleep 30'
    expect_code 1 86
    expect_code 0 86
    grep -q "node 1 stopped the job (a rank said the job failed); stopping" "$dir/node0" ||
        fail "node 0 did not say why it stopped"
    ;;
jobfailed_late)
    node 0 2 -n 1 --elastic -v -- true
    node 1 2 -n 1 --elastic -- sh -c 'while [ ! -e "$0" ]; do sleep 0.05; done; exit 86' "$dir/go"
    wait_for "$dir/node0" "waiting for node(s) 1"
    touch "$dir/go"
    expect_code 1 86
    expect_code 0 86
    grep -q "node 1 stopped the job (a rank said the job failed) after this node's ranks ended" \
        "$dir/node0" || fail "node 0 did not say that the job failed after its ranks ended"
    ;;
*)
    echo "two_nodes: unknown case $what" >&2
    exit 2
    ;;
esac
echo "two_nodes ($what): passed"
