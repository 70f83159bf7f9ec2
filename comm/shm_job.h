/*
 * A job's names in /dev/shm (internal; comm/ and launcher/ use it).
 *
 * Every shared-memory segment of a job is named "weft-<job>-<ns>-<gid>-<epoch>-<kind>"
 * there: <job> and <ns> are 16 hex digits each of HMAC-SHA256 keyed by the job token,
 * over the store address (<job>) and over the store address and the namespace (<ns>).
 * The token is secret, so neither can be traced back to it, and nobody without it can
 * predict a job's names. <job> comes first and does not depend on the namespace, so
 * weftrun finds every segment of its job by the prefix "weft-<job>-" whatever namespaces
 * the ranks use.
 */
#ifndef WEFT_SHM_JOB_H
#define WEFT_SHM_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

#define WEFT_SHM_DIR "/dev/shm"   /* where shm_open() puts its names on Linux */
#define WEFT_SHM_ID_HEX 16        /* hex digits of <job> and of <ns> */

/* What names a job's segments. */
typedef struct weft_shm_job {
    char job[WEFT_SHM_ID_HEX + 1];
    char ns[WEFT_SHM_ID_HEX + 1];
} weft_shm_job_t;

/*
 * The <job> part of the names of the job whose ranks got @p store_addr in WEFT_STORE
 * and @p token in WEFT_JOB_TOKEN (either may be ""). WEFT_ERR_INVALID_ARG if the HMAC
 * cannot be computed.
 */
weft_status_t weft__shm_job_id(const char *store_addr, const char *token,
                               char job[WEFT_SHM_ID_HEX + 1]);
/* Both parts, for namespace @p ns. */
weft_status_t weft__shm_job_init(weft_shm_job_t *j, const char *store_addr, const char *token,
                                 const char *ns);
/* The shm_open() name of segment @p kind of group @p gid at @p epoch. */
void weft__shm_seg_name(const weft_shm_job_t *j, uint32_t gid, uint32_t epoch, const char *kind,
                        char *out, size_t len);

#endif
