/* A new process joins a running group, and subgroups are split off and freed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/group/edit.h"

/* The membership of the world group as far as decisions in the store tell, followed
 * from epoch 0 (members 0..size-1) on, so a joiner can see whether anyone is left. The
 * decisions of finished epochs are deleted but the newest (comm/group/retire.c): the view
 * starts again from that one when it is ahead. */
typedef struct world_view {
    uint32_t epoch;
    int32_t *members;
    uint32_t n;
    bool known; /* members is the membership at epoch (not one of an earlier epoch) */
} world_view_t;

static void view_follow(weft_ctx_t *ctx, uint32_t gid, world_view_t *w)
{
    enum { ROUNDS = 4 };
    for (int round = 0; round < ROUNDS; round++) {
        uint32_t finished;
        if (weft__finished_epoch(ctx, gid, &finished) && finished > w->epoch) {
            w->epoch = finished;
            w->known = false;
        }
        weft_decision_t d;
        while (weft__decision_lookup(ctx, gid, w->epoch, 0, &d) == WEFT_OK) {
            free(w->members);
            w->members = d.members;
            w->n = d.n_members;
            w->epoch = d.new_epoch;
            w->known = true;
        }
        /* The decision at w->epoch is not taken yet, unless a finish that came meanwhile
         * deleted it: such a finish names an epoch at least as new first. */
        if (!weft__finished_epoch(ctx, gid, &finished) || finished < w->epoch) {
            return;
        }
    }
    w->known = false; /* decisions are being taken and deleted faster than read */
}

/* Whether every member of the group's newest known membership has failed: then nobody
 * is left to admit anyone (every rank of the job died before its replacements came). */
static bool view_all_failed(weft_ctx_t *ctx, uint32_t gid, world_view_t *w)
{
    view_follow(ctx, gid, w);
    weft__poll_failure_notices(ctx);
    if (!w->known) {
        return false;
    }
    for (uint32_t i = 0; i < w->n; i++) {
        if (weft__peer_slot(ctx, w->members[i]) != WEFT_OK ||
            ctx->peers[w->members[i]].failed == WEFT_OK) {
            return false;
        }
    }
    return w->n > 0;
}

static weft_status_t wait_admission_loop(weft_ctx_t *ctx, uint32_t gid, const char *key,
                                         const char *closed, uint64_t start, uint64_t end,
                                         world_view_t *w, int64_t *epoch)
{
    enum { SLICE_MS = 100 };
    for (;;) {
        uint64_t now = weft__now_ns();
        uint64_t left = now >= end ? 0 : (end - now + 999999) / 1000000;
        weft_status_t st = weft__store_get_i64(ctx->store, key,
                                               left < SLICE_MS ? (int)left : SLICE_MS, epoch);
        if (st == WEFT_OK && (*epoch < 1 || *epoch > UINT32_MAX)) {
            st = WEFT_ERR_PROTOCOL;
        }
        unsigned long long waited = (weft__now_ns() - start) / 1000000;
        if (st != WEFT_ERR_TIMEOUT) {
            return st == WEFT_OK ? st
                                 : weft__error(ctx, st, "cannot read this member's admission "
                                                        "(after %llu ms)", waited);
        }
        void *v;
        size_t vlen;
        char why[128];
        if (weft__store_get(ctx->store, closed, 0, &v, &vlen) == WEFT_OK) {
            free(v);
            return weft__error(ctx, WEFT_ERR_REVOKED, "group %u finished before this process "
                                                      "was admitted (every member left)", gid);
        }
        if (weft__declared_failed(ctx, why, sizeof(why))) {
            return weft__error(ctx, WEFT_ERR_REVOKED, "this process was declared failed (%s) "
                                                      "before group %u admitted it", why, gid);
        }
        if (view_all_failed(ctx, gid, w)) {
            return weft__error(ctx, WEFT_ERR_PEER_FAILED, "every member of group %u failed: "
                                                          "nobody is left to admit this process",
                               gid);
        }
        if (left == 0) {
            return weft__error(ctx, WEFT_ERR_TIMEOUT, "not admitted to group %u (waited %llu ms)",
                               gid, waited);
        }
    }
}

