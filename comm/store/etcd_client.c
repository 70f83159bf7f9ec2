/*
 * The etcd backend of the store client (backend.h): weft's store calls mapped onto etcd
 * v3's JSON gateway (HTTP/1.1 POST to /v3/kv/..., /v3/lease/..., /v3/watch; keys and
 * values in base64) through libcurl, loaded at run time (etcd_curl.h). The mapping, what
 * holds and what does not, is in docs/store-protocol.md ("etcd backend"); in short:
 *
 * - Every key lives under a root derived from the job's data key (weft__store_data_key of
 *   the token, or the one a rank was given), "weft/<16 hex of HMAC-SHA256(data key,
 *   "etcd-namespace")>/": user keys under k/, lease notices under n/,
 *   the markers of this client's compare-and-swaps under m/.
 * - get waits with a range, then a watch of the key from the range's revision + 1.
 * - set_nx and add are transactions; each also writes this client's marker (m/<nonce>)
 *   with the call's sequence number, so that a request retried after a lost answer (a
 *   leader that failed over) learns whether its first try was applied and is never
 *   applied twice.
 * - lease(key, val) holds an etcd lease (kept alive by the renewals) to which the notice
 *   n/<key> = val is bound; a watcher of a prefix also watches the notices under it, and
 *   when one is deleted with its lease (the lease lapsed) delivers key = val and writes
 *   it unless the key exists.
 * - scan is a range from after the resume key to the prefix's end, cut at the page's
 *   bytes; its min_count wait polls a count_only range every ETCD_SCAN_POLL_MS.
 * - A watch runs on a thread of its own (a curl multi handle: a range, then one streamed
 *   POST /v3/watch with two watches, the prefix's and its notices'), queuing events and
 *   writing a byte to a pipe whose read end is weft__store_fd().
 *
 * Requests take a curl handle from a small pool, so threads call at once (the heartbeat
 * renews while a member waits in a get). Each request tries the endpoints in turn from
 * the last that answered, with bounded timeouts, for at most ETCD_RETRY_MS in all; then
 * the store is lost (the shared health record, store.h). Answers are untrusted: bounded
 * in size (WEFT__ETCD_MAX_ANSWER), parsed by the bounded reader (json.h), base64 checked.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/store/backend.h"
#include "comm/store/etcd_curl.h"
#include "comm/store/etcd_answer.h"
#include "comm/store/proto.h"
#include "util/clock.h"

#define ETCD_MAX_ENDPOINTS 8
#define ETCD_POOL 4              /* idle curl handles kept for requests */
#define ETCD_REQ_TIMEOUT_MS 5000 /* one try at one endpoint, beyond a get's own wait */
#define ETCD_CONNECT_TIMEOUT_MS 1000
#define ETCD_RETRY_MS 20000 /* trying the endpoints in turn before the store is lost */
#define ETCD_MAX_SUPPRESS 64

typedef struct etcd_event {
    struct etcd_event *next;
    char *key;
    uint8_t *val;
    size_t vlen;
} etcd_event_t;

typedef struct etcd_watch etcd_watch_t;

typedef struct etcd_client {
    weft_store_client_t base; /* first: the ops table, logger and address */
    const weft_curl_t *curl;
    char *endpoints[ETCD_MAX_ENDPOINTS];
    int nend;
    atomic_int cur; /* the endpoint that answered last */
    char root[WEFT__ETCD_ROOT_LEN + 1];
    char mark[WEFT__ETCD_ROOT_LEN + 24]; /* this client's marker key: root "m/" 16 hex */
    atomic_uint_fast64_t seq;            /* of the marked calls */
    pthread_mutex_t pool_lock;
    CURL *pool[ETCD_POOL];
    int npool;
    weft_store_health_t *health;
    atomic_bool broken, fenced;
    atomic_uint_fast64_t requests; /* HTTP requests sent (weft__store_requests) */
    /* The lease: one per client, as a native connection holds one. */
    pthread_mutex_t lease_lock;
    int64_t lease_id; /* 0: none */
    int64_t lease_ttl_s;
    uint64_t renewed_ms;
    char *lease_key; /* the user key */
    uint8_t *lease_val;
    size_t lease_vlen;
    /* Events of the watch, and the pipe that says there are some. */
    pthread_mutex_t ev_lock;
    etcd_event_t *ev_head, *ev_tail;
    int pipe[2];
    bool watch_failed;
    etcd_watch_t *watch;
} etcd_client_t;

static etcd_client_t *etcd(weft_store_client_t *c)
{
    return (etcd_client_t *)c;
}

/* ---- requests ---- */

static CURL *take_handle(etcd_client_t *c)
{
    pthread_mutex_lock(&c->pool_lock);
    CURL *h = c->npool > 0 ? c->pool[--c->npool] : NULL;
    pthread_mutex_unlock(&c->pool_lock);
    return h != NULL ? h : c->curl->easy_init();
}

