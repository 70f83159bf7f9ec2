/*
 * The store server's map and requests: what each request does, the handshake that opens
 * a connection's session, and what a connection may write (docs/store-protocol.md,
 * "Sessions"). Called from the loop of server.c with the server's mutex held.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "comm/store/server.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/log_escape.h"
#include "util/parse.h"

/* ---- the map ---- */

static size_t key_hash(const char *key, size_t klen)
{
    return (size_t)weft__fnv1a(WEFT__FNV1A_SEED, key, klen);
}

store_entry_t **weft__store_srv_slot(weft_store_server_t *s, const char *key, size_t klen)
{
    store_entry_t **p = &s->buckets[key_hash(key, klen) & (s->nbuckets - 1)];
    while (*p != NULL && ((*p)->klen != klen || memcmp((*p)->key, key, klen) != 0)) {
        p = &(*p)->next;
    }
    return p;
}

static void map_grow(weft_store_server_t *s)
{
    size_t n = s->nbuckets * 2;
    store_entry_t **b = calloc(n, sizeof(*b));
    if (b == NULL) {
        return; /* longer chains, still correct */
    }
    for (size_t i = 0; i < s->nbuckets; i++) {
        while (s->buckets[i] != NULL) {
            store_entry_t *e = s->buckets[i];
            s->buckets[i] = e->next;
            size_t j = key_hash(e->key, e->klen) & (n - 1);
            e->next = b[j];
            b[j] = e;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

void weft__store_srv_remove(weft_store_server_t *s, store_entry_t **slot)
{
    store_entry_t *e = *slot;
    *slot = e->next;
    weft__store_srv_scan_key_removed(s, e);
    weft__store_srv_dir_unlink(s, e);
    s->data_bytes -= e->klen + e->vlen + ENTRY_OVERHEAD;
    weft__store_srv_share_sub(s, e->owner, e->klen + e->vlen + ENTRY_OVERHEAD);
    s->nentries--;
    free(e->counted);
    free(e->val);
    free(e);
}

/* ---- store operations (mutex held) ---- */

/* ---- GETs waiting for their keys ---- */

static store_wait_t **wait_bucket(weft_store_server_t *s, const char *key, size_t klen)
{
    return &s->waits[key_hash(key, klen) & (s->nwait_buckets - 1)];
}

void weft__store_srv_wait_free(weft_store_server_t *s, store_wait_t *w)
{
    *w->pprev = w->next;
    if (w->next != NULL) {
        w->next->pprev = w->pprev;
    }
    store_wait_t **p = &w->conn->waits;
    while (*p != w) {
        p = &(*p)->conn_next;
    }
    *p = w->conn_next;
    w->conn->nwaits--;
    s->nwaits--;
    s->data_bytes -= w->klen + ENTRY_OVERHEAD;
    free(w);
}

/* Parks a GET of @p c on @p key until it is set or @p timeout_ms pass. */
static void wait_park(weft_store_server_t *s, store_conn_t *c, const char *key, size_t klen,
                      uint32_t timeout_ms)
{
    if (c->nwaits >= WEFT__STORE_MAX_WAITS) {
        WEFT_WARN(s->lg, "store: refused a GET of %.*s by %s: %d of its requests wait already",
                  (int)klen, key, c->peer, WEFT__STORE_MAX_WAITS);
        weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
        return;
    }
    store_wait_t *w = s->data_bytes + klen + ENTRY_OVERHEAD <= WEFT__STORE_MAX_DATA
                          ? malloc(sizeof(*w) + klen + 1)
                          : NULL;
    if (w == NULL) {
        weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
        return;
    }
    memcpy(w->key, key, klen);
    w->key[klen] = '\0';
    w->klen = klen;
    w->conn = c;
    w->id = c->in_id;
    w->deadline_ms = weft__now_ms() + timeout_ms;
    store_wait_t **b = wait_bucket(s, key, klen);
    w->next = *b;
    w->pprev = b;
    if (*b != NULL) {
        (*b)->pprev = &w->next;
    }
    *b = w;
    w->conn_next = c->waits;
    c->waits = w;
    c->nwaits++;
    s->nwaits++;
    s->data_bytes += klen + ENTRY_OVERHEAD;
    if (w->deadline_ms < s->waits_due_ms) {
        s->waits_due_ms = w->deadline_ms;
    }
}

uint64_t weft__store_srv_waits_expire(weft_store_server_t *s, uint64_t now)
{
    uint64_t next = weft__store_srv_scans_expire(s, now);
    for (size_t i = 0; i < s->nwait_buckets; i++) {
        for (store_wait_t *w = s->waits[i], *n; w != NULL; w = n) {
            n = w->next;
            if (now >= w->deadline_ms) {
                weft__store_srv_resp_id(s, w->conn, w->id, WEFT_ERR_TIMEOUT, NULL, 0);
                weft__store_srv_wait_free(s, w);
            } else if (w->deadline_ms < next) {
                next = w->deadline_ms;
            }
        }
    }
    return next;
}

/* A key changed: answer the GETs waiting for it and tell the watchers of its prefixes. */
static void publish(weft_store_server_t *s, const store_entry_t *e)
{
    for (store_wait_t *w = *wait_bucket(s, e->key, e->klen), *n; w != NULL; w = n) {
        n = w->next;
        if (w->klen == e->klen && memcmp(w->key, e->key, e->klen) == 0 && !w->conn->dead) {
            weft__store_srv_resp_id(s, w->conn, w->id, WEFT_OK, e->val, e->vlen);
            weft__store_srv_wait_free(s, w);
        }
    }
    weft__store_srv_notify(s, e);
}

weft_status_t weft__store_srv_put(weft_store_server_t *s, const char *key, size_t klen,
                                  const void *val, size_t vlen)
{
    if (klen == 0 || klen > WEFT_STORE_MAX_KEY || vlen > WEFT__STORE_MAX_VALUE) {
        return WEFT_ERR_INVALID_ARG;
    }
    store_entry_t **slot = weft__store_srv_slot(s, key, klen);
    store_entry_t *e = *slot;
    size_t after =
        e != NULL ? s->data_bytes - e->vlen + vlen : s->data_bytes + klen + ENTRY_OVERHEAD + vlen;
    if (after > WEFT__STORE_MAX_DATA) {
        WEFT_WARN(s->lg, "store: full (%zu bytes), refusing to set %.*s", s->data_bytes, (int)klen,
                  key);
        return WEFT_ERR_NO_MEMORY;
    }
    /* The writer's share: what it held of this key before is given back first. */
    size_t old_size = e != NULL ? e->klen + e->vlen + ENTRY_OVERHEAD : 0;
    size_t new_size = klen + vlen + ENTRY_OVERHEAD;
    int64_t w = s->writer;
    if (!weft__store_srv_share_fits(s, w, e != NULL && e->owner == w ? old_size : 0, new_size)) {
        char text[WEFT_STORE_MAX_KEY + 16];
        WEFT_WARN(s->lg,
                  "store: member %lld's share of the store is full (%zu of %u bytes), refusing "
                  "to set %s",
                  (long long)w, weft__store_srv_share_of(s, w), WEFT__STORE_MEMBER_SHARE,
                  weft__log_escape(key, klen, text, sizeof(text)));
        return WEFT_ERR_NO_MEMORY;
    }
    if (!weft__store_srv_share_add(s, w, 0)) { /* its slot in the table, before any change */
        return WEFT_ERR_NO_MEMORY;
    }
    uint8_t *copy = malloc(vlen > 0 ? vlen : 1);
    if (copy == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    if (vlen > 0) {
        memcpy(copy, val, vlen);
    }
    bool created = e == NULL;
    if (created) {
        e = malloc(sizeof(*e) + klen + 1);
        if (e == NULL) {
            free(copy);
            return WEFT_ERR_NO_MEMORY;
        }
        memcpy(e->key, key, klen);
        e->key[klen] = '\0';
        e->klen = klen;
        e->vlen = 0;
        e->val = NULL;
        e->next = NULL;
        e->owner = -1;
        e->counted = NULL;
        e->ncounted = 0;
        e->deletable = false;
        if (weft__store_srv_dir_link(s, e) != WEFT_OK) {
            free(e);
            free(copy);
            return WEFT_ERR_NO_MEMORY;
        }
        *slot = e;
        s->nentries++;
        s->data_bytes += klen + ENTRY_OVERHEAD;
    }
    s->data_bytes = s->data_bytes - e->vlen + vlen;
    weft__store_srv_share_sub(s, e->owner, created ? 0 : old_size);
    (void)weft__store_srv_share_add(s, w, new_size); /* its slot exists: cannot fail */
    e->owner = w;
    free(e->val);
    e->val = copy;
    e->vlen = vlen;
    publish(s, e);
    if (created) {
        weft__store_srv_scan_key_added(s, e);
    }
    if (s->nentries > s->nbuckets) {
        map_grow(s);
    }
    return WEFT_OK;
}

/* The counter in a stored value: optional '-' and decimal digits, nothing else. */
static bool parse_counter(const store_entry_t *e, int64_t *out)
{
    char text[24];
    if (e->vlen == 0 || e->vlen >= sizeof(text)) {
        return false;
    }
    memcpy(text, e->val, e->vlen);
    text[e->vlen] = '\0';
    return weft__parse_i64(text, INT64_MIN, INT64_MAX, out);
}

static weft_status_t store_add(weft_store_server_t *s, const char *key, size_t klen, int64_t delta,
                               int64_t *result)
{
    int64_t cur = 0;
    store_entry_t *e = *weft__store_srv_slot(s, key, klen);
    if (e != NULL && !parse_counter(e, &cur)) {
        return WEFT_ERR_INVALID_ARG;
    }
    if ((delta > 0 && cur > INT64_MAX - delta) || (delta < 0 && cur < INT64_MIN - delta)) {
        return WEFT_ERR_INVALID_ARG;
    }
    char text[24];
    int n = snprintf(text, sizeof(text), "%" PRId64, cur + delta);
    weft_status_t st = weft__store_srv_put(s, key, klen, text, (size_t)n);
    if (st == WEFT_OK) {
        *result = cur + delta;
    }
    return st;
}

/* ---- requests ---- */

static void conn_protocol_error(weft_store_server_t *s, store_conn_t *c, const char *what)
{
    WEFT_ERROR(s->lg, "store: closing %s: %s", c->peer, what);
    weft__store_srv_kill(s, c);
}

/* AUTH: check the client's proof, prove ours, and key the session (proto.h). */
void weft__store_srv_auth(weft_store_server_t *s, store_conn_t *c)
{
    const uint8_t *p = c->in;
    weft_store_role_t role = (weft_store_role_t)p[WEFT__STORE_NONCE_LEN];
    uint32_t id = weft__store_get_u32(p + WEFT__STORE_NONCE_LEN + 1);
    uint8_t t[WEFT__STORE_TRANSCRIPT_LEN], secret[WEFT__STORE_PROOF_LEN];
    uint8_t proof[WEFT__STORE_PROOF_LEN];
    weft__store_transcript(t, c->nonce, p, role, id);
    bool ok = role <= WEFT__STORE_ROLE_MAX &&
              weft__store_session_secret(s->token, role, id, secret) == WEFT_OK &&
              weft__store_proof_check(secret, WEFT__STORE_CLIENT_PROOF, t,
                                      p + WEFT__STORE_NONCE_LEN + 5, WEFT__STORE_PROOF_LEN);
    if (!ok) {
        WEFT_WARN(s->lg, "store: refused %s: wrong token proof", c->peer);
        weft__store_srv_resp(s, c, WEFT_ERR_AUTH, NULL, 0);
        c->closing = true;
    } else if (s->nauth >= WEFT__STORE_MAX_CONNS) {
        if (weft__store_srv_busy_log_due(s)) { /* the refused try again: once a second */
            WEFT_WARN(s->lg, "store: refused %s: too many connections (%d)", c->peer,
                      WEFT__STORE_MAX_CONNS);
        }
        weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
        c->closing = true;
    } else if (weft__store_derive(secret, WEFT__STORE_SERVER_PROOF, t, proof) != WEFT_OK ||
               weft__store_derive(secret, WEFT__STORE_KEY_C2S, t, c->rx.key) != WEFT_OK ||
               weft__store_derive(secret, WEFT__STORE_KEY_S2C, t, c->tx.key) != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: closing %s: cannot derive its session keys", c->peer);
        weft__store_srv_kill(s, c);
    } else {
        weft__store_srv_authenticated(s, c);
        c->role = role;
        c->id = id;
        c->state = CONN_READY;
        if (role == WEFT__STORE_ROLE_MEMBER && id != WEFT__STORE_NO_ID) {
            WEFT_DEBUG(s->lg, "store: %s authenticated as member %u", c->peer, id);
            snprintf(c->peer + strlen(c->peer), sizeof(c->peer) - strlen(c->peer), " (member %u)",
                     id);
        } else {
            WEFT_DEBUG(s->lg, "store: %s authenticated as a %s", c->peer,
                       role == WEFT__STORE_ROLE_MEMBER ? "member without an id" : "launcher");
        }
        /* The last frame without a tag. */
        weft__store_srv_resp(s, c, WEFT_OK, proof, sizeof(proof));
        c->sealed = true;
    }
    OPENSSL_cleanse(secret, sizeof(secret));
}

/*
 * Whether the last two parts of @p key are "<kind>/<decimal id>"; *id is the id. The
 * keys a member owns end so (docs/store-protocol.md, "Sessions").
 */
static bool key_names_member(const char *key, size_t klen, const char *kind, int64_t *id)
{
    size_t end = klen, i = klen, kl = strlen(kind);
    while (i > 0 && key[i - 1] >= '0' && key[i - 1] <= '9') {
        i--;
    }
    if (i == end || end - i > 10 || i < kl + 1 || key[i - 1] != '/' ||
        memcmp(key + i - 1 - kl, kind, kl) != 0 || (i - 1 - kl > 0 && key[i - 2 - kl] != '/')) {
        return false;
    }
    char digits[12];
    memcpy(digits, key + i, end - i);
    digits[end - i] = '\0';
    return weft__parse_i64(digits, 0, INT64_MAX, id);
}

/* Whether @p key, after some namespace (a prefix ending in '/'), has one of the @p n
 * shapes ('#': a decimal number of 1 to 10 digits). */
static bool key_shaped(const char *key, size_t klen, const char *const *shapes, size_t n)
{
    for (size_t at = 1; at < klen; at++) {
        if (key[at - 1] != '/') {
            continue;
        }
        for (size_t p = 0; p < n; p++) {
            size_t i = at;
            bool match = true;
            for (const char *f = shapes[p]; *f != '\0' && match; f++) {
                size_t from = i;
                while (*f == '#' && i < klen && i - from < 10 && key[i] >= '0' && key[i] <= '9') {
                    i++;
                }
                match = *f == '#' ? i > from : i < klen && key[i++] == *f;
            }
            if (match && i == klen) {
                return true;
            }
        }
    }
    return false;
}

/*
 * Why the connection may not make this write, or NULL when it may. Launchers may write
 * anything; a member may not touch the launchers' keys, hold a lease but on its own
 * failure notice, delete but the agreement keys of finished epochs and the notices read once, count
 * itself under a decision but once and as one of its members, write another
 * member's claim, address or topology, or write another's failure notice but as a
 * report signed with its own id, about a member the store does not see alive
 * (renews_lease).
 */
/*
 * Whether the member whose failure notice is @p key is alive to the store: a connection
 * holds the lease on that notice and renewed it within the last quarter of its time to
 * live (WEFT_FAILURE_TIMEOUT_MS / 4 as weft arms it: 500 ms, five of its renewals). A
 * member that died closed its connection (its lease fired), and one that hangs or whose
 * host is lost stops renewing: a report about it is believed after that quarter, before
 * the lease itself lapses.
 */
static bool renews_lease(const weft_store_server_t *s, const char *key, size_t klen)
{
    uint64_t now = weft__now_ms();
    for (size_t i = 0; i < s->nconns; i++) {
        const store_conn_t *h = s->conns[i];
        if (h->dead || h->lease_key == NULL || h->lease_klen != klen ||
            memcmp(h->lease_key, key, klen) != 0) {
            continue;
        }
        uint64_t renewed = h->lease_deadline_ms - h->lease_ttl_ms;
        return now < renewed + h->lease_ttl_ms / 4;
    }
    return false;
}

/* Whether @p key is a program's (weft_kv_*, comm/ctx/kv.c): "<ns>/kv/<one part>", the
 * namespace being one part too. */
static bool program_key(const char *key, size_t klen)
{
    const char *slash = memchr(key, '/', klen);
    if (slash == NULL || slash == key) {
        return false;
    }
    size_t at = (size_t)(slash - key) + 1;
    return klen > at + 3 && memcmp(key + at, "kv/", 3) == 0 &&
           memchr(key + at + 3, '/', klen - at - 3) == NULL;
}

static const char *refusal(weft_store_server_t *s, const store_conn_t *c, weft_store_msg_t type,
                           const char *key, size_t klen, const uint8_t *val, size_t vlen)
{
    static const char *const owned[] = {"claim", "addr", "topo"};
    int64_t id;
    if (c->role == WEFT__STORE_ROLE_LAUNCHER) {
        return NULL;
    }
    if (klen >= 8 && memcmp(key, "weftrun/", 8) == 0) {
        return "keys under weftrun/ are the launchers'";
    }
    if (program_key(key, klen)) {
        /* A program's own keys: every member reads and writes them (its share of the
         * store bounds what it writes); leases are for failure notices. */
        return type == WEFT__STORE_LEASE ? "a member holds a lease only on its own failure notice"
                                         : NULL;
    }
    bool notice = key_names_member(key, klen, "failed", &id);
    if (type == WEFT__STORE_LEASE) {
        return notice && id == c->id ? NULL
                                     : "a member holds a lease only on its own failure notice";
    }
    /* Decisions, their counts, join slots and admissions: server_epochs.c. */
    bool agreement;
    const char *why = weft__store_srv_epoch_refusal(s, c, type, key, klen, val, vlen, &agreement);
    if (why != NULL || (agreement && type == WEFT__STORE_DELETE)) {
        return why;
    }
    if (type == WEFT__STORE_DELETE) {
        /* The notices a member deletes once it has set them and those it was for have
         * read them (comm/group/core.c's revocations, comm/group/join.c's split records),
         * by their shape after the namespace ('#': a decimal number). What a member owns,
         * failure notices, counters and everything else stay. */
        static const char *const read_once[] = {"split/#/#/#", "failed/g#.#"};
        return key_shaped(key, klen, read_once, sizeof(read_once) / sizeof(read_once[0]))
                   ? NULL
                   : "a member deletes only the agreement keys of finished epochs (decisions "
                     "and their counts, join slots, admissions), split records and revocation "
                     "notices";
    }
    /* What members agree on is created once, by SET_NX, whose answer is the value that
     * won: a plain SET would replace an agreed decision (or a join slot's occupant) under
     * the members that read it. */
    static const char *const once[] = {"g/#/#/next", "g/#/join/#"};
    if (type == WEFT__STORE_SET && key_shaped(key, klen, once, sizeof(once) / sizeof(once[0]))) {
        return "a decision or a join slot is created once, with SET_NX";
    }
    if (notice && id != c->id) {
        char sign[48];
        int n = snprintf(sign, sizeof(sign), "reported by member %u: ", c->id);
        bool signed_ok =
            c->id != WEFT__STORE_NO_ID && vlen >= (size_t)n && memcmp(val, sign, (size_t)n) == 0;
        if (!signed_ok) {
            return "another member's failure notice takes a report signed by the reporter "
                   "(\"reported by member <own id>: ...\")";
        }
        /* One member's word does not evict a peer the store sees alive. */
        return *weft__store_srv_slot(s, key, klen) == NULL && renews_lease(s, key, klen)
                   ? "the member it reports renews its lease: a report about a member alive "
                     "to the store is refused (it is believed once the renewals are a quarter "
                     "of the lease's time late)"
                   : NULL;
    }
    for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) {
        if (key_names_member(key, klen, owned[i], &id) && id != c->id) {
            return "the key belongs to another member";
        }
    }
    return NULL;
}

static void send_event(weft_store_server_t *s, const store_entry_t *e, void *arg)
{
    store_conn_t *c = arg;
    if (!c->dead) {
        weft__store_srv_event(s, c, e);
    }
}

static void handle_watch(weft_store_server_t *s, store_conn_t *c, const char *prefix, size_t plen)
{
    weft_status_t st = weft__store_srv_watch(s, c, prefix, plen);
    weft__store_srv_resp(s, c, st, NULL, 0);
    if (st == WEFT_OK) {
        weft__store_srv_dir_scan(s, prefix, plen, send_event, c);
    }
}

static void handle_get(weft_store_server_t *s, store_conn_t *c, const char *key, size_t klen,
                       uint32_t timeout_ms)
{
    const store_entry_t *e = *weft__store_srv_slot(s, key, klen);
    if (e != NULL) {
        weft__store_srv_resp(s, c, WEFT_OK, e->val, e->vlen);
    } else if (timeout_ms == 0) {
        weft__store_srv_resp(s, c, WEFT_ERR_TIMEOUT, NULL, 0);
    } else {
        wait_park(s, c, key, klen, timeout_ms);
    }
}

/* Create unless present; answer with whether ours won and the value that did. */
static void handle_set_nx(weft_store_server_t *s, store_conn_t *c, const char *key, size_t klen,
                          const uint8_t *val, size_t vlen)
{
    const store_entry_t *e = *weft__store_srv_slot(s, key, klen);
    uint8_t created = 0;
    if (e == NULL) {
        weft_status_t st = weft__store_srv_put(s, key, klen, val, vlen);
        if (st != WEFT_OK) {
            weft__store_srv_resp(s, c, st, NULL, 0);
            return;
        }
        created = 1;
        e = *weft__store_srv_slot(s, key, klen);
    }
    uint8_t *out = malloc(1 + e->vlen);
    if (out == NULL) {
        weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
        return;
    }
    out[0] = created;
    memcpy(out + 1, e->val, e->vlen);
    weft__store_srv_resp(s, c, WEFT_OK, out, 1 + e->vlen);
    free(out);
}

static void handle_lease(weft_store_server_t *s, store_conn_t *c, const char *key, size_t klen,
                         const uint8_t *rest, size_t rlen)
{
    uint32_t ttl = weft__store_get_u32(rest);
    weft__store_srv_lease_clear(s, c);
    if (ttl > 0) {
        size_t charge = klen + rlen - 4 + ENTRY_OVERHEAD;
        if (!weft__store_srv_share_fits(s, weft__store_srv_owner(c), 0, charge) ||
            !weft__store_srv_share_add(s, weft__store_srv_owner(c), 0)) {
            WEFT_WARN(s->lg, "store: the share of %s is full, refusing its lease", c->peer);
            weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
            return;
        }
        if (s->data_bytes + charge > WEFT__STORE_MAX_DATA) {
            WEFT_WARN(s->lg, "store: full (%zu bytes), refusing a lease on %.*s", s->data_bytes,
                      (int)klen, key);
            weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
            return;
        }
        c->lease_key = malloc(klen + 1);
        c->lease_val = malloc(rlen - 4 + 1);
        if (c->lease_key == NULL || c->lease_val == NULL) {
            free(c->lease_key);
            free(c->lease_val);
            c->lease_key = NULL;
            c->lease_val = NULL;
            weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
            return;
        }
        s->data_bytes += charge;
        (void)weft__store_srv_share_add(s, weft__store_srv_owner(c), charge);
        memcpy(c->lease_key, key, klen);
        c->lease_key[klen] = '\0';
        c->lease_klen = klen;
        memcpy(c->lease_val, rest + 4, rlen - 4);
        c->lease_vlen = rlen - 4;
        c->lease_deadline_ms = weft__now_ms() + ttl;
        c->lease_ttl_ms = ttl;
        weft__store_srv_lease_armed(s, c);
    }
    weft__store_srv_resp(s, c, WEFT_OK, NULL, 0);
}

void weft__store_srv_request(weft_store_server_t *s, store_conn_t *c)
{
    const char *key;
    const uint8_t *rest;
    size_t klen, rlen;
    if ((c->in_type < WEFT__STORE_SET || c->in_type > WEFT__STORE_WATCH) &&
        c->in_type != WEFT__STORE_SET_NX && c->in_type != WEFT__STORE_LEASE &&
        c->in_type != WEFT__STORE_SCAN) {
        conn_protocol_error(s, c, "unexpected message type");
        return;
    }
    if (weft__store_kv_decode(c->in, c->in_len, &key, &klen, &rest, &rlen) != WEFT_OK) {
        conn_protocol_error(s, c, "malformed request body");
        return;
    }
    /* Reads take a prefix, which may be empty; writes a key. */
    bool read = c->in_type == WEFT__STORE_GET || c->in_type == WEFT__STORE_WATCH ||
                c->in_type == WEFT__STORE_SCAN;
    if (klen == 0 && c->in_type != WEFT__STORE_WATCH && c->in_type != WEFT__STORE_SCAN) {
        weft__store_srv_resp(s, c, WEFT_ERR_INVALID_ARG, NULL, 0);
        return;
    }
    if (!read) {
        const char *why = refusal(s, c, c->in_type, key, klen, rest, rlen);
        if (why != NULL) {
            char text[WEFT_STORE_MAX_KEY + 16]; /* the member chose the key: escaped */
            WEFT_WARN(s->lg, "store: refused a write of %s by %s: %s",
                      weft__log_escape(key, klen, text, sizeof(text)), c->peer, why);
            weft__store_srv_resp(s, c, WEFT_ERR_AUTH, NULL, 0);
            return;
        }
    }
    switch (c->in_type) {
    case WEFT__STORE_SET:
        weft__store_srv_resp(s, c, weft__store_srv_put(s, key, klen, rest, rlen), NULL, 0);
        return;
    case WEFT__STORE_GET:
        if (rlen == 4) {
            handle_get(s, c, key, klen, weft__store_get_u32(rest));
            return;
        }
        break;
    case WEFT__STORE_ADD:
        if (rlen == 8) {
            int64_t result = 0;
            weft_status_t st = store_add(s, key, klen, (int64_t)weft__store_get_u64(rest), &result);
            if (st == WEFT_OK) {
                weft__store_srv_epoch_added(s, c, key, klen, result);
            }
            uint8_t be[8];
            weft__store_set_u64(be, (uint64_t)result);
            weft__store_srv_resp(s, c, st, be, st == WEFT_OK ? sizeof(be) : 0);
            return;
        }
        break;
    case WEFT__STORE_DELETE:
        if (rlen == 0) {
            store_entry_t **slot = weft__store_srv_slot(s, key, klen);
            if (*slot != NULL) {
                weft__store_srv_remove(s, slot);
            }
            weft__store_srv_resp(s, c, WEFT_OK, NULL, 0);
            return;
        }
        break;
    case WEFT__STORE_WATCH:
        if (rlen == 0) {
            handle_watch(s, c, key, klen);
            return;
        }
        break;
    case WEFT__STORE_SET_NX:
        handle_set_nx(s, c, key, klen, rest, rlen);
        return;
    case WEFT__STORE_LEASE:
        if (rlen >= 4 && rlen - 4 <= WEFT__STORE_MAX_VALUE) {
            handle_lease(s, c, key, klen, rest, rlen);
            return;
        }
        break;
    case WEFT__STORE_SCAN:
        if (weft__store_srv_scan(s, c, key, klen, rest, rlen)) {
            return;
        }
        break;
    default:
        break;
    }
    conn_protocol_error(s, c, "malformed request arguments");
}
