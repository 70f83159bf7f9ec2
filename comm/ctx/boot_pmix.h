/*
 * Bootstrap through PMIx, for ranks started by srun --mpi=pmix or Open MPI's mpirun
 * without weftrun: libpmix is opened at run time (WEFT_PMIX_LIBRARY), so libweft loads
 * where it is absent. Rank 0 serves the job's store in its own process and hands its
 * address and a fresh job token to the others through PMIx (Put, Commit, Fence that
 * collects data, Get); from then on the context uses the store as under weftrun. The
 * process calls PMIx_Init once and PMIx_Finalize at exit.
 */
#ifndef WEFT_BOOT_PMIX_H
#define WEFT_BOOT_PMIX_H

#include <stdbool.h>

#include "comm/ctx/bootstrap.h"
#include "comm/ctx/config.h"

typedef struct weft_pmix weft_pmix_t;

/* PMIX_RANK and PMIX_NAMESPACE are set: a PMIx server started this process. */
bool weft__pmix_present(void);

/*
 * Join the PMIx job, learn rank, size and local rank and size from it, and exchange the
 * store's address and token (rank 0 starts the store, here, in this process). Fills
 * @p b's rank, size, local_rank, local_size, store and token. On failure the reason (how
 * to launch, when PMIx cannot start) is logged and copied to @p why.
 */
weft_status_t weft__pmix_boot(const weft_config_t *cfg, const weft_logger_t *lg, weft_boot_t *b,
                              weft_pmix_t **out, char *why, size_t why_len);

/*
 * The context is done with PMIx. On rank 0, the store stays up until every other process
 * has closed its connection (they finalize or exit), at most @p wait_ms; then it stops.
 * The process stays in the PMIx job (it leaves at exit): a later context bootstraps
 * again, under keys of its own. NULL: no-op.
 */
void weft__pmix_fini(weft_pmix_t *p, uint64_t wait_ms, const weft_logger_t *lg);

#endif