static void give_handle(etcd_client_t *c, CURL *h)
{
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool < ETCD_POOL) {
        c->pool[c->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (h != NULL) {
        c->curl->easy_cleanup(h);
    }
}

/* Sets up @p h for a POST of @p body to @p path at endpoint @p e. */
static void setup(etcd_client_t *c, CURL *h, int e, const char *path, const char *body, size_t blen,
                  long timeout_ms, weft_etcd_answer_t *a, char *url, size_t url_len)
{
    const weft_curl_t *cu = c->curl;
    snprintf(url, url_len, "http://%s%s", c->endpoints[e], path);
    cu->easy_setopt(h, WEFT__CURLOPT_URL, url);
    cu->easy_setopt(h, WEFT__CURLOPT_PROTOCOLS, WEFT__CURLPROTO_HTTP);
    cu->easy_setopt(h, WEFT__CURLOPT_PROXY, ""); /* the cluster is reached directly */
    cu->easy_setopt(h, WEFT__CURLOPT_NOSIGNAL, 1L);
    cu->easy_setopt(h, WEFT__CURLOPT_TCP_NODELAY, 1L);
    cu->easy_setopt(h, WEFT__CURLOPT_POST, 1L);
    cu->easy_setopt(h, WEFT__CURLOPT_POSTFIELDS, body);
    cu->easy_setopt(h, WEFT__CURLOPT_POSTFIELDSIZE, (long)blen);
    cu->easy_setopt(h, WEFT__CURLOPT_HTTPHEADER, cu->no_expect);
    cu->easy_setopt(h, WEFT__CURLOPT_WRITEFUNCTION, weft__etcd_on_data);
    cu->easy_setopt(h, WEFT__CURLOPT_WRITEDATA, a);
    cu->easy_setopt(h, WEFT__CURLOPT_TIMEOUT_MS, timeout_ms);
    cu->easy_setopt(h, WEFT__CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_CONNECT_TIMEOUT_MS);
}

static void nap_ms(uint64_t ms)
{
    nanosleep(
        &(struct timespec){.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000},
        NULL);
}

static bool usable(etcd_client_t *c)
{
    if (!atomic_load(&c->broken) && weft__store_lost_ns(c->health) != 0) {
        atomic_store(&c->broken, true);
    }
    return !atomic_load(&c->broken) && !atomic_load(&c->fenced);
}

/* No endpoint answered in time: the store is lost (for every connection sharing its
 * health, whose owner reports it; else logged here). */
static weft_status_t lost(etcd_client_t *c, const char *what, const char *why)
{
    if (c->health != NULL) {
        weft__store_health_lost(c->health, what, why);
    } else {
        WEFT_ERROR(c->base.lg, "store %s: %s: %s", c->base.addr, what, why);
    }
    atomic_store(&c->broken, true);
    return WEFT_ERR_IO;
}

/*
 * POSTs @p body to @p path and parses the answer into @p doc (and @p a, which holds its
 * text: free a->p and the doc). Tries the endpoints in turn, for at most ETCD_RETRY_MS.
 * *uncertain (may be NULL) is set when a try may have been applied without our learning
 * its answer (anything but a refused connection).
 */
static weft_status_t post_quiet(etcd_client_t *c, const char *path, const char *body, size_t blen,
                                weft_etcd_answer_t *a, weft_json_t *doc, bool *uncertain,
                                bool quiet_big)
{
    *a = (weft_etcd_answer_t){0};
    if (!usable(c)) {
        return WEFT_ERR_IO;
    }
    CURL *h = take_handle(c);
    if (h == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    char url[320], why[160] = "";
    uint64_t deadline = weft__now_ms() + ETCD_RETRY_MS;
    weft_status_t st = WEFT_ERR_IO;
    for (unsigned tries = 0, pause = 20;; tries++) {
        int e = atomic_load(&c->cur);
        a->len = 0;
        a->too_big = false;
        setup(c, h, e, path, body, blen, ETCD_REQ_TIMEOUT_MS, a, url, sizeof(url));
        atomic_fetch_add(&c->requests, 1);
        CURLcode rc = c->curl->easy_perform(h);
        long code = 0;
        c->curl->easy_getinfo(h, WEFT__CURLINFO_RESPONSE_CODE, &code);
        if (rc == WEFT__CURLE_OK && code == 200 && a->p != NULL) {
            st = weft__json_parse(doc, a->p, a->len);
            if (st != WEFT_OK) {
                WEFT_ERROR(c->base.lg, "store %s: %s answered %s with malformed JSON", c->base.addr,
                           c->endpoints[e], path);
            }
            break;
        }
        if (a->too_big && quiet_big) {
            st = WEFT_ERR_NO_MEMORY; /* the caller asks for less */
            break;
        }
        if (a->too_big || (rc == WEFT__CURLE_OK && code >= 400 && code < 500)) {
            WEFT_ERROR(c->base.lg, "store %s: %s refused %s: %s%.200s", c->base.addr,
                       c->endpoints[e], path, a->too_big ? "answer too large" : "",
                       a->too_big || a->p == NULL ? "" : a->p);
            st = WEFT_ERR_PROTOCOL;
            break;
        }
        if (uncertain != NULL && rc != WEFT__CURLE_COULDNT_CONNECT) {
            *uncertain = true;
        }
        snprintf(why, sizeof(why), "%s: %s", c->endpoints[e],
                 rc != WEFT__CURLE_OK ? c->curl->easy_strerror(rc) : "HTTP error");
        /* The next endpoint; around the ring, a pause (an election takes a second or two). */
        int next = (e + 1) % c->nend;
        atomic_compare_exchange_strong(&c->cur, &e, next);
        uint64_t now = weft__now_ms();
        if (now >= deadline || !usable(c)) {
            st = usable(c) ? lost(c, "no etcd endpoint answered", why) : WEFT_ERR_IO;
            break;
        }
        if (next == 0 || c->nend == 1) {
            nap_ms(pause);
            pause = pause < 400 ? pause * 2 : 500;
        }
    }
    give_handle(c, h);
    if (st != WEFT_OK) {
        free(a->p);
        a->p = NULL;
    }
    return st;
}

static weft_status_t post(etcd_client_t *c, const char *path, const char *body, size_t blen,
                          weft_etcd_answer_t *a, weft_json_t *doc, bool *uncertain)
{
    return post_quiet(c, path, body, blen, a, doc, uncertain, false);
}

/* ---- bodies ---- */

/* The etcd key of @p key under @p dir ("k/", "n/") of the root, base64. */
static char *b64_key(const etcd_client_t *c, const char *dir, const char *key)
{
    char full[WEFT__ETCD_ROOT_LEN + 4 + WEFT_STORE_MAX_KEY + 1];
    int n = snprintf(full, sizeof(full), "%s%s%s", c->root, dir, key);
    char *b = malloc(WEFT__B64_LEN((size_t)n) + 1);
    if (b != NULL) {
        weft__b64_encode(full, (size_t)n, b);
    }
    return b;
}

/* The range end of every key starting with @p dir @p prefix: the prefix with its last
 * byte one up (the root is never all 0xff). */
static char *b64_prefix_end(const etcd_client_t *c, const char *dir, const char *prefix)
{
    char full[WEFT__ETCD_ROOT_LEN + 4 + WEFT_STORE_MAX_KEY + 1];
    int n = snprintf(full, sizeof(full), "%s%s%s", c->root, dir, prefix);
    while (n > 0 && (unsigned char)full[n - 1] == 0xff) {
        n--;
    }
    full[n - 1] = (char)((unsigned char)full[n - 1] + 1);
    char *b = malloc(WEFT__B64_LEN((size_t)n) + 1);
    if (b != NULL) {
        weft__b64_encode(full, (size_t)n, b);
    }
    return b;
}

static char *b64_val(const void *val, size_t len)
{
    char *b = malloc(WEFT__B64_LEN(len) + 1);
    if (b != NULL) {
        weft__b64_encode(val, len, b);
    }
    return b;
}

/* printf into a malloc'ed string. */
static char *fmt(size_t *len, const char *f, ...) __attribute__((format(printf, 2, 3)));
static char *fmt(size_t *len, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s != NULL) {
        va_start(ap, f);
        vsnprintf(s, (size_t)n + 1, f, ap);
        va_end(ap);
        *len = (size_t)n;
    }
    return s;
}

/* POSTs a body made by fmt (NULL: no memory) and frees it. */
static weft_status_t post_owned(etcd_client_t *c, const char *path, char *body, size_t blen,
                                weft_etcd_answer_t *a, weft_json_t *doc, bool *uncertain)
{
    if (body == NULL) {
        *a = (weft_etcd_answer_t){0};
        return WEFT_ERR_NO_MEMORY;
    }
    weft_status_t st = post(c, path, body, blen, a, doc, uncertain);
    free(body);
    return st;
}

static void done(weft_etcd_answer_t *a, weft_json_t *doc)
{
    weft__json_free(doc);
    free(a->p);
}

/* ---- key calls ---- */

/* A request whose answer says nothing but that it was done: @p body is consumed. */
static weft_status_t simple(etcd_client_t *c, const char *path, char *body, size_t blen)
{
    weft_etcd_answer_t a;
    weft_json_t doc;
    weft_status_t st = post_owned(c, path, body, blen, &a, &doc, NULL);
    if (st == WEFT_OK) {
        done(&a, &doc);
    }
    return st;
}

static weft_status_t etcd_set(weft_store_client_t *bc, const char *key, const void *val, size_t len)
{
    etcd_client_t *c = etcd(bc);
    char *k = b64_key(c, "k/", key), *v = b64_val(val, len);
    size_t blen = 0;
    char *body =
        k != NULL && v != NULL ? fmt(&blen, "{\"key\":\"%s\",\"value\":\"%s\"}", k, v) : NULL;
    free(k);
    free(v);
    return simple(c, "/v3/kv/put", body, blen);
}

static weft_status_t etcd_delete(weft_store_client_t *bc, const char *key)
{
    etcd_client_t *c = etcd(bc);
    char *k = b64_key(c, "k/", key);
    size_t blen = 0;
    char *body = k != NULL ? fmt(&blen, "{\"key\":\"%s\"}", k) : NULL;
    free(k);
    return simple(c, "/v3/kv/deleterange", body, blen);
}

/* Logs what a decoder of etcd_answer.h refused in answer to @p what (WEFT_ERR_PROTOCOL;
 * other statuses pass through quietly). */
static weft_status_t refused(etcd_client_t *c, weft_status_t st, const char *what)
{
    if (st == WEFT_ERR_PROTOCOL) {
        WEFT_ERROR(c->base.lg, "store %s: a malformed answer to %s", c->base.addr, what);
    }
    return st;
}

/* Range of one key: WEFT_OK and its value, or WEFT_INPROGRESS and the revision to watch
 * from. */
static weft_status_t range_one(etcd_client_t *c, const char *key, uint8_t **val, size_t *len,
                               int64_t *rev)
{
    char *k = b64_key(c, "k/", key);
    size_t blen = 0;
    char *body = k != NULL ? fmt(&blen, "{\"key\":\"%s\"}", k) : NULL;
    free(k);
    weft_etcd_answer_t a;
    weft_json_t doc;
    weft_status_t st = post_owned(c, "/v3/kv/range", body, blen, &a, &doc, NULL);
    if (st != WEFT_OK) {
        return st;
    }
    st = refused(c, weft__etcd_range_one(&doc, val, len, rev), "a range of one key");
    done(&a, &doc);
    return st;
}

/* ---- watch streams ---- */

/* A get's wait: the first PUT of the key. */
typedef struct get_wait {
    uint8_t *val;
    size_t len;
    weft_status_t st;
} get_wait_t;

static bool on_get_event(void *arg, const weft_json_t *doc)
{
    get_wait_t *g = arg;
    g->st = weft__etcd_get_event(doc, &g->val, &g->len);
    return g->st == WEFT_INPROGRESS;
}

/* Watches @p key from @p rev until it is put or @p deadline passes (WEFT_ERR_TIMEOUT);
 * WEFT_INPROGRESS: the stream broke, look again. */
static weft_status_t watch_key(etcd_client_t *c, const char *key, int64_t rev, uint64_t deadline,
                               uint8_t **val, size_t *len)
{
    char *k = b64_key(c, "k/", key);
    size_t blen = 0;
    char *body =
        k != NULL ? fmt(&blen, "{\"create_request\":{\"key\":\"%s\",\"start_revision\":\"%lld\"}}",
                        k, (long long)rev)
                  : NULL;
    free(k);
    CURL *h = body != NULL ? take_handle(c) : NULL;
    if (h == NULL) {
        free(body);
        return WEFT_ERR_NO_MEMORY;
    }
    get_wait_t g = {.st = WEFT_INPROGRESS};
    weft_etcd_stream_t s = {.fn = on_get_event, .arg = &g};
    char url[320];
    int e = atomic_load(&c->cur);
    uint64_t now = weft__now_ms();
    setup(c, h, e, "/v3/watch", body, blen, (long)(deadline > now ? deadline - now : 1), &s.buf,
          url, sizeof(url));
    c->curl->easy_setopt(h, WEFT__CURLOPT_WRITEFUNCTION, weft__etcd_on_stream);
    c->curl->easy_setopt(h, WEFT__CURLOPT_WRITEDATA, &s);
    atomic_fetch_add(&c->requests, 1);
    CURLcode rc = c->curl->easy_perform(h);
    give_handle(c, h);
    free(body);
    free(s.buf.p);
    if (s.stopped) {
        if (g.st == WEFT_OK) {
            *val = g.val;
            *len = g.len;
        }
        return refused(c, g.st, "a watch of one key");
    }
    if (rc == WEFT__CURLE_OPERATION_TIMEDOUT && weft__now_ms() >= deadline) {
        return WEFT_ERR_TIMEOUT;
    }
    if (s.malformed) {
        WEFT_ERROR(c->base.lg, "store %s: a malformed watch message", c->base.addr);
        return WEFT_ERR_PROTOCOL;
    }
    int next = (e + 1) % c->nend; /* this endpoint failed us: the next one */
    atomic_compare_exchange_strong(&c->cur, &e, next);
    return WEFT_INPROGRESS;
}

static weft_status_t etcd_get(weft_store_client_t *bc, const char *key, int timeout_ms, void **val,
                              size_t *len)
{
    etcd_client_t *c = etcd(bc);
    uint64_t deadline = weft__now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint8_t *v = NULL;
        size_t n = 0;
        int64_t rev = 0;
        weft_status_t st = range_one(c, key, &v, &n, &rev);
        if (st == WEFT_INPROGRESS) {
            if (weft__now_ms() >= deadline) {
                return WEFT_ERR_TIMEOUT;
            }
            st = watch_key(c, key, rev + 1, deadline, &v, &n);
            if (st == WEFT_INPROGRESS) {
                nap_ms(50); /* the stream broke: look again, at the next endpoint */
                continue;
            }
        }
        if (st == WEFT_OK) {
            *val = v;
            *len = n;
        }
        return st;
    }
}

