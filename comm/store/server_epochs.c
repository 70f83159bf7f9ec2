/*
 * What a member may do to the agreement keys of a group's epochs (server.h, "Epochs").
 * A member deletes a decision g/<gid>/<e>/next, its count g/<gid>/<e>/applied, a join slot
 * g/<gid>/join/<k> or an admission g/<gid>/admit/<id> only once the store has seen epoch
 * e finish: every member the decision lists counted itself under its "applied" key, once
 * each, with an add of 1. The finish marks what comm/group/retire.c then deletes (the
 * epoch's two keys, the run of unfinished decisions just below it, the join slots up to
 * the decision's join_hi and their admissions): the same walk, done by the store, so that
 * a member can delete neither the decision others are still reading nor a joiner's slot.
 * The layout of a decision, which the store reads for this, is comm/store/agreement.h.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/store/agreement.h"
#include "comm/store/server.h"

typedef enum epoch_kind { KIND_NEXT, KIND_APPLIED, KIND_JOIN, KIND_ADMIT } epoch_kind_t;

/* The parts of an agreement key: the group's prefix ("<ns>/g/<gid>/", plen bytes), its
 * kind and number (the epoch, the slot or the joiner's id). */
typedef struct epoch_key {
    size_t plen;
    epoch_kind_t kind;
    uint32_t num;
} epoch_key_t;

/* Start of the '/'-separated part ending just before @p end (0 when none). */
static size_t part_start(const char *key, size_t end)
{
    while (end > 0 && key[end - 1] != '/') {
        end--;
    }
    return end;
}

static bool digits(const char *p, size_t n, uint32_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 10) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return false;
        }
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    *out = (uint32_t)v;
    return v <= UINT32_MAX;
}

static bool same(const char *p, size_t n, const char *word)
{
    return n == strlen(word) && memcmp(p, word, n) == 0;
}

/* Whether @p key is "<ns>/g/<gid>/<e>/next|applied" or "<ns>/g/<gid>/join|admit/<n>",
 * with a namespace of at least one byte. */
static bool parse(const char *key, size_t klen, epoch_key_t *k)
{
    size_t a = part_start(key, klen); /* last part */
    if (a < 2) {
        return false;
    }
    size_t b = part_start(key, a - 1); /* the one before */
    if (b < 2) {
        return false;
    }
    const char *last = key + a, *mid = key + b;
    size_t llen = klen - a, mlen = a - 1 - b;
    if (same(last, llen, "next") || same(last, llen, "applied")) {
        k->kind = last[0] == 'n' ? KIND_NEXT : KIND_APPLIED;
        if (!digits(mid, mlen, &k->num)) {
            return false;
        }
    } else if (same(mid, mlen, "join") || same(mid, mlen, "admit")) {
        k->kind = mid[0] == 'j' ? KIND_JOIN : KIND_ADMIT;
        if (!digits(last, llen, &k->num)) {
            return false;
        }
    } else {
        return false;
    }
    /* The group id, after "g" as a part of its own, after a namespace ('/' at least). */
    size_t g = part_start(key, b - 1);
    uint32_t gid;
    if (g < 3 || !digits(key + g, b - 1 - g, &gid) || key[g - 2] != 'g' || key[g - 3] != '/') {
        return false;
    }
    k->plen = b;
    return true;
}

/* The entry "<prefix><n>/<word>" (an epoch's) or "<prefix><word>/<n>" (a slot's, an
 * admission's), if present. */
static store_entry_t *entry_at(weft_store_server_t *s, const char *key, size_t plen, uint32_t n,
                               const char *word, bool epoch)
{
    char buf[WEFT_STORE_MAX_KEY + 32];
    if (plen > WEFT_STORE_MAX_KEY) {
        return NULL;
    }
    int t = epoch ? snprintf(buf + plen, 32, "%u/%s", n, word)
                  : snprintf(buf + plen, 32, "%s/%u", word, n);
    if (t < 0 || t >= 32 || plen + (size_t)t > WEFT_STORE_MAX_KEY) {
        return NULL;
    }
    memcpy(buf, key, plen);
    return *weft__store_srv_slot(s, buf, plen + (size_t)t);
}

/* The membership of a decision's value: false when it is not one. */
static bool decision_members(const store_entry_t *d, const uint32_t **members, uint32_t *n,
                             uint32_t *join_hi)
{
    uint32_t h[WEFT__DECISION_HEADER];
    if (d == NULL || d->vlen < sizeof(h)) {
        return false;
    }
    memcpy(h, d->val, sizeof(h));
    uint32_t count = h[WEFT__DECISION_W_N_MEMBERS];
    if (h[0] != WEFT__DECISION_MAGIC || count == 0 ||
        d->vlen != (WEFT__DECISION_HEADER + (size_t)count) * sizeof(uint32_t)) {
        return false;
    }
    *members = (const uint32_t *)(const void *)(d->val + sizeof(h)); /* malloc'd: aligned */
    *n = count;
    *join_hi = h[WEFT__DECISION_W_JOIN_HI];
    return true;
}

