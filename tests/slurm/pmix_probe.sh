# shellcheck shell=bash
# Sourced by the scripts that run srun --mpi=pmix inside slurm_bed.sh:
#   require_pmix_step NAME
# returns when a one-task PMIx step runs; exits 77 (skipped) when Slurm has no pmix
# plug-in or it cannot load libpmix, 1 when the step fails otherwise. NAME prefixes the
# messages.
require_pmix_step() {
    local name=$1 probe
    if ! timeout 30 srun --mpi=list 2>&1 | grep -qw pmix; then
        echo "$name: skipped: srun --mpi=list has no pmix"
        exit 77
    fi
    # --mpi=list names the plug-ins it finds without loading them. Debian's loads PMIx
    # from pmix2/lib/libpmix.so, which libpmix-dev installs, not libpmix2: without it,
    # every --mpi=pmix step fails with "can not load PMIx library".
    if ! probe=$(timeout 60 srun --mpi=pmix -n 1 true 2>&1); then
        echo "$probe"
        if echo "$probe" | grep -q "can not load PMIx library\|plugin name for mpi/pmix"; then
            echo "$name: skipped: Slurm's pmix plug-in cannot load libpmix (Debian: install" \
                 "libpmix-dev)"
            exit 77
        fi
        echo "$name: srun --mpi=pmix -n 1 true failed"
        exit 1
    fi
}
