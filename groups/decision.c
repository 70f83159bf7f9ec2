/* Encoding of group-edit decisions as store values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "groups/edit.h"

#define DECISION_MAGIC 0x77656674u /* "weft" */
#define DECISION_HEADER 5          /* magic, kind, new_epoch, join_hi, n_members */

void weft__decision_key(const weft_ctx_t *ctx, char *key, size_t len, uint32_t gid,
                        uint32_t epoch)
{
    weft__key(ctx, key, len, "g/%u/%u/next", gid, epoch);
}

weft_status_t weft__decision_encode(const weft_decision_t *d, void **buf, size_t *len)
{
    size_t n = (DECISION_HEADER + (size_t)d->n_members) * sizeof(uint32_t);
    uint32_t *w = malloc(n);
    if (w == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    w[0] = DECISION_MAGIC;
    w[1] = d->kind;
    w[2] = d->new_epoch;
    w[3] = d->join_hi;
    w[4] = d->n_members;
    memcpy(w + DECISION_HEADER, d->members, sizeof(int32_t) * d->n_members);
    *buf = w;
    *len = n;
    return WEFT_OK;
}

weft_status_t weft__decision_decode(const void *buf, size_t len, weft_decision_t *d)
{
    uint32_t h[DECISION_HEADER];
    if (len < sizeof(h)) {
        return WEFT_ERR_PROTOCOL;
    }
    memcpy(h, buf, sizeof(h));
    if (h[0] != DECISION_MAGIC || h[4] > (1u << 16) ||
        len != (DECISION_HEADER + (size_t)h[4]) * sizeof(uint32_t)) {
        return WEFT_ERR_PROTOCOL;
    }
    int32_t *m = malloc(sizeof(int32_t) * (h[4] > 0 ? h[4] : 1));
    if (m == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    memcpy(m, (const uint32_t *)buf + DECISION_HEADER, sizeof(int32_t) * h[4]);
    d->kind = h[1];
    d->new_epoch = h[2];
    d->join_hi = h[3];
    d->n_members = h[4];
    d->members = m;
    return WEFT_OK;
}

weft_status_t weft__decision_lookup(const weft_ctx_t *ctx, uint32_t gid, uint32_t epoch,
                                    int timeout_ms, weft_decision_t *d)
{
    char key[96];
    void *val;
    size_t len;
    weft__decision_key(ctx, key, sizeof(key), gid, epoch);
    weft_status_t st = weft__store_get(ctx->store, key, timeout_ms, &val, &len);
    if (st != WEFT_OK) {
        return st;
    }
    st = weft__decision_decode(val, len, d);
    free(val);
    return st;
}
