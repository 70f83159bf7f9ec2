#!/usr/bin/env bash
# heartbeat_warn.sh WEFTRUN PROG
#   A member that renews its liveness lease less often than a quarter of the lease is
#   warned at weft_init: between its renewals the store takes a peer's report that it
#   failed (decision 0030). Runs PROG (test_init_store count) on one rank with a heartbeat
#   just over the quarter, where the warning must come, and at the quarter, where it must
#   not.
set -u
weftrun=$1 prog=$2
run() { # heartbeat_ms failure_timeout_ms
    WEFT_HEARTBEAT_MS=$1 WEFT_FAILURE_TIMEOUT_MS=$2 "$weftrun" -n 1 --timeout 60 -- "$prog" count 2>&1
}
out=$(run 501 2000) || { echo "$out"; echo "heartbeat_warn: FAIL: the job failed"; exit 1; }
grep -q "WEFT_HEARTBEAT_MS 501 is more than a quarter of WEFT_FAILURE_TIMEOUT_MS 2000" <<<"$out" || {
    echo "$out"
    echo "heartbeat_warn: FAIL: no warning for a heartbeat of 501 ms in a lease of 2000 ms"
    exit 1
}
out=$(run 500 2000) || { echo "$out"; echo "heartbeat_warn: FAIL: the job failed"; exit 1; }
if grep -q "more than a quarter" <<<"$out"; then
    echo "$out"
    echo "heartbeat_warn: FAIL: a warning for a heartbeat of 500 ms in a lease of 2000 ms"
    exit 1
fi
echo "heartbeat_warn: PASS"
