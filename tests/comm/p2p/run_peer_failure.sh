#!/bin/sh
# run_peer_failure.sh WEFTRUN NRANKS PROG
# Runs PROG (test_peer_failure) on NRANKS ranks with --keep-going: the last rank kills
# itself with SIGKILL on purpose while the others are blocked receiving from it. Passes
# when weftrun exits with 137 (128 + SIGKILL, the status of that first failure), every
# survivor printed "SURVIVOR-OK" and none printed "SURVIVOR-FAIL". A hang ends in
# weftrun's --timeout (exit 124) and fails.
set -u
weftrun=$1 n=$2 prog=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$weftrun" -n "$n" --keep-going --timeout 100 -- "$prog" >"$out" 2>&1
rc=$?
cat "$out"
ok=$(grep -c "SURVIVOR-OK" "$out")
bad=$(grep -c "SURVIVOR-FAIL" "$out")
expect=$((n - 1))
echo "run_peer_failure: weftrun exit $rc (expected 137), $ok of $expect survivors OK, $bad failed"
[ "$rc" -eq 137 ] && [ "$ok" -eq "$expect" ] && [ "$bad" -eq 0 ]
