/* Bootstrap: who this process is, from the launcher's environment. */
#ifndef WEFT_BOOTSTRAP_H
#define WEFT_BOOTSTRAP_H

#include "comm/log.h"
#include "weft/status.h"

typedef struct weft_boot {
    int rank, size, local_rank, local_size;
    char launcher[16];   /* weftrun, mpirun, srun, pmix, singleton */
    char store[256];     /* host:port, "" for a singleton without store */
    char token[128];
} weft_boot_t;

/*
 * Read rank/size/store/token. Sources, first match wins for rank and size: WEFT_RANK /
 * WEFT_WORLD_SIZE (weftrun), OMPI_COMM_WORLD_* (mpirun), SLURM_PROCID / SLURM_NTASKS
 * (srun), PMIX_RANK + WEFT_WORLD_SIZE. The store address and token always come from
 * WEFT_STORE and WEFT_JOB_TOKEN. When several sources are present they must agree:
 * a size that disagrees with the launcher's is an error, not a silent singleton.
 * No source at all: a singleton of size 1.
 */
weft_status_t weft__bootstrap(const weft_logger_t *lg, weft_boot_t *boot);

#endif
