/*
 * Editing a group in place. Every edit (repair after a failure, admission of joiners)
 * moves the group from epoch e to e+1 through one decision stored under
 * weft/g/<gid>/<e>/next with the store's create-if-absent: the first proposal wins and
 * every member applies that one, so no two members can end up with different
 * memberships. A member that lags (it was busy while others edited twice) catches up by
 * applying the decisions of later epochs in order. Survivors keep their connections; only
 * newcomers are looked up and connected, lazily, on first use.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/group/edit.h"
#include "util/parse.h"
#include "util/assert.h"

#define JOIN_GET_TIMEOUT_MS 1000

static int find_member(const int32_t *members, int n, int id)
{
    for (int i = 0; i < n; i++) {
        if (members[i] == id) {
            return i;
        }
    }
    return -1;
}

static void info_begin(weft_edit_info_t *info, const weft_group_t *g)
{
    if (info == NULL) {
        return;
    }
    size_t size = info->size;
    memset(info, 0, sizeof(*info));
    info->size = size;
    info->old_epoch = info->new_epoch = g->epoch;
    info->old_size = info->new_size = g->size;
    for (int i = 0; i < g->size && i < WEFT_EDIT_INFO_MAX_RANKS; i++) {
        info->rank_map[i] = i;
    }
}

/* Count @p id; list it while the list has room. */
static void list_id(int list[WEFT_EDIT_INFO_MAX_LISTED], int *n, int id)
{
    if (*n < WEFT_EDIT_INFO_MAX_LISTED) {
        list[*n] = id;
    }
    (*n)++;
}

/* Compose this step's old->new rank map onto what earlier steps produced. */
static void info_step(weft_edit_info_t *info, const weft_group_t *g, const weft_decision_t *d)
{
    if (info == NULL) {
        return;
    }
    for (int i = 0; i < info->old_size && i < WEFT_EDIT_INFO_MAX_RANKS; i++) {
        int r = info->rank_map[i];
        info->rank_map[i] = r < 0 ? -1 : find_member(d->members, (int)d->n_members, g->members[r]);
    }
    for (int i = 0; i < g->size; i++) {
        if (find_member(d->members, (int)d->n_members, g->members[i]) < 0) {
            list_id(info->removed, &info->n_removed, g->members[i]);
        }
    }
    for (uint32_t i = 0; i < d->n_members; i++) {
        int old = 0;
        for (int j = 0; j < g->size && !old; j++) {
            old = g->members[j] == d->members[i];
        }
        if (!old) {
            list_id(info->added, &info->n_added, d->members[i]);
        }
    }
    info->new_epoch = d->new_epoch;
    info->new_size = (int)d->n_members;
}

/* Tell joiners admitted by this decision at which epoch they enter. */
static void announce_admissions(weft_group_t *g, const weft_decision_t *d)
{
    char key[96], val[16];
    for (uint32_t i = 0; i < d->n_members; i++) {
        if (find_member(g->members, g->size, d->members[i]) >= 0) {
            continue;
        }
        weft__key(g->ctx, key, sizeof(key), "g/%u/admit/%d", g->id, d->members[i]);
        int n = snprintf(val, sizeof(val), "%u", d->new_epoch);
        (void)weft__store_set(g->ctx->store, key, val, (size_t)n);
    }
}

/* Look up the address of every member this process has never talked to, so it knows
 * which of them share its host: the members of an epoch must agree on whether it can
 * collect through shared memory. A member whose address cannot be read is reported as
 * failed, which every member then learns, and the next repair removes it. */
void weft__learn_members(weft_ctx_t *ctx, const int *ids, int n)
{
    if (ctx->store == NULL || ctx->tl_remote == NULL) {
        return;
    }
    for (int i = 0; i < n; i++) {
        int id = ids[i];
        if (id == ctx->rank || ctx->peers[id].addr != NULL || ctx->peers[id].failed != WEFT_OK) {
            continue;
        }
        if (weft__fetch_address(ctx, id, (int)ctx->cfg.connect_timeout_ms, 0) != WEFT_OK) {
            weft__report_failure(ctx, id, "its address could not be read");
        }
    }
}

