#!/usr/bin/env bash
# run_elastic.sh WEFTRUN N PROG ARGS...
# Runs PROG on N ranks under `weftrun --elastic --replace --max-restarts 3` and passes when
# weftrun exits 0 and exactly N members of the final group printed "ELASTIC-OK" (none
# "ELASTIC-FAIL"). Both are needed: in elastic mode a member that fails its checks is one
# more tolerated death for weftrun, and a check cannot see weftrun's verdict.
set -u
weftrun=$1 n=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$weftrun" -n "$n" ${WEFTRUN_EXTRA:-} --elastic --replace --max-restarts 3 --timeout 100 --tag-output -- "$@" \
    >"$out" 2>&1
rc=$?
ok=$(grep -c "ELASTIC-OK" "$out")
bad=$(grep -c "ELASTIC-FAIL" "$out")
cat "$out"
echo "run_elastic: weftrun exit $rc, $ok member(s) verified (expected $n), $bad failed"
[[ $rc -eq 0 && $ok -eq $n && $bad -eq 0 ]]