/* ---- transactions ---- */

/* A transaction that creates @p key (compare create_revision == 0) or, given @p mod_rev > 0,
 * replaces it at that revision, writing this client's marker too; on failure it reads
 * the key and the marker (*out: weft__etcd_txn). */
typedef weft_etcd_txn_out_t txn_out_t;

static weft_status_t txn(etcd_client_t *c, const char *key, int64_t mod_rev, const void *val,
                         size_t len, uint64_t seq, txn_out_t *out, bool *uncertain)
{
    char seqs[24];
    int sn = snprintf(seqs, sizeof(seqs), "%llu", (unsigned long long)seq);
    char *k = b64_key(c, "k/", key), *v = b64_val(val, len), *m = b64_val(c->mark, strlen(c->mark));
    char *ms = b64_val(seqs, (size_t)sn);
    size_t blen = 0;
    char *body = k != NULL && v != NULL && m != NULL && ms != NULL
                     ? fmt(&blen,
                           "{\"compare\":[{\"target\":\"%s\",\"key\":\"%s\",\"%s\":\"%lld\"}],"
                           "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}},"
                           "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}],"
                           "\"failure\":[{\"request_range\":{\"key\":\"%s\"}},"
                           "{\"request_range\":{\"key\":\"%s\"}}]}",
                           mod_rev > 0 ? "MOD" : "CREATE", k,
                           mod_rev > 0 ? "mod_revision" : "create_revision", (long long)mod_rev, k,
                           v, m, ms, k, m)
                     : NULL;
    free(k);
    free(v);
    free(m);
    free(ms);
    weft_etcd_answer_t a;
    weft_json_t doc;
    weft_status_t st = post_owned(c, "/v3/kv/txn", body, blen, &a, &doc, uncertain);
    if (st != WEFT_OK) {
        return st;
    }
    st = refused(c, weft__etcd_txn(&doc, seqs, out), "a transaction");
    done(&a, &doc);
    return st;
}