static void discard_stale(weft_group_t *g)
{
    uint64_t tag = weft__tag(0, g->tag_id, g->epoch, WEFT_TAG_P2P, 0);
    weft__ctx_discard(g->ctx, tag, WEFT_TAG_MASK_GROUP_EPOCH);
}

/*
 * Every member a decision removes from @p g must have a failure notice in the store: one
 * member's word evicts nobody the store sees alive (docs/store-protocol.md, "Sessions").
 * The proposer made sure of it before writing the decision (propose), so the notice is
 * there when the decision is read. A decision that removes a member without one was
 * written by a member that lied: nobody applies it, the group stays at its epoch, and the
 * job fails loudly rather than lose a live member.
 */
static weft_status_t check_removals(weft_group_t *g, const weft_decision_t *d)
{
    weft_ctx_t *ctx = g->ctx;
    for (int i = 0; i < g->size; i++) {
        int id = g->members[i];
        if (find_member(d->members, (int)d->n_members, id) >= 0 ||
            (id == ctx->rank ? ctx->declared_failed : ctx->peers[id].noticed)) {
            continue;
        }
        char key[64];
        void *v;
        size_t len;
        weft__key(ctx, key, sizeof(key), "failed/%d", id);
        weft_status_t st = weft__store_get(ctx->store, key, 0, &v, &len);
        if (st == WEFT_OK) {
            free(v);
            if (id != ctx->rank) {
                ctx->peers[id].noticed = true;
            }
        } else if (st == WEFT_ERR_TIMEOUT) {
            return weft__error(ctx, WEFT_ERR_PROTOCOL,
                               "group %u: the decision of epoch %u removes member %d, of which "
                               "the store holds no failure notice: not applied",
                               g->id, g->epoch, id);
        } else {
            return weft__error(ctx, st, "group %u: cannot read member %d's failure notice", g->id,
                               id);
        }
    }
    return WEFT_OK;
}

weft_status_t weft__group_apply(weft_group_t *g, const weft_decision_t *d,
                                weft_edit_info_t *info)
{
    weft_ctx_t *ctx = g->ctx;
    if (d->new_epoch != g->epoch + 1 || d->n_members == 0) {
        return weft__error(ctx, WEFT_ERR_PROTOCOL, "group %u: decision for epoch %u at epoch %u",
                           g->id, d->new_epoch, g->epoch);
    }
    weft_status_t checked = check_removals(g, d);
    if (checked != WEFT_OK) {
        return checked;
    }
    int *members = malloc(sizeof(int) * d->n_members);
    if (members == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for a membership");
    }
    int me = -1;
    for (uint32_t i = 0; i < d->n_members; i++) {
        members[i] = d->members[i];
        if (members[i] == ctx->rank) {
            me = (int)i;
        }
        weft_status_t st = weft__peer_slot(ctx, members[i]);
        if (st != WEFT_OK) {
            free(members);
            return st;
        }
    }
    if (me >= 0) {
        weft__learn_members(ctx, members, (int)d->n_members);
    }
    info_step(info, g, d);
    if (ctx->store != NULL && me >= 0) {
        /* Only members that stay: they count themselves as having applied d afterwards,
         * so no admission is written again once the epoch's keys are deleted. */
        announce_admissions(g, d);
    }
    weft__group_fail_requests(g, WEFT_ERR_REVOKED);
    discard_stale(g);
    free(g->members);
    g->members = members;
    g->size = (int)d->n_members;
    g->rank = me;
    g->epoch = d->new_epoch;
    g->coll_seq = 0;
    g->join_lo = d->join_hi;
    g->revoked = WEFT_OK;
    if (me < 0) {
        g->revoked = WEFT_ERR_REVOKED;
        return weft__error(ctx, WEFT_ERR_REVOKED,
                           "group %u: this member was declared failed by the others", g->id);
    }
    for (int i = 0; i < g->size; i++) {
        if (ctx->peers[g->members[i]].failed != WEFT_OK) {
            g->revoked = WEFT_ERR_PEER_FAILED; /* died meanwhile: the next repair drops it */
        }
    }
    /* An applied decision is the group's next epoch, and this member is in it. */
    WEFT_ASSERT(g->epoch == d->new_epoch && g->size == (int)d->n_members);
    WEFT_ASSERT(g->rank >= 0 && g->rank < g->size && g->members[g->rank] == ctx->rank);
    weft__edit_applied(g, d);
    return WEFT_OK;
}

