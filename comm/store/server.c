/*
 * The rendezvous store server: one thread runs a poll() loop over nonblocking sockets.
 * One mutex guards the key-value map and the connections; the loop drops it only while
 * it sleeps in poll(), so weft__store_server_set() from the hosting process applies its
 * change under the mutex and wakes the loop through a pipe to send what it queued.
 *
 * Each connection reads one frame at a time into a buffer of at most one frame, stops
 * reading while a GET is parked or while its pending output is large, and is closed when
 * its pending output passes WEFT__STORE_MAX_OUT: no client can make the server hold more
 * than about that much, and there are at most WEFT__STORE_MAX_CONNS connections.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/store/proto.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/parse.h"

#define ENTRY_OVERHEAD 64                         /* bytes charged per key besides its data */
#define OUT_HIGH_WATER (4 * WEFT_STORE_MAX_FRAME) /* stop reading requests above this */
#define FRAMES_PER_TURN 32                        /* fairness between busy clients */
#define ACCEPT_PAUSE_MS 100                       /* after accept() ran out of descriptors */

typedef struct store_entry {
    struct store_entry *next;
    uint8_t *val;
    size_t vlen, klen;
    char key[]; /* klen bytes and a NUL */
} store_entry_t;

typedef enum { CONN_AUTH, CONN_READY, CONN_WATCH } conn_state_t;

typedef struct store_conn {
    int fd;
    conn_state_t state;
    bool dead;    /* close at the end of this loop turn */
    bool closing; /* close once the output is flushed */
    bool parked;  /* a GET waits for key[] to be set */
    char peer[64];
    char host[64]; /* the peer's address without its port: the unit of the per-address cap */
    uint64_t opened_ms;
    uint8_t nonce[WEFT__STORE_NONCE_LEN];
    /* Whom the connection speaks for, and its session (proto.h) once authenticated. */
    weft_store_role_t role;
    uint32_t id;
    bool sealed;
    weft_store_dir_t rx, tx;
    uint64_t deadline_ms; /* of the authentication, or of the parked GET */
    uint8_t hdr[WEFT__STORE_HDR_LEN];
    size_t hdr_fill;
    bool in_body;
    weft_store_msg_t in_type;
    uint32_t in_len;
    uint8_t *in;
    size_t in_fill, in_cap;
    weft_store_buf_t out;
    size_t out_off;
    size_t klen;
    char key[WEFT_STORE_MAX_KEY + 1]; /* parked GET's key, or the watch prefix */
    /* Lease: set lease_key = lease_val when this connection drops or is not renewed. */
    char *lease_key;
    uint8_t *lease_val;
    size_t lease_klen, lease_vlen;
    uint64_t lease_deadline_ms;
} store_conn_t;

struct weft_store_server {
    pthread_t thread;
    pthread_mutex_t lock;
    bool stop;
    int listen_fd, wake_rd, wake_wr;
    int port;
    char *token;
    const weft_logger_t *lg;
    void (*on_lapse)(void *arg, const char *key);
    void *on_lapse_arg;
    store_entry_t **buckets;
    size_t nbuckets, nentries, data_bytes;
    store_conn_t *conns[WEFT__STORE_MAX_CONNS + WEFT__STORE_MAX_UNAUTH];
    size_t nconns;
    size_t queued; /* output bytes queued to all connections */
    struct pollfd pfds[WEFT__STORE_MAX_CONNS + WEFT__STORE_MAX_UNAUTH + 2];
    uint64_t accept_resume_ms;
    uint64_t busy_logged_ms; /* last warning that the unauthenticated pool was full */
    /* Fake connections (weft__store_server_feed): the bytes they receive next. */
    const uint8_t *feed;
    size_t feed_len;
    bool feed_eof;
};

static void reap(weft_store_server_t *s);

/* ---- the map ---- */

static size_t key_hash(const char *key, size_t klen)
{
    return (size_t)weft__fnv1a(WEFT__FNV1A_SEED, key, klen);
}

static store_entry_t **map_slot(weft_store_server_t *s, const char *key, size_t klen)
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

static void map_remove(weft_store_server_t *s, store_entry_t **slot)
{
    store_entry_t *e = *slot;
    *slot = e->next;
    s->data_bytes -= e->klen + e->vlen + ENTRY_OVERHEAD;
    s->nentries--;
    free(e->val);
    free(e);
}

/* ---- connection output ---- */

static size_t conn_pending(const store_conn_t *c)
{
    return c->out.len - c->out_off;
}

static void conn_compact(store_conn_t *c)
{
    if (c->out_off == c->out.len) {
        c->out.len = c->out_off = 0;
    } else if (c->out_off > c->out.len / 2) {
        memmove(c->out.data, c->out.data + c->out_off, conn_pending(c));
        c->out.len -= c->out_off;
        c->out_off = 0;
    }
}

/* Drops what a connection about to close still had to send. */
static void conn_drop_output(weft_store_server_t *s, store_conn_t *c)
{
    s->queued -= conn_pending(c);
    c->out.len = c->out_off = 0;
}

/* The connection with the most output queued. */
static store_conn_t *largest_queue(weft_store_server_t *s)
{
    store_conn_t *big = NULL;
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (!c->dead && (big == NULL || conn_pending(c) > conn_pending(big))) {
            big = c;
        }
    }
    return big;
}

/*
 * A frame was appended (or failed to be, st) to a connection that had @p before bytes
 * pending: seal it once authenticated, and enforce the caps on its output and on all.
 */
