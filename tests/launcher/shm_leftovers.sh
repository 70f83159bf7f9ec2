#!/bin/sh
# What jobs leave in /dev/shm (comm/shm/shm_job.h). Each case makes sure the names it looks
# for exist before the step that should remove them, so that it can fail.
#   shm_leftovers.sh WEFTRUN SHM_HOLD CASE
# killed      every rank of a job is SIGKILLed while a segment waits for a member:
#             nothing of the job is left once weftrun exits
# stale       names of a dead job (free lock file; no lock file and an hour old) go at
#             the start of the next job; a young name without a lock file stays
# store_only  ranks started by hand under weftrun --store-only: rank 0's weft_init
#             removes a dead job's names; when they are all SIGKILLed, the next job
#             removes theirs
# weftrun_killed  weftrun and its ranks SIGKILLed: the next job removes their names
# concurrent  a job starting, running and ending beside a job whose segment waits for a
#             member leaves that segment alone (its lock alone protects it: it is made
#             to look an hour old), and the waiting job then succeeds
set -u
weftrun=$1
prog=$2
what=$3
shm=/dev/shm
if [ ! -d $shm ] || [ ! -w $shm ]; then
    echo "skipped: no writable $shm"
    exit 77
fi
tmp=$(mktemp -d)
made=""
# Whatever still runs of ours when the script ends: background jobs, and ranks (in
# process groups of their own) whose pid is still a shm_hold.
cleanup() {
    for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
    for f in "$tmp"/*/pid.*; do
        [ -e "$f" ] || continue
        p=$(cat "$f")
        grep -q shm_hold "/proc/$p/cmdline" 2>/dev/null && kill -9 "$p"
    done
    for f in $made; do rm -f "$shm/$f"; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAILED ($what): $*"
    for f in "$tmp"/*/out; do [ -e "$f" ] && { echo "--- $f"; cat "$f"; }; done
    exit 1
}

