#!/usr/bin/env bash
# abandon_campaign.sh WEFTRUN TEST_ABANDON RUNS [ROUNDS] [SEED]
# A randomized campaign of abandoned collectives (timeouts and one-sided cancels of
# random sizes, 8 B-16 MiB): RUNS jobs of 2-4 ranks, each over shared memory or messages,
# each ROUNDS events followed by recovery (tests/groups/test_abandon.c, "random"). A
# trial is one event; it passes when every member then agrees on membership and epoch
# with every member kept. Prints the trials, hangs (a job past its time limit) and split
# brains (a job whose members disagreed or lost one), and exits non-zero on any.
set -u
weftrun=$1 prog=$2 runs=$3 rounds=${4:-10} seed=${5:-$RANDOM}
RANDOM=$seed
trials=0 hangs=0 split=0 failed=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 0; i < runs; i++)); do
    n=$((2 + RANDOM % 3))
    shm=$([[ $((RANDOM % 2)) -eq 0 ]] && echo on || echo off)
    s=$RANDOM
    # Timeout rounds sleep 2.5 x WEFT_TIMEOUT_MS; the limit leaves room for a busy machine.
    timeout -s KILL $((60 + rounds * 6)) "$weftrun" -n "$n" --elastic --timeout $((50 + rounds * 6)) -- \
        env WEFT_TIMEOUT_MS=300 WEFT_COLL_SHM=$shm "$prog" random "$rounds" "$s" >"$out" 2>&1
    rc=$?
    ok=$(grep -c "SURVIVOR-OK" "$out")
    if [[ $rc -eq 0 && $ok -eq $n ]]; then
        trials=$((trials + rounds))
        continue
    fi
    failed=$((failed + 1))
    if [[ $rc -eq 137 ]] || grep -q "timed out after.*weftrun\|--timeout" "$out"; then
        hangs=$((hangs + 1))
    elif grep -q "members disagree\|of $n members" "$out"; then
        split=$((split + 1))
    fi
    echo "abandon_campaign: run $i failed (n=$n shm=$shm seed=$s rc=$rc):"
    grep -v '^\s*$' "$out" | tail -15
done
echo "abandon_campaign: $runs jobs, $trials trials passed, $failed jobs failed ($hangs hangs, $split split brains), seed $seed"
[[ $failed -eq 0 ]]
