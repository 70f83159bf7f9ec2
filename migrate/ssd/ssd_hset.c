/* Sets of chunk hashes, for dedup inside a snapshot and for garbage collection: open
 * addressing with linear probing, sized once for what they will hold (at most half full),
 * so adding never grows them. */
#include <stdlib.h>

#include "migrate/ssd/ssd_impl.h"

bool weft__ssd_hset_init(weft__ssd_hset_t *h, size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2) {
        cap *= 2;
    }
    h->keys = malloc(cap * sizeof(*h->keys));
    h->used = calloc(cap, 1);
    h->mask = cap - 1;
    if (h->keys == NULL || h->used == NULL) {
        weft__ssd_hset_free(h);
        return false;
    }
    return true;
}

static size_t hset_find(const weft__ssd_hset_t *h, const weft__ssd_hash_t *k)
{
    size_t i = (size_t)(k->lo ^ (k->hi >> 7)) & h->mask;
    while (h->used[i] && (h->keys[i].lo != k->lo || h->keys[i].hi != k->hi)) {
        i = (i + 1) & h->mask;
    }
    return i;
}

bool weft__ssd_hset_add(weft__ssd_hset_t *h, const weft__ssd_hash_t *k)
{
    size_t i = hset_find(h, k);
    if (h->used[i]) {
        return false;
    }
    h->used[i] = 1;
    h->keys[i] = *k;
    return true;
}

bool weft__ssd_hset_has(const weft__ssd_hset_t *h, const weft__ssd_hash_t *k)
{
    return h->used[hset_find(h, k)] != 0;
}

void weft__ssd_hset_free(weft__ssd_hset_t *h)
{
    free(h->keys);
    free(h->used);
    h->keys = NULL;
    h->used = NULL;
}