static void conn_queued(weft_store_server_t *s, store_conn_t *c, weft_status_t st, size_t start,
                        size_t before)
{
    if (st == WEFT_OK && c->sealed) {
        st = weft__store_seal(&c->out, start, &c->tx);
    }
    s->queued += conn_pending(c) - before;
    if (st == WEFT_OK && s->queued > WEFT__STORE_MAX_QUEUED) {
        /* The watchers that read slowest hold the most: close the worst of them. */
        store_conn_t *big = largest_queue(s);
        WEFT_WARN(s->lg, "store: closing %s: the store's output queues are full (%zu bytes), "
                  "and it has the most of it (%zu bytes) unread", big->peer, s->queued,
                  conn_pending(big));
        conn_drop_output(s, big);
        big->dead = true;
    }
    if (c->dead) {
        return;
    }
    if (st != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: cannot queue a reply to %s: %s", c->peer, weft_status_str(st));
        c->dead = true;
    } else if (conn_pending(c) > WEFT__STORE_MAX_OUT) {
        WEFT_WARN(s->lg, "store: closing %s: it does not read its events (%zu bytes pending)",
                  c->peer, conn_pending(c));
        c->dead = true;
    }
}

static void conn_resp(weft_store_server_t *s, store_conn_t *c, weft_status_t status,
                      const void *data, size_t len)
{
    conn_compact(c);
    size_t start = c->out.len, before = conn_pending(c);
    conn_queued(s, c, weft__store_frame_resp(&c->out, status, data, len), start, before);
}

static void conn_event(weft_store_server_t *s, store_conn_t *c, const store_entry_t *e)
{
    conn_compact(c);
    size_t start = c->out.len, before = conn_pending(c);
    conn_queued(s, c,
                weft__store_frame_kv(&c->out, WEFT__STORE_EVENT, e->key, e->klen, e->val, e->vlen),
                start, before);
}

static void conn_flush(weft_store_server_t *s, store_conn_t *c)
{
    while (!c->dead && conn_pending(c) > 0 && c->fd >= 0) { /* a fake one's stays queued */
        ssize_t n =
            send(c->fd, c->out.data + c->out_off, conn_pending(c), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                WEFT_DEBUG(s->lg, "store: send to %s failed: %m", c->peer);
                c->dead = true;
            }
            break;
        }
        c->out_off += (size_t)n;
        s->queued -= (size_t)n;
    }
    conn_compact(c);
    if (c->closing && conn_pending(c) == 0) {
        c->dead = true;
    }
}

/* Drops the connection's lease, and its charge on the store's memory. */
static void lease_clear(weft_store_server_t *s, store_conn_t *c)
{
    if (c->lease_key != NULL) {
        s->data_bytes -= c->lease_klen + c->lease_vlen + ENTRY_OVERHEAD;
    }
    free(c->lease_key);
    free(c->lease_val);
    c->lease_key = NULL;
    c->lease_val = NULL;
}

/* ---- store operations (mutex held) ---- */

/* A key changed: answer the GETs parked on it and tell the watchers of its prefixes. */
static void publish(weft_store_server_t *s, const store_entry_t *e)
{
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (c->dead) {
            continue;
        }
        if (c->parked && c->klen == e->klen && memcmp(c->key, e->key, e->klen) == 0) {
            c->parked = false;
            conn_resp(s, c, WEFT_OK, e->val, e->vlen);
        } else if (c->state == CONN_WATCH && c->klen <= e->klen &&
                   memcmp(c->key, e->key, c->klen) == 0) {
            conn_event(s, c, e);
        }
    }
}

static weft_status_t store_put(weft_store_server_t *s, const char *key, size_t klen,
                               const void *val, size_t vlen)
{
    if (klen == 0 || klen > WEFT_STORE_MAX_KEY || vlen > WEFT__STORE_MAX_VALUE) {
        return WEFT_ERR_INVALID_ARG;
    }
    store_entry_t **slot = map_slot(s, key, klen);
    store_entry_t *e = *slot;
    size_t after =
        e != NULL ? s->data_bytes - e->vlen + vlen : s->data_bytes + klen + ENTRY_OVERHEAD + vlen;
    if (after > WEFT__STORE_MAX_DATA) {
        WEFT_WARN(s->lg, "store: full (%zu bytes), refusing to set %.*s", s->data_bytes, (int)klen,
                  key);
        return WEFT_ERR_NO_MEMORY;
    }
    uint8_t *copy = malloc(vlen > 0 ? vlen : 1);
    if (copy == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    if (vlen > 0) {
        memcpy(copy, val, vlen);
    }
    if (e == NULL) {
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
        *slot = e;
        s->nentries++;
        s->data_bytes += klen + ENTRY_OVERHEAD;
    }
    s->data_bytes = s->data_bytes - e->vlen + vlen;
    free(e->val);
    e->val = copy;
    e->vlen = vlen;
    publish(s, e);
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
    store_entry_t *e = *map_slot(s, key, klen);
    if (e != NULL && !parse_counter(e, &cur)) {
        return WEFT_ERR_INVALID_ARG;
    }
    if ((delta > 0 && cur > INT64_MAX - delta) || (delta < 0 && cur < INT64_MIN - delta)) {
        return WEFT_ERR_INVALID_ARG;
    }
    char text[24];
    int n = snprintf(text, sizeof(text), "%" PRId64, cur + delta);
    weft_status_t st = store_put(s, key, klen, text, (size_t)n);
    if (st == WEFT_OK) {
        *result = cur + delta;
    }
    return st;
}

/* ---- requests ---- */

static void conn_protocol_error(weft_store_server_t *s, store_conn_t *c, const char *what)
{
    WEFT_ERROR(s->lg, "store: closing %s: %s", c->peer, what);
    c->dead = true;
}

/* Connections that have authenticated (and are not closing). */
static size_t count_authenticated(const weft_store_server_t *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nconns; i++) {
        n += s->conns[i]->state != CONN_AUTH && !s->conns[i]->dead;
    }
    return n;
}