/* Wait until the members admit this process (*epoch: the epoch it enters at), the group
 * finishes without it (every member left together: WEFT_ERR_REVOKED), or the timeout. */
static weft_status_t wait_admission(weft_ctx_t *ctx, uint32_t gid, uint64_t timeout_ms,
                                    int64_t *epoch)
{
    char key[96], closed[96];
    weft__key(ctx, key, sizeof(key), "g/%u/admit/%d", gid, ctx->rank);
    weft__key(ctx, closed, sizeof(closed), "g/%u/closed", gid);
    uint64_t start = weft__now_ns(), end = start + weft__ms_to_ns(timeout_ms);
    world_view_t w = {.n = (uint32_t)(ctx->size > 0 ? ctx->size : 0), .known = true};
    w.members = malloc(sizeof(int32_t) * (w.n > 0 ? w.n : 1));
    if (w.members == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory to join");
    }
    for (uint32_t i = 0; i < w.n; i++) {
        w.members[i] = (int32_t)i;
    }
    weft_status_t st = wait_admission_loop(ctx, gid, key, closed, start, end, &w, epoch);
    free(w.members);
    return st;
}

/* The admission named epoch @p epoch, but the decision that admitted this process is
 * not in the store: it is written before any admission, and deleted only once every
 * member of the epoch applied it, so the members went on without this process. */
static weft_status_t admitting_edit_gone(weft_ctx_t *ctx, uint32_t gid, uint32_t epoch,
                                         weft_status_t st)
{
    char why[128];
    if (st != WEFT_ERR_TIMEOUT) {
        return weft__error(ctx, st, "cannot read the edit that admitted this member");
    }
    if (weft__declared_failed(ctx, why, sizeof(why))) {
        return weft__error(ctx, WEFT_ERR_REVOKED, "group %u admitted this process at epoch %u "
                                                  "but declared it failed (%s) before it "
                                                  "arrived; the members went on without it",
                           gid, epoch, why);
    }
    return weft__error(ctx, WEFT_ERR_PROTOCOL, "group %u admitted this process at epoch %u, "
                                               "but the edit that admitted it is gone",
                       gid, epoch);
}

/* Take a joiner slot and write this member's id into it. A member that found the slot
 * still empty after a while has closed it with a tombstone (it took us for dead between
 * the two steps): then take another. */
static weft_status_t register_joiner(weft_ctx_t *ctx, uint32_t gid)
{
    char key[96], val[32];
    int len = snprintf(val, sizeof(val), "%d", ctx->rank);
    for (int attempt = 0; attempt < 16; attempt++) {
        int64_t n;
        weft__key(ctx, key, sizeof(key), "g/%u/joins", gid);
        weft_status_t st = weft__store_add(ctx->store, key, 1, &n);
        if (st != WEFT_OK) {
            return weft__error(ctx, st, "cannot register to join");
        }
        weft__key(ctx, key, sizeof(key), "g/%u/join/%lld", gid, (long long)n);
        void *won;
        size_t wlen;
        st = weft__store_set_nx(ctx->store, key, val, (size_t)len, &won, &wlen, NULL);
        if (st != WEFT_OK) {
            return weft__error(ctx, st, "cannot register to join");
        }
        int ours = wlen == (size_t)len && memcmp(won, val, wlen) == 0;
        free(won);
        if (ours) {
            return WEFT_OK;
        }
    }
    return weft__error(ctx, WEFT_ERR_TIMEOUT, "cannot register to join: every slot taken was "
                                              "closed before this process could write it");
}

