#!/usr/bin/env bash
# reaped_group.sh WEFTRUN
# weftrun signals the process group of a rank it has reaped only while that group still
# has members: once it is empty, the kernel may give its id to an unrelated process that
# leads a group of its own. Rank 0 exits at once; its pid is then given to such a process
# (ns_last_pid: root only, skipped elsewhere); the job stops at --timeout and signals its
# ranks' groups: the unrelated process must live on.
set -u
weftrun=$1
if [ "$(id -u)" != 0 ] || [ ! -w /proc/sys/kernel/ns_last_pid ]; then
    echo "reaped_group: needs root and a writable /proc/sys/kernel/ns_last_pid; skipped"
    exit 77
fi
dir=$(mktemp -d)
victim=
cleanup() {
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    cat "$dir/out"
    echo "reaped_group: FAIL: $*"
    exit 1
}
# shellcheck disable=SC2016  # expanded by the ranks' shell
"$weftrun" -n 2 --timeout 4 -- sh -c \
    'if [ "$WEFT_RANK" = 0 ]; then echo $$ >"$0/pid0"; exit 0; fi; exec sleep 30' "$dir" \
    >"$dir/out" 2>&1 &
wr=$!
for _ in $(seq 200); do
    [ -s "$dir/pid0" ] && ! kill -0 "$(cat "$dir/pid0")" 2>/dev/null && break
    sleep 0.02
done
pid=$(cat "$dir/pid0" 2>/dev/null) || fail "rank 0 did not start"
kill -0 "$pid" 2>/dev/null && fail "rank 0 did not exit"
sleep 0.2 # weftrun has reaped it (it is gone from the process table)
# Hand rank 0's pid to a new process that leads a group of its own, as any daemon or
# shell job may; other processes of the machine may take it first: try again.
for _ in $(seq 100); do
    echo $((pid - 1)) >/proc/sys/kernel/ns_last_pid
    setsid sleep 60 &
    if [ $! -eq "$pid" ]; then
        victim=$!
        break
    fi
    kill -9 $! 2>/dev/null
done
[ -n "$victim" ] || { echo "reaped_group: could not reuse pid $pid; skipped"; exit 77; }
wait "$wr"
rc=$?
[ $rc -eq 124 ] || fail "weftrun exited $rc, not 124 (--timeout)"
sleep 0.2
kill -0 "$victim" 2>/dev/null ||
    fail "weftrun signalled the group of reaped rank 0, whose id an unrelated process had taken"
echo "reaped_group: PASS (pid $pid reused by an unrelated group leader, left alone)"