static weft_status_t etcd_set_nx(weft_store_client_t *bc, const char *key, const void *val,
                                 size_t len, void **winner, size_t *winner_len, int *created)
{
    etcd_client_t *c = etcd(bc);
    uint64_t seq = atomic_fetch_add(&c->seq, 1) + 1;
    for (int tries = 0;; tries++) {
        txn_out_t o;
        bool uncertain = false;
        weft_status_t st = txn(c, key, 0, val, len, seq, &o, &uncertain);
        if (st != WEFT_OK) {
            return st;
        }
        if (o.won || o.ours) { /* ours: a try whose answer was lost created it */
            free(o.cur);
            uint8_t *w = malloc(len + 1);
            if (w == NULL) {
                return WEFT_ERR_NO_MEMORY;
            }
            if (len > 0) {
                memcpy(w, val, len);
            }
            w[len] = '\0';
            *winner = w;
            *winner_len = len;
            if (created != NULL) {
                *created = 1;
            }
            return WEFT_OK;
        }
        if (o.cur != NULL) {
            *winner = o.cur;
            *winner_len = o.cur_len;
            if (created != NULL) {
                *created = 0;
            }
            return WEFT_OK;
        }
        if (tries > 100) { /* deleted between every compare and read: give up */
            return WEFT_ERR_IO;
        }
    }
}

static weft_status_t etcd_add(weft_store_client_t *bc, const char *key, int64_t delta,
                              int64_t *result)
{
    etcd_client_t *c = etcd(bc);
    uint64_t seq = atomic_fetch_add(&c->seq, 1) + 1;
    int64_t cur = 0, rev = 0, want = delta;
    for (;;) {
        char buf[24];
        int n = snprintf(buf, sizeof(buf), "%lld", (long long)want);
        txn_out_t o;
        bool uncertain = false;
        weft_status_t st = txn(c, key, rev, buf, (size_t)n, seq, &o, &uncertain);
        if (st != WEFT_OK) {
            return st;
        }
        if (o.won || o.ours) { /* ours: the lost answer of the last try, which wrote want */
            free(o.cur);
            if (result != NULL) {
                *result = want;
            }
            return WEFT_OK;
        }
        /* Another add came first: start again from what the key holds now. */
        rev = 0;
        cur = 0;
        if (o.cur != NULL) {
            char *end;
            errno = 0;
            long long v = strtoll((const char *)o.cur, &end, 10);
            bool ok = o.cur_len > 0 && end == (char *)o.cur + o.cur_len && errno == 0;
            free(o.cur);
            if (!ok) {
                WEFT_ERROR(c->base.lg, "store %s: %s does not hold an integer", c->base.addr, key);
                return WEFT_ERR_PROTOCOL;
            }
            cur = v;
            rev = o.cur_rev;
        }
        want = (int64_t)((uint64_t)cur + (uint64_t)delta);
    }
}

/* ---- leases ---- */

/* Puts the notice of the lease's key, bound to lease @p id (0: to none). */
static weft_status_t put_notice(etcd_client_t *c, int64_t id)
{
    char *k = b64_key(c, "n/", c->lease_key), *v = b64_val(c->lease_val, c->lease_vlen);
    size_t blen = 0;
    char *body = k != NULL && v != NULL
                     ? fmt(&blen, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}", k, v,
                           (long long)id)
                     : NULL;
    free(k);
    free(v);
    return simple(c, "/v3/kv/put", body, blen);
}

/* Disarms the lease quietly: the notice is detached from it (a watcher then takes its
 * deletion for no lapse), deleted, and the lease revoked. Lease lock held. */
static weft_status_t disarm(etcd_client_t *c)
{
    if (c->lease_id == 0) {
        return WEFT_OK;
    }
    weft_status_t st = put_notice(c, 0);
    if (st == WEFT_OK) {
        char *k = b64_key(c, "n/", c->lease_key);
        size_t blen = 0;
        char *body = k != NULL ? fmt(&blen, "{\"key\":\"%s\"}", k) : NULL;
        free(k);
        st = simple(c, "/v3/kv/deleterange", body, blen);
    }
    if (st == WEFT_OK) {
        size_t blen = 0;
        char *body = fmt(&blen, "{\"ID\":\"%lld\"}", (long long)c->lease_id);
        st = simple(c, "/v3/lease/revoke", body, blen);
    }
    if (st == WEFT_OK) {
        c->lease_id = 0;
        free(c->lease_key);
        c->lease_key = NULL;
    }
    return st;
}

/* A new lease of @p ttl_ms (rounded up to seconds; etcd raises it to its minimum). */
static weft_status_t grant(etcd_client_t *c, uint32_t ttl_ms)
{
    size_t blen = 0;
    char *body = fmt(&blen, "{\"TTL\":\"%u\"}", (ttl_ms + 999) / 1000);
    weft_etcd_answer_t a;
    weft_json_t doc;
    weft_status_t st = post_owned(c, "/v3/lease/grant", body, blen, &a, &doc, NULL);
    if (st != WEFT_OK) {
        return st;
    }
    int64_t id, ttl;
    st = refused(c, weft__etcd_grant(&doc, &id, &ttl), "a lease grant");
    if (st == WEFT_OK) {
        c->lease_id = id;
        c->lease_ttl_s = ttl;
        c->renewed_ms = weft__now_ms();
    }
    done(&a, &doc);
    return st;
}

/* Keeps the lease alive; false when it had lapsed already. */
static weft_status_t keepalive(etcd_client_t *c, bool *alive)
{
    size_t blen = 0;
    char *body = fmt(&blen, "{\"ID\":\"%lld\"}", (long long)c->lease_id);
    weft_etcd_answer_t a;
    weft_json_t doc;
    uint64_t sent = weft__now_ms();
    weft_status_t st = post_owned(c, "/v3/lease/keepalive", body, blen, &a, &doc, NULL);
    if (st != WEFT_OK) {
        return st;
    }
    *alive = weft__etcd_keepalive_alive(&doc);
    if (*alive) {
        c->renewed_ms = sent;
    }
    done(&a, &doc);
    return WEFT_OK;
}

static weft_status_t etcd_lease(weft_store_client_t *bc, const char *key, const void *val,
                                size_t len, uint32_t ttl_ms)
{
    etcd_client_t *c = etcd(bc);
    pthread_mutex_lock(&c->lease_lock);
    weft_status_t st = WEFT_OK;
    bool same_key = c->lease_id != 0 && strcmp(c->lease_key, key) == 0;
    if (ttl_ms == 0 || (c->lease_id != 0 && !same_key)) {
        st = disarm(c);
    }
    if (st != WEFT_OK || ttl_ms == 0) {
        pthread_mutex_unlock(&c->lease_lock);
        return st;
    }
    bool same_val =
        same_key && c->lease_vlen == len && (len == 0 || memcmp(c->lease_val, val, len) == 0);
    if (!same_val) {
        uint8_t *v = malloc(len + 1);
        char *k = same_key ? c->lease_key : strdup(key);
        if (v == NULL || k == NULL) {
            free(v);
            if (!same_key) {
                free(k);
            }
            pthread_mutex_unlock(&c->lease_lock);
            return WEFT_ERR_NO_MEMORY;
        }
        if (len > 0) {
            memcpy(v, val, len);
        }
        free(c->lease_val);
        c->lease_val = v;
        c->lease_vlen = len;
        c->lease_key = k;
    }
    bool alive = c->lease_id != 0;
    /* Renewals come every heartbeat; a keepalive every third of the TTL is enough. */
    if (alive && weft__now_ms() - c->renewed_ms >= (uint64_t)c->lease_ttl_s * 1000 / 3) {
        st = keepalive(c, &alive);
    }
    if (st == WEFT_OK && !alive) {
        st = grant(c, ttl_ms); /* the first call, or one after a lapse */
        same_val = false;
    }
    if (st == WEFT_OK && !same_val) {
        st = put_notice(c, c->lease_id);
    }
    pthread_mutex_unlock(&c->lease_lock);
    return st;
}