weft_status_t weft__group_catch_up(weft_group_t *g, weft_edit_info_t *info)
{
    for (;;) {
        weft_decision_t d;
        weft_status_t st = weft__decision_lookup(g->ctx, g->id, g->epoch, 0, &d);
        if (st == WEFT_ERR_TIMEOUT) {
            return WEFT_OK;
        }
        if (st != WEFT_OK) {
            return weft__error(g->ctx, st, "group %u: cannot read edits", g->id);
        }
        st = weft__group_apply(g, &d, info);
        free(d.members);
        if (st != WEFT_OK) {
            return st;
        }
    }
}

/* Joiner registrations ever made on g (a store counter; joiners add 1 each). Read, not
 * added to: a group nobody joins (every subgroup) gets no counter in the store. */
static weft_status_t joins_registered(const weft_group_t *g, int64_t *count)
{
    char key[96];
    weft__key(g->ctx, key, sizeof(key), "g/%u/joins", g->id);
    weft_status_t st = weft__store_get_i64(g->ctx->store, key, 0, count);
    if (st == WEFT_ERR_TIMEOUT) {
        *count = 0;
        return WEFT_OK;
    }
    return st;
}

/* Member id registered in joiner slot @p k of g: the id, or -1 for a slot whose joiner
 * never completed its registration (it died between taking the slot and writing it). Such a
 * slot is closed with a tombstone, so it stays consumed for everyone, and a live joiner
 * that was merely slow sees the tombstone and registers again. */
static weft_status_t joiner_in_slot(weft_group_t *g, uint32_t k, int64_t *id)
{
    char key[96];
    weft__key(g->ctx, key, sizeof(key), "g/%u/join/%u", g->id, k);
    weft_status_t st = weft__store_get_i64(g->ctx->store, key, JOIN_GET_TIMEOUT_MS, id);
    if (st == WEFT_ERR_TIMEOUT) {
        void *won;
        size_t wlen;
        st = weft__store_set_nx(g->ctx->store, key, "-1", 2, &won, &wlen, NULL);
        if (st != WEFT_OK) {
            return st;
        }
        char text[24] = {0};
        memcpy(text, won, wlen < sizeof(text) - 1 ? wlen : sizeof(text) - 1);
        free(won);
        if (wlen >= sizeof(text) || !weft__parse_i64(text, INT64_MIN, INT64_MAX, id)) {
            WEFT_ERROR(&g->ctx->logger, "%s does not hold a member id", key);
            return WEFT_ERR_PROTOCOL;
        }
    }
    return st;
}

/* Joiners registered on g since the last admission that are not known to have died:
 * their ids and the new high-water mark of consumed registrations. */
