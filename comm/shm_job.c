/* A job's names in /dev/shm (comm/shm_job.h). */
#include <stdio.h>
#include <string.h>

#include "comm/shm_job.h"
#include "comm/store_proto.h"

#define NAME_PREFIX "weft-"

/* 16 hex digits of HMAC-SHA256(token, each of @p parts with its NUL byte). */
static weft_status_t keyed_id(const char *token, const char *const *parts, size_t nparts,
                              char out[WEFT_SHM_ID_HEX + 1])
{
    char msg[1024];
    size_t len = 0;
    for (size_t i = 0; i < nparts; i++) {
        size_t n = strlen(parts[i]) + 1; /* the NUL keeps ("ab", "c") apart from ("a", "bc") */
        if (len + n > sizeof(msg)) {
            return WEFT_ERR_INVALID_ARG;
        }
        memcpy(msg + len, parts[i], n);
        len += n;
    }
    uint8_t mac[WEFT__STORE_PROOF_LEN];
    weft_status_t st = weft__store_hmac_sha256(token, strlen(token), msg, len, mac);
    if (st != WEFT_OK) {
        return st;
    }
    for (int i = 0; i < WEFT_SHM_ID_HEX / 2; i++) {
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
    }
    return WEFT_OK;
}

weft_status_t weft__shm_job_id(const char *store_addr, const char *token,
                               char job[WEFT_SHM_ID_HEX + 1])
{
    const char *parts[] = {"weft shm job", store_addr};
    return keyed_id(token, parts, 2, job);
}

weft_status_t weft__shm_job_init(weft_shm_job_t *j, const char *store_addr, const char *token,
                                 const char *ns)
{
    const char *parts[] = {"weft shm namespace", store_addr, ns};
    weft_status_t st = weft__shm_job_id(store_addr, token, j->job);
    return st != WEFT_OK ? st : keyed_id(token, parts, 3, j->ns);
}

void weft__shm_seg_name(const weft_shm_job_t *j, uint32_t gid, uint32_t epoch, const char *kind,
                        char *out, size_t len)
{
    snprintf(out, len, "/" NAME_PREFIX "%s-%s-%u-%u-%s", j->job, j->ns, gid, epoch, kind);
}