# The names of job $1 in /dev/shm, segments and lock file.
names() {
    ls $shm | grep -E "^weft-$1[-.]"
}
# Wait up to $2 seconds for file $1.
wait_file() {
    i=0
    while [ ! -e "$1" ]; do
        i=$((i + 1))
        [ $i -le $(($2 * 20)) ] || return 1
        sleep 0.05
    done
}
# 16 random hex digits: a job that never ran.
random_job() {
    od -An -tx1 -N8 /dev/urandom | tr -d ' \n'
}
# Make name $1 in /dev/shm, remembered for the cleanup.
make_name() {
    : >"$shm/$1" || fail "cannot create $shm/$1"
    made="$made $1"
}
# Start a job of 2 ranks of "shm_hold hold $1" in the background ($hold_pid: weftrun) and
# wait until rank 0's segment is in /dev/shm ($job: its <job>).
start_hold() {
    mkdir -p "$1"
    "$weftrun" -n 2 --timeout 100 -- "$prog" hold "$1" >"$1/out" 2>&1 &
    hold_pid=$!
    wait_file "$1/created" 60 || fail "rank 0 never reported its segment"
    job=$(cat "$1/job")
    [ -n "$(names "$job")" ] || fail "no name of job $job in $shm"
    [ -e "$shm/weft-$job.lock" ] || fail "no lock file of job $job in $shm"
}
# After a kill, job $1's names must still be there for the next job to remove; another
# job starting on this host meanwhile removes them rightly, and then nothing is judged.
check_still_there() {
    if [ -z "$(names "$1")" ]; then
        echo "skipped: another job on this host removed the killed job's names first"
        exit 77
    fi
}
# Wait until processes $@ have exited: gone, or zombies whose every thread has exited (a
# SIGKILLed process's first thread can be a zombie while others still hold its files and
# locks; a busy machine makes that last a while).
exited() {
    for t in /proc/$1/task/*/stat; do
        [ -e "$t" ] || continue
        [ "$(cut -d' ' -f3 "$t" 2>/dev/null)" = Z ] || return 1
    done
}
wait_exited() {
    for p in "$@"; do
        i=0
        until exited "$p"; do
            i=$((i + 1))
            [ $i -le 1200 ] || fail "process $p did not exit within 60 s of SIGKILL"
            sleep 0.05
        done
    done
}
# Check that job $1 has nothing left in /dev/shm.
check_gone() {
    left=$(names "$1")
    [ -z "$left" ] || fail "$2: left in $shm: $left"
}
# Stale names of three dead jobs: $dead (a free lock file), $old (no lock file, an hour
# old), $young (no lock file, new).
make_stale() {
    dead=$(random_job)
    old=$(random_job)
    young=$(random_job)
    make_name "weft-$dead-0123456789abcdef-1-0-ctl"
    make_name "weft-$dead.lock"
    make_name "weft-$old-0123456789abcdef-1-0-ctl"
    touch -d '1 hour ago' "$shm/weft-$old-0123456789abcdef-1-0-ctl"
    make_name "weft-$young-0123456789abcdef-1-0-ctl"
}

case $what in
killed)
    start_hold "$tmp/a"
    kill -9 "$(cat "$tmp/a/pid.0")" "$(cat "$tmp/a/pid.1")"
    wait "$hold_pid"
    rc=$?
    [ $rc = 137 ] || fail "weftrun exited $rc, not 137"
    check_gone "$job" "after weftrun exited"
    ;;
stale)
    make_stale
    "$weftrun" -n 1 -- true || fail "weftrun -n 1 true failed"
    check_gone "$dead" "a dead job's names (free lock)"
    check_gone "$old" "an hour-old name without lock file"
    [ "$(names "$young")" = "weft-$young-0123456789abcdef-1-0-ctl" ] ||
        fail "a new name without lock file: got '$(names "$young")'"
    ;;
store_only)
    "$weftrun" --store-only --timeout 100 >"$tmp/env" 2>"$tmp/store.err" &
    store_pid=$!
    i=0
    until grep -qs '^WEFT_JOB_TOKEN_FILE=' "$tmp/env"; do
        i=$((i + 1))
        [ $i -le 600 ] || fail "weftrun --store-only printed no token: $(cat "$tmp/store.err")"
        sleep 0.05
    done
    WEFT_STORE=$(sed -n 's/^WEFT_STORE=//p' "$tmp/env")
    WEFT_JOB_TOKEN_FILE=$(sed -n 's/^WEFT_JOB_TOKEN_FILE=//p' "$tmp/env")
    [ -n "$WEFT_STORE" ] && [ -n "$WEFT_JOB_TOKEN_FILE" ] || fail "no store: $(cat "$tmp/store.err")"
    export WEFT_STORE WEFT_JOB_TOKEN_FILE WEFT_WORLD_SIZE=2 WEFT_LOCAL_SIZE=2
    make_stale # after weftrun's own sweep: only the ranks can remove these
    d=$tmp/b
    mkdir -p "$d"
    for r in 0 1; do
        WEFT_RANK=$r WEFT_LOCAL_RANK=$r "$prog" hold "$d" >"$d/out.$r" 2>&1 &
    done
    wait_file "$d/created" 60 || fail "rank 0 never reported its segment: $(cat "$d"/out.*)"
    check_gone "$dead" "a dead job's names after rank 0's weft_init"
    job=$(cat "$d/job")
    [ -n "$(names "$job")" ] || fail "no name of job $job in $shm"
    kill -9 "$(cat "$d/pid.0")" "$(cat "$d/pid.1")"
    wait_exited "$(cat "$d/pid.0")" "$(cat "$d/pid.1")"
    check_still_there "$job"
    unset WEFT_STORE WEFT_JOB_TOKEN_FILE WEFT_WORLD_SIZE WEFT_LOCAL_SIZE
    "$weftrun" -n 1 -- true || fail "weftrun -n 1 true failed"
    check_gone "$job" "names of ranks that all died, after the next job"
    kill -TERM "$store_pid"
    wait "$store_pid"
    ;;
weftrun_killed)
    start_hold "$tmp/a"
    kill -9 "$hold_pid" "$(cat "$tmp/a/pid.0")" "$(cat "$tmp/a/pid.1")"
    wait "$hold_pid"
    wait_exited "$(cat "$tmp/a/pid.0")" "$(cat "$tmp/a/pid.1")"
    check_still_there "$job"
    "$weftrun" -n 1 -- true || fail "weftrun -n 1 true failed"
    check_gone "$job" "names of a SIGKILLed job, after the next job"
    ;;
concurrent)
    start_hold "$tmp/a"
    # Old enough to go if it had no lock file: only the lock keeps it.
    for f in $(names "$job"); do touch -d '1 hour ago' "$shm/$f"; done
    before=$(names "$job")
    "$weftrun" -n 2 --timeout 100 -- "$prog" quick >"$tmp/quick.out" 2>&1 ||
        fail "the second job failed: $(cat "$tmp/quick.out")"
    "$weftrun" -n 1 -- true || fail "weftrun -n 1 true failed"
    [ "$(names "$job")" = "$before" ] ||
        fail "the running job's names were '$before', now '$(names "$job")'"
    touch "$tmp/a/go"
    wait "$hold_pid"
    rc=$?
    [ $rc = 0 ] || fail "the job whose segment waited exited $rc"
    check_gone "$job" "after a job that ended well"
    ;;
*)
    echo "unknown case $what"
    exit 2
    ;;
esac
echo "PASSED ($what)"
