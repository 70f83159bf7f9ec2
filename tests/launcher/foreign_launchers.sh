#!/usr/bin/env bash
# foreign_launchers.sh WEFTRUN WEFT_PERF
# Ranks started by another launcher: torchrun (RANK, WORLD_SIZE), MPICH's Hydra
# (PMI_RANK, PMI_SIZE), Open MPI (OMPI_COMM_WORLD_*) and srun (SLURM_PROCID,
# SLURM_NTASKS), with no WEFT_* variable. The ranks are real weft-perf processes given
# each launcher's variables by hand.
#  1. Without WEFT_STORE each is refused (exit 3, no table): the message names the
#     variables seen and how to launch, instead of N lone ranks 0 of 1.
#  2. With a store from `weftrun --store-only` (one key namespace per job) each forms one
#     job of 2 ranks whose allreduce is checked.
#  3. A second job on the store in a namespace already used says so, at the default log
#     level; a rank started twice in a running job is told apart from that.
set -u
weftrun=$1
perf=$2
tmp=$(mktemp -d)
store_pid=""
cleanup() {
    for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() {
    echo "FAILED: $*"
    failures=$((failures + 1))
}
show() {
    for f in "$@"; do echo "--- $f"; cat "$f"; done
}

for v in WEFT_RANK WEFT_WORLD_SIZE WEFT_LOCAL_RANK WEFT_LOCAL_SIZE WEFT_STORE WEFT_JOB_TOKEN \
    WEFT_JOB_TOKEN_FILE PMIX_RANK PMIX_NAMESPACE \
    WEFT_JOIN WEFT_NAMESPACE RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR \
    MASTER_PORT PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS OMPI_COMM_WORLD_RANK \
    OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE SLURM_PROCID \
    SLURM_NTASKS SLURM_LOCALID SLURM_NTASKS_PER_NODE PMIX_RANK; do
    unset "$v"
done

launchers=(
    "torchrun RANK WORLD_SIZE"
    "pmi PMI_RANK PMI_SIZE"
    "mpirun OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE"
    "srun SLURM_PROCID SLURM_NTASKS"
)

# perf OUT VAR=VALUE...: one rank of a 2-rank allreduce run, its output in OUT.
perf() {
    local out=$1
    shift
    env "$@" timeout 60 "$perf" allreduce -b 8 -e 64 -n 2 -w 1 --settle 0 --bind none \
        >"$out" 2>&1
}

# 1. No store.
for spec in "${launchers[@]}"; do
    read -r name rank size <<<"$spec"
    perf "$tmp/nostore.$name" "$rank=1" "$size=2"
    rc=$?
    want="$rank=1 $size=2 set by $name but no WEFT_STORE"
    if [ "$rc" != 3 ] || ! grep -qF "$want" "$tmp/nostore.$name" ||
        ! grep -qF "weftrun --store-only" "$tmp/nostore.$name" ||
        grep -q "Out of bounds" "$tmp/nostore.$name"; then
        fail "$name without a store: exit $rc, expected 3 and '$want'"
        show "$tmp/nostore.$name"
    fi
done

# 2. A store for the jobs started by the other launchers.
"$weftrun" --store-only --timeout 100 >"$tmp/store" 2>&1 &
store_pid=$!
for _ in $(seq 200); do
    grep -q '^WEFT_JOB_TOKEN_FILE=' "$tmp/store" && break
    sleep 0.05
done
store=$(sed -n 's/^WEFT_STORE=//p' "$tmp/store")
token=$(sed -n 's/^WEFT_JOB_TOKEN_FILE=//p' "$tmp/store")
[ -n "$store" ] && [ -n "$token" ] || {
    show "$tmp/store"
    echo "FAILED: weftrun --store-only printed no store"
    exit 1
}
export WEFT_STORE=$store WEFT_JOB_TOKEN_FILE=$token

# job NAME NAMESPACE RANKVAR SIZEVAR: ranks 0 and 1 at once; their exit codes in
# $tmp/NAME.rc.R, outputs in $tmp/NAME.out.R.
job() {
    local name=$1 ns=$2 rank=$3 size=$4 pids=()
    for r in 0 1; do
        (
            perf "$tmp/$name.out.$r" "$rank=$r" "$size=2" WEFT_NAMESPACE="$ns"
            echo $? >"$tmp/$name.rc.$r"
        ) &
        pids+=($!)
    done
    wait "${pids[@]}"
}

for spec in "${launchers[@]}"; do
    read -r name rank size <<<"$spec"
    job "$name" "job-$name" "$rank" "$size"
    if [ "$(cat "$tmp/$name.rc.0")" != 0 ] || [ "$(cat "$tmp/$name.rc.1")" != 0 ] ||
        ! grep -q "allreduce: 2 ranks" "$tmp/$name.out.0" ||
        ! grep -q "Out of bounds values : 0 OK" "$tmp/$name.out.0"; then
        fail "$name with a store: not one checked job of 2 ranks"
        show "$tmp/$name".*
    fi
done

# 3. The torchrun job's namespace again: a second job on the store.
job again job-torchrun RANK WORLD_SIZE
for r in 0 1; do
    if [ "$(cat "$tmp/again.rc.$r")" != 3 ] ||
        ! grep -q "ERROR: member $r is already registered in the store" "$tmp/again.out.$r" ||
        ! grep -qF "a job that has ended already ran on this store" "$tmp/again.out.$r"; then
        fail "second job, rank $r: not refused as a second job"
        show "$tmp/again".*
    fi
done

# Rank 0 started twice in a running job (its rank 1 comes later): one of the two is
# refused as started twice, while the job has not ended; the other runs the job.
for c in a b; do
    (
        perf "$tmp/twice.out.$c" RANK=0 WORLD_SIZE=2 WEFT_NAMESPACE=twice
        echo $? >"$tmp/twice.rc.$c"
    ) &
done
for _ in $(seq 400); do
    [ -e "$tmp/twice.rc.a" ] || [ -e "$tmp/twice.rc.b" ] && break
    sleep 0.05
done
perf "$tmp/twice.out.1" RANK=1 WORLD_SIZE=2 WEFT_NAMESPACE=twice
rc1=$?
for _ in $(seq 400); do
    [ -e "$tmp/twice.rc.a" ] && [ -e "$tmp/twice.rc.b" ] && break
    sleep 0.05
done
codes="$(cat "$tmp/twice.rc.a" 2>/dev/null) $(cat "$tmp/twice.rc.b" 2>/dev/null)"
refused=$(grep -l "member 0 is already registered" "$tmp"/twice.out.[ab] | head -1)
if [ "$rc1" != 0 ] || { [ "$codes" != "0 3" ] && [ "$codes" != "3 0" ]; } ||
    [ -z "$refused" ] || ! grep -qF "this member was started twice" "$refused"; then
    fail "rank 0 started twice: exit codes '$codes' (rank 1: $rc1), expected one 0 and one 3"
    show "$tmp"/twice.*
fi

kill "$store_pid" 2>/dev/null
if [ "$failures" != 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "PASSED"