/* AUTH: check the client's proof, prove ours, and key the session (proto.h). */
static void handle_auth(weft_store_server_t *s, store_conn_t *c)
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
        conn_resp(s, c, WEFT_ERR_AUTH, NULL, 0);
        c->closing = true;
    } else if (count_authenticated(s) >= WEFT__STORE_MAX_CONNS) {
        WEFT_WARN(s->lg, "store: refused %s: too many connections (%d)", c->peer,
                  WEFT__STORE_MAX_CONNS);
        conn_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
        c->closing = true;
    } else if (weft__store_derive(secret, WEFT__STORE_SERVER_PROOF, t, proof) != WEFT_OK ||
               weft__store_derive(secret, WEFT__STORE_KEY_C2S, t, c->rx.key) != WEFT_OK ||
               weft__store_derive(secret, WEFT__STORE_KEY_S2C, t, c->tx.key) != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: closing %s: cannot derive its session keys", c->peer);
        c->dead = true;
    } else {
        c->role = role;
        c->id = id;
        c->state = CONN_READY;
        if (role == WEFT__STORE_ROLE_MEMBER && id != WEFT__STORE_NO_ID) {
            WEFT_DEBUG(s->lg, "store: %s authenticated as member %u", c->peer, id);
            snprintf(c->peer + strlen(c->peer), sizeof(c->peer) - strlen(c->peer),
                     " (member %u)", id);
        } else {
            WEFT_DEBUG(s->lg, "store: %s authenticated as a %s", c->peer,
                       role == WEFT__STORE_ROLE_MEMBER ? "member without an id" : "launcher");
        }
        conn_resp(s, c, WEFT_OK, proof, sizeof(proof)); /* the last frame without a tag */
        c->sealed = true;
    }
    OPENSSL_cleanse(secret, sizeof(secret));
}

/*
 * Whether the last two parts of @p key are "<kind>/<decimal id>"; *id is the id. The
 * keys a member owns end so (docs/DESIGN.md, "The store's sessions").
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

/*
 * Why the connection may not make this write, or NULL when it may. Launchers may write
 * anything; a member may not touch the launchers' keys, hold a lease but on its own
 * failure notice, delete, write another member's claim, address or topology, or write
 * another's failure notice but as a report signed with its own id.
 */
static const char *refusal(const store_conn_t *c, weft_store_msg_t type, const char *key,
                           size_t klen, const uint8_t *val, size_t vlen)
{
    static const char *const owned[] = {"claim", "addr", "topo"};
    int64_t id;
    if (c->role == WEFT__STORE_ROLE_LAUNCHER) {
        return NULL;
    }
    if (klen >= 8 && memcmp(key, "weftrun/", 8) == 0) {
        return "keys under weftrun/ are the launchers'";
    }
    bool notice = key_names_member(key, klen, "failed", &id);
    if (type == WEFT__STORE_LEASE) {
        return notice && id == c->id ? NULL
                                     : "a member holds a lease only on its own failure notice";
    }
    if (type == WEFT__STORE_DELETE) {
        return "members delete no keys";
    }
    if (notice && id != c->id) {
        char sign[48];
        int n = snprintf(sign, sizeof(sign), "reported by member %u: ", c->id);
        bool signed_ok = c->id != WEFT__STORE_NO_ID && vlen >= (size_t)n &&
                         memcmp(val, sign, (size_t)n) == 0;
        return signed_ok ? NULL
                         : "another member's failure notice takes a report signed by the "
                           "reporter (\"reported by member <own id>: ...\")";
    }
    for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) {
        if (key_names_member(key, klen, owned[i], &id) && id != c->id) {
            return "the key belongs to another member";
        }
    }
    return NULL;
}

static void handle_watch(weft_store_server_t *s, store_conn_t *c, const char *prefix, size_t plen)
{
    memcpy(c->key, prefix, plen);
    c->key[plen] = '\0';
    c->klen = plen;
    c->state = CONN_WATCH;
    conn_resp(s, c, WEFT_OK, NULL, 0);
    for (size_t i = 0; i < s->nbuckets && !c->dead; i++) {
        for (const store_entry_t *e = s->buckets[i]; e != NULL && !c->dead; e = e->next) {
            if (e->klen >= plen && memcmp(e->key, prefix, plen) == 0) {
                conn_event(s, c, e);
            }
        }
    }
}

static void handle_get(weft_store_server_t *s, store_conn_t *c, const char *key, size_t klen,
                       uint32_t timeout_ms)
{
    const store_entry_t *e = *map_slot(s, key, klen);
    if (e != NULL) {
        conn_resp(s, c, WEFT_OK, e->val, e->vlen);
    } else if (timeout_ms == 0) {
        conn_resp(s, c, WEFT_ERR_TIMEOUT, NULL, 0);
    } else {
        memcpy(c->key, key, klen);
        c->key[klen] = '\0';
        c->klen = klen;
        c->parked = true;
        c->deadline_ms = weft__now_ms() + timeout_ms;
    }
}