static weft_status_t pending_joiners(weft_group_t *g, int32_t **ids, uint32_t *n, uint32_t *hi)
{
    int64_t count;
    weft_status_t st = joins_registered(g, &count);
    if (st != WEFT_OK) {
        return st;
    }
    uint32_t want = count > (int64_t)g->join_lo ? (uint32_t)(count - g->join_lo) : 0;
    int32_t *out = malloc(sizeof(int32_t) * (want > 0 ? want : 1));
    if (out == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    uint32_t got = 0, k = 0;
    for (; k < want; k++) {
        int64_t id;
        st = joiner_in_slot(g, g->join_lo + k + 1, &id);
        if (st != WEFT_OK) {
            free(out);
            return st;
        }
        if (id < 0 || id >= (int64_t)WEFT_TAG_MAX_MEMBERS) {
            continue; /* a tombstone */
        }
        if (weft__peer_slot(g->ctx, (int)id) == WEFT_OK &&
            g->ctx->peers[id].failed == WEFT_OK) {
            out[got++] = (int32_t)id;
        }
    }
    *ids = out;
    *n = got;
    *hi = g->join_lo + k;
    return WEFT_OK;
}

/*
 * WEFT_ERR_REVOKED when this member was declared failed. The others then edit without
 * it, and once every member of the next epoch has applied that decision it is deleted
 * (comm/group/retire.c): this member, which never read it, finds no decision at its epoch.
 * Its failure notice stays, and tells it instead of a decision it cannot find (or would
 * create again by proposing one).
 */
static weft_status_t refuse_if_declared_failed(weft_group_t *g)
{
    char why[128];
    if (!weft__declared_failed_seen(g->ctx, why, sizeof(why))) {
        return WEFT_OK;
    }
    if (g->revoked == WEFT_OK) {
        g->revoked = WEFT_ERR_REVOKED;
    }
    return weft__error(g->ctx, WEFT_ERR_REVOKED,
                       "group %u: this member was declared failed (%s); the others go on "
                       "without it from epoch %u",
                       g->id, why, g->epoch);
}

/* Propose survivors + pending joiners as epoch e+1, then apply whatever won. A member
 * declared failed proposes nothing. */
static weft_status_t propose(weft_group_t *g, uint32_t kind, weft_edit_info_t *info)
{
    weft_ctx_t *ctx = g->ctx;
    weft_status_t st = refuse_if_declared_failed(g);
    if (st != WEFT_OK) {
        return st;
    }
    /* A member this one lost contact with is removed only once the store holds its
     * notice (this member's report, taken once the store no longer sees it alive). */
    for (int i = 0; i < g->size; i++) {
        int id = g->members[i];
        if (ctx->peers[id].failed != WEFT_OK && weft__failure_noticed(ctx, id) != WEFT_OK) {
            return weft__error(ctx, WEFT_ERR_TIMEOUT,
                               "group %u: this member lost contact with member %d, which the "
                               "store still sees alive (it renews its lease): no edit removes "
                               "it on one member's word",
                               g->id, id);
        }
    }
    int32_t *joiners = NULL;
    uint32_t n_join = 0, hi = g->join_lo;
    st = pending_joiners(g, &joiners, &n_join, &hi);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "group %u: cannot read joiners", g->id);
    }
    weft_decision_t d = {.kind = kind, .new_epoch = g->epoch + 1, .join_hi = hi};
    d.members = malloc(sizeof(int32_t) * ((size_t)g->size + n_join));
    if (d.members == NULL) {
        free(joiners);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for a proposal");
    }
    for (int i = 0; i < g->size; i++) {
        if (ctx->peers[g->members[i]].failed == WEFT_OK) {
            d.members[d.n_members++] = g->members[i];
        }
    }
    /* Removing members needs no revocation: each removed member's failure notice is in
     * the store already, and it fails every operation of the old epoch on every member.
     * An admission, or an edit that removes nobody, is news to the others. */
    bool quiet = d.n_members < (uint32_t)g->size;
    for (uint32_t i = 0; i < n_join; i++) {
        if (find_member(d.members, (int)d.n_members, joiners[i]) < 0) {
            d.members[d.n_members++] = joiners[i];
            quiet = false;
        }
    }
    free(joiners);
    void *buf, *winner;
    size_t len, wlen;
    char key[96];
    st = weft__decision_encode(&d, &buf, &len);
    free(d.members);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "no memory for a proposal");
    }
    weft__decision_key(g->ctx, key, sizeof(key), g->id, g->epoch);
    int created = 0;
    st = weft__store_set_nx(ctx->store, key, buf, len, &winner, &wlen, &created);
    free(buf);
    if (st == WEFT_OK && created && !quiet) {
        st = weft__group_publish_revoke(g, g->epoch, "edited");
        if (st != WEFT_OK) {
            free(winner);
        }
    }
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "group %u: cannot store the edit", g->id);
    }
    weft_decision_t won;
    st = weft__decision_decode(winner, wlen, &won);
    free(winner);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "group %u: malformed edit in the store", g->id);
    }
    st = weft__group_apply(g, &won, info);
    free(won.members);
    return st == WEFT_OK ? weft__group_catch_up(g, info) : st;
}

