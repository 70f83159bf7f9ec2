#!/usr/bin/env bash
# run_fault.sh WEFTRUN NRANKS EXPECTED_SURVIVORS PROG ARGS...
# Runs PROG on NRANKS ranks under weftrun --elastic (ranks that kill themselves on
# purpose do not stop the others, and do not fail the job) and passes when weftrun exits
# 0 (every process still a member at the end exited 0), exactly EXPECTED_SURVIVORS ranks
# printed "SURVIVOR-OK" and none printed "SURVIVOR-FAIL".
set -u
weftrun=$1 n=$2 expect=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# WEFTRUN_EXTRA: more weftrun options (--replace, say).
"$weftrun" -n "$n" --elastic ${WEFTRUN_EXTRA:-} --timeout 100 -- "$@" >"$out" 2>&1
rc=$?
ok=$(grep -c "SURVIVOR-OK" "$out")
bad=$(grep -c "SURVIVOR-FAIL" "$out")
cat "$out"
echo "run_fault: weftrun exit $rc, $ok survivor(s) verified (expected $expect), $bad failed"
[[ $ok -eq $expect && $bad -eq 0 && $rc -eq 0 ]]
