/*
 * Tag ids of new subgroups. A message's tag carries its group's tag id in 12 bits
 * (comm/ctx/tag.h), so a process must never hold two groups with the same one: their
 * messages could be taken for each other's. Group ids proper are never reused (a job-wide
 * store counter), but 4095 tag ids are all there is besides the world's 0, and a long job
 * creates and frees far more groups than that.
 *
 * The members of the parent (a superset of every new subgroup's) agree on the tag ids in
 * use by any of their live groups: an allreduce (MAX) of one byte per tag id. Every member
 * then takes, from the same cursor on, the same free ids in the same order. Starting at
 * a cursor that moves on with every split (the group-id counter) rather than at the lowest
 * free id gives a freed id the longest rest before it is reused, so that a stale message
 * of the freed group is long gone by then.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"
#include "comm/group/edit.h"

#define TAG_IDS WEFT_TAG_MAX_GROUPS /* 0 (the world's) .. 4095 */

weft_status_t weft__split_tag_ids(weft_group_t *parent, int n, uint64_t cursor, uint32_t **out)
{
    weft_ctx_t *ctx = parent->ctx;
    uint8_t *used = calloc(TAG_IDS, 1);
    uint32_t *ids = malloc(sizeof(uint32_t) * (size_t)n);
    if (used == NULL || ids == NULL) {
        free(used);
        free(ids);
        weft_status_t st = weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory to split");
        weft_coll_args_t a = weft__coll_args(WEFT_COLL_ALLREDUCE, "allreduce", NULL, NULL, TAG_IDS,
                                             WEFT_U8, WEFT_MAX, -1);
        weft__coll_refuse(parent, &a, true); /* the others are in the allreduce */
        return st;
    }
    for (const weft_group_t *g = ctx->groups; g != NULL; g = g->next) {
        used[g->tag_id % TAG_IDS] = 1;
    }
    used[0] = 1;
    weft_status_t st = weft_allreduce(parent, used, used, TAG_IDS, WEFT_U8, WEFT_MAX);
    if (st != WEFT_OK) {
        free(used);
        free(ids);
        return st;
    }
    int got = 0;
    for (uint32_t k = 0; k < TAG_IDS - 1 && got < n; k++) {
        uint32_t t = 1 + (uint32_t)((cursor + k) % (TAG_IDS - 1));
        if (!used[t]) {
            ids[got++] = t;
        }
    }
    free(used);
    if (got < n) {
        free(ids);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY,
                           "group %u: no tag id left for %d new group%s: the members of this "
                           "group hold live groups with %d of the %u tag ids; free some groups "
                           "(weft_group_free) first",
                           parent->id, n, n == 1 ? "" : "s", (int)(TAG_IDS - 1) - got, TAG_IDS - 1);
    }
    *out = ids;
    return WEFT_OK;
}
