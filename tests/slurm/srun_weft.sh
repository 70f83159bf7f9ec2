#!/usr/bin/env bash
# weft jobs started by srun, inside slurm_bed.sh:
#   srun_weft.sh perf WEFT_PERF
#       srun --mpi=pmix -n 4 weft-perf allreduce, no weftrun: weft bootstraps through PMIx
#       (comm/ctx/boot_pmix.c); every size from 8 B to 4 MiB measured, none wrong.
#   srun_weft.sh trainer CHECK_TRAINER WEFTRUN TRAINER
#       the elastic example trainer under one weftrun per node that srun starts, as
#       docs/launch.md ("Under Slurm") shows it: member 3 kills itself at step 20, weftrun
#       replaces it, and the job ends with the state bitwise equal to a run without
#       failures (check_trainer.sh ok).
# Exits 77 when Slurm's pmix plug-in cannot load libpmix (perf only: pmix_probe.sh), 1 on
# a failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/slurm/pmix_probe.sh
. "$here/pmix_probe.sh"
mode=$1
shift
case $mode in
perf)
    perf=$1
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    require_pmix_step srun_weft
    # Each rank reads its store through PMIx, not through a variable left over by a caller.
    unset WEFT_STORE WEFT_JOB_TOKEN
    set +e
    timeout 120 srun --mpi=pmix -n 4 "$perf" allreduce -b 8 -e 4M -c 1 --bind none >"$out" 2>&1
    rc=$?
    set -e
    cat "$out"
    [[ $rc -eq 0 ]] || { echo "FAIL: srun --mpi=pmix -n 4 weft-perf exited $rc"; exit 1; }
    "$here/../launcher/perf_table_ok.sh" "$out" 4 20
    echo "srun_weft: 4 ranks started by srun --mpi=pmix, allreduce correct at 20 sizes"
    ;;
trainer)
    check=$1 weftrun=$2 trainer=$3
    # One weftrun per node, its node rank and the node count from Slurm (one node here).
    # shellcheck disable=SC2016  # expanded by the task's shell
    exec "$check" ok 0 timeout 150 srun -N1 --ntasks-per-node=1 --kill-on-bad-exit=0 \
        bash -c 'exec "$0" --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" "$@"' \
        "$weftrun" -n 4 --elastic --replace --max-restarts 2 --timeout 100 -- \
        "$trainer" --steps 200 --kill-rank 3 --kill-step 20 --wait-replacement 30000
    ;;
*)
    echo "usage: srun_weft.sh perf WEFT_PERF | trainer CHECK_TRAINER WEFTRUN TRAINER" >&2
    exit 2
    ;;
esac
