#!/usr/bin/env bash
# run_exit_no_finalize.sh RUNS EXPECT WEFTRUN PROG MODE
# Runs `WEFTRUN -n 2 -- PROG MODE` RUNS times (a crash at exit is a race: one run may miss
# it) and checks that every run ended with weftrun's exit status EXPECT and that no rank
# was killed by a signal. --keep-going: every rank exits by itself, none is stopped.
set -u
runs=$1 expect=$2 weftrun=$3 prog=$4 mode=$5
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq "$runs"); do
    "$weftrun" -n 2 --keep-going --timeout 60 -- "$prog" "$mode" >"$out" 2>&1
    rc=$?
    if [ "$rc" -ne "$expect" ] || grep -qi 'signal' "$out"; then
        cat "$out"
        echo "run_exit_no_finalize $mode: FAIL: run $i of $runs: exit status $rc, expected $expect"
        exit 1
    fi
done
echo "run_exit_no_finalize $mode: $runs runs, exit status $expect, no signal"