static int group_needs_edit(const weft_group_t *g)
{
    if (g->revoked != WEFT_OK) {
        return 1;
    }
    for (int i = 0; i < g->size; i++) {
        if (g->ctx->peers[g->members[i]].failed != WEFT_OK) {
            return 1;
        }
    }
    return 0;
}

static int count_revoked_subgroups(const weft_group_t *g)
{
    int n = 0;
    for (const weft_group_t *s = g->ctx->groups; s != NULL; s = s->next) {
        n += s->parent == g && s->revoked != WEFT_OK;
    }
    return n;
}

/* Hand the edit's summary to the caller, within the size the caller's struct has. */
static void info_finish(const weft_group_t *g, weft_edit_info_t *tmp, weft_edit_info_t *info)
{
    if (info == NULL) {
        return;
    }
    tmp->n_subgroups_revoked = count_revoked_subgroups(g);
    size_t n = info->size < sizeof(*tmp) ? info->size : sizeof(*tmp);
    memcpy(info, tmp, n);
    info->size = n;
}

/* The fields every caller's weft_edit_info_t has: the struct as ABI 2 made it. */
#define EDIT_INFO_MIN_SIZE (offsetof(weft_edit_info_t, n_subgroups_revoked) + sizeof(int))

static weft_status_t check_editable(weft_group_t *g, const weft_edit_info_t *info)
{
    if (g == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (info != NULL && info->size < EDIT_INFO_MIN_SIZE) {
        return weft__error(g->ctx, WEFT_ERR_INVALID_ARG,
                           "weft_edit_info_t.size is %zu, at least %zu expected (set it to "
                           "sizeof(weft_edit_info_t))",
                           info->size, (size_t)EDIT_INFO_MIN_SIZE);
    }
    if (g->ctx->store == NULL) {
        return weft__error(g->ctx, WEFT_ERR_UNSUPPORTED,
                           "group edits need the rendezvous store (run under weftrun)");
    }
    if (g->rank < 0) {
        return weft__error(g->ctx, WEFT_ERR_REVOKED, "this member is no longer in group %u",
                           g->id);
    }
    return WEFT_OK;
}

weft_status_t weft_group_repair(weft_group_t *g, weft_edit_info_t *info)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_status_t st = check_editable(g, info);
    if (st != WEFT_OK) {
        return st;
    }
    weft_edit_info_t tmp = {.size = sizeof(tmp)};
    weft_edit_info_t *out = info != NULL ? &tmp : NULL;
    info_begin(out, g);
    weft__poll_failure_notices(g->ctx);
    st = weft__group_catch_up(g, out);
    if (st == WEFT_OK && group_needs_edit(g)) {
        st = propose(g, WEFT_EDIT_REPAIR, out);
    } else if (st == WEFT_OK) {
        st = refuse_if_declared_failed(g); /* catch-up found no decision: perhaps deleted */
    }
    if (st != WEFT_OK) {
        return st;
    }
    info_finish(g, &tmp, info);
    return WEFT_OK;
}

/* Wait up to @p ms for joiner slot @p k of g to be written (it exists once k joiners
 * have registered). WEFT_OK when it is there, WEFT_ERR_TIMEOUT when not yet. */
static weft_status_t wait_for_slot(weft_group_t *g, uint32_t k, int ms)
{
    char key[96];
    void *val;
    size_t len;
    weft__key(g->ctx, key, sizeof(key), "g/%u/join/%u", g->id, k);
    weft_status_t st = weft__store_get(g->ctx->store, key, ms, &val, &len);
    if (st == WEFT_OK) {
        free(val);
    }
    return st;
}

/*
 * Admission is an agreement like repair: whoever proposes first decides, and every other
 * member applies that decision, whatever it was waiting for. So members need not agree
 * beforehand on how many joiners to wait for, and a member that calls it later, or calls
 * repair instead, lands on the same membership. No edit is made when there is nothing to
 * admit and nobody failed: a member that finds nothing goes on at the same epoch, and if
 * another did admit someone meanwhile, its next operation fails with WEFT_ERR_REVOKED and
 * its repair applies that admission.
 */
