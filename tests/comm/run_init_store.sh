#!/usr/bin/env bash
# run_init_store.sh count WEFTRUN PROG N1 N2...
#   Runs PROG (test_init_store count) under weftrun at each job size and checks that every
#   rank of every job sent weft_init's store the same number of requests: what a rank
#   costs the store at start-up does not grow with the job. The heartbeat is slowed down
#   so that no renewal of its lease lands inside weft_init (the lease then lapses only
#   after WEFT_FAILURE_TIMEOUT_MS, set longer still).
# run_init_store.sh death WEFTRUN PROG N
#   Runs PROG death under weftrun --elastic: the last rank dies before weft_init, and each
#   of the others must print INIT-DEATH-OK (weftrun --elastic tolerates any rank's exit,
#   so its status alone would not tell).
set -u
mode=$1 weftrun=$2 prog=$3
shift 3
if [ "$mode" = death ]; then
    n=$1
    out=$("$weftrun" -n "$n" --elastic --timeout 60 -- "$prog" death)
    echo "$out"
    ok=$(grep -c INIT-DEATH-OK <<<"$out")
    [ "$ok" -eq $((n - 1)) ] || { echo "run_init_store: FAIL: $ok of $((n - 1)) ranks started"; exit 1; }
    echo "run_init_store death: PASS"
    exit 0
fi
export WEFT_HEARTBEAT_MS=60000 WEFT_FAILURE_TIMEOUT_MS=600000
counts=()
for n in "$@"; do
    out=$("$weftrun" -n "$n" --timeout 100 -- "$prog" count) || {
        echo "$out"
        echo "run_init_store: FAIL: the job of $n ranks failed"
        exit 1
    }
    echo "$out"
    got=$(grep -c "init store requests:" <<<"$out")
    [ "$got" -eq "$n" ] || { echo "run_init_store: FAIL: $got of $n ranks reported"; exit 1; }
    counts+=($(sed -n 's/.*init store requests: \([0-9]*\)$/\1/p' <<<"$out"))
done
first=${counts[0]}
for k in "${counts[@]}"; do
    if [ "$k" != "$first" ]; then
        echo "run_init_store: FAIL: requests per rank differ between jobs of $* ranks: ${counts[*]}"
        exit 1
    fi
done
echo "run_init_store: PASS: $first requests per rank at $* ranks"
