/*
 * A job's names in /dev/shm (internal; comm/ and launcher/ use it).
 *
 * Every shared-memory segment of a job is named "weft-<job>-<ns>-<gid>-<epoch>-<kind>"
 * there: <job> and <ns> are 16 hex digits each of HMAC-SHA256 keyed by the job token,
 * over the store address and the host id (<job>; util/host_id.h) and over the store
 * address and the key namespace (<ns>). The token is secret, so neither can be traced
 * back to it, and nobody without it can predict a job's names. <job> comes first and
 * does not depend on the key namespace, so weftrun finds every segment of its job by the
 * prefix "weft-<job>-" whatever key namespaces the ranks use; it does depend on the
 * host, so that hosts sharing one /dev/shm (network namespaces of one machine) keep
 * their names, and weftrun's removals, apart.
 *
 * The job lock "weft-<job>.lock" beside them says whether a job still runs on this host.
 * Each process of the job takes it, shared (flock LOCK_SH), before it creates or opens
 * its first segment, and holds it until weft_finalize or its death. The processes hold
 * it rather than weftrun because they are the ones using the segments, whatever started
 * them: weftrun, mpirun or srun with `weftrun --store-only`, or a shell; and because the
 * lock's name then comes from the very store address and token that name their
 * segments, however the address was spelled. A lock taken here is always on the file
 * now at the path: after flock the file is checked to be the one opened, since a cleaner
 * may have removed it meanwhile.
 *
 * The rule for leftovers: a job's names may go when its lock can be taken exclusively
 * (LOCK_EX | LOCK_NB) and is still the file at the path; then no process of the job is
 * alive on this host. When there is no lock file, the names were not made by a process
 * holding one (an older weft, or a cleaner stopped half way): they go once unchanged for
 * WEFT_SHM_ORPHAN_AGE_S, which spares a live job of an older weft that is still setting
 * up a segment. The cleaner then holds a lock file it created itself meanwhile, so that
 * no process of the job can take the lock and create a name while it looks. Only names
 * of regular files owned by this user are considered.
 */
#ifndef WEFT_SHM_JOB_H
#define WEFT_SHM_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/ctx/log.h"
#include "weft/core.h"
#include "weft/status.h"

#define WEFT_SHM_DIR "/dev/shm"   /* where shm_open() puts its names on Linux */
#define WEFT_SHM_ID_HEX 16        /* hex digits of <job> and of <ns> */
#define WEFT_SHM_ORPHAN_AGE_S 600 /* names without a lock file go after this unchanged */

/* What names a job's segments; lock_fd holds the job lock once taken, -1 before. */
typedef struct weft_shm_job {
    char job[WEFT_SHM_ID_HEX + 1];
    char ns[WEFT_SHM_ID_HEX + 1];
    int lock_fd;
} weft_shm_job_t;

/*
 * The <job> part of the names of the job whose ranks got @p store_addr in WEFT_STORE,
 * keyed by @p key: the hex of the job's data key (weft__store_data_hex; what every rank
 * holds, and weftrun computes from the token), "" without a store. WEFT_ERR_INVALID_ARG
 * if the HMAC cannot be computed.
 */
weft_status_t weft__shm_job_id(const char *store_addr, const char *key,
                               char job[WEFT_SHM_ID_HEX + 1]);
/* Both parts, for namespace @p ns; lock_fd is set to -1. */
weft_status_t weft__shm_job_init(weft_shm_job_t *j, const char *store_addr, const char *key,
                                 const char *ns);
/* The <job> part of the context's names ("" before its shared memory starts): what tests
 * look for in /dev/shm. */
const char *weft__shm_ctx_job(const weft_ctx_t *ctx);
/* The shm_open() name of segment @p kind of group @p gid at @p epoch. */
void weft__shm_seg_name(const weft_shm_job_t *j, uint32_t gid, uint32_t epoch, const char *kind,
                        char *out, size_t len);

/*
 * Take @p j's job lock in @p dir (shared) if not held yet. Returns 0 when it is held in
 * j->lock_fd, else the errno of what failed (EAGAIN: a cleaner held it for seconds).
 */
int weft__shm_job_lock(weft_shm_job_t *j, const char *dir);
/*
 * Release @p j's job lock, then remove the job's names in @p dir if no other process
 * of the job holds it: the last process of a job to finalize leaves nothing behind.
 */
void weft__shm_job_unlock(weft_shm_job_t *j, const char *dir, const weft_logger_t *lg);

/*
 * Remove the names of job @p job in @p dir, its lock file last: with @p force all of
 * them, else only as the rule above allows. Returns the number of names removed.
 */
int weft__shm_clean_job(const char *dir, const char *job, bool force, const weft_logger_t *lg);
/* Remove what every job in @p dir that no longer runs left there. Returns the count. */
int weft__shm_sweep(const char *dir, const weft_logger_t *lg);

#endif