static bool counted(const store_entry_t *a, uint32_t id)
{
    for (uint32_t i = 0; a != NULL && i < a->ncounted; i++) {
        if (a->counted[i] == id) {
            return true;
        }
    }
    return false;
}

const char *weft__store_srv_epoch_refusal(weft_store_server_t *s, const store_conn_t *c,
                                          weft_store_msg_t type, const char *key, size_t klen,
                                          const uint8_t *rest, size_t rlen, bool *agreement)
{
    epoch_key_t k;
    *agreement = parse(key, klen, &k);
    if (!*agreement || c->role == WEFT__STORE_ROLE_LAUNCHER) {
        return NULL;
    }
    if (type == WEFT__STORE_DELETE) {
        const store_entry_t *e = *weft__store_srv_slot(s, key, klen);
        return e == NULL || e->deletable
                   ? NULL
                   : "a member deletes a decision, its count, a join slot or an admission only "
                     "once the epoch that used it has finished (every member of the decision "
                     "counted itself)";
    }
    if (k.kind != KIND_APPLIED) {
        return NULL; /* the rules of server_req.c's refusal() */
    }
    if (type != WEFT__STORE_ADD) {
        return "a decision's count changes only by its members' adds";
    }
    if (rlen != 8 || weft__store_get_u64(rest) != 1) {
        return "a member counts itself under a decision with an add of 1";
    }
    const uint32_t *members;
    uint32_t n, join_hi;
    if (!decision_members(entry_at(s, key, k.plen, k.num, "next", true), &members, &n, &join_hi)) {
        return "there is no decision of that epoch to count";
    }
    bool listed = false;
    for (uint32_t i = 0; i < n && !listed; i++) {
        listed = members[i] == c->id;
    }
    if (!listed) {
        return "only a member of the decision counts itself under it";
    }
    return counted(*weft__store_srv_slot(s, key, klen), c->id)
               ? "a member counts itself under a decision once"
               : NULL;
}

/* Marks what the finish of epoch @p epoch lets members delete (retire.c's walk). */
static void finish(weft_store_server_t *s, const char *key, size_t plen, uint32_t epoch,
                   uint32_t join_hi)
{
    for (uint32_t e = epoch;; e--) {
        store_entry_t *d = entry_at(s, key, plen, e, "next", true);
        store_entry_t *a = entry_at(s, key, plen, e, "applied", true);
        if (a != NULL) {
            a->deletable = true;
        }
        if (d == NULL && e != epoch) {
            break; /* the run of unfinished decisions below ends here */
        }
        if (d != NULL) {
            d->deletable = true;
        }
        if (e == 0) {
            break;
        }
    }
    for (uint32_t j = join_hi; j > 0; j--) {
        store_entry_t *slot = entry_at(s, key, plen, j, "join", false);
        if (slot == NULL) {
            break; /* every slot below went with an earlier finish */
        }
        slot->deletable = true;
        char text[24];
        uint32_t id;
        size_t len = slot->vlen < sizeof(text) ? slot->vlen : sizeof(text) - 1;
        memcpy(text, slot->val, len);
        if (digits(text, len, &id)) {
            store_entry_t *admit = entry_at(s, key, plen, id, "admit", false);
            if (admit != NULL) {
                admit->deletable = true;
            }
        }
    }
}

void weft__store_srv_epoch_added(weft_store_server_t *s, const store_conn_t *c, const char *key,
                                 size_t klen, int64_t count)
{
    epoch_key_t k;
    if (!parse(key, klen, &k) || k.kind != KIND_APPLIED) {
        return;
    }
    store_entry_t *a = *weft__store_srv_slot(s, key, klen);
    if (a != NULL && c->role == WEFT__STORE_ROLE_MEMBER) {
        uint32_t *grown = realloc(a->counted, sizeof(*grown) * ((size_t)a->ncounted + 1));
        if (grown == NULL) {
            WEFT_WARN(s->lg, "store: no memory to remember who counted under a decision");
        } else {
            grown[a->ncounted++] = c->id;
            a->counted = grown;
        }
    }
    const uint32_t *members;
    uint32_t n, join_hi;
    if (decision_members(entry_at(s, key, k.plen, k.num, "next", true), &members, &n, &join_hi) &&
        count >= (int64_t)n) {
        finish(s, key, k.plen, k.num, join_hi);
    }
}
