/*
 * weft-etcd-check: the store client's calls against a store given by address (an etcd
 * cluster, etcd://..., or weft's own), driven by tests/comm/store/etcd_store.sh. Each
 * command prints what it checked and exits 0 when it held, 1 when not:
 *
 *   basic ADDR TOKEN               set, get, get-wait with a concurrent setter, get
 *                                  timeout, delete, set_nx raced by two threads, watch of
 *                                  a prefix (existing keys and later ones, each once)
 *   add ADDR TOKEN KEY N [MS]      N increments of KEY by 1, each value above the last
 *                                  (MS: a pause after each)
 *   get ADDR TOKEN KEY             prints KEY's value
 *   hold ADDR TOKEN KEY VAL TTL    holds a lease on KEY (renewed every 100 ms) until killed
 *   lapse ADDR TOKEN PREFIX KEY VAL SECONDS
 *                                  watches PREFIX until KEY = VAL arrives (once), then
 *                                  reads KEY = VAL on a fresh connection
 *   quiet ADDR TOKEN               a lease disarmed with ttl 0 is delivered to no watcher
 *   cost ADDR TOKEN N              times N sets, gets and adds (ADDR "native": an
 *                                  in-process weft store, TOKEN ignored)
 *   fanout ADDR TOKEN N set|lapse  N watchers of fail/, each a connection of its own;
 *                                  then fail/7 is set (weftrun's notice of a rank it
 *                                  reaped) or a lease on it is left to lapse (its holder
 *                                  closes): times each watcher's delivery (once each),
 *                                  counts the watchers' requests meanwhile (ADDR "native"
 *                                  as for cost)
 */
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/store/store.h"
#include "util/clock.h"

static weft_logger_t lg = {.level = WEFT_LOG_WARN};

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void nap(int ms)
{
    nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000},
              NULL);
}

static weft_store_client_t *conn(const char *addr, const char *token)
{
    weft_store_client_t *c;
    weft_status_t st = weft__store_connect(addr, token, 10000, &lg, &c);
    CHECK(st == WEFT_OK, "connect %s: %s", addr, weft_status_str(st));
    return c;
}

static void expect_value(weft_store_client_t *c, const char *key, int timeout_ms, const char *want)
{
    void *v;
    size_t n;
    weft_status_t st = weft__store_get(c, key, timeout_ms, &v, &n);
    CHECK(st == WEFT_OK, "get %s: %s", key, weft_status_str(st));
    CHECK(n == strlen(want) && memcmp(v, want, n) == 0, "get %s: '%.*s', not '%s'", key, (int)n,
          (char *)v, want);
    free(v);
}

typedef struct late {
    const char *addr, *token, *key, *val;
    int delay_ms;
} late_t;

static void *set_late(void *arg)
{
    late_t *l = arg;
    weft_store_client_t *c = conn(l->addr, l->token);
    nap(l->delay_ms);
    CHECK(weft__store_set(c, l->key, l->val, strlen(l->val)) == WEFT_OK, "late set");
    weft__store_close(c);
    return NULL;
}

typedef struct racer {
    const char *addr, *token;
    char val[16];
    int created;
    char winner[16];
} racer_t;

static void *race(void *arg)
{
    racer_t *r = arg;
    weft_store_client_t *c = conn(r->addr, r->token);
    void *w;
    size_t n;
    weft_status_t st = weft__store_set_nx(c, "race", r->val, strlen(r->val), &w, &n, &r->created);
    CHECK(st == WEFT_OK && n < sizeof(r->winner), "set_nx: %s", weft_status_str(st));
    memcpy(r->winner, w, n);
    r->winner[n] = '\0';
    free(w);
    weft__store_close(c);
    return NULL;
}

/* Takes events until @p want keys came or @p ms passed; counts each key seen. */
static int take_events(weft_store_client_t *w, const char **keys, int *seen, int nkeys, int ms)
{
    uint64_t until = weft__now_ms() + (uint64_t)ms;
    int got = 0;
    while (weft__now_ms() < until) {
        char *k;
        void *v;
        size_t n;
        weft_status_t st = weft__store_next_event(w, 100, &k, &v, &n);
        if (st == WEFT_INPROGRESS) {
            continue;
        }
        CHECK(st == WEFT_OK, "next_event: %s", weft_status_str(st));
        for (int i = 0; i < nkeys; i++) {
            if (strcmp(k, keys[i]) == 0) {
                seen[i]++;
                got++;
            }
        }
        free(k);
        free(v);
    }
    return got;
}

