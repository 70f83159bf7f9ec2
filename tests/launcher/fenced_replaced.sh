#!/usr/bin/env bash
# fenced_replaced.sh WEFTRUN
# Under --elastic --replace a rank that is declared failed is replaced when it is fenced,
# not when it is reaped: under load the kernel can take seconds to unmap a large process
# after SIGKILL, and the members would wait for the replacement all that time. Rank 1
# stops itself, so weftrun fences it after WEFT_FAILURE_TIMEOUT_MS; weftrun's log must
# say that the replacement started before it says that rank 1 died. Ranks 0 and 2 wait
# for the replacement (a file it makes), so the job is not finishing before the fence.
set -u
weftrun=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
WEFT_FAILURE_TIMEOUT_MS=300 "$weftrun" -n 3 --elastic --replace --max-restarts 1 --timeout 60 \
    -- sh -c '
if [ "${WEFT_JOIN:-0}" = 1 ]; then touch "$0/joined"; exit 0; fi
if [ "$WEFT_RANK" = 1 ]; then kill -STOP $$; fi
while [ ! -e "$0/joined" ]; do sleep 0.05; done' "$dir" >"$dir/out" 2>&1
rc=$?
cat "$dir/out"
fail() { echo "fenced_replaced: FAIL: $*"; exit 1; }
[ "$rc" -eq 0 ] || fail "weftrun exited $rc"
started=$(grep -n "to join in its place" "$dir/out" | head -1 | cut -d: -f1)
died=$(grep -n "rank 1 (pid [0-9]*) was killed" "$dir/out" | head -1 | cut -d: -f1)
[ -n "$started" ] || fail "no replacement was started"
[ -n "$died" ] || fail "the death of rank 1 was not reported"
[ "$started" -lt "$died" ] || fail "the replacement started only after rank 1 was reaped"
grep -q "replaced when it was declared failed" "$dir/out" || fail "rank 1 was counted twice"
[ "$(grep -c "to join in its place" "$dir/out")" -eq 1 ] || fail "more than one replacement"
echo "fenced_replaced: PASS"
