/* Bootstrap: who this process is, from the launcher's environment. */
#ifndef WEFT_BOOTSTRAP_H
#define WEFT_BOOTSTRAP_H

#include <stdbool.h>

#include "comm/log.h"
#include "weft/status.h"

typedef struct weft_boot {
    int rank, size, local_rank, local_size;
    char launcher[16];   /* weftrun, mpirun, srun, pmix, singleton */
    char store[256];     /* host:port, "" for a singleton without store */
    char token[128];
    bool joining;        /* WEFT_JOIN=1: a new member of a running job; rank may be -1 */
} weft_boot_t;

/*
 * Read rank/size/store/token. Sources, first match wins for rank and size: WEFT_RANK /
 * WEFT_WORLD_SIZE (weftrun), OMPI_COMM_WORLD_* (mpirun), SLURM_PROCID / SLURM_NTASKS
 * (srun), PMIX_RANK + WEFT_WORLD_SIZE. The store address and token always come from
 * WEFT_STORE and WEFT_JOB_TOKEN; the token is then removed from the environment (later
 * calls in the process use the copy kept by the first). When several sources are present
 * they must agree:
 * a size that disagrees with the launcher's is an error, not a silent singleton.
 * No source at all: a singleton of size 1.
 * WEFT_JOIN=1 marks a process that joins a running job: its WEFT_RANK is a member id
 * beyond the original world (or absent: the store assigns one) and a store is required.
 */
weft_status_t weft__bootstrap(const weft_logger_t *lg, weft_boot_t *boot);
/* Forgets the token kept from the environment, as if no context had been made (tests). */
void weft__bootstrap_forget_token(void);

#endif
