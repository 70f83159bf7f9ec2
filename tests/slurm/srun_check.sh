#!/usr/bin/env bash
# Checks, inside slurm_bed.sh, that srun starts PMIx jobs: `srun --mpi=pmix -n 4` gives
# its tasks PMIX_RANK 0 to 3, once each, and one PMIX_NAMESPACE; and that a plain
# one-task step runs. Exits 77 when Slurm's pmix plug-in is absent or cannot load PMIx
# (scripts/install-deps.sh installs what it needs), 1 on a wrong answer.
set -euo pipefail
# shellcheck source=tests/slurm/pmix_probe.sh
. "$(dirname "$0")/pmix_probe.sh"

# Every srun is bounded: a step that cannot start would otherwise wait for resources
# forever.
step() { timeout 60 srun "$@"; }

require_pmix_step srun_check

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
