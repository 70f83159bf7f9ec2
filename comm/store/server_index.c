/*
 * The store server's indexes for prefixes: keys grouped by directory, so that a WATCH
 * lists the keys under its prefix without walking the whole map, and watchers grouped by
 * prefix, so that a set tests each distinct prefix once rather than each watcher (every
 * rank of a job watches the same one). Called with the server's mutex held.
 *
 * A key's directory is the key up to and including its last '/' ("" without one): a key
 * is its directory and a base without '/'. A prefix P matches every key of a directory D
 * that P begins (P a prefix of D), some keys of a directory that begins P (those whose
 * base begins with the rest of P), and no others.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/store/server.h"
#include "util/hash.h"

/* ---- directories ---- */

static size_t dir_hash(const char *name, size_t n)
{
    return (size_t)weft__fnv1a(WEFT__FNV1A_SEED, name, n);
}

static size_t dir_len(const char *key, size_t klen)
{
    const char *slash = memrchr(key, '/', klen);
    return slash != NULL ? (size_t)(slash - key) + 1 : 0;
}

static void dirs_grow(weft_store_server_t *s)
{
    size_t n = s->ndir_buckets > 0 ? s->ndir_buckets * 2 : 64;
    store_dir_t **b = calloc(n, sizeof(*b));
    if (b == NULL) {
        return; /* longer chains, still correct */
    }
    for (size_t i = 0; i < s->ndir_buckets; i++) {
        while (s->dirs[i] != NULL) {
            store_dir_t *d = s->dirs[i];
            s->dirs[i] = d->next;
            size_t j = dir_hash(d->name, d->nlen) & (n - 1);
            d->next = b[j];
            b[j] = d;
        }
    }
    free(s->dirs);
    s->dirs = b;
    s->ndir_buckets = n;
}

weft_status_t weft__store_srv_dir_link(weft_store_server_t *s, store_entry_t *e)
{
    if (s->ndirs >= s->ndir_buckets) {
        dirs_grow(s);
    }
    if (s->dirs == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    size_t n = dir_len(e->key, e->klen);
    store_dir_t **slot = &s->dirs[dir_hash(e->key, n) & (s->ndir_buckets - 1)];
    while (*slot != NULL && ((*slot)->nlen != n || memcmp((*slot)->name, e->key, n) != 0)) {
        slot = &(*slot)->next;
    }
    store_dir_t *d = *slot;
    if (d == NULL) {
        d = calloc(1, sizeof(*d) + n + 1);
        if (d == NULL) {
            return WEFT_ERR_NO_MEMORY;
        }
        memcpy(d->name, e->key, n);
        d->nlen = n;
        *slot = d;
        s->ndirs++;
    }
    e->dir = d;
    e->dir_pprev = &d->entries;
    e->dir_next = d->entries;
    if (d->entries != NULL) {
        d->entries->dir_pprev = &e->dir_next;
    }
    d->entries = e;
    return WEFT_OK;
}

void weft__store_srv_dir_unlink(weft_store_server_t *s, store_entry_t *e)
{
    store_dir_t *d = e->dir;
    *e->dir_pprev = e->dir_next;
    if (e->dir_next != NULL) {
        e->dir_next->dir_pprev = e->dir_pprev;
    }
    if (d->entries != NULL) {
        return;
    }
    store_dir_t **slot = &s->dirs[dir_hash(d->name, d->nlen) & (s->ndir_buckets - 1)];
    while (*slot != d) {
        slot = &(*slot)->next;
    }
    *slot = d->next;
    s->ndirs--;
    free(d);
}

void weft__store_srv_dir_scan(weft_store_server_t *s, const char *prefix, size_t plen,
                              void (*fn)(weft_store_server_t *s, const store_entry_t *e, void *arg),
                              void *arg)
{
    for (size_t i = 0; i < s->ndir_buckets; i++) {
        for (store_dir_t *d = s->dirs[i], *next; d != NULL; d = next) {
            next = d->next;
            bool all = plen <= d->nlen && memcmp(d->name, prefix, plen) == 0;
            if (!all && (d->nlen >= plen || memcmp(d->name, prefix, d->nlen) != 0)) {
                continue;
            }
            for (const store_entry_t *e = d->entries; e != NULL; e = e->dir_next) {
                if (all || (e->klen >= plen && memcmp(e->key, prefix, plen) == 0)) {
                    fn(s, e, arg);
                }
            }
        }
    }
}

void weft__store_srv_dirs_free(weft_store_server_t *s)
{
    free(s->dirs);
    s->dirs = NULL;
    s->ndir_buckets = s->ndirs = 0;
}

/* ---- watchers, by prefix ---- */

weft_status_t weft__store_srv_watch(weft_store_server_t *s, store_conn_t *c, const char *prefix,
                                    size_t plen)
{
    store_watch_group_t *g = s->watch_groups;
    while (g != NULL && (g->plen != plen || memcmp(g->prefix, prefix, plen) != 0)) {
        g = g->next;
    }
    if (g == NULL) {
        g = calloc(1, sizeof(*g) + plen + 1);
        if (g == NULL) {
            return WEFT_ERR_NO_MEMORY;
        }
        memcpy(g->prefix, prefix, plen);
        g->plen = plen;
        g->next = s->watch_groups;
        s->watch_groups = g;
    }
    if (c->wgroup == g) {
        return WEFT_OK;
    }
    weft__store_srv_unwatch(s, c);
    c->wgroup = g;
    c->watch_prev = NULL;
    c->watch_next = g->conns;
    if (g->conns != NULL) {
        g->conns->watch_prev = c;
    }
    g->conns = c;
    return WEFT_OK;
}

void weft__store_srv_unwatch(weft_store_server_t *s, store_conn_t *c)
{
    store_watch_group_t *g = c->wgroup;
    if (g == NULL) {
        return;
    }
    if (c->watch_prev != NULL) {
        c->watch_prev->watch_next = c->watch_next;
    } else {
        g->conns = c->watch_next;
    }
    if (c->watch_next != NULL) {
        c->watch_next->watch_prev = c->watch_prev;
    }
    c->watch_prev = c->watch_next = NULL;
    c->wgroup = NULL;
    if (g->conns == NULL) { /* the last of its prefix */
        store_watch_group_t **p = &s->watch_groups;
        while (*p != g) {
            p = &(*p)->next;
        }
        *p = g->next;
        free(g);
    }
}

void weft__store_srv_notify(weft_store_server_t *s, const store_entry_t *e)
{
    for (store_watch_group_t *g = s->watch_groups; g != NULL; g = g->next) {
        if (g->plen > e->klen || memcmp(g->prefix, e->key, g->plen) != 0) {
            continue;
        }
        for (store_conn_t *c = g->conns; c != NULL; c = c->watch_next) {
            if (!c->dead) {
                weft__store_srv_event(s, c, e);
            }
        }
    }
}
