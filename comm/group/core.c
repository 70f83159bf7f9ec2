/*
 * The part of groups that collectives need: membership arrays, revocation on a failure,
 * rank/size queries. Editing lives beside it: repair, grow and catch-up in edit.c, join,
 * split and free in join.c.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "comm/core_impl.h"
#include "comm/shm/shm.h"
#include "util/assert.h"

weft_status_t weft__group_create(weft_ctx_t *ctx, const int *members, int size, uint32_t id,
                                 uint32_t tag_id, weft_group_t *parent, weft_group_t **out)
{
    weft_group_t *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for a group");
    }
    g->members = malloc(sizeof(int) * (size_t)(size > 0 ? size : 1));
    if (g->members == NULL) {
        free(g);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for a group");
    }
    memcpy(g->members, members, sizeof(int) * (size_t)size);
    g->ctx = ctx;
    g->id = id;
    g->tag_id = tag_id;
    g->size = size;
    g->rank = -1;
    for (int i = 0; i < size; i++) {
        if (members[i] == ctx->rank) {
            g->rank = i;
        }
    }
    g->parent = parent;
    g->revoked = WEFT_OK;
    for (int i = 0; i < size; i++) {
        if (members[i] < ctx->npeers && ctx->peers[members[i]].failed != WEFT_OK) {
            g->revoked = WEFT_ERR_PEER_FAILED; /* died before the group existed */
        }
    }
    g->next = ctx->groups;
    ctx->groups = g;
    *out = g;
    return WEFT_OK;
}

void weft__group_destroy(weft_group_t *g)
{
    weft_ctx_t *ctx = g->ctx;
    for (weft_group_t **pp = &ctx->groups; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    /* Requests of this group must not outlive it. */
    weft__req_free_all(ctx, g);
    if (ctx->world == g) {
        ctx->world = NULL;
    }
    weft__cuda_group_fini(g);
    weft__shm_release(g);
    /* Its tag id may be given to a new group: nothing of this one may be taken for it. */
    weft__ctx_discard(ctx, weft__tag(0, g->tag_id, 0, WEFT_TAG_P2P, 0), WEFT_TAG_MASK_GROUP);
    free(g->hosts);
    free(g->members);
    free(g);
}

weft_status_t weft__group_status(const weft_group_t *g)
{
    return g->revoked;
}

static int group_has_member(const weft_group_t *g, int id)
{
    for (int i = 0; i < g->size; i++) {
        if (g->members[i] == id) {
            return 1;
        }
    }
    return 0;
}

weft_status_t weft__peer_slot(weft_ctx_t *ctx, int id)
{
    if (id < 0 || (unsigned)id >= WEFT_TAG_MAX_MEMBERS) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "member id %d is out of range", id);
    }
    if (id < ctx->npeers) {
        return WEFT_OK;
    }
    int n = ctx->npeers > 0 ? ctx->npeers : 8;
    while (n <= id) {
        n *= 2;
    }
    weft_peer_t *p = realloc(ctx->peers, sizeof(*p) * (size_t)n);
    if (p == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for the peer table");
    }
    memset(p + ctx->npeers, 0, sizeof(*p) * (size_t)(n - ctx->npeers));
    int old = ctx->npeers;
    ctx->peers = p;
    ctx->npeers = n;
    for (int i = old; i < n; i++) {
        weft__peer_route(ctx, i);
        p[i].failed = WEFT_OK;
    }
    return WEFT_OK;
}

void weft__group_fail_requests(weft_group_t *g, weft_status_t why)
{
    for (weft_req_t *r = g->ctx->live; r != NULL; r = r->next) {
        if (r->group == g && r->status == WEFT_INPROGRESS) {
            if (r->tl_req != NULL) {
                r->ops->cancel(r->tl, r->tl_req);
                r->tl_req = NULL;
            }
            r->status = why;
        }
    }
}

/* The member that revokes an epoch tells everyone still working in it, so an operation
 * they have in flight there fails at once instead of waiting for members that have moved
 * on. Members learn it from their watch of failed/, which is sent the notice when it is
 * set; nobody reads it later (a process that starts watching afterwards is no member at
 * that epoch), so it is deleted at once and never piles up. */
