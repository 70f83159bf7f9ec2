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
# A death the survivors recover from is no transport's warning to print.
noise=$(grep -c "^\[weft [0-9]*\] WARN: ucx:" "$out")
cat "$out"
echo "run_fault: weftrun exit $rc, $ok survivor(s) verified (expected $expect), $bad failed," \
     "$noise transport warning(s)"
[[ $ok -eq $expect && $bad -eq 0 && $rc -eq 0 && $noise -eq 0 ]]
