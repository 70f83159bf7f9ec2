/* Group edits: one decision per (group, epoch), taken by the store's create-if-absent. */
#ifndef WEFT_GROUP_EDIT_H
#define WEFT_GROUP_EDIT_H

#include "comm/core_impl.h"
#include "weft/group.h"

enum weft_edit_kind {
    WEFT_EDIT_REPAIR = 1,
    WEFT_EDIT_GROW = 2,
};

/* The decision that takes a group from epoch e to e+1, as stored under
 * weft/g/<gid>/<e>/next. Encoded in host byte order (all members share one). */
typedef struct weft_decision {
    uint32_t kind;
    uint32_t new_epoch;
    uint32_t join_hi; /* joiner registrations consumed up to here */
    uint32_t n_members;
    int32_t *members; /* new membership, group order */
} weft_decision_t;

weft_status_t weft__decision_encode(const weft_decision_t *d, void **buf, size_t *len);
/* WEFT_ERR_PROTOCOL unless @p buf holds a decision of a known kind whose membership has
 * 1 to WEFT_TAG_MAX_MEMBERS valid member ids, none twice; d->members is malloc'ed. */
weft_status_t weft__decision_decode(const void *buf, size_t len, weft_decision_t *d);
void weft__decision_key(const weft_ctx_t *ctx, char *key, size_t len, uint32_t gid,
                        uint32_t epoch);
/* The decision taken at @p epoch of group @p gid, waiting up to @p timeout_ms for it:
 * WEFT_OK and *d (d->members malloc'ed), WEFT_ERR_TIMEOUT when there is none (yet). */
weft_status_t weft__decision_lookup(const weft_ctx_t *ctx, uint32_t gid, uint32_t epoch,
                                    int timeout_ms, weft_decision_t *d);
/* Apply a decided edit to @p g (members, epoch, stale messages); fills @p info. */
weft_status_t weft__group_apply(weft_group_t *g, const weft_decision_t *d,
                                weft_edit_info_t *info);
/* Read the addresses of the members among @p ids this process does not know yet (so it
 * knows which share its host); one that cannot be read is reported as failed. */
void weft__learn_members(weft_ctx_t *ctx, const int *ids, int n);
/*
 * Tag ids for @p n > 0 new subgroups of @p parent (comm/group/tag_ids.c), a collective of
 * @p parent: ids that no member of @p parent uses for a live group, the first free ones
 * from @p cursor on, the same on every member; *ids is malloc'ed. WEFT_ERR_NO_MEMORY on
 * every member alike when fewer than @p n are free.
 */
weft_status_t weft__split_tag_ids(weft_group_t *parent, int n, uint64_t cursor, uint32_t **ids);
/* Apply every decision already taken for g's current epoch and later ones. */
weft_status_t weft__group_catch_up(weft_group_t *g, weft_edit_info_t *info);

/*
 * Keys of finished epochs (comm/group/retire.c). A member of g that applied @p d (the
 * decision that took g to d->new_epoch, this member included) counts itself among those
 * that did; the one that completes the count deletes the keys of the finished epoch and
 * of unfinished ones below it. Best effort: a store that fails only leaves keys behind.
 */
void weft__edit_applied(weft_group_t *g, const weft_decision_t *d);
/* Whether this member was declared failed (its notice failed/<id> is in the store, read
 * now, not from the watch); @p why receives the notice's text. */
bool weft__declared_failed(weft_ctx_t *ctx, char *why, size_t len);
/*
 * The same from this member's watch of the failure notices, with no round trip: its own
 * notice comes on the connection its requests use, so once a store call returned, a
 * notice set before the store served it has been received. Use it after the edit's own
 * store calls (the catch-up's reads).
 */
bool weft__declared_failed_seen(weft_ctx_t *ctx, char *why, size_t len);
/* The newest finished epoch of group @p gid whose decision is kept (the world's only):
 * false when none has finished, or the store cannot say. */
bool weft__finished_epoch(weft_ctx_t *ctx, uint32_t gid, uint32_t *epoch);

#endif
