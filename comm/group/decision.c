/* Encoding of group-edit decisions as store values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/group/edit.h"
#include "comm/store/agreement.h"

/* The layout is the store's to read as well (comm/store/agreement.h). */
#define DECISION_MAGIC WEFT__DECISION_MAGIC
#define DECISION_HEADER WEFT__DECISION_HEADER

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
    w[WEFT__DECISION_W_JOIN_HI] = d->join_hi;
    w[WEFT__DECISION_W_N_MEMBERS] = d->n_members;
    memcpy(w + DECISION_HEADER, d->members, sizeof(int32_t) * d->n_members);
    *buf = w;
    *len = n;
    return WEFT_OK;
}

/* Whether @p m holds @p n member ids, each a valid one and none twice. */
static bool members_valid(const int32_t *m, uint32_t n)
{
    uint64_t *seen = calloc(WEFT_TAG_MAX_MEMBERS / 64, sizeof(uint64_t));
    bool ok = seen != NULL;
    for (uint32_t i = 0; ok && i < n; i++) {
        uint32_t id = (uint32_t)m[i];
        ok = id < WEFT_TAG_MAX_MEMBERS && !(seen[id / 64] >> (id % 64) & 1);
        if (ok) {
            seen[id / 64] |= UINT64_C(1) << (id % 64);
        }
    }
    free(seen);
    return ok;
}

/* Values in the store are anyone's who holds the job token: only what is safe to apply
 * (a known kind, a membership of valid, distinct member ids) is decoded. */
weft_status_t weft__decision_decode(const void *buf, size_t len, weft_decision_t *d)
{
    uint32_t h[DECISION_HEADER];
    if (len < sizeof(h)) {
        return WEFT_ERR_PROTOCOL;
    }
    memcpy(h, buf, sizeof(h));
    uint32_t n = h[WEFT__DECISION_W_N_MEMBERS];
    if (h[0] != DECISION_MAGIC || (h[1] != WEFT_EDIT_REPAIR && h[1] != WEFT_EDIT_GROW) ||
        n == 0 || n > WEFT_TAG_MAX_MEMBERS ||
        len != (DECISION_HEADER + (size_t)n) * sizeof(uint32_t)) {
        return WEFT_ERR_PROTOCOL;
    }
    int32_t *m = malloc(sizeof(int32_t) * n);
    if (m == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    memcpy(m, (const uint8_t *)buf + sizeof(h), sizeof(int32_t) * n);
    if (!members_valid(m, n)) {
        free(m);
        return WEFT_ERR_PROTOCOL;
    }
    d->kind = h[1];
    d->new_epoch = h[2];
    d->join_hi = h[WEFT__DECISION_W_JOIN_HI];
    d->n_members = n;
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