/* Create unless present; answer with whether ours won and the value that did. */
static void handle_set_nx(weft_store_server_t *s, store_conn_t *c, const char *key, size_t klen,
                          const uint8_t *val, size_t vlen)
{
    const store_entry_t *e = *map_slot(s, key, klen);
    uint8_t created = 0;
    if (e == NULL) {
        weft_status_t st = store_put(s, key, klen, val, vlen);
        if (st != WEFT_OK) {
            conn_resp(s, c, st, NULL, 0);
            return;
        }
        created = 1;
        e = *map_slot(s, key, klen);
    }
    uint8_t *out = malloc(1 + e->vlen);
    if (out == NULL) {
        conn_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
        return;
    }
    out[0] = created;
    memcpy(out + 1, e->val, e->vlen);
    conn_resp(s, c, WEFT_OK, out, 1 + e->vlen);
    free(out);
}

static void handle_lease(weft_store_server_t *s, store_conn_t *c, const char *key, size_t klen,
                         const uint8_t *rest, size_t rlen)
{
    uint32_t ttl = weft__store_get_u32(rest);
    lease_clear(s, c);
    if (ttl > 0) {
        size_t charge = klen + rlen - 4 + ENTRY_OVERHEAD;
        if (s->data_bytes + charge > WEFT__STORE_MAX_DATA) {
            WEFT_WARN(s->lg, "store: full (%zu bytes), refusing a lease on %.*s", s->data_bytes,
                      (int)klen, key);
            conn_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
            return;
        }
        c->lease_key = malloc(klen + 1);
        c->lease_val = malloc(rlen - 4 + 1);
        if (c->lease_key == NULL || c->lease_val == NULL) {
            free(c->lease_key);
            free(c->lease_val);
            c->lease_key = NULL;
            c->lease_val = NULL;
            conn_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
            return;
        }
        s->data_bytes += charge;
        memcpy(c->lease_key, key, klen);
        c->lease_key[klen] = '\0';
        c->lease_klen = klen;
        memcpy(c->lease_val, rest + 4, rlen - 4);
        c->lease_vlen = rlen - 4;
        c->lease_deadline_ms = weft__now_ms() + ttl;
    }
    conn_resp(s, c, WEFT_OK, NULL, 0);
}

static void handle_request(weft_store_server_t *s, store_conn_t *c)
{
    const char *key;
    const uint8_t *rest;
    size_t klen, rlen;
    if ((c->in_type < WEFT__STORE_SET || c->in_type > WEFT__STORE_WATCH) &&
        c->in_type != WEFT__STORE_SET_NX && c->in_type != WEFT__STORE_LEASE) {
        conn_protocol_error(s, c, "unexpected message type");
        return;
    }
    if (weft__store_kv_decode(c->in, c->in_len, &key, &klen, &rest, &rlen) != WEFT_OK) {
        conn_protocol_error(s, c, "malformed request body");
        return;
    }
    if (klen == 0 && c->in_type != WEFT__STORE_WATCH) {
        conn_resp(s, c, WEFT_ERR_INVALID_ARG, NULL, 0);
        return;
    }
    if (c->in_type != WEFT__STORE_GET && c->in_type != WEFT__STORE_WATCH) {
        const char *why = refusal(c, c->in_type, key, klen, rest, rlen);
        if (why != NULL) {
            WEFT_WARN(s->lg, "store: refused a write of %.*s by %s: %s", (int)klen, key, c->peer,
                      why);
            conn_resp(s, c, WEFT_ERR_AUTH, NULL, 0);
            return;
        }
    }
    switch (c->in_type) {
    case WEFT__STORE_SET:
        conn_resp(s, c, store_put(s, key, klen, rest, rlen), NULL, 0);
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
            uint8_t be[8];
            weft__store_set_u64(be, (uint64_t)result);
            conn_resp(s, c, st, be, st == WEFT_OK ? sizeof(be) : 0);
            return;
        }
        break;
    case WEFT__STORE_DELETE:
        if (rlen == 0) {
            store_entry_t **slot = map_slot(s, key, klen);
            if (*slot != NULL) {
                map_remove(s, slot);
            }
            conn_resp(s, c, WEFT_OK, NULL, 0);
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
    default:
        break;
    }
    conn_protocol_error(s, c, "malformed request arguments");
}

/* ---- reading frames ---- */

