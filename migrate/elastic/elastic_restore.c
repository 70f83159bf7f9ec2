/* Restoring the generation weft_elastic_choose_gen chose (weft_elastic_restore_gen). */
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "util/sized.h"
#include "weft/coll.h"
#include "weft/elastic.h"
#include "weft/group.h"

/* What a member prepared before the restore: the target layout and the buffer. */
typedef struct prepared {
    weft_layout_t *target;
    void *buf;
    size_t bytes;
} prepared_t;

static bool args_valid(const weft_snapshot_t *snap, const weft_group_t *world,
                       weft_elastic_target_fn target, void **buf, size_t *bytes,
                       const weft_snapshot_restored_t *info)
{
    return snap != NULL && world != NULL && target != NULL && buf != NULL && bytes != NULL &&
           (info == NULL ||
            info->size >= WEFT__SIZED_MIN(weft_snapshot_restored_t, bytes_from_ssd));
}

/* WEFT_ERR_REVOKED if @p world was edited (or revoked, which repair turns into an edit or
 * nothing): a repair applies an edit another member decided and leaves a healthy group
 * alone. */
static weft_status_t world_unchanged(weft_group_t *world)
{
    uint32_t before = weft__group_epoch(world);
    weft_status_t st = weft_group_repair(world, NULL);
    uint32_t after = weft__group_epoch(world);
    if (st == WEFT_OK && after != before) {
        st = weft__error(weft__group_ctx(world), WEFT_ERR_REVOKED,
                         "weft_elastic_restore_gen: the world group was edited (epoch %u -> %u) "
                         "since the generation was chosen: repair it and choose again",
                         before, after);
    }
    return st;
}

/* The caller's target over the generation group's members now, and the buffer for it. */
static weft_status_t prepare(weft_snapshot_t *snap, weft_group_t *gen_group,
                             weft_elastic_target_fn target, void *arg, prepared_t *p)
{
    weft_ctx_t *ctx = weft__group_ctx(gen_group);
    int n = weft__group_size(gen_group);
    int *members = malloc((size_t)n * sizeof(int));
    if (members == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_elastic_restore_gen: out of memory");
    }
    /* A copy: the callback sees ids that no call of its own can move. */
    memcpy(members, weft__group_members(gen_group), (size_t)n * sizeof(int));
    weft_status_t st = target(arg, members, n, &p->target);
    free(members);
    if (st != WEFT_OK) {
        p->target = NULL;
        return weft__error(ctx, st, "weft_elastic_restore_gen: the target function returned %s",
                           weft_status_str(st));
    }
    if (p->target == NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_elastic_restore_gen: the target function gave no layout");
    }
    p->bytes = weft_snapshot_restore_bytes(snap, p->target);
    return weft_mem_alloc(p->bytes, &p->buf);
}

/* Every member's status before the restore, gathered over @p g (@p all has room for its
 * size): the status of the lowest rank that failed, the same on every member. */
static weft_status_t agree(weft_group_t *g, weft_status_t mine, int32_t *all)
{
    int32_t me = mine;
    weft_status_t st = weft_allgather(g, &me, all, 1, WEFT_I32);
    if (st != WEFT_OK) {
        return st;
    }
    int rank = weft__group_rank(g);
    for (int r = 0; r < weft__group_size(g); r++) {
        if (all[r] == WEFT_OK) {
            continue;
        }
        if (r == rank) {
            return mine; /* its detail is this member's own last error */
        }
        return weft__error(weft__group_ctx(g), (weft_status_t)all[r],
                           "weft_elastic_restore_gen: group rank %d of the generation's group "
                           "failed before the restore (%s; its log says why), so every member "
                           "gives up",
                           r, weft_status_str((weft_status_t)all[r]));
    }
    return WEFT_OK;
}

/* Revoke and repair the generation's group: every member of it starts from one fresh
 * epoch, without the members that died. */
static weft_status_t fresh_epoch(weft_group_t *gen_group)
{
    weft_status_t st = weft_group_revoke(gen_group);
    return st == WEFT_OK ? weft_group_repair(gen_group, NULL) : st;
}

weft_status_t weft_elastic_restore_gen(weft_snapshot_t *snap, weft_group_t *gen_group,
                                       weft_group_t *world, weft_elastic_target_fn target,
                                       void *arg, void **buf, size_t *bytes,
                                       weft_snapshot_restored_t *info)
{
    WEFT_API_LOCK(gen_group != NULL ? weft__group_ctx(gen_group) : NULL);
    if (gen_group == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_elastic_restore_gen: NULL gen_group");
    }
    weft_ctx_t *ctx = weft__group_ctx(gen_group);
    /* Room for every member's status, taken before anything that others wait for. */
    int32_t *all = malloc((size_t)weft__group_size(gen_group) * sizeof(int32_t));
    if (all == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_elastic_restore_gen: out of memory");
    }
    weft_status_t st = fresh_epoch(gen_group);
    if (st != WEFT_OK) {
        free(all);
        return st;
    }
    /* From here every failure of this member goes through the agreement: no member is
     * left waiting in the restore for one that gave up. */
    prepared_t p = {0};
    weft_status_t mine = WEFT_OK;
    if (!args_valid(snap, world, target, buf, bytes, info)) {
        mine = weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_elastic_restore_gen: NULL snap, world, target, buf or bytes, or "
                           "info->size smaller than sizeof(weft_snapshot_restored_t)");
    }
    if (mine == WEFT_OK) {
        mine = world_unchanged(world);
    }
    if (mine == WEFT_OK) {
        mine = prepare(snap, gen_group, target, arg, &p);
    }
    st = agree(gen_group, mine, all);
    free(all);
    weft_snapshot_restored_t r = {.size = sizeof(r)};
    if (st == WEFT_OK) {
        st = weft_snapshot_restore(snap, p.target, p.buf, p.bytes, &r);
        if (st != WEFT_OK) {
            /* A migration that failed on a peer may still write into it: kept until
             * weft_finalize has stopped the transports. */
            weft__retire_big(ctx, p.buf, p.bytes);
            p.buf = NULL;
        }
    }
    weft_layout_free(p.target);
    if (st != WEFT_OK) {
        weft_mem_free(p.buf, p.bytes); /* NULL, or never handed to a transport */
        return st;
    }
    *buf = p.buf;
    *bytes = p.bytes;
    if (info != NULL) {
        weft__sized_copy(info, &r, sizeof(r));
    }
    return WEFT_OK;
}