weft_status_t weft_group_join(weft_ctx_t *ctx, const char *name, uint64_t timeout_ms,
                              weft_group_t **out)
{
    WEFT_API_LOCK((weft_ctx_t *)ctx);
    if (ctx == NULL || name == NULL || out == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (strcmp(name, "world") != 0) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "cannot join '%s': only \"world\" can be joined; split it after", name);
    }
    if (!ctx->joining || ctx->world != NULL || ctx->store == NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_group_join needs a process started to join (WEFT_JOIN=1) "
                           "that is not yet a member");
    }
    const uint32_t gid = 0;
    weft_status_t st = register_joiner(ctx, gid);
    if (st != WEFT_OK) {
        return st;
    }
    int64_t admitted;
    st = wait_admission(ctx, gid, timeout_ms, &admitted);
    if (st != WEFT_OK) {
        return st;
    }
    uint32_t epoch = (uint32_t)admitted;
    weft_decision_t d;
    st = weft__decision_lookup(ctx, gid, epoch - 1, 0, &d);
    if (st != WEFT_OK) {
        return admitting_edit_gone(ctx, gid, epoch, st);
    }
    weft_group_t *g;
    int *members = malloc(sizeof(int) * d.n_members);
    if (members == NULL) {
        free(d.members);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for a group");
    }
    for (uint32_t i = 0; i < d.n_members; i++) {
        members[i] = d.members[i];
        if (st == WEFT_OK) {
            st = weft__peer_slot(ctx, members[i]);
        }
    }
    if (st == WEFT_OK) {
        st = weft__group_create(ctx, members, (int)d.n_members, gid, 0, NULL, &g);
    }
    free(members);
    free(d.members);
    d.members = NULL;
    if (st != WEFT_OK) {
        return st;
    }
    g->epoch = epoch;
    g->join_lo = d.join_hi;
    weft__edit_applied(g, &d);
    ctx->world = g;
    ctx->size = g->size;
    weft__poll_failure_notices(ctx);
    weft__learn_members(ctx, g->members, g->size); /* which members share its host */
    st = weft__group_catch_up(g, NULL);
    if (st != WEFT_OK) {
        return st;
    }
    *out = g;
    return WEFT_OK;
}

typedef struct split_entry {
    int32_t color, key, prank;
} split_entry_t;

static int split_cmp(const void *a, const void *b)
{
    const split_entry_t *x = a, *y = b;
    if (x->color != y->color) {
        return x->color < y->color ? -1 : 1;
    }
    if (x->key != y->key) {
        return x->key < y->key ? -1 : 1;
    }
    return x->prank < y->prank ? -1 : (x->prank > y->prank);
}

/*
 * Ids for the new subgroups: parent rank 0 reserves a block from a store counter and
 * publishes its start under @p key (split/<parent id>/<epoch>/<seq>), which every member
 * can derive. Rank 0 deletes the record once the split's next collective returns
 * (weft_group_split): the others wait for it in slices that read failure notices, so
 * that a parent revoked meanwhile (whose split fails anyway) ends the wait at once.
 */
static weft_status_t split_ids(weft_group_t *parent, int ncolors, const char *key, int64_t *base)
{
    enum { SLICE_MS = 100 };
    weft_ctx_t *ctx = parent->ctx;
    if (parent->rank == 0) {
        int64_t end;
        char gkey[64], val[32];
        weft__key(ctx, gkey, sizeof(gkey), "group_ids");
        weft_status_t st = weft__store_add(ctx->store, gkey, ncolors, &end);
        if (st != WEFT_OK) {
            return st;
        }
        int n = snprintf(val, sizeof(val), "%lld", (long long)(end - ncolors));
        st = weft__store_set(ctx->store, key, val, (size_t)n);
        if (st == WEFT_OK) {
            *base = end - ncolors;
        }
        return st;
    }
    uint64_t end = weft__now_ns() + weft__ms_to_ns(ctx->cfg.connect_timeout_ms);
    for (;;) {
        uint64_t now = weft__now_ns();
        uint64_t left = now >= end ? 0 : (end - now + 999999) / 1000000;
        weft_status_t st =
            weft__store_get_i64(ctx->store, key, left < SLICE_MS ? (int)left : SLICE_MS, base);
        if (st != WEFT_ERR_TIMEOUT || left == 0) {
            return st;
        }
        weft__poll_failure_notices(ctx);
        if (parent->revoked != WEFT_OK) {
            return parent->revoked;
        }
    }
}