/* recv() on the socket, or on a fake connection the bytes of weft__store_server_feed. */
static ssize_t conn_recv_some(weft_store_server_t *s, store_conn_t *c, void *p, size_t want)
{
    ssize_t n;
    if (c->fd < 0) {
        n = (ssize_t)(want < s->feed_len ? want : s->feed_len);
        if (n == 0) {
            errno = EAGAIN;
            return s->feed_eof ? 0 : -1;
        }
        memcpy(p, s->feed, (size_t)n);
        s->feed += n;
        s->feed_len -= (size_t)n;
        return n;
    }
    do {
        n = recv(c->fd, p, want, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
}

/* recv() into @p p; false when the connection should stop reading this turn. */
static bool conn_recv(weft_store_server_t *s, store_conn_t *c, void *p, size_t want, size_t *got)
{
    ssize_t n = conn_recv_some(s, c, p, want);
    if (n > 0) {
        *got += (size_t)n;
        return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return false;
    }
    if (n < 0) {
        WEFT_DEBUG(s->lg, "store: recv from %s failed: %m", c->peer);
    } else if (c->hdr_fill > 0 || c->in_body) {
        WEFT_ERROR(s->lg, "store: closing %s: truncated frame", c->peer);
    } else if (c->state == CONN_AUTH) {
        WEFT_WARN(s->lg, "store: refused %s: closed without authenticating", c->peer);
    } else {
        WEFT_DEBUG(s->lg, "store: %s disconnected", c->peer);
    }
    c->dead = true;
    return false;
}

/* A header arrived: check it and make room for the body. False closes the connection. */
static bool conn_start_body(weft_store_server_t *s, store_conn_t *c)
{
    if (weft__store_hdr_decode(c->hdr, &c->in_len, &c->in_type) != WEFT_OK) {
        if (c->state == CONN_AUTH) {
            WEFT_WARN(s->lg, "store: refused %s: not a weft store client", c->peer);
        } else {
            WEFT_ERROR(s->lg, "store: closing %s: malformed or oversized frame header", c->peer);
        }
        return false;
    }
    if (c->state == CONN_AUTH &&
        (c->in_type != WEFT__STORE_AUTH || c->in_len != WEFT__STORE_AUTH_LEN)) {
        WEFT_WARN(s->lg, "store: refused %s: request before authentication", c->peer);
        return false;
    }
    if (c->state == CONN_WATCH) {
        WEFT_ERROR(s->lg, "store: closing %s: request on a watch connection", c->peer);
        return false;
    }
    size_t want = c->in_len + (c->sealed ? WEFT__STORE_TAG_LEN : 0);
    if (c->in_cap < want) {
        uint8_t *in = realloc(c->in, want);
        if (in == NULL) {
            WEFT_ERROR(s->lg, "store: closing %s: no memory for a %u-byte frame", c->peer,
                       c->in_len);
            return false;
        }
        c->in = in;
        c->in_cap = want;
    }
    c->in_body = true;
    c->in_fill = 0;
    return true;
}

static bool conn_wants_input(const store_conn_t *c)
{
    return !c->dead && !c->closing && !c->parked && conn_pending(c) <= OUT_HIGH_WATER;
}

static void conn_read(weft_store_server_t *s, store_conn_t *c)
{
    for (int frames = 0; frames < FRAMES_PER_TURN && conn_wants_input(c);) {
        if (!c->in_body) {
            if (!conn_recv(s, c, c->hdr + c->hdr_fill, sizeof(c->hdr) - c->hdr_fill,
                           &c->hdr_fill)) {
                return;
            }
            if (c->hdr_fill < sizeof(c->hdr)) {
                continue;
            }
            if (!conn_start_body(s, c)) {
                c->dead = true;
                return;
            }
        }
        size_t want = c->in_len + (c->sealed ? WEFT__STORE_TAG_LEN : 0);
        if (c->in_fill < want) {
            if (!conn_recv(s, c, c->in + c->in_fill, want - c->in_fill, &c->in_fill)) {
                return;
            }
            if (c->in_fill < want) {
                continue;
            }
        }
        c->hdr_fill = 0;
        c->in_body = false;
        frames++;
        if (c->sealed &&
            !weft__store_tag_check(&c->rx, c->hdr, c->in, c->in_len, c->in + c->in_len)) {
            /* Nothing of the frame is applied: the store is as it was. */
            WEFT_ERROR(s->lg,
                       "store: closing %s: frame %llu failed its integrity check (altered, "
                       "injected, replayed or reordered on the way)",
                       c->peer, (unsigned long long)c->rx.seq);
            c->dead = true;
            return;
        }
        if (c->state == CONN_AUTH) {
            handle_auth(s, c);
        } else {
            handle_request(s, c);
        }
        if (c->in_cap > 65536) { /* keep one big SET from pinning a megabyte per client */
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        }
    }
}

/* ---- connections and the loop ---- */

/* "host:port" of a peer into @p out, and its host alone into @p hostout (64 bytes). */
static void format_peer(const struct sockaddr_storage *sa, socklen_t len, char *out, size_t n,
                        char *hostout)
{
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getnameinfo((const struct sockaddr *)sa, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, n, "unknown peer");
        snprintf(hostout, 64, "unknown");
    } else {
        snprintf(out, n, sa->ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
        snprintf(hostout, 64, "%.63s", host);
    }
}

static void conn_free(weft_store_server_t *s, store_conn_t *c)
{
    lease_clear(s, c);
    s->queued -= conn_pending(c);
    if (c->fd >= 0) {
        close(c->fd);
    }
    free(c->in);
    weft__store_buf_free(&c->out);
    OPENSSL_cleanse(c, sizeof(*c)); /* the session's keys */
    free(c);
}

/*
 * Makes room for one more connection that has yet to authenticate. They have a small
 * pool of their own (WEFT__STORE_MAX_UNAUTH), of which one address may hold only part
 * (WEFT__STORE_MAX_UNAUTH_PER_ADDR), and a short deadline: strangers who open sockets
 * and say nothing cannot take the slots of the job's processes. When the pool (or the
 * address's part) is full, its oldest goes, told that the store is busy, so that a
 * client of the job that was among them tries again.
 */
static void unauth_make_room(weft_store_server_t *s, const char *host)
{
    size_t total = 0, same = 0;
    store_conn_t *oldest = NULL, *oldest_same = NULL;
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (c->dead || c->state != CONN_AUTH) {
            continue;
        }
        total++;
        oldest = oldest == NULL || c->opened_ms < oldest->opened_ms ? c : oldest;
        if (strcmp(c->host, host) == 0) {
            same++;
            oldest_same =
                oldest_same == NULL || c->opened_ms < oldest_same->opened_ms ? c : oldest_same;
        }
    }
    store_conn_t *victim = same >= WEFT__STORE_MAX_UNAUTH_PER_ADDR ? oldest_same
                           : total >= WEFT__STORE_MAX_UNAUTH      ? oldest
                                                                  : NULL;
    if (victim == NULL) {
        return;
    }
    uint64_t now = weft__now_ms();
    if (now >= s->busy_logged_ms + 1000) { /* a flood would fill the log */
        s->busy_logged_ms = now;
        WEFT_WARN(s->lg,
                  "store: dropping %s: too many connections that have not authenticated (%zu, "
                  "%zu of them from %s)",
                  victim->peer, total, same, host);
    }
    conn_resp(s, victim, WEFT_ERR_NO_MEMORY, NULL, 0);
    conn_flush(s, victim);
    conn_drop_output(s, victim);
    victim->dead = true;
}

/* A new connection: greet it with the nonce it must prove the token against. */
static void conn_open(weft_store_server_t *s, int fd, const char *peer, const char *host)
{
    store_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        WEFT_ERROR(s->lg, "store: no memory for a new connection");
        if (fd >= 0) {
            close(fd);
        }
        return;
    }
    c->fd = fd;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->opened_ms = weft__now_ms();
    unauth_make_room(s, host);
    size_t cap = sizeof(s->conns) / sizeof(s->conns[0]);
    if (s->nconns >= cap) {
        reap(s); /* dropped ones still hold their entries */
    }
    if (s->nconns >= cap) {
        WEFT_WARN(s->lg, "store: refused %s: too many connections (%zu)", c->peer, cap);
        conn_free(s, c);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint8_t hello[WEFT__STORE_HELLO_LEN] = {WEFT__STORE_VERSION};
    weft_status_t st = weft__store_random(c->nonce, sizeof(c->nonce));
    if (st != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: getrandom failed: %m");
        conn_free(s, c);
        return;
    }
    memcpy(hello + 1, c->nonce, sizeof(c->nonce));
    if (weft__store_frame_bytes(&c->out, WEFT__STORE_HELLO, hello, sizeof(hello)) != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: no memory for a new connection");
        conn_free(s, c);
        return;
    }
    s->queued += conn_pending(c);
    c->state = CONN_AUTH;
    c->deadline_ms = weft__now_ms() + WEFT__STORE_AUTH_TIMEOUT_MS;
    s->conns[s->nconns++] = c;
    WEFT_DEBUG(s->lg, "store: connection from %s", c->peer);
}

static void accept_all(weft_store_server_t *s)
{
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof(sa);
        int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            char peer[64], host[64];
            format_peer(&sa, len, peer, sizeof(peer), host);
            conn_open(s, fd, peer, host);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) {
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            /* Out of descriptors or memory: poll() would report the listener forever. */
            WEFT_WARN(s->lg, "store: accept failed: %m; pausing %d ms", ACCEPT_PAUSE_MS);
            s->accept_resume_ms = weft__now_ms() + ACCEPT_PAUSE_MS;
        }
        return;
    }
}