/* ---- the watch ---- */

/* A notice delivered: the set of its key that follows (from any watcher) is no new event. */
typedef struct suppress {
    char *key;
    uint8_t *val;
    size_t len;
} suppress_t;

struct etcd_watch {
    etcd_client_t *c;
    pthread_t thread;
    CURLM *multi;
    atomic_bool stop;
    char prefix[WEFT_STORE_MAX_KEY + 1];
    int64_t next_rev; /* to watch from */
    suppress_t sup[ETCD_MAX_SUPPRESS];
    int nsup;
};

static void push_event(etcd_client_t *c, char *key, uint8_t *val, size_t len)
{
    etcd_event_t *e = malloc(sizeof(*e));
    if (e == NULL) {
        free(key);
        free(val);
        return; /* the event is lost; nothing better to do without memory */
    }
    *e = (etcd_event_t){.key = key, .val = val, .vlen = len};
    pthread_mutex_lock(&c->ev_lock);
    if (c->ev_tail != NULL) {
        c->ev_tail->next = e;
    } else {
        c->ev_head = e;
    }
    c->ev_tail = e;
    (void)!write(c->pipe[1], "e", 1); /* full: it is readable anyway */
    pthread_mutex_unlock(&c->ev_lock);
}

/* Writes key = val unless the key exists (a lapsed lease's value, for later readers). */
static void publish_lapse(etcd_client_t *c, const char *key, const uint8_t *val, size_t len)
{
    char *k = b64_key(c, "k/", key), *v = b64_val(val, len);
    size_t blen = 0;
    char *body = k != NULL && v != NULL
                     ? fmt(&blen,
                           "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\","
                           "\"create_revision\":\"0\"}],\"success\":[{\"request_put\":"
                           "{\"key\":\"%s\",\"value\":\"%s\"}}]}",
                           k, k, v)
                     : NULL;
    free(k);
    free(v);
    (void)simple(c, "/v3/kv/txn", body, blen);
}

/* A put of @p key = @p val that only repeats a notice delivered already: drop it. */
static bool suppressed(etcd_watch_t *w, const char *key, const uint8_t *val, size_t len)
{
    for (int i = 0; i < w->nsup; i++) {
        suppress_t *s = &w->sup[i];
        if (strcmp(s->key, key) == 0 && s->len == len && memcmp(s->val, val, len) == 0) {
            free(s->key);
            free(s->val);
            *s = w->sup[--w->nsup];
            return true;
        }
    }
    return false;
}

static void remember(etcd_watch_t *w, const char *key, const uint8_t *val, size_t len)
{
    if (w->nsup == ETCD_MAX_SUPPRESS) {
        free(w->sup[0].key);
        free(w->sup[0].val);
        w->sup[0] = w->sup[--w->nsup];
    }
    suppress_t s = {.key = strdup(key), .val = malloc(len + 1), .len = len};
    if (s.key == NULL || s.val == NULL) {
        free(s.key);
        free(s.val);
        return;
    }
    memcpy(s.val, val, len);
    w->sup[w->nsup++] = s;
}

/* One event of the stream. False: malformed. */
static bool on_watch_event(etcd_watch_t *w, const weft_json_t *doc, int ev)
{
    etcd_client_t *c = w->c;
    weft_etcd_event_t e;
    if (!weft__etcd_watch_event(c->root, doc, ev, &e)) {
        return false;
    }
    w->next_rev = e.rev + 1 > w->next_rev ? e.rev + 1 : w->next_rev;
    if (e.kind == WEFT__ETCD_EV_PUT) {
        if (e.version == 1 && suppressed(w, e.key, e.val, e.len)) {
            free(e.key);
            free(e.val);
        } else {
            push_event(c, e.key, e.val, e.len);
        }
    } else if (e.kind == WEFT__ETCD_EV_LAPSE) {
        remember(w, e.key, e.val, e.len);
        publish_lapse(c, e.key, e.val, e.len);
        push_event(c, e.key, e.val, e.len);
    }
    return true;
}

static bool on_watch_message(void *arg, const weft_json_t *doc)
{
    etcd_watch_t *w = arg;
    bool canceled;
    int r = weft__etcd_watch_result(doc, &canceled);
    if (r < 0 || canceled) {
        return false;
    }
    int ev;
    for (size_t i = 0; (ev = weft__json_item(doc, weft__json_get(doc, r, "events"), i)) >= 0; i++) {
        if (!on_watch_event(w, doc, ev)) {
            return false;
        }
    }
    return !atomic_load(&w->stop);
}

/* The keys under the prefix now, as events; w->next_rev the revision after. */
static weft_status_t list_existing(etcd_watch_t *w)
{
    etcd_client_t *c = w->c;
    char *k = b64_key(c, "k/", w->prefix), *end = b64_prefix_end(c, "k/", w->prefix);
    size_t blen = 0;
    char *body = k != NULL && end != NULL
                     ? fmt(&blen, "{\"key\":\"%s\",\"range_end\":\"%s\"}", k, end)
                     : NULL;
    free(k);
    free(end);
    weft_etcd_answer_t a;
    weft_json_t doc;
    weft_status_t st = post_owned(c, "/v3/kv/range", body, blen, &a, &doc, NULL);
    if (st != WEFT_OK) {
        return st;
    }
    int64_t rev;
    if (!weft__etcd_header_rev(&doc, 0, &rev)) {
        st = WEFT_ERR_PROTOCOL;
    }
    int kv;
    for (size_t i = 0;
         st == WEFT_OK && (kv = weft__json_item(&doc, weft__json_get(&doc, 0, "kvs"), i)) >= 0;
         i++) {
        char *key;
        uint8_t *val;
        size_t len;
        if (!weft__etcd_kv_entry(c->root, &doc, kv, "k/", &key, &val, &len)) {
            st = WEFT_ERR_PROTOCOL;
            break;
        }
        push_event(c, key, val, len);
    }
    if (st == WEFT_OK) {
        w->next_rev = rev + 1;
    } else if (st == WEFT_ERR_PROTOCOL) {
        WEFT_ERROR(c->base.lg, "store %s: a malformed listing of %s", c->base.addr, w->prefix);
    }
    done(&a, &doc);
    return st;
}

/* One streamed watch at the current endpoint until it breaks or the watch stops. */
static void stream_once(etcd_watch_t *w, bool *malformed)
{
    etcd_client_t *c = w->c;
    char *k = b64_key(c, "k/", w->prefix), *end = b64_prefix_end(c, "k/", w->prefix);
    char *nk = b64_key(c, "n/", w->prefix), *nend = b64_prefix_end(c, "n/", w->prefix);
    size_t blen = 0;
    char *body = k != NULL && end != NULL && nk != NULL && nend != NULL
                     ? fmt(&blen,
                           "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\","
                           "\"start_revision\":\"%lld\"}}\n"
                           "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\","
                           "\"start_revision\":\"%lld\",\"prev_kv\":true}}\n",
                           k, end, (long long)w->next_rev, nk, nend, (long long)w->next_rev)
                     : NULL;
    free(k);
    free(end);
    free(nk);
    free(nend);
    CURL *h = body != NULL ? c->curl->easy_init() : NULL;
    if (h == NULL) {
        free(body);
        nap_ms(100);
        return;
    }
    weft_etcd_stream_t s = {.fn = on_watch_message, .arg = w};
    char url[320];
    int e = atomic_load(&c->cur);
    setup(c, h, e, "/v3/watch", body, blen, 0L, &s.buf, url, sizeof(url));
    c->curl->easy_setopt(h, WEFT__CURLOPT_WRITEFUNCTION, weft__etcd_on_stream);
    c->curl->easy_setopt(h, WEFT__CURLOPT_WRITEDATA, &s);
    atomic_fetch_add(&c->requests, 1);
    c->curl->multi_add_handle(w->multi, h);
    int running = 1;
    while (running > 0 && !atomic_load(&w->stop)) {
        c->curl->multi_perform(w->multi, &running);
        if (running > 0) {
            c->curl->multi_poll(w->multi, NULL, 0, 1000, NULL);
        }
    }
    c->curl->multi_remove_handle(w->multi, h);
    c->curl->easy_cleanup(h);
    free(body);
    free(s.buf.p);
    *malformed = s.malformed || (s.stopped && !atomic_load(&w->stop));
    if (!atomic_load(&w->stop)) { /* it broke: the next endpoint */
        int next = (e + 1) % c->nend;
        atomic_compare_exchange_strong(&c->cur, &e, next);
    }
}

