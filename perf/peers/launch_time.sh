#!/bin/bash
# Job start time: the same 4-rank weft job started by weftrun and by Open MPI's mpirun
# (weft bootstraps through PMIx there, comm/ctx/boot_pmix.c), beside what each launcher
# costs on its own and what Open MPI's own job (MPI_Init, one allreduce) takes.
#
#   perf/peers/launch_time.sh [-n RANKS] [-r ROUNDS] [--build DIR] [--srun]
#
# Each case is timed from the launcher's start to its exit, ROUNDS times, the cases
# alternating so that all see the same background load; the table shows medians (ms) and
# ratios against weftrun. The weft job is `weft-perf allreduce -b 8 -e 8 -n 1 -w 0
# --settle 0 --bind none` (weft_init, one checked allreduce, weft_finalize); Open MPI's is
# mpi-allreduce-perf with the same options. With --srun (inside the Slurm bed,
# tests/slurm/slurm_bed.sh), `srun --mpi=pmix` is timed too.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build"
ranks=4
rounds=7
srun=0
while [ $# -gt 0 ]; do
    case "$1" in
    -n) ranks=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --srun) srun=1; shift ;;
    *) echo "usage: $0 [-n RANKS] [-r ROUNDS] [--build DIR] [--srun]" >&2; exit 2 ;;
    esac
done
perf="$build/bin/weft-perf"
mpiperf="$build/bin/mpi-allreduce-perf"
weftrun="$build/bin/weftrun"
for f in "$perf" "$weftrun" "$mpiperf"; do
    [ -x "$f" ] || { echo "launch_time: $f not built" >&2; exit 1; }
done
if pgrep -x weftrun >/dev/null; then
    echo "launch_time: weftrun processes are running; measure on a quiet machine" >&2
    exit 1
fi
unset WEFT_STORE WEFT_JOB_TOKEN
job=(allreduce -b 8 -e 8 -n 1 -w 0 --settle 0)
mpi=(mpirun --allow-run-as-root --oversubscribe -n "$ranks")
declare -A cmd
names=(weftrun mpirun_weft mpirun_ompi weftrun_true mpirun_true)
cmd[weftrun]="$weftrun -n $ranks -- $perf ${job[*]} --bind none"
cmd[mpirun_weft]="${mpi[*]} $perf ${job[*]} --bind none"
cmd[mpirun_ompi]="${mpi[*]} $mpiperf -C ${job[*]}"
cmd[weftrun_true]="$weftrun -n $ranks -- true"
cmd[mpirun_true]="${mpi[*]} true"
if [ "$srun" = 1 ]; then
    names+=(srun_weft srun_true)
    cmd[srun_weft]="srun --mpi=pmix -n $ranks $perf ${job[*]} --bind none"
    cmd[srun_true]="srun --mpi=pmix -n $ranks true"
fi

declare -A times
for ((r = 0; r < rounds; r++)); do
    for n in "${names[@]}"; do
        t0=$(date +%s%N)
        if ! ${cmd[$n]} >/tmp/launch_time.$$ 2>&1; then
            cat /tmp/launch_time.$$ >&2
            echo "launch_time: $n failed" >&2
            exit 1
        fi
        t1=$(date +%s%N)
        times[$n]+="$(((t1 - t0) / 1000)) "
    done
done
rm -f /tmp/launch_time.$$

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(echo "${times[weftrun]}" | median)
printf "# job start to exit, %d ranks, medians of %d alternating rounds (ms)\n" "$ranks" "$rounds"
printf "%-14s %10s %12s   %s\n" case ms "/ weftrun" command
for n in "${names[@]}"; do
    m=$(echo "${times[$n]}" | median)
    printf "%-14s %10.1f %12.2f   %s\n" "$n" "$(echo "$m / 1000" | bc -l)" \
        "$(echo "$m / $base" | bc -l)" "${cmd[$n]//"$build/bin/"/}"
done