/* Expire authentication deadlines and parked GETs; returns the poll() timeout. */
static int run_timers(weft_store_server_t *s)
{
    uint64_t now = weft__now_ms();
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (c->dead || !(c->state == CONN_AUTH || c->parked)) {
            continue;
        }
        if (now < c->deadline_ms) {
            next = c->deadline_ms < next ? c->deadline_ms : next;
        } else if (c->state == CONN_AUTH) {
            if (!c->closing) { /* a refused one that is not reading its refusal is no news */
                uint64_t waited = now - (c->deadline_ms - WEFT__STORE_AUTH_TIMEOUT_MS);
                WEFT_WARN(s->lg, "store: refused %s: no authentication after %llu ms", c->peer,
                          (unsigned long long)waited);
            }
            c->dead = true;
        } else {
            c->parked = false;
            conn_resp(s, c, WEFT_ERR_TIMEOUT, NULL, 0);
        }
    }
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (c->dead || c->lease_key == NULL) {
            continue;
        }
        if (now < c->lease_deadline_ms) {
            next = c->lease_deadline_ms < next ? c->lease_deadline_ms : next;
        } else {
            WEFT_WARN(s->lg, "store: %s did not renew its lease: publishing %s", c->peer,
                      c->lease_key);
            if (s->on_lapse != NULL) {
                s->on_lapse(s->on_lapse_arg, c->lease_key);
            }
            c->dead = true; /* reap() fires the lease */
        }
    }
    if (s->accept_resume_ms > now) {
        next = s->accept_resume_ms < next ? s->accept_resume_ms : next;
    }
    if (next == UINT64_MAX) {
        return -1;
    }
    return next - now > INT32_MAX ? INT32_MAX : (int)(next - now);
}