weft_status_t weft_group_grow(weft_group_t *g, int min_new, uint64_t timeout_ms,
                              weft_edit_info_t *info)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    enum { SLICE_MS = 20 };
    weft_status_t st = check_editable(g, info);
    if (st != WEFT_OK || min_new < 0) {
        return st != WEFT_OK ? st : WEFT_ERR_INVALID_ARG;
    }
    weft_edit_info_t tmp = {.size = sizeof(tmp)};
    info_begin(&tmp, g);
    /* min_new = 0: those present now, without waiting. */
    uint64_t deadline = weft__now_ns() + (min_new > 0 ? weft__ms_to_ns(timeout_ms) : 0);
    uint32_t start_epoch = g->epoch;
    int want = min_new > 0 ? min_new : 1;
    for (;;) {
        weft__poll_failure_notices(g->ctx);
        st = weft__group_catch_up(g, &tmp);
        if (st != WEFT_OK || g->epoch != start_epoch) {
            break; /* another member already decided this edit */
        }
        if (group_needs_edit(g)) {
            st = propose(g, WEFT_EDIT_REPAIR, &tmp); /* a failure: nobody waits for joiners */
            break;
        }
        int64_t count;
        st = joins_registered(g, &count);
        if (st != WEFT_OK) {
            st = weft__error(g->ctx, st, "group %u: cannot count joiners", g->id);
            break;
        }
        int64_t pending = count - (int64_t)g->join_lo;
        uint64_t now = weft__now_ns();
        if (pending >= want || (now >= deadline && pending > 0)) {
            st = propose(g, WEFT_EDIT_GROW, &tmp);
            break;
        }
        if (now >= deadline) {
            break; /* nobody to admit: no edit */
        }
        uint64_t left_ms = (deadline - now) / 1000000 + 1;
        st = wait_for_slot(g, g->join_lo + (uint32_t)want,
                           left_ms < SLICE_MS ? (int)left_ms : SLICE_MS);
        if (st != WEFT_OK && st != WEFT_ERR_TIMEOUT) {
            st = weft__error(g->ctx, st, "group %u: cannot wait for joiners", g->id);
            break;
        }
    }
    if (st == WEFT_OK) {
        st = refuse_if_declared_failed(g); /* catch-up found no decision: perhaps deleted */
    }
    if (st == WEFT_OK) {
        info_finish(g, &tmp, info);
    }
    return st;
}

weft_status_t weft_group_pending_joiners(const weft_group_t *g, int *n)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || n == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (g->ctx->store == NULL) {
        *n = 0;
        return WEFT_OK;
    }
    int64_t count;
    weft_status_t st = joins_registered(g, &count);
    if (st != WEFT_OK) {
        return weft__error(g->ctx, st, "group %u: cannot count joiners", g->id);
    }
    *n = count > (int64_t)g->join_lo ? (int)(count - (int64_t)g->join_lo) : 0;
    return WEFT_OK;
}

weft_status_t weft_group_revoke(weft_group_t *g)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = g->ctx;
    if (g->revoked == WEFT_OK) {
        g->revoked = WEFT_ERR_REVOKED;
    }
    weft__group_fail_requests(g, WEFT_ERR_REVOKED);
    if (ctx->store != NULL) {
        weft_status_t st = weft__group_publish_revoke(g, g->epoch, "revoked");
        if (st != WEFT_OK) {
            return weft__error(ctx, st, "group %u: cannot publish the revocation", g->id);
        }
    }
    return WEFT_OK;
}

weft_status_t weft_group_epoch(const weft_group_t *g, uint32_t *epoch)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || epoch == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    *epoch = g->epoch;
    return WEFT_OK;
}

weft_status_t weft_group_member_id(const weft_group_t *g, int rank, int *id)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || id == NULL || rank < 0 || rank >= g->size) {
        return WEFT_ERR_INVALID_ARG;
    }
    *id = g->members[rank];
    return WEFT_OK;
}

weft_status_t weft_group_rank_of(const weft_group_t *g, int id, int *rank)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || rank == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    for (int i = 0; i < g->size; i++) {
        if (g->members[i] == id) {
            *rank = i;
            return WEFT_OK;
        }
    }
    return WEFT_ERR_INVALID_ARG;
}