/* The watch is over for good: next_event says so. */
static void watch_fail(etcd_client_t *c)
{
    pthread_mutex_lock(&c->ev_lock);
    c->watch_failed = true;
    (void)!write(c->pipe[1], "x", 1);
    pthread_mutex_unlock(&c->ev_lock);
}

static void *watch_main(void *arg)
{
    etcd_watch_t *w = arg;
    etcd_client_t *c = w->c;
    uint64_t quiet_since = weft__now_ms();
    unsigned pause = 20;
    while (!atomic_load(&w->stop)) {
        bool malformed = false;
        uint64_t began = weft__now_ms();
        stream_once(w, &malformed);
        if (atomic_load(&w->stop)) {
            break;
        }
        if (malformed) {
            /* A canceled watch (its revision compacted) or a message we cannot read. */
            WEFT_ERROR(c->base.lg, "store %s: the watch of %s broke (canceled or malformed)",
                       c->base.addr, w->prefix);
            break;
        }
        uint64_t now = weft__now_ms();
        if (now - began > 2000) { /* it ran a while: a fresh failure */
            quiet_since = now;
            pause = 20;
        }
        if (now - quiet_since > ETCD_RETRY_MS || !usable(c)) {
            if (usable(c)) {
                lost(c, "the watch", "no etcd endpoint kept its stream");
            }
            break;
        }
        nap_ms(pause);
        pause = pause < 400 ? pause * 2 : 500;
    }
    if (!atomic_load(&w->stop)) {
        watch_fail(c);
    }
    return NULL;
}

static void watch_stop(etcd_watch_t *w)
{
    if (w == NULL) {
        return;
    }
    atomic_store(&w->stop, true);
    w->c->curl->multi_wakeup(w->multi);
    pthread_join(w->thread, NULL);
    w->c->curl->multi_cleanup(w->multi);
    for (int i = 0; i < w->nsup; i++) {
        free(w->sup[i].key);
        free(w->sup[i].val);
    }
    free(w);
}

static weft_status_t etcd_watch(weft_store_client_t *bc, const char *prefix)
{
    etcd_client_t *c = etcd(bc);
    watch_stop(c->watch); /* a second watch replaces the first */
    c->watch = NULL;
    etcd_watch_t *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    w->c = c;
    snprintf(w->prefix, sizeof(w->prefix), "%s", prefix);
    weft_status_t st = list_existing(w);
    if (st == WEFT_OK && (w->multi = c->curl->multi_init()) == NULL) {
        st = WEFT_ERR_NO_MEMORY;
    }
    if (st == WEFT_OK && pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        c->curl->multi_cleanup(w->multi);
        st = WEFT_ERR_NO_MEMORY;
    }
    if (st != WEFT_OK) {
        free(w);
        return st;
    }
    c->watch = w;
    return WEFT_OK;
}

static weft_status_t etcd_next_event(weft_store_client_t *bc, int timeout_ms, char **key,
                                     void **val, size_t *len)
{
    etcd_client_t *c = etcd(bc);
    if (c->watch == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    uint64_t deadline = weft__now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        if (!usable(c)) {
            return WEFT_ERR_IO;
        }
        pthread_mutex_lock(&c->ev_lock);
        etcd_event_t *e = c->ev_head;
        if (e != NULL) {
            c->ev_head = e->next;
            if (c->ev_head == NULL) {
                c->ev_tail = NULL;
            }
        }
        bool failed = c->watch_failed;
        if (c->ev_head == NULL && !failed) {
            char drain[64];
            while (read(c->pipe[0], drain, sizeof(drain)) > 0) {
            }
        }
        pthread_mutex_unlock(&c->ev_lock);
        if (e != NULL) {
            *key = e->key;
            *val = e->val;
            *len = e->vlen;
            free(e);
            return WEFT_OK;
        }
        if (failed) {
            atomic_store(&c->broken, true);
            return WEFT_ERR_IO;
        }
        uint64_t now = weft__now_ms();
        if (now >= deadline) {
            return WEFT_INPROGRESS;
        }
        uint64_t left = deadline - now;
        struct pollfd p = {.fd = c->pipe[0], .events = POLLIN};
        poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
    }
}

/* ---- scans ---- */

#define ETCD_SCAN_POLL_MS 20 /* between the counts of a scan waiting for its min_count */
#define ETCD_SCAN_LIMIT 256  /* keys asked for by a page's first range request */
#define ETCD_SCAN_MAX_LIMIT 8192

/*
 * A scan: the count of keys under the prefix is polled (a count_only range) every
 * ETCD_SCAN_POLL_MS until it reaches min_count or the timeout passes; then one page is
 * read with range requests from the resume key on, at one revision, until the page's
 * bytes are spent or no key is left. Nothing runs between the calls: scan_wait makes the
 * requests, so a scan in flight holds no request of its own.
 */
typedef struct etcd_scan {
    weft_store_scan_t base; /* first: the client */
    uint32_t min_count, max_bytes;
    uint64_t deadline_ms; /* of the wait for min_count */
    char *prefix, *after;
    char text[]; /* the prefix and a NUL, the resume key and a NUL */
} etcd_scan_t;