weft_status_t weft_group_split(weft_group_t *parent, int color, int key, weft_group_t **sub)
{
    WEFT_API_LOCK(parent != NULL ? parent->ctx : NULL);
    if (parent == NULL || sub == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = parent->ctx;
    int n = parent->size;
    split_entry_t mine = {color < 0 ? -1 : color, key, parent->rank};
    split_entry_t *all = malloc(sizeof(*all) * (size_t)n);
    int *ids = malloc(sizeof(int) * (size_t)n);
    if (all == NULL || ids == NULL) {
        free(all);
        free(ids);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory to split");
    }
    uint32_t seq = parent->coll_seq;
    char record[96] = "";
    weft_status_t st = weft_allgather(parent, &mine, all, 3, WEFT_I32);
    if (st != WEFT_OK) {
        goto out;
    }
    qsort(all, (size_t)n, sizeof(*all), split_cmp);
    int ncolors = 0, my_color_index = -1, count = 0;
    for (int i = 0; i < n; i++) {
        if (all[i].color < 0) {
            continue;
        }
        if (i == 0 || all[i].color != all[i - 1].color || all[i - 1].color < 0) {
            ncolors++;
        }
        if (all[i].color == mine.color) {
            my_color_index = ncolors - 1;
            ids[count++] = parent->members[all[i].prank];
        }
    }
    int64_t base = 0;
    if (ctx->store != NULL && ncolors > 0) {
        weft__key(ctx, record, sizeof(record), "split/%u/%u/%u", parent->id, parent->epoch, seq);
        st = split_ids(parent, ncolors, record, &base);
    } else {
        base = ctx->local_group_ids; /* no store: a single process */
        ctx->local_group_ids += ncolors;
    }
    if (st == WEFT_OK && (base < 0 || base + ncolors >= UINT32_MAX)) {
        st = WEFT_ERR_PROTOCOL; /* 4 billion subgroups, or a counter not ours */
    }
    if (st != WEFT_OK) {
        st = weft__error(ctx, st, "group %u: cannot allocate subgroup ids", parent->id);
        goto out;
    }
    uint32_t *tags = NULL;
    if (ncolors > 0) {
        st = weft__split_tag_ids(parent, ncolors, (uint64_t)base, &tags);
    }
    if (st == WEFT_OK && mine.color >= 0) {
        /* Group id 0 is the world's; the others come from the counter, never reused. */
        uint32_t gid = 1 + (uint32_t)(base + my_color_index);
        st = weft__group_create(ctx, ids, count, gid, tags[my_color_index], parent, sub);
    } else if (st == WEFT_OK) {
        *sub = NULL;
    }
    free(tags);
out:
    if (record[0] != '\0' && parent->rank == 0) {
        /* Every member read the record before it entered the allreduce of
         * weft__split_tag_ids, which rank 0 completed only with all of them; if it
         * failed, a member that has not read it yet fails its split too. */
        weft__store_chore_delete(ctx, record);
    }
    free(all);
    free(ids);
    return st;
}

weft_status_t weft_group_free(weft_group_t *g)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL) {
        return WEFT_OK;
    }
    if (g == g->ctx->world || g->parent == NULL) {
        return weft__error(g->ctx, WEFT_ERR_INVALID_ARG,
                           "the world group belongs to the context; weft_finalize frees it");
    }
    for (weft_group_t *s = g->ctx->groups; s != NULL; s = s->next) {
        if (s->parent == g) {
            s->parent = NULL;
        }
    }
    weft__group_destroy(g);
    return WEFT_OK;
}