weft_status_t weft__group_publish_revoke(weft_group_t *g, uint32_t epoch, const char *why)
{
    char key[96];
    weft__key(g->ctx, key, sizeof(key), "failed/g%u.%u", g->id, epoch);
    weft_status_t st = weft__store_set(g->ctx->store, key, why, strlen(why));
    if (st == WEFT_OK) {
        weft__store_chore_delete(g->ctx, key);
    }
    return st;
}

bool weft__group_revoke_here(weft_group_t *g)
{
    if (g->revoked != WEFT_OK) {
        return false;
    }
    g->revoked = WEFT_ERR_REVOKED;
    weft__group_fail_requests(g, WEFT_ERR_REVOKED);
    return true;
}

void weft__group_abandon(weft_group_t *g, uint32_t epoch, const char *what)
{
    weft_ctx_t *ctx = g->ctx;
    if (g->epoch != epoch || g->rank < 0 || !weft__group_revoke_here(g)) {
        return; /* already revoked or edited: everyone has been told */
    }
    WEFT_ASSERT(g->revoked == WEFT_ERR_REVOKED);
    weft__shm_mark_abandoned(g, epoch);
    char why[160];
    snprintf(why, sizeof(why), "member %d abandoned %s", ctx->rank, what);
    WEFT_INFO(&ctx->logger, "group %u epoch %u: %s; the epoch is revoked for every member", g->id,
              epoch, why);
    if (ctx->store != NULL && weft__group_publish_revoke(g, epoch, why) != WEFT_OK &&
        weft__store_lost_ns(&ctx->store_health) == 0) { /* a lost store is reported once */
        WEFT_WARN(&ctx->logger,
                  "group %u: cannot publish the revocation of epoch %u: the "
                  "others learn it when their own wait ends",
                  g->id, epoch);
    }
}

void weft__peer_failed(weft_ctx_t *ctx, int id, weft_status_t why)
{
    if (id == ctx->rank || weft__peer_slot(ctx, id) != WEFT_OK) {
        return;
    }
    if (ctx->peers[id].failed != WEFT_OK) {
        return;
    }
    ctx->peers[id].failed = why == WEFT_OK ? WEFT_ERR_PEER_FAILED : why;
    WEFT_ASSERT(ctx->peers[id].failed != WEFT_OK && ctx->peers[id].failed != WEFT_INPROGRESS);
    int revoked = 0;
    for (weft_group_t *g = ctx->groups; g != NULL; g = g->next) {
        if (g->revoked == WEFT_OK && group_has_member(g, id)) {
            g->revoked = WEFT_ERR_PEER_FAILED;
            revoked++;
        }
    }
    snprintf(ctx->last_error, sizeof(ctx->last_error), "rank %d: member %d failed", ctx->rank,
             id);
    WEFT_INFO(&ctx->logger, "member %d failed; %d group(s) revoked", id, revoked);
}

/* This member's signed report that member @p id failed (@p why), with the store's answer:
 * it takes it, or refuses it (WEFT_ERR_AUTH) while it sees @p id alive. Marks @p id
 * noticed when taken. */
static weft_status_t send_report(weft_ctx_t *ctx, int id, const char *why)
{
    char key[64], val[128];
    weft__key(ctx, key, sizeof(key), "failed/%d", id);
    int n = snprintf(val, sizeof(val), "reported by member %d: %s", ctx->rank, why);
    weft_status_t st = weft__store_set(ctx->store, key, val, (size_t)n);
    ctx->peers[id].noticed = st == WEFT_OK;
    return st;
}

void weft__report_failure(weft_ctx_t *ctx, int id, const char *why)
{
    if (id == ctx->rank || (id < ctx->npeers && ctx->peers[id].failed != WEFT_OK)) {
        return;
    }
    weft__peer_failed(ctx, id, WEFT_ERR_PEER_FAILED);
    if (ctx->store != NULL && id < ctx->npeers) {
        /* Best effort: the launcher's notice reaches everyone too when the process died,
         * and a report the store refuses (it sees @p id alive) is sent again before an
         * edit would remove @p id (weft__failure_noticed). */
        weft_status_t st = send_report(ctx, id, why);
        if (st == WEFT_ERR_AUTH) {
            WEFT_INFO(&ctx->logger, "the store sees member %d alive: report refused for now", id);
        }
    }
}

