#!/usr/bin/env bash
# stopped_rank.sh WEFTRUN
# A rank stopped (SIGSTOP) before it holds a liveness lease, as in its first milliseconds,
# cannot be declared failed by the store; weftrun must see the stop itself and fence the
# process once it stayed stopped for WEFT_FAILURE_TIMEOUT_MS, not leave the job hanging
# until --timeout. Passes when weftrun ends well before its --timeout and says why.
set -u
weftrun=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s%N)
WEFT_FAILURE_TIMEOUT_MS=500 "$weftrun" -n 3 --elastic --timeout 30 -- \
    sh -c 'if [ "$WEFT_RANK" = 1 ]; then kill -STOP $$; fi; sleep 0.2' >"$out" 2>&1
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
cat "$out"
echo "stopped_rank: weftrun exit $rc after $ms ms"
grep -q "stayed stopped" "$out" || { echo "stopped_rank: FAIL: the stopped rank was not fenced"; exit 1; }
[ "$rc" -ne 124 ] && [ "$ms" -lt 15000 ] || { echo "stopped_rank: FAIL: weftrun waited for it"; exit 1; }
echo "stopped_rank: PASS"