static int basic(const char *addr, const char *token)
{
    weft_store_client_t *c = conn(addr, token);
    CHECK(weft__store_set(c, "a/1", "one", 3) == WEFT_OK, "set");
    expect_value(c, "a/1", 0, "one");
    CHECK(weft__store_set(c, "a/1", "uno", 3) == WEFT_OK, "set again");
    expect_value(c, "a/1", 0, "uno");
    CHECK(weft__store_set(c, "empty", "", 0) == WEFT_OK, "set empty");
    expect_value(c, "empty", 0, "");
    void *v;
    size_t n;
    uint64_t t0 = weft__now_ms();
    CHECK(weft__store_get(c, "absent", 300, &v, &n) == WEFT_ERR_TIMEOUT, "get absent");
    CHECK(weft__now_ms() - t0 >= 290, "get absent waited its timeout");
    printf("set/get/timeout: ok\n");

    pthread_t t;
    late_t l = {addr, token, "late", "arrived", 500};
    pthread_create(&t, NULL, set_late, &l);
    t0 = weft__now_ms();
    expect_value(c, "late", 10000, "arrived");
    uint64_t waited = weft__now_ms() - t0;
    pthread_join(t, NULL);
    CHECK(waited >= 300 && waited < 5000, "get-wait took %" PRIu64 " ms", waited);
    printf("get-wait with a concurrent setter: ok (%" PRIu64 " ms)\n", waited);

    CHECK(weft__store_delete(c, "a/1") == WEFT_OK, "delete");
    CHECK(weft__store_get(c, "a/1", 0, &v, &n) == WEFT_ERR_TIMEOUT, "deleted key absent");
    printf("delete: ok\n");

    racer_t r[2] = {{addr, token, "red", 0, ""}, {addr, token, "blue", 0, ""}};
    pthread_t rt[2];
    for (int i = 0; i < 2; i++) {
        pthread_create(&rt[i], NULL, race, &r[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(rt[i], NULL);
    }
    CHECK(r[0].created + r[1].created == 1, "set_nx: %d and %d created", r[0].created,
          r[1].created);
    CHECK(strcmp(r[0].winner, r[1].winner) == 0, "set_nx winners %s, %s", r[0].winner, r[1].winner);
    CHECK(strcmp(r[0].winner, r[r[0].created ? 0 : 1].val) == 0, "the winner's value");
    printf("set_nx race: ok (%s won)\n", r[0].winner);

    int64_t x;
    CHECK(weft__store_add(c, "n", 5, &x) == WEFT_OK && x == 5, "add creates");
    CHECK(weft__store_add(c, "n", -2, &x) == WEFT_OK && x == 3, "add");
    CHECK(weft__store_get_i64(c, "n", 0, &x) == WEFT_OK && x == 3, "get_i64");
    printf("add/get_i64: ok\n");

    CHECK(weft__store_set(c, "w/old", "1", 1) == WEFT_OK, "set w/old");
    CHECK(weft__store_set(c, "wx", "1", 1) == WEFT_OK, "set wx");
    weft_store_client_t *w = conn(addr, token);
    CHECK(weft__store_watch(w, "w/") == WEFT_OK, "watch");
    CHECK(weft__store_set(c, "w/new", "2", 1) == WEFT_OK, "set w/new");
    CHECK(weft__store_set(c, "w/old", "3", 1) == WEFT_OK, "set w/old again");
    CHECK(weft__store_set(c, "wy", "1", 1) == WEFT_OK, "set wy");
    const char *keys[] = {"w/old", "w/new", "wx", "wy"};
    int seen[4] = {0};
    take_events(w, keys, seen, 4, 2000);
    CHECK(seen[0] == 2 && seen[1] == 1 && seen[2] == 0 && seen[3] == 0,
          "watch saw w/old %d, w/new %d, wx %d, wy %d times", seen[0], seen[1], seen[2], seen[3]);
    printf("watch of a prefix: ok (existing and later keys, each once)\n");
    weft__store_close(w);

    /* Scans: order, pages by bytes, the resume key, the wait for a count in slices. */
    for (int i = 9; i >= 0; i--) {
        char k[16], v[16];
        snprintf(k, sizeof(k), "s/%d", i);
        snprintf(v, sizeof(v), "v%d", i);
        CHECK(weft__store_set(c, k, v, strlen(v)) == WEFT_OK, "set %s", k);
    }
    CHECK(weft__store_set(c, "s", "x", 1) == WEFT_OK &&
              weft__store_set(c, "t/0", "x", 1) == WEFT_OK,
          "set s, t/0");
    uint64_t r0 = weft__store_requests(c);
    weft_store_page_t pg;
    weft_store_scan_args_t sa = {.prefix = "s/"};
    CHECK(weft__store_scan(c, &sa, &pg) == WEFT_OK, "scan s/");
    CHECK(pg.n == 10 && !pg.more, "scan s/: %zu keys, more %d", pg.n, pg.more);
    for (size_t i = 0; i < pg.n; i++) {
        char k[32], v[32];
        snprintf(k, sizeof(k), "s/%zu", i);
        snprintf(v, sizeof(v), "v%zu", i);
        CHECK(strcmp(pg.kv[i].key, k) == 0 && pg.kv[i].len == strlen(v) &&
                  strcmp(pg.kv[i].val, v) == 0,
              "scan entry %zu: %s = %s", i, pg.kv[i].key, (const char *)pg.kv[i].val);
    }
    weft__store_page_free(&pg);
    CHECK(weft__store_requests(c) > r0, "requests counted");
    char after[WEFT_STORE_MAX_KEY + 1] = "";
    int pages = 0, keys_read = 0;
    for (bool more = true; more; pages++) {
        weft_store_scan_args_t pa = {.prefix = "s/", .after = after, .max_bytes = 25};
        CHECK(weft__store_scan(c, &pa, &pg) == WEFT_OK, "scan page %d", pages);
        CHECK(pg.n >= 1 && pg.n <= 2, "page %d holds %zu keys", pages, pg.n);
        for (size_t i = 0; i < pg.n; i++, keys_read++) {
            char k[16];
            snprintf(k, sizeof(k), "s/%d", keys_read);
            CHECK(strcmp(pg.kv[i].key, k) == 0, "paged scan: %s for %s", pg.kv[i].key, k);
        }
        more = pg.more;
        snprintf(after, sizeof(after), "%s", pg.kv[pg.n - 1].key);
        weft__store_page_free(&pg);
    }
    CHECK(keys_read == 10 && pages == 5, "paged scan: %d keys in %d pages", keys_read, pages);
    weft_store_scan_args_t wa = {.prefix = "s/", .min_count = 11, .timeout_ms = 10000};
    weft_store_scan_t *q;
    late_t l2 = {addr, token, "s/late", "L", 400};
    pthread_create(&t, NULL, set_late, &l2);
    CHECK(weft__store_scan_start(c, &wa, &q) == WEFT_OK, "scan_start");
    int slices = 0;
    weft_status_t st;
    while ((st = weft__store_scan_wait(q, 50, &pg)) == WEFT_INPROGRESS) {
        slices++;
    }
    pthread_join(t, NULL);
    CHECK(st == WEFT_OK && pg.n == 11 && slices >= 2, "scan waited for 11: %s, %zu keys, %d slices",
          weft_status_str(st), pg.n, slices);
    CHECK(strcmp(pg.kv[10].key, "s/late") == 0, "the late key last");
    weft__store_page_free(&pg);
    weft_store_scan_args_t ta = {.prefix = "s/", .min_count = 100, .timeout_ms = 200};
    t0 = weft__now_ms();
    CHECK(weft__store_scan(c, &ta, &pg) == WEFT_ERR_TIMEOUT, "scan for 100 keys times out");
    CHECK(weft__now_ms() - t0 >= 190, "scan waited its timeout");
    CHECK(weft__store_scan_start(c, &ta, &q) == WEFT_OK, "scan_start to cancel");
    weft__store_scan_cancel(q);
    weft_store_scan_args_t ea = {.prefix = "nothing/"};
    CHECK(weft__store_scan(c, &ea, &pg) == WEFT_OK && pg.n == 0 && !pg.more, "empty scan");
    weft__store_page_free(&pg);
    printf("scan: ok (order, pages of a byte budget, resume key, count wait in %d slices, "
           "timeout, cancel)\n",
           slices);
    weft__store_close(c);
    return 0;
}

static int add_n(const char *addr, const char *token, const char *key, int n, int pause_ms)
{
    weft_store_client_t *c = conn(addr, token);
    int64_t last = 0;
    for (int i = 0; i < n; i++) {
        int64_t v;
        weft_status_t st = weft__store_add(c, key, 1, &v);
        CHECK(st == WEFT_OK, "add %d: %s", i, weft_status_str(st));
        CHECK(v > last, "add went from %" PRId64 " to %" PRId64, last, v);
        last = v;
        if (pause_ms > 0) {
            nap(pause_ms);
        }
    }
    weft__store_close(c);
    return 0;
}

static int hold(const char *addr, const char *token, const char *key, const char *val, int ttl)
{
    weft_store_client_t *c = conn(addr, token);
    for (;;) {
        weft_status_t st = weft__store_lease(c, key, val, strlen(val), (uint32_t)ttl);
        CHECK(st == WEFT_OK, "lease: %s", weft_status_str(st));
        printf("held\n");
        fflush(stdout);
        nap(100);
    }
}

static int lapse(const char *addr, const char *token, const char *prefix, const char *key,
                 const char *val, int seconds)
{
    weft_store_client_t *w = conn(addr, token);
    CHECK(weft__store_watch(w, prefix) == WEFT_OK, "watch");
    printf("watching\n");
    fflush(stdout);
    uint64_t t0 = weft__now_ms(), got_at = 0;
    int seen = 0;
    while (weft__now_ms() - t0 < (uint64_t)seconds * 1000 + 3000) {
        char *k;
        void *v;
        size_t n;
        weft_status_t st = weft__store_next_event(w, 100, &k, &v, &n);
        if (st == WEFT_OK) {
            if (strcmp(k, key) == 0) {
                CHECK(n == strlen(val) && memcmp(v, val, n) == 0, "notice value '%.*s'", (int)n,
                      (char *)v);
                seen++;
                got_at = got_at == 0 ? weft__now_ms() : got_at;
            }
            free(k);
            free(v);
        } else {
            CHECK(st == WEFT_INPROGRESS, "next_event: %s", weft_status_str(st));
        }
        if (got_at != 0 && weft__now_ms() - got_at > 3000) {
            break; /* long enough to see a duplicate */
        }
    }
    CHECK(seen == 1, "the notice came %d times", seen);
    weft__store_close(w);
    weft_store_client_t *c = conn(addr, token);
    expect_value(c, key, 0, val);
    weft__store_close(c);
    printf("lapse delivered once and readable: ok\n");
    return 0;
}

static int quiet(const char *addr, const char *token)
{
    weft_store_client_t *w = conn(addr, token), *c = conn(addr, token);
    CHECK(weft__store_watch(w, "q/") == WEFT_OK, "watch");
    CHECK(weft__store_lease(c, "q/x", "gone", 4, 1000) == WEFT_OK, "lease");
    CHECK(weft__store_lease(c, "q/x", "gone", 4, 1000) == WEFT_OK, "renew");
    CHECK(weft__store_lease(c, "q/x", "gone", 4, 0) == WEFT_OK, "disarm");
    weft__store_close(c);
    const char *keys[] = {"q/x"};
    int seen[1] = {0};
    take_events(w, keys, seen, 1, 4000);
    CHECK(seen[0] == 0, "a disarmed lease was delivered");
    void *v;
    size_t n;
    c = conn(addr, token);
    CHECK(weft__store_get(c, "q/x", 0, &v, &n) == WEFT_ERR_TIMEOUT,
          "a disarmed lease's key was written");
    weft__store_close(c);
    weft__store_close(w);
    printf("disarmed lease quiet: ok\n");
    return 0;
}

static double per_op_us(uint64_t ns, int n)
{
    return (double)ns / 1000.0 / n;
}

/* ADDR "native": an in-process weft store, whose address and token replace *addr, *token
 * (in @p native and @p tok); else NULL. */
static weft_store_server_t *maybe_native(const char **addr, const char **token, char *native,
                                         size_t nlen, char *tok)
{
    if (strcmp(*addr, "native") != 0) {
        return NULL;
    }
    weft_store_server_t *srv;
    CHECK(weft__store_make_token(tok) == WEFT_OK, "token");
    weft_store_server_params_t p = {.size = sizeof(p), .token = tok};
    CHECK(weft__store_server_start(&p, &srv) == WEFT_OK, "server");
    snprintf(native, nlen, "127.0.0.1:%d", weft__store_server_port(srv));
    *addr = native;
    *token = tok;
    return srv;
}

static int cost(const char *addr, const char *token, int n)
{
    char native[64], tok[65];
    weft_store_server_t *srv = maybe_native(&addr, &token, native, sizeof(native), tok);
    weft_store_client_t *c = conn(addr, token);
    uint64_t t0 = weft__now_ns();
    for (int i = 0; i < n; i++) {
        CHECK(weft__store_set(c, "cost/k", "value", 5) == WEFT_OK, "set");
    }
    uint64_t t1 = weft__now_ns();
    for (int i = 0; i < n; i++) {
        void *v;
        size_t len;
        CHECK(weft__store_get(c, "cost/k", 0, &v, &len) == WEFT_OK, "get");
        free(v);
    }
    uint64_t t2 = weft__now_ns();
    for (int i = 0; i < n; i++) {
        CHECK(weft__store_add(c, "cost/n", 1, NULL) == WEFT_OK, "add");
    }
    uint64_t t3 = weft__now_ns();
    printf("%s: %d ops each: set %.1f us, get %.1f us, add %.1f us per op\n",
           srv != NULL ? "native" : "etcd", n, per_op_us(t1 - t0, n), per_op_us(t2 - t1, n),
           per_op_us(t3 - t2, n));
    weft__store_close(c);
    if (srv != NULL) {
        weft__store_server_stop(srv);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t requests_of(weft_store_client_t **w, int n)
{
    uint64_t r = 0;
    for (int i = 0; i < n; i++) {
        r += weft__store_requests(w[i]);
    }
    return r;
}

static int fanout(const char *addr, const char *token, int n, bool lapse)
{
    char native[64], tok[65];
    weft_store_server_t *srv = maybe_native(&addr, &token, native, sizeof(native), tok);
    weft_store_client_t **w = calloc((size_t)n, sizeof(*w));
    uint64_t *at = calloc((size_t)n, sizeof(*at));
    struct pollfd *p = calloc((size_t)n, sizeof(*p));
    int *idx = calloc((size_t)n, sizeof(*idx));
    CHECK(w != NULL && at != NULL && p != NULL && idx != NULL, "memory");
    uint64_t t0 = weft__now_ns();
    for (int i = 0; i < n; i++) {
        w[i] = conn(addr, token);
        CHECK(weft__store_watch(w[i], "fail/") == WEFT_OK, "watch %d", i);
    }
    uint64_t setup = weft__now_ns() - t0;
    weft_store_client_t *h = conn(addr, token);
    if (lapse) {
        CHECK(weft__store_lease(h, "fail/7", "dead", 4, 1000) == WEFT_OK, "lease");
        nap(200); /* the notice's put reaches the watchers, and is no event */
    }
    for (int i = 0; i < n; i++) {
        char *key;
        void *v;
        size_t len;
        CHECK(weft__store_next_event(w[i], 0, &key, &v, &len) == WEFT_INPROGRESS,
              "watcher %d: an event before the notice (fail/ not empty: use a fresh token)", i);
    }
    uint64_t req0 = requests_of(w, n);
    uint64_t t1 = weft__now_ns(), deadline = t1 + 60000000000ull;
    if (lapse) {
        weft__store_close(h); /* the lease is left to lapse (etcd: its TTL) */
    } else {
        CHECK(weft__store_set(h, "fail/7", "dead", 4) == WEFT_OK, "set");
        weft__store_close(h);
    }
    int got = 0;
    while (got < n && weft__now_ns() < deadline) {
        int np = 0;
        for (int i = 0; i < n; i++) {
            if (at[i] == 0) {
                p[np] = (struct pollfd){.fd = weft__store_fd(w[i]), .events = POLLIN};
                idx[np++] = i;
            }
        }
        poll(p, (nfds_t)np, 100);
        for (int k = 0; k < np; k++) {
            char *key;
            void *v;
            size_t len;
            int i = idx[k];
            if ((p[k].revents & POLLIN) == 0 ||
                weft__store_next_event(w[i], 0, &key, &v, &len) != WEFT_OK) {
                continue;
            }
            CHECK(strcmp(key, "fail/7") == 0 && len == 4 && memcmp(v, "dead", 4) == 0,
                  "watcher %d: %s", i, key);
            at[i] = weft__now_ns() - t1;
            got++;
            free(key);
            free(v);
        }
    }
    CHECK(got == n, "%d of %d watchers had the notice in 60 s", got, n);
    nap(lapse ? 500 : 100); /* a second event (none is due) would show now */
    uint64_t req = requests_of(w, n) - req0;
    for (int i = 0; i < n; i++) {
        char *key;
        void *v;
        size_t len;
        CHECK(weft__store_next_event(w[i], 0, &key, &v, &len) == WEFT_INPROGRESS,
              "watcher %d had the notice twice", i);
    }
    qsort(at, (size_t)n, sizeof(*at), cmp_u64);
    printf("fanout %s %s: %d watchers, set up in %.2f s; delivered first %.1f ms, median %.1f "
           "ms, last %.1f ms (last - first %.1f ms) after the %s; watchers' requests meanwhile "
           "%" PRIu64 " (%.2f per watcher)\n",
           srv != NULL ? "native" : "etcd", lapse ? "lapse" : "set", n, (double)setup / 1e9,
           (double)at[0] / 1e6, (double)at[n / 2] / 1e6, (double)at[n - 1] / 1e6,
           (double)(at[n - 1] - at[0]) / 1e6, lapse ? "holder closed" : "set", req,
           (double)req / n);
    for (int i = 0; i < n; i++) {
        weft__store_close(w[i]);
    }
    free(w);
    free(at);
    free(p);
    free(idx);
    if (srv != NULL) {
        weft__store_server_stop(srv);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: see the top of etcd_check.c\n");
        return 2;
    }
    const char *cmd = argv[1], *addr = argv[2], *token = argv[3];
    if (strcmp(cmd, "basic") == 0) {
        return basic(addr, token);
    }
    if (strcmp(cmd, "add") == 0 && (argc == 6 || argc == 7)) {
        return add_n(addr, token, argv[4], atoi(argv[5]), argc == 7 ? atoi(argv[6]) : 0);
    }
    if (strcmp(cmd, "get") == 0 && argc == 5) {
        weft_store_client_t *c = conn(addr, token);
        void *v;
        size_t n;
        CHECK(weft__store_get(c, argv[4], 0, &v, &n) == WEFT_OK, "get %s", argv[4]);
        printf("%.*s\n", (int)n, (char *)v);
        free(v);
        weft__store_close(c);
        return 0;
    }
    if (strcmp(cmd, "hold") == 0 && argc == 7) {
        return hold(addr, token, argv[4], argv[5], atoi(argv[6]));
    }
    if (strcmp(cmd, "lapse") == 0 && argc == 8) {
        return lapse(addr, token, argv[4], argv[5], argv[6], atoi(argv[7]));
    }
    if (strcmp(cmd, "quiet") == 0) {
        return quiet(addr, token);
    }
    if (strcmp(cmd, "cost") == 0 && argc == 5) {
        return cost(addr, token, atoi(argv[4]));
    }
    if (strcmp(cmd, "fanout") == 0 && argc == 6 &&
        (strcmp(argv[5], "set") == 0 || strcmp(argv[5], "lapse") == 0)) {
        return fanout(addr, token, atoi(argv[4]), strcmp(argv[5], "lapse") == 0);
    }
    fprintf(stderr, "unknown command or arguments: %s\n", cmd);
    return 2;
}
