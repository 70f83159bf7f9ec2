#!/usr/bin/env bash
# Checks, inside slurm_bed.sh, that srun starts PMIx jobs: `srun --mpi=pmix -n 4` gives
# its tasks PMIX_RANK 0 to 3, once each, and one PMIX_NAMESPACE; and that a plain
# one-task step runs. Exits 77 when Slurm's pmix plug-in is absent or cannot load PMIx
# (scripts/install-deps.sh installs what it needs), 1 on a wrong answer.
set -euo pipefail

# Every srun is bounded: a step that cannot start would otherwise wait for resources
# forever.
step() { timeout 60 srun "$@"; }

skip() {
    echo "srun_check: skipped: $*"
    exit 77
}
timeout 30 srun --mpi=list 2>&1 | grep -qw pmix || skip "srun --mpi=list has no pmix"
# --mpi=list names the plug-ins it finds without loading them. Debian's loads PMIx from
# pmix2/lib/libpmix.so, which libpmix-dev installs, not libpmix2: without it, every
# --mpi=pmix step fails with "can not load PMIx library".
if ! probe=$(step --mpi=pmix -n 1 true 2>&1); then
    echo "$probe"
    if echo "$probe" | grep -q "can not load PMIx library\|plugin name for mpi/pmix"; then
        skip "Slurm's pmix plug-in cannot load libpmix (Debian: install libpmix-dev)"
    fi
    echo "srun_check: srun --mpi=pmix -n 1 true failed"
    exit 1
fi

# The two variables of each task, in one line per task.
# shellcheck disable=SC2016  # expanded by each task's shell
out=$(step --mpi=pmix -n 4 sh -c 'echo "${PMIX_RANK:-none} ${PMIX_NAMESPACE:-none}"')
echo "$out"
ranks=$(echo "$out" | cut -d' ' -f1 | sort -n | tr '\n' ' ')
spaces=$(echo "$out" | cut -d' ' -f2 | sort -u)
if [ "$ranks" != "0 1 2 3 " ]; then
    echo "srun_check: PMIX_RANK of the 4 tasks were '$ranks', not 0 1 2 3"
    exit 1
fi
if [ "$(echo "$spaces" | wc -l)" -ne 1 ] || [ "$spaces" = none ]; then
    echo "srun_check: the tasks had namespaces '$(echo "$spaces" | tr '\n' ' ')', not one"
    exit 1
fi

host=$(step -N1 --ntasks-per-node=1 hostname)
if [ "$host" != "$(hostname)" ]; then
    echo "srun_check: srun -N1 --ntasks-per-node=1 hostname printed '$host', not $(hostname)"
    exit 1
fi
echo "srun_check: 4 PMIx ranks in namespace $spaces; one task on $host"
