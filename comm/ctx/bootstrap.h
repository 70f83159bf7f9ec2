/* Bootstrap: who this process is, from the launcher's environment. */
#ifndef WEFT_BOOTSTRAP_H
#define WEFT_BOOTSTRAP_H

#include <stdbool.h>

#include "comm/ctx/log.h"
#include "comm/store/store.h"
#include "weft/status.h"

typedef struct weft_boot {
    int rank, size, local_rank, local_size;
    char launcher[16];   /* weftrun, mpirun, pmi, torchrun, srun, pmix, singleton, join */
    char store[256];     /* host:port, "" for a singleton without store */
    char token[128];     /* the job token; "" when member_only */
    bool member_only;    /* WEFT_MEMBER_SECRET_FD: cred holds this rank's secret and the
                          * job's data key, and there is no token */
    weft_store_cred_t cred;
    bool joining;        /* WEFT_JOIN=1: a new member of a running job; rank may be -1 */
    bool via_pmix;       /* no WEFT_STORE but a PMIx server: comm/ctx/boot_pmix.c goes on */
} weft_boot_t;

/*
 * Read rank/size/store/token. Sources, the first present wins (launchers nest, the
 * innermost comes first): WEFT_RANK / WEFT_WORLD_SIZE (weftrun), OMPI_COMM_WORLD_*
 * (Open MPI's mpirun), PMI_RANK / PMI_SIZE (MPICH's and Intel MPI's Hydra), RANK /
 * WORLD_SIZE (torchrun), SLURM_PROCID / SLURM_NTASKS (srun), PMIX_RANK + WEFT_WORLD_SIZE.
 * A rank weftrun started holds no token: WEFT_MEMBER_SECRET_FD names a pipe with its own
 * member secret and the job's data key (launcher/weftrun_spawn.c, secret_pipe), read once
 * and closed; the member id there must be WEFT_RANK. Otherwise the store address and
 * token come from WEFT_STORE and WEFT_JOB_TOKEN, or
 * WEFT_JOB_TOKEN_FILE naming a file only this user can read (util/secret_file.h) (the token
 * is then removed from the environment; later calls in the process use the copy kept by
 * the first): a source of more than one rank without WEFT_STORE is an error that names
 * the variables seen and how to launch, never a silent rank 0 of 1. No source at all: a
 * singleton of size 1.
 * A process that a PMIx server started (PMIX_RANK and PMIX_NAMESPACE, as srun --mpi=pmix
 * and Open MPI's mpirun set them) without WEFT_STORE is not refused: via_pmix is set and
 * weft__pmix_boot (comm/ctx/boot_pmix.h) learns the rest from PMIx.
 * WEFT_JOIN=1 marks a process that joins a running job: its WEFT_RANK is a member id
 * beyond the original world (or absent: the store assigns one) and a store is required.
 * On failure the reason is logged as an error and, when @p why is not NULL, copied there.
 */
weft_status_t weft__bootstrap(const weft_logger_t *lg, weft_boot_t *boot, char *why,
                              size_t why_len);
/* Log the reason of a failure as an error, copy it to @p why (may be NULL) for
 * weft_last_error, and return @p st: every refusal of the bootstrap, PMIx's included. */
__attribute__((format(printf, 5, 6))) weft_status_t
weft__boot_fail(const weft_logger_t *lg, char *why, size_t why_len, weft_status_t st,
                const char *fmt, ...);
/* Forgets the token kept from the environment, as if no context had been made (tests). */
void weft__bootstrap_forget_token(void);
/* A line of WEFT_MEMBER_SECRET_FD's pipe, "weft-member-v1 <id> <64 hex> <64 hex>\n" and
 * nothing else, into @p cred; false (cred cleared) for anything else. */
bool weft__member_secret_parse(const char *line, size_t len, weft_store_cred_t *cred);

#endif