static weft_status_t etcd_scan_start(weft_store_client_t *bc, const weft_store_scan_args_t *args,
                                     weft_store_scan_t **scan)
{
    etcd_client_t *c = etcd(bc);
    if (!usable(c)) {
        return WEFT_ERR_IO;
    }
    const char *after = args->after != NULL ? args->after : "";
    size_t plen = strlen(args->prefix), alen = strlen(after);
    etcd_scan_t *q = malloc(sizeof(*q) + plen + alen + 2);
    if (q == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    q->base.c = bc;
    q->min_count = args->min_count;
    q->max_bytes = args->max_bytes;
    q->deadline_ms = weft__now_ms() + (uint64_t)args->timeout_ms;
    q->prefix = q->text;
    q->after = q->text + plen + 1;
    memcpy(q->prefix, args->prefix, plen + 1);
    memcpy(q->after, after, alen + 1);
    *scan = &q->base;
    return WEFT_OK;
}

/* How many keys are under @p prefix now (a count_only range). */
static weft_status_t count_under(etcd_client_t *c, const char *prefix, int64_t *count)
{
    char *k = b64_key(c, "k/", prefix), *end = b64_prefix_end(c, "k/", prefix);
    size_t blen = 0;
    char *body =
        k != NULL && end != NULL
            ? fmt(&blen, "{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true}", k, end)
            : NULL;
    free(k);
    free(end);
    weft_etcd_answer_t a;
    weft_json_t doc;
    weft_status_t st = post_owned(c, "/v3/kv/range", body, blen, &a, &doc, NULL);
    if (st != WEFT_OK) {
        return st;
    }
    if ((st = weft__etcd_count(&doc, count)) == WEFT_ERR_PROTOCOL) {
        WEFT_ERROR(c->base.lg, "store %s: a malformed count of %s", c->base.addr, prefix);
        st = WEFT_ERR_PROTOCOL;
    }
    done(&a, &doc);
    return st;
}

/*
 * One page of @p q: range requests from just after the resume key (the key and a NUL) to
 * the prefix's range end, in etcd's order (ascending bytes of the key, which is the
 * store's), each with a limit (halved when an answer was too large, then sized by the
 * answers so far), at the revision of the first, until the page's bytes are spent (more)
 * or etcd has no more.
 */
static weft_status_t scan_page(etcd_client_t *c, const etcd_scan_t *q, weft_store_page_t *page)
{
    size_t budget = q->max_bytes > 0 && q->max_bytes < WEFT__STORE_MAX_PAGE ? q->max_bytes
                                                                            : WEFT__STORE_MAX_PAGE;
    size_t plen = strlen(q->prefix), rl = strlen(c->root);
    /* The first etcd key to read: root "k/" and the prefix, or the resume key and a NUL. */
    char from[WEFT__ETCD_ROOT_LEN + 2 + WEFT_STORE_MAX_KEY + 2];
    size_t flen = rl + 2;
    memcpy(from, c->root, rl);
    memcpy(from + rl, "k/", 2);
    if (q->after[0] != '\0' && strcmp(q->after, q->prefix) >= 0) {
        size_t alen = strlen(q->after);
        memcpy(from + flen, q->after, alen);
        flen += alen;
        from[flen++] = '\0';
    } else {
        memcpy(from + flen, q->prefix, plen);
        flen += plen;
    }
    char *end = b64_prefix_end(c, "k/", q->prefix);
    if (end == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    weft_etcd_page_acc_t acc = {0};
    int64_t rev = 0;
    size_t limit = ETCD_SCAN_LIMIT;
    bool more = false, finished = false;
    weft_status_t st = WEFT_OK;
    while (st == WEFT_OK && !finished) {
        char k[WEFT__B64_LEN(sizeof(from)) + 1];
        weft__b64_encode(from, flen, k);
        char revs[48] = "";
        if (rev > 0) {
            snprintf(revs, sizeof(revs), ",\"revision\":\"%lld\"", (long long)rev);
        }
        size_t blen = 0;
        char *body = fmt(&blen, "{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":\"%zu\"%s}", k, end,
                         limit, revs);
        weft_etcd_answer_t a;
        weft_json_t doc;
        if (body == NULL) {
            st = WEFT_ERR_NO_MEMORY;
            break;
        }
        st = post_quiet(c, "/v3/kv/range", body, blen, &a, &doc, NULL, true);
        free(body);
        if (st == WEFT_ERR_NO_MEMORY && a.too_big && limit > 1) {
            limit /= 2;
            st = WEFT_OK;
            continue;
        }
        if (st != WEFT_OK) {
            break;
        }
        if (rev == 0 && !weft__etcd_header_rev(&doc, 0, &rev)) {
            st = WEFT_ERR_PROTOCOL;
        }
        size_t got = 0;
        bool full = false, etcd_more = false;
        if (st == WEFT_OK) {
            st = weft__etcd_page_add(c->root, &doc, q->prefix, q->after, budget, &acc, &got, &full,
                                     &etcd_more);
        }
        more = finished = full;
        if (st == WEFT_OK && !finished) {
            if (got == 0 || !etcd_more) {
                finished = true; /* the prefix is read to its end */
            } else {
                const char *last = acc.keys[acc.n - 1];
                size_t llen = strlen(last);
                flen = rl + 2;
                memcpy(from + flen, last, llen);
                flen += llen;
                from[flen++] = '\0';
                /* As many keys as fit in half an answer's bound and in what is left of the
                 * page, by the sizes seen so far. */
                size_t by_answer = WEFT__ETCD_MAX_ANSWER / 2 / (a.len / got + 1);
                size_t by_page = (budget - acc.used) / (acc.used / acc.n + 1) + 1;
                limit = by_answer < by_page ? by_answer : by_page;
                limit = limit < 1 ? 1 : limit > ETCD_SCAN_MAX_LIMIT ? ETCD_SCAN_MAX_LIMIT : limit;
            }
        }
        if (st == WEFT_ERR_PROTOCOL) {
            WEFT_ERROR(c->base.lg, "store %s: a malformed range answer in a scan of '%s'",
                       c->base.addr, q->prefix);
        }
        done(&a, &doc);
    }
    free(end);
    if (st == WEFT_OK) {
        st = weft__etcd_acc_page(&acc, more, page);
    }
    weft__etcd_acc_free(&acc);
    return st;
}

static weft_status_t etcd_scan_wait(weft_store_scan_t *bq, int wait_ms, weft_store_page_t *page)
{
    etcd_scan_t *q = (etcd_scan_t *)bq;
    etcd_client_t *c = etcd(bq->c);
    uint64_t until = weft__now_ms() + (uint64_t)wait_ms;
    weft_status_t st = WEFT_OK;
    while (q->min_count > 0) {
        int64_t n;
        st = count_under(c, q->prefix, &n);
        if (st != WEFT_OK || n >= (int64_t)q->min_count) {
            break;
        }
        uint64_t now = weft__now_ms();
        if (now >= q->deadline_ms) {
            st = WEFT_ERR_TIMEOUT;
            break;
        }
        if (now >= until) {
            return WEFT_INPROGRESS;
        }
        uint64_t nap = ETCD_SCAN_POLL_MS;
        nap = q->deadline_ms - now < nap ? q->deadline_ms - now : nap;
        nap = until - now < nap ? until - now : nap;
        nap_ms(nap);
    }
    if (st == WEFT_OK) {
        st = scan_page(c, q, page);
    }
    free(q);
    return st;
}

static void etcd_scan_cancel(weft_store_scan_t *bq)
{
    free(bq); /* nothing of it is in flight */
}

static uint64_t etcd_requests(const weft_store_client_t *bc)
{
    return atomic_load(&((const etcd_client_t *)bc)->requests);
}

/* ---- the handle ---- */

static int etcd_fd(const weft_store_client_t *bc)
{
    return ((const etcd_client_t *)bc)->pipe[0];
}

static void etcd_fence(weft_store_client_t *bc, const struct timespec *deadline)
{
    (void)deadline; /* no OpenSSL state of ours to protect: plain HTTP */
    atomic_store(&etcd(bc)->fenced, true);
}

static bool etcd_fenced(weft_store_client_t *bc)
{
    return atomic_load(&etcd(bc)->fenced);
}

static void etcd_share_health(weft_store_client_t *bc, weft_store_health_t *h)
{
    etcd(bc)->health = h;
}

static void etcd_close(weft_store_client_t *bc)
{
    etcd_client_t *c = etcd(bc);
    watch_stop(c->watch);
    if (atomic_load(&c->seq) > 0 && usable(c)) { /* this client's marker, best effort */
        char *m = b64_val(c->mark, strlen(c->mark));
        size_t blen = 0;
        char *body = m != NULL ? fmt(&blen, "{\"key\":\"%s\"}", m) : NULL;
        free(m);
        (void)simple(c, "/v3/kv/deleterange", body, blen);
    }
    /* An armed lease is left to lapse, as a native connection's fires when it closes. */
    for (int i = 0; i < c->npool; i++) {
        c->curl->easy_cleanup(c->pool[i]);
    }
    for (int i = 0; i < c->nend; i++) {
        free(c->endpoints[i]);
    }
    while (c->ev_head != NULL) {
        etcd_event_t *e = c->ev_head;
        c->ev_head = e->next;
        free(e->key);
        free(e->val);
        free(e);
    }
    free(c->lease_key);
    free(c->lease_val);
    if (c->pipe[0] >= 0) {
        close(c->pipe[0]);
        close(c->pipe[1]);
    }
    pthread_mutex_destroy(&c->pool_lock);
    pthread_mutex_destroy(&c->lease_lock);
    pthread_mutex_destroy(&c->ev_lock);
    free(c);
}

static const weft_store_ops_t etcd_ops = {
    .size = sizeof(weft_store_ops_t),
    .set = etcd_set,
    .get = etcd_get,
    .add = etcd_add,
    .del = etcd_delete,
    .set_nx = etcd_set_nx,
    .lease = etcd_lease,
    .watch = etcd_watch,
    .next_event = etcd_next_event,
    .scan_start = etcd_scan_start,
    .scan_wait = etcd_scan_wait,
    .scan_cancel = etcd_scan_cancel,
    .requests = etcd_requests,
    .fd = etcd_fd,
    .fence = etcd_fence,
    .fenced = etcd_fenced,
    .close = etcd_close,
    .share_health = etcd_share_health,
};

/* "etcd://h1:2379,h2:2379": the endpoints. */
static bool parse_url(etcd_client_t *c, const char *url)
{
    const char *p = url + strlen(WEFT__STORE_ETCD_SCHEME);
    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        if (n == 0 || n > 255 || c->nend == ETCD_MAX_ENDPOINTS || memchr(p, ':', n) == NULL) {
            return false;
        }
        for (size_t i = 0; i < n; i++) { /* host:port, [v6]:port: nothing that bends a URL */
            if (strchr("/?#@ \t%\\", p[i]) != NULL || (unsigned char)p[i] < 0x21) {
                return false;
            }
        }
        if ((c->endpoints[c->nend] = strndup(p, n)) == NULL) {
            return false;
        }
        c->nend++;
        p += n;
        p += *p == ',' ? 1 : 0;
    }
    return c->nend > 0;
}

/* The job's root: "weft/" and 16 hex of HMAC-SHA256(data key, "etcd-namespace"), "/". */
static weft_status_t make_root(etcd_client_t *c, const char *token, const weft_store_cred_t *cred)
{
    uint8_t mac[32], nonce[8], data[32];
    static const char label[] = "etcd-namespace";
    weft_status_t st = token != NULL ? weft__store_data_key(token, data) : WEFT_OK;
    if (st == WEFT_OK) {
        st = weft__store_hmac_sha256(token != NULL ? data : cred->data_key, sizeof(data), label,
                                     sizeof(label) - 1, mac);
    }
    OPENSSL_cleanse(data, sizeof(data));
    if (st == WEFT_OK) {
        st = weft__store_random(nonce, sizeof(nonce));
    }
    if (st != WEFT_OK) {
        return st;
    }
    int n = snprintf(c->root, sizeof(c->root), "weft/");
    for (int i = 0; i < 8; i++) {
        n += snprintf(c->root + n, sizeof(c->root) - (size_t)n, "%02x", mac[i]);
    }
    snprintf(c->root + n, sizeof(c->root) - (size_t)n, "/");
    n = snprintf(c->mark, sizeof(c->mark), "%sm/", c->root);
    for (int i = 0; i < 8; i++) {
        n += snprintf(c->mark + n, sizeof(c->mark) - (size_t)n, "%02x", nonce[i]);
    }
    return WEFT_OK;
}

/* Reaches the cluster within @p timeout_ms (it may start late). */
static weft_status_t first_contact(etcd_client_t *c, int timeout_ms)
{
    uint64_t deadline = weft__now_ms() + (uint64_t)timeout_ms;
    CURL *h = take_handle(c);
    if (h == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    static const char body[] = "{\"key\":\"AA==\",\"limit\":\"1\"}";
    char url[320];
    weft_status_t st = WEFT_ERR_TIMEOUT;
    for (unsigned pause = 10;;) {
        weft_etcd_answer_t a = {0};
        int e = atomic_load(&c->cur);
        setup(c, h, e, "/v3/kv/range", body, sizeof(body) - 1, ETCD_REQ_TIMEOUT_MS, &a, url,
              sizeof(url));
        CURLcode rc = c->curl->easy_perform(h);
        long code = 0;
        c->curl->easy_getinfo(h, WEFT__CURLINFO_RESPONSE_CODE, &code);
        free(a.p);
        if (rc == WEFT__CURLE_OK && code == 200) {
            st = WEFT_OK;
            break;
        }
        atomic_store(&c->cur, (e + 1) % c->nend);
        if (weft__now_ms() >= deadline) {
            WEFT_ERROR(c->base.lg, "store %s: no etcd endpoint answered in %d ms (last: %s: %s)",
                       c->base.addr, timeout_ms, c->endpoints[e],
                       rc != WEFT__CURLE_OK ? c->curl->easy_strerror(rc) : "HTTP error");
            break;
        }
        nap_ms(pause);
        pause = pause < 200 ? pause * 2 : 200;
    }
    give_handle(c, h);
    return st;
}

weft_status_t weft__store_etcd_connect(const char *url, const char *token,
                                       const weft_store_cred_t *cred, int member, bool launcher,
                                       int timeout_ms, const weft_logger_t *lg,
                                       weft_store_client_t **client)
{
    (void)member; /* etcd cannot tell members apart: docs/store-protocol.md, "etcd backend" */
    (void)launcher;
    if (url == NULL || (token == NULL && cred == NULL) || (token != NULL && token[0] == '\0') ||
        timeout_ms < 0 || client == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    const weft_curl_t *curl = weft__curl(lg);
    if (curl == NULL) {
        return WEFT_ERR_UNSUPPORTED;
    }
    etcd_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    c->base.ops = &etcd_ops;
    c->base.lg = lg;
    snprintf(c->base.addr, sizeof(c->base.addr), "%s", url);
    c->curl = curl;
    c->pipe[0] = c->pipe[1] = -1;
    pthread_mutex_init(&c->pool_lock, NULL);
    pthread_mutex_init(&c->lease_lock, NULL);
    pthread_mutex_init(&c->ev_lock, NULL);
    weft_status_t st = WEFT_OK;
    if (!parse_url(c, url)) {
        WEFT_ERROR(lg, "store: '%s' is not etcd://HOST:PORT[,HOST:PORT...] (at most %d)", url,
                   ETCD_MAX_ENDPOINTS);
        st = WEFT_ERR_INVALID_ARG;
    }
    if (st == WEFT_OK) {
        st = make_root(c, token, cred);
    }
    if (st == WEFT_OK && pipe2(c->pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        WEFT_ERROR(lg, "store %s: pipe: %m", url);
        c->pipe[0] = c->pipe[1] = -1;
        st = WEFT_ERR_IO;
    }
    if (st == WEFT_OK) {
        st = first_contact(c, timeout_ms);
    }
    if (st != WEFT_OK) {
        etcd_close(&c->base);
        return st;
    }
    *client = &c->base;
    return WEFT_OK;
}