static void reap(weft_store_server_t *s)
{
    /* Fire the leases of connections that went away first: watchers may be among the
     * survivors of this very turn. */
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (c->dead && c->lease_key != NULL) {
            WEFT_DEBUG(s->lg, "store: lease of %s fires: %s", c->peer, c->lease_key);
            /* Its charge goes before the notice is stored: a full store still takes it. */
            char *key = c->lease_key;
            uint8_t *val = c->lease_val;
            size_t klen = c->lease_klen, vlen = c->lease_vlen;
            s->data_bytes -= klen + vlen + ENTRY_OVERHEAD;
            c->lease_key = NULL;
            c->lease_val = NULL;
            (void)store_put(s, key, klen, val, vlen);
            free(key);
            free(val);
        }
    }
    for (size_t i = 0; i < s->nconns;) {
        if (s->conns[i]->dead) {
            conn_free(s, s->conns[i]);
            s->conns[i] = s->conns[--s->nconns];
        } else {
            i++;
        }
    }
}

static size_t build_pollfds(weft_store_server_t *s)
{
    s->pfds[0] = (struct pollfd){.fd = s->wake_rd, .events = POLLIN};
    s->pfds[1] = (struct pollfd){.fd = weft__now_ms() >= s->accept_resume_ms ? s->listen_fd : -1,
                                 .events = POLLIN};
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        short ev = POLLRDHUP;
        ev |= conn_wants_input(c) ? POLLIN : 0;
        ev |= conn_pending(c) > 0 ? POLLOUT : 0;
        s->pfds[2 + i] = (struct pollfd){.fd = c->fd, .events = ev};
    }
    return s->nconns;
}

static void handle_events(weft_store_server_t *s, size_t npolled)
{
    if (s->pfds[0].revents & POLLIN) {
        char drain[64];
        while (read(s->wake_rd, drain, sizeof(drain)) > 0) {
        }
    }
    for (size_t i = 0; i < npolled; i++) {
        store_conn_t *c = s->conns[i];
        short re = s->pfds[2 + i].revents;
        if (re & POLLOUT) {
            conn_flush(s, c);
        }
        if (re & POLLIN) {
            conn_read(s, c);
        }
        if ((re & (POLLERR | POLLHUP)) || ((re & POLLRDHUP) && !conn_wants_input(c))) {
            /* Gone, or half-closed while we are not reading: nobody will read a reply. */
            WEFT_DEBUG(s->lg, "store: %s hung up", c->peer);
            c->dead = true;
        }
    }
    if (s->pfds[1].revents & POLLIN) {
        accept_all(s);
    }
}

static void *server_main(void *arg)
{
    weft_store_server_t *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        int timeout = run_timers(s);
        for (size_t i = 0; i < s->nconns; i++) {
            conn_flush(s, s->conns[i]);
        }
        reap(s);
        size_t npolled = build_pollfds(s);
        pthread_mutex_unlock(&s->lock);
        int n = poll(s->pfds, npolled + 2, timeout);
        int err = errno;
        pthread_mutex_lock(&s->lock);
        if (n < 0 && err != EINTR) {
            errno = err;
            WEFT_ERROR(s->lg, "store: poll failed: %m; the store stops serving");
            break;
        }
        if (n > 0) {
            handle_events(s, npolled);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- public calls ---- */

static weft_status_t open_listener(weft_store_server_t *s, const char *addr, int port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(addr, portstr, &hints, &res);
    if (rc != 0) {
        WEFT_ERROR(s->lg, "store: cannot resolve bind address %s: %s", addr, gai_strerror(rc));
        return WEFT_ERR_INVALID_ARG;
    }
    int fd = -1, one = 1, err = 0;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        errno = err;
        WEFT_ERROR(s->lg, "store: cannot listen on %s port %d: %m", addr, port);
        return WEFT_ERR_IO;
    }
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                             : ((struct sockaddr_in *)&sa)->sin_port);
    s->listen_fd = fd;
    return WEFT_OK;
}

static void server_free(weft_store_server_t *s)
{
    for (size_t i = 0; i < s->nconns; i++) {
        conn_free(s, s->conns[i]);
    }
    for (size_t i = 0; s->buckets != NULL && i < s->nbuckets; i++) {
        while (s->buckets[i] != NULL) {
            map_remove(s, &s->buckets[i]);
        }
    }
    free(s->buckets);
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
    }
    if (s->wake_rd >= 0) {
        close(s->wake_rd);
        close(s->wake_wr);
    }
    if (s->token != NULL) {
        OPENSSL_cleanse(s->token, strlen(s->token));
    }
    free(s->token);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

