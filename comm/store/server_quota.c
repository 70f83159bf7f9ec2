/*
 * Each member's share of the store's memory (server.h, "Shares"). What a member writes
 * (keys it created or last replaced, its lease) is charged to its id, up to
 * WEFT__STORE_MEMBER_SHARE: one member, by bug or on purpose, cannot fill the store and
 * starve the others' addresses and counters. Launchers and the hosting process are
 * charged nothing beyond the store's own cap. The ids come from the members' proofs, so
 * any 32-bit number: a small open-addressing table, not an array by id.
 */
#include <stdlib.h>

#include "comm/store/server.h"

static size_t slot_of(const weft_store_server_t *s, uint32_t id)
{
    size_t mask = s->shares.cap - 1, i = (size_t)(id * 2654435761u) & mask;
    while (s->shares.v[i].used && s->shares.v[i].id != id) {
        i = (i + 1) & mask;
    }
    return i;
}

static bool grow(weft_store_server_t *s)
{
    size_t cap = s->shares.cap ? 2 * s->shares.cap : 64;
    store_share_t *old = s->shares.v, *v = calloc(cap, sizeof(*v));
    if (v == NULL) {
        return false;
    }
    size_t oldcap = s->shares.cap;
    s->shares.v = v;
    s->shares.cap = cap;
    for (size_t i = 0; i < oldcap; i++) {
        if (old[i].used) {
            s->shares.v[slot_of(s, old[i].id)] = old[i];
        }
    }
    free(old);
    return true;
}

size_t weft__store_srv_share_of(const weft_store_server_t *s, int64_t owner)
{
    if (owner < 0 || s->shares.cap == 0) {
        return 0;
    }
    const store_share_t *q = &s->shares.v[slot_of(s, (uint32_t)owner)];
    return q->used ? q->bytes : 0;
}

bool weft__store_srv_share_fits(const weft_store_server_t *s, int64_t owner, size_t give_back,
                                size_t take)
{
    if (owner < 0) {
        return true;
    }
    size_t now = weft__store_srv_share_of(s, owner);
    now = now > give_back ? now - give_back : 0;
    return take <= WEFT__STORE_MEMBER_SHARE && now <= WEFT__STORE_MEMBER_SHARE - take;
}

bool weft__store_srv_share_add(weft_store_server_t *s, int64_t owner, size_t bytes)
{
    if (owner < 0) {
        return true;
    }
    if ((s->shares.n + 1) * 2 > s->shares.cap && !grow(s)) {
        return false;
    }
    store_share_t *q = &s->shares.v[slot_of(s, (uint32_t)owner)];
    if (!q->used) {
        q->used = true;
        q->id = (uint32_t)owner;
        s->shares.n++;
    }
    q->bytes += bytes;
    return true;
}

void weft__store_srv_share_sub(weft_store_server_t *s, int64_t owner, size_t bytes)
{
    if (owner < 0 || s->shares.cap == 0) {
        return;
    }
    store_share_t *q = &s->shares.v[slot_of(s, (uint32_t)owner)];
    if (q->used) {
        q->bytes = q->bytes > bytes ? q->bytes - bytes : 0;
    }
}

void weft__store_srv_shares_free(weft_store_server_t *s)
{
    free(s->shares.v);
    s->shares.v = NULL;
    s->shares.cap = s->shares.n = 0;
}
