/*
 * Deleting the agreement keys of finished epochs, so that a long elastic job does not
 * grow the store without bound (docs/decisions/0015-retire-finished-epochs.md).
 *
 * Epoch e of a group is finished once every member of epoch e+1 has applied the
 * decision g/<gid>/<e>/next. Each does so, right after applying it, by an add to
 * g/<gid>/<e>/applied; the member whose add reaches the size of the decision's
 * membership is the one that deletes. From then on no member of the group can need a
 * key of epoch e or earlier: each of them is at e+1 or later, past every decision up to
 * e, every admission and join slot the decision consumed. A process that still could
 * is one that was left out along the way, and a member is left out only once it was
 * declared failed (a notice under failed/ that stays): it learns that instead of
 * finding a decision (weft__declared_failed).
 *
 * The world keeps the decision of its newest finished epoch, and says which it is under
 * g/0/finished: a process waiting to join follows the world's decisions from there to
 * see whether anyone is left to admit it (comm/group/join.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/group/edit.h"

#define WORLD_GID 0u /* the only group that can be joined */

static void applied_key(const weft_ctx_t *ctx, char *key, size_t len, uint32_t gid, uint32_t epoch)
{
    weft__key(ctx, key, len, "g/%u/%u/applied", gid, epoch);
}

bool weft__declared_failed(weft_ctx_t *ctx, char *why, size_t len)
{
    char key[64];
    void *val;
    size_t vlen;
    if (ctx->store == NULL || ctx->rank < 0) {
        return false;
    }
    weft__key(ctx, key, sizeof(key), "failed/%d", ctx->rank);
    if (weft__store_get(ctx->store, key, 0, &val, &vlen) != WEFT_OK) {
        return false;
    }
    snprintf(why, len, "%.*s", (int)strnlen(val, vlen), (const char *)val);
    free(val);
    return true;
}

bool weft__finished_epoch(weft_ctx_t *ctx, uint32_t gid, uint32_t *epoch)
{
    char key[96];
    int64_t e;
    weft__key(ctx, key, sizeof(key), "g/%u/finished", gid);
    if (weft__store_get_i64(ctx->store, key, 0, &e) != WEFT_OK || e < 0 || e >= UINT32_MAX) {
        return false;
    }
    *epoch = (uint32_t)e;
    return true;
}

static bool decision_present(weft_ctx_t *ctx, uint32_t gid, uint32_t epoch)
{
    char key[96];
    void *val;
    size_t len;
    weft__decision_key(ctx, key, sizeof(key), gid, epoch);
    if (weft__store_get(ctx->store, key, 0, &val, &len) != WEFT_OK) {
        return false;
    }
    free(val);
    return true;
}

static void delete_epoch(weft_ctx_t *ctx, uint32_t gid, uint32_t epoch, bool decision)
{
    char key[96];
    applied_key(ctx, key, sizeof(key), gid, epoch);
    (void)weft__store_delete(ctx->store, key);
    if (decision) {
        weft__decision_key(ctx, key, sizeof(key), gid, epoch);
        (void)weft__store_delete(ctx->store, key);
    }
}

/*
 * Epochs before @p epoch that never finished (a member of the next epoch died before it
 * applied the decision) left their decisions: they are the run of decisions present
 * just below @p epoch, since each finish deletes everything below it. Deleted lowest
 * first, so that a finish racing with this one still finds the run.
 */
static void delete_unfinished_below(weft_ctx_t *ctx, uint32_t gid, uint32_t epoch)
{
    uint32_t lo = epoch;
    while (lo > 0 && decision_present(ctx, gid, lo - 1)) {
        lo--;
    }
    for (uint32_t k = lo; k < epoch; k++) {
        delete_epoch(ctx, gid, k, true);
    }
}

/*
 * The join slots consumed up to @p hi and the admissions of the joiners in them. Every
 * slot below one already gone went with an earlier finish, so the walk down stops at the
 * first missing one. A tombstone ("-1") stays: a joiner that took the slot but was slow
 * to write it must still find it closed and take another (comm/group/join.c).
 */
static void delete_join_slots(weft_ctx_t *ctx, uint32_t gid, uint32_t hi)
{
    char key[96];
    for (uint32_t k = hi; k > 0; k--) {
        int64_t id;
        weft__key(ctx, key, sizeof(key), "g/%u/join/%u", gid, k);
        weft_status_t st = weft__store_get_i64(ctx->store, key, 0, &id);
        if (st != WEFT_OK && st != WEFT_ERR_PROTOCOL) {
            return; /* gone (or the store is): so is every slot below */
        }
        if (st != WEFT_OK || id < 0) {
            continue;
        }
        char admit[96];
        weft__key(ctx, admit, sizeof(admit), "g/%u/admit/%lld", gid, (long long)id);
        (void)weft__store_delete(ctx->store, admit);
        (void)weft__store_delete(ctx->store, key);
    }
}

/* Epoch @p epoch of group @p gid is finished: delete its keys and those of unfinished
 * epochs below. */
static void finish_epoch(weft_ctx_t *ctx, uint32_t gid, uint32_t epoch, uint32_t join_hi)
{
    bool keep = gid == WORLD_GID;
    if (keep) {
        /* Before anything is deleted: a joiner that misses a decision then finds this. */
        char key[96], val[16];
        weft__key(ctx, key, sizeof(key), "g/%u/finished", gid);
        int n = snprintf(val, sizeof(val), "%u", epoch);
        if (weft__store_set(ctx->store, key, val, (size_t)n) != WEFT_OK) {
            return;
        }
    }
    delete_unfinished_below(ctx, gid, epoch);
    delete_epoch(ctx, gid, epoch, !keep);
    if (join_hi > 0) {
        delete_join_slots(ctx, gid, join_hi);
    }
    WEFT_DEBUG(&ctx->logger, "group %u: epoch %u finished, its keys deleted", gid, epoch);
}

/* What a member that applied a decision leaves to the heartbeat's thread. */
typedef struct applied {
    uint32_t gid, epoch, n_members, join_hi;
} applied_t;

/* This member counts itself as having applied the decision of a->epoch, and the last of
 * its members to do so deletes the epoch's keys. */
static void count_applied(weft_ctx_t *ctx, const void *arg)
{
    const applied_t *a = arg;
    char key[96];
    int64_t n;
    applied_key(ctx, key, sizeof(key), a->gid, a->epoch);
    if (weft__store_add(ctx->store, key, 1, &n) == WEFT_OK && n == (int64_t)a->n_members) {
        finish_epoch(ctx, a->gid, a->epoch, a->join_hi);
    }
}

void weft__edit_applied(weft_group_t *g, const weft_decision_t *d)
{
    if (g->ctx->store == NULL || d->new_epoch == 0) {
        return;
    }
    /* Off the edit's path: the count and the deletes are several round trips to the
     * store, which the next collective would otherwise wait for. */
    applied_t a = {.gid = g->id, .epoch = d->new_epoch - 1, .n_members = d->n_members,
                   .join_hi = d->join_hi};
    weft__store_chore(g->ctx, count_applied, &a, sizeof(a));
}

bool weft__declared_failed_seen(weft_ctx_t *ctx, char *why, size_t len)
{
    weft__poll_failure_notices(ctx);
    if (!ctx->declared_failed) {
        return false;
    }
    snprintf(why, len, "%s", ctx->declared_failed_why);
    return true;
}
