#!/usr/bin/env bash
# run_fault.sh WEFTRUN NRANKS EXPECTED_SURVIVORS PROG ARGS...
# Runs PROG on NRANKS ranks with --keep-going (ranks that kill themselves on purpose do
# not stop the others) and passes when exactly EXPECTED_SURVIVORS ranks printed
# "SURVIVOR-OK" and none printed "SURVIVOR-FAIL". weftrun's own exit status reflects the
# deliberate deaths and is not used.
set -u
weftrun=$1 n=$2 expect=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$weftrun" -n "$n" --keep-going --timeout 100 -- "$@" >"$out" 2>&1
rc=$?
ok=$(grep -c "SURVIVOR-OK" "$out")
bad=$(grep -c "SURVIVOR-FAIL" "$out")
cat "$out"
echo "run_fault: weftrun exit $rc, $ok survivor(s) verified (expected $expect), $bad failed"
[[ $ok -eq $expect && $bad -eq 0 && $rc -ne 124 ]]