weft_status_t weft__failure_noticed(weft_ctx_t *ctx, int id)
{
    if (ctx->store == NULL || id == ctx->rank || weft__peer_slot(ctx, id) != WEFT_OK) {
        return WEFT_OK;
    }
    uint64_t period = ctx->cfg.heartbeat_ms > 0 ? ctx->cfg.heartbeat_ms : 1;
    uint64_t start = weft__now_ms(), deadline = start + ctx->cfg.failure_timeout_ms + 2 * period;
    char key[64];
    weft__key(ctx, key, sizeof(key), "failed/%d", id);
    for (;;) {
        weft__poll_failure_notices(ctx);
        if (ctx->peers[id].noticed) {
            return WEFT_OK;
        }
        if (send_report(ctx, id, "no longer reachable") != WEFT_ERR_AUTH) {
            return WEFT_OK; /* taken, or the store cannot answer: the edit's requests fail */
        }
        uint64_t now = weft__now_ms();
        if (now >= deadline) {
            return WEFT_ERR_TIMEOUT;
        }
        void *v;
        size_t len;
        uint64_t wait = deadline - now < period ? deadline - now : period;
        weft_status_t st = weft__store_get(ctx->store, key, (int)wait, &v, &len);
        if (st == WEFT_OK) {
            free(v);
            ctx->peers[id].noticed = true;
            return WEFT_OK;
        }
        if (st != WEFT_ERR_TIMEOUT) {
            return WEFT_OK; /* the store cannot answer: the edit's requests fail too */
        }
    }
}

weft_status_t weft_group_rank(const weft_group_t *g, int *rank)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || rank == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    *rank = g->rank;
    return WEFT_OK;
}

weft_status_t weft_group_size(const weft_group_t *g, int *size)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || size == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    *size = g->size;
    return WEFT_OK;
}

/* The host id member @p id published ("" if its address was never read). */
static const char *member_host_id(const weft_ctx_t *ctx, int id)
{
    if (id == ctx->rank) {
        return ctx->host_id;
    }
    return id >= 0 && id < ctx->npeers ? ctx->peers[id].host_id : "";
}

int weft__group_hosts(const weft_group_t *g, int *host)
{
    int nhosts = 0;
    for (int r = 0; r < g->size; r++) {
        const char *hid = member_host_id(g->ctx, g->members[r]);
        host[r] = -1;
        for (int q = 0; q < r && hid[0] != '\0' && host[r] < 0; q++) {
            if (strcmp(member_host_id(g->ctx, g->members[q]), hid) == 0) {
                host[r] = host[q];
            }
        }
        if (hid[0] != '\0' && host[r] < 0) {
            host[r] = r;
            nhosts++;
        }
    }
    return nhosts;
}

const int *weft__group_host_table(weft_group_t *g, int *nhosts)
{
    if (g->hosts_epoch != g->epoch + 1) {
        int *h = realloc(g->hosts, (size_t)(g->size > 0 ? g->size : 1) * sizeof(int));
        if (h == NULL) {
            return NULL;
        }
        g->hosts = h;
        g->nhosts = weft__group_hosts(g, h);
        g->host_ranks = -1; /* until a host's count is known */
        for (int r = 0; r < g->size && g->host_ranks != 0; r++) {
            int n = 0; /* r leads its host: count the host's ranks */
            for (int q = r; q < g->size && h[r] == r; q++) {
                n += h[q] == r;
            }
            if (h[r] < 0 || (h[r] == r && g->host_ranks >= 0 && n != g->host_ranks)) {
                g->host_ranks = 0;
            } else if (h[r] == r) {
                g->host_ranks = n;
            }
        }
        g->host_ranks = g->host_ranks > 0 ? g->host_ranks : 0;
        g->hosts_epoch = g->epoch + 1;
    }
    *nhosts = g->nhosts;
    return g->hosts;
}

int weft__group_host_ranks(weft_group_t *g)
{
    int nhosts;
    return weft__group_host_table(g, &nhosts) != NULL ? g->host_ranks : 0;
}