weft_status_t weft__store_server_start(const weft_store_server_params_t *params,
                                       weft_store_server_t **server)
{
    if (params == NULL || server == NULL || params->size < sizeof(*params) ||
        params->token == NULL || params->token[0] == '\0' || params->port < 0 ||
        params->port > 65535) {
        WEFT_ERROR(params != NULL ? params->logger : NULL,
                   "store: invalid server parameters (size, token or port)");
        return WEFT_ERR_INVALID_ARG;
    }
    weft_store_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    weft_status_t status = WEFT_ERR_NO_MEMORY;
    pthread_mutex_init(&s->lock, NULL);
    s->lg = params->logger;
    s->on_lapse = params->on_lapse;
    s->on_lapse_arg = params->on_lapse_arg;
    s->listen_fd = s->wake_rd = s->wake_wr = -1;
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    s->token = strdup(params->token);
    if (s->buckets == NULL || s->token == NULL) {
        goto err_free_server;
    }
    int pipefd[2];
    if (pipe2(pipefd, O_NONBLOCK | O_CLOEXEC) != 0) {
        WEFT_ERROR(s->lg, "store: pipe2 failed: %m");
        status = WEFT_ERR_IO;
        goto err_free_server;
    }
    s->wake_rd = pipefd[0];
    s->wake_wr = pipefd[1];
    const char *addr = params->bind_addr != NULL ? params->bind_addr : "127.0.0.1";
    status = open_listener(s, addr, params->port);
    if (status != WEFT_OK) {
        goto err_free_server;
    }
    /* The hosting process (weftrun) handles its signals on its own threads, not here. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        WEFT_ERROR(s->lg, "store: cannot start the server thread: %m");
        status = WEFT_ERR_IO;
        goto err_free_server;
    }
    WEFT_INFO(s->lg, "store: listening on %s port %d", addr, s->port);
    *server = s;
    return WEFT_OK;

err_free_server:
    server_free(s);
    return status;
}

int weft__store_server_port(const weft_store_server_t *s)
{
    return s != NULL ? s->port : -1;
}

static void server_wake(weft_store_server_t *s)
{
    ssize_t n;
    if (s->wake_wr < 0) {
        return; /* a fake server: no loop to wake */
    }
    do {
        n = write(s->wake_wr, "w", 1);
    } while (n < 0 && errno == EINTR);
    /* EAGAIN: the pipe is full, so a wake-up is pending anyway. */
}

weft_status_t weft__store_server_set(weft_store_server_t *s, const char *key, const void *val,
                                     size_t len)
{
    if (s == NULL || key == NULL || (val == NULL && len > 0)) {
        return WEFT_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&s->lock);
    weft_status_t st = store_put(s, key, strnlen(key, WEFT_STORE_MAX_KEY + 1), val, len);
    pthread_mutex_unlock(&s->lock);
    if (st == WEFT_OK) {
        server_wake(s);
    }
    return st;
}

bool weft__store_server_has(weft_store_server_t *s, const char *key)
{
    if (s == NULL || key == NULL) {
        return false;
    }
    pthread_mutex_lock(&s->lock);
    bool has = *map_slot(s, key, strnlen(key, WEFT_STORE_MAX_KEY + 1)) != NULL;
    pthread_mutex_unlock(&s->lock);
    return has;
}

void weft__store_server_stop(weft_store_server_t *s)
{
    if (s == NULL) {
        return;
    }
    if (s->listen_fd >= 0) { /* not a fake one: a thread serves it */
        pthread_mutex_lock(&s->lock);
        s->stop = true;
        pthread_mutex_unlock(&s->lock);
        server_wake(s);
        pthread_join(s->thread, NULL);
    }
    server_free(s);
}

/* ---- fake connections: the request path without sockets or thread (fuzzing, tests) ---- */

weft_status_t weft__store_server_fake(const char *token, const weft_logger_t *lg,
                                      weft_store_server_t **server)
{
    weft_store_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->lg = lg;
    s->listen_fd = s->wake_rd = s->wake_wr = -1;
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    s->token = strdup(token);
    if (s->buckets == NULL || s->token == NULL) {
        server_free(s);
        return WEFT_ERR_NO_MEMORY;
    }
    *server = s;
    return WEFT_OK;
}

/* A fake connection's descriptor: negative, so that nothing closes or polls it. */
static int fake_fd(int id)
{
    return -2 - id;
}

int weft__store_server_fake_open(weft_store_server_t *s, bool authenticated)
{
    pthread_mutex_lock(&s->lock);
    int id = 0;
    for (size_t i = 0; i < s->nconns; i++) {
        int used = -2 - s->conns[i]->fd;
        id = used >= id ? used + 1 : id;
    }
    char peer[32];
    snprintf(peer, sizeof(peer), "fake connection %d", id);
    conn_open(s, fake_fd(id), peer, peer);
    store_conn_t *c = s->nconns > 0 ? s->conns[s->nconns - 1] : NULL;
    if (c == NULL || c->fd != fake_fd(id)) {
        id = -1;
    } else if (authenticated) {
        /* A launcher's connection without tags: the fuzzer drives the request path. */
        c->state = CONN_READY;
    }
    pthread_mutex_unlock(&s->lock);
    return id;
}

bool weft__store_server_feed(weft_store_server_t *s, int id, const void *p, size_t n, bool eof,
                             struct weft_store_buf *out, size_t *used)
{
    pthread_mutex_lock(&s->lock);
    store_conn_t *c = NULL;
    for (size_t i = 0; i < s->nconns && c == NULL; i++) {
        c = s->conns[i]->fd == fake_fd(id) ? s->conns[i] : NULL;
    }
    size_t taken = 0;
    if (c != NULL) {
        s->feed = p;
        s->feed_len = n;
        s->feed_eof = eof;
        /* As the loop does: read while it wants input, answer, expire, flush, reap. */
        while (conn_wants_input(c) && (s->feed_len > 0 || s->feed_eof)) {
            conn_read(s, c);
        }
        taken = n - s->feed_len;
        s->feed = NULL;
        s->feed_len = 0;
        s->feed_eof = false;
        (void)run_timers(s);
        if (out != NULL && !c->dead &&
            weft__store_buf_put(out, c->out.data + c->out_off, conn_pending(c)) == WEFT_OK) {
            s->queued -= conn_pending(c);
            c->out_off = c->out.len;
        }
        conn_flush(s, c);
    }
    bool open = c != NULL && !c->dead;
    reap(s);
    pthread_mutex_unlock(&s->lock);
    if (used != NULL) {
        *used = taken;
    }
    return open;
}
