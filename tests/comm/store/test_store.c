/*
 * The rendezvous store end to end: an in-process server on a free port, real clients,
 * and raw sockets that misbehave (wrong or missing token, malformed and random frames).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/store/proto.h"
#include "server_fixture.h"
#include "store_raw.h"

/* ---- fixture (server_fixture.h) ---- */

static weft_store_client_t *client(const fixture_t *f)
{
    weft_store_client_t *c = NULL;
    assert_int_equal(weft__store_connect(f->hostport, f->token, 10000, NULL, &c), WEFT_OK);
    assert_non_null(c);
    return c;
}

static void expect_stored(weft_store_client_t *c, const char *key, const void *val, size_t len)
{
    void *got = NULL;
    size_t glen = 0;
    assert_int_equal(weft__store_get(c, key, 10000, &got, &glen), WEFT_OK);
    assert_int_equal(glen, len);
    assert_memory_equal(got, val, len);
    assert_int_equal(((char *)got)[len], '\0');
    free(got);
}

/* A fresh, well-behaved client is served correctly. */
static void check_server_serves(const fixture_t *f)
{
    static int round;
    char key[64], val[64];
    snprintf(key, sizeof(key), "check/%d", round);
    snprintf(val, sizeof(val), "value %d", round++);
    weft_store_client_t *c = client(f);
    assert_int_equal(weft__store_set(c, key, val, strlen(val)), WEFT_OK);
    expect_stored(c, key, val, strlen(val));
    weft__store_close(c);
}

/* ---- raw sockets (store_raw.h) ---- */

static int raw_connect(const fixture_t *f)
{
    return raw_connect_port(f->port);
}

/* Connects and authenticates by hand as a launcher; the session is in *r when not NULL. */
static int raw_auth_session(const fixture_t *f, raw_session_t *r)
{
    raw_session_t s = raw_auth_as(f->port, f->token, WEFT__STORE_ROLE_LAUNCHER, 0);
    if (r != NULL) {
        *r = s;
    }
    return s.fd;
}

static int raw_auth(const fixture_t *f)
{
    return raw_auth_session(f, NULL);
}

/* ---- semantics ---- */

static void test_bad_arguments(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = (weft_store_client_t *)0x1;
    assert_int_equal(weft__store_connect("no-port", f->token, 100, &test_logger, &c),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_connect(f->hostport, "", 100, NULL, &c), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_connect(f->hostport, NULL, 100, NULL, &c), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_connect(f->hostport, f->token, -1, NULL, &c),
                     WEFT_ERR_INVALID_ARG);
    assert_ptr_equal(c, (weft_store_client_t *)0x1);

    weft_store_server_params_t p = {.size = sizeof(p), .token = ""};
    weft_store_server_t *s = (weft_store_server_t *)0x1;
    assert_int_equal(weft__store_server_start(&p, &s), WEFT_ERR_INVALID_ARG);
    p.token = "t";
    p.size = 0; /* forgotten size */
    assert_int_equal(weft__store_server_start(&p, &s), WEFT_ERR_INVALID_ARG);
    assert_ptr_equal(s, (weft_store_server_t *)0x1);
    assert_int_equal(weft__store_server_set(f->server, "", "x", 1), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_server_set(f->server, "k", NULL, 1), WEFT_ERR_INVALID_ARG);

    c = client(f);
    char key[WEFT_STORE_MAX_KEY + 2];
    memset(key, 'k', sizeof(key));
    key[WEFT_STORE_MAX_KEY + 1] = '\0';
    assert_int_equal(weft__store_set(c, key, "x", 1), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_set(c, "", "x", 1), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_set(c, "k", NULL, 1), WEFT_ERR_INVALID_ARG);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(weft__store_get(c, "k", -1, &v, &len), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_next_event(c, 0, (char **)&v, &v, &len), WEFT_ERR_INVALID_ARG);
    /* The longest key is fine, and the client is still usable after refused calls. */
    key[WEFT_STORE_MAX_KEY] = '\0';
    assert_int_equal(weft__store_set(c, key, "x", 1), WEFT_OK);
    expect_stored(c, key, "x", 1);
    weft__store_close(c);
}

static void test_set_get(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    const uint8_t bin[] = {0, 1, 0, 255, 0};
    assert_int_equal(weft__store_set(c, "empty", NULL, 0), WEFT_OK);
    expect_stored(c, "empty", "", 0);
    assert_int_equal(weft__store_set(c, "bin", bin, sizeof(bin)), WEFT_OK);
    expect_stored(c, "bin", bin, sizeof(bin));
    assert_int_equal(weft__store_set(c, "a", "hello", 5), WEFT_OK);
    expect_stored(c, "a", "hello", 5);
    assert_int_equal(weft__store_set(c, "a", "hi", 2), WEFT_OK); /* overwrite, shorter */
    expect_stored(c, "a", "hi", 2);

    /* A second client sees the same data. */
    weft_store_client_t *c2 = client(f);
    expect_stored(c2, "a", "hi", 2);
    expect_stored(c2, "bin", bin, sizeof(bin));
    weft__store_close(c2);

    /* Many keys: the map grows and keeps every one. */
    char key[32], val[32];
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof(key), "many/%d", i);
        snprintf(val, sizeof(val), "%d", i * 7);
        assert_int_equal(weft__store_set(c, key, val, strlen(val)), WEFT_OK);
    }
    for (int i = 499; i >= 0; i -= 13) {
        snprintf(key, sizeof(key), "many/%d", i);
        snprintf(val, sizeof(val), "%d", i * 7);
        expect_stored(c, key, val, strlen(val));
    }
    weft__store_close(c);
}

static void test_large_value(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    size_t n = WEFT__STORE_MAX_VALUE;
    uint8_t *big = malloc(n + 1);
    assert_non_null(big);
    for (size_t i = 0; i <= n; i++) {
        big[i] = (uint8_t)(i * 131 + (i >> 8));
    }
    char key[WEFT_STORE_MAX_KEY + 1];
    memset(key, 'L', WEFT_STORE_MAX_KEY);
    key[WEFT_STORE_MAX_KEY] = '\0';
    assert_int_equal(weft__store_set(c, key, big, n), WEFT_OK);
    expect_stored(c, key, big, n);
    assert_int_equal(weft__store_set(c, key, big, n + 1), WEFT_ERR_INVALID_ARG);
    /* Server-side sets obey the same limit. */
    assert_int_equal(weft__store_server_set(f->server, "big2", big, n + 1), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_server_set(f->server, "big2", big, n), WEFT_OK);
    expect_stored(c, "big2", big, n);
    free(big);
    weft__store_close(c);
}

static void test_get_timeout(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    void *v = (void *)0x1;
    size_t len = 77;
    assert_int_equal(weft__store_get(c, "missing", 0, &v, &len), WEFT_ERR_TIMEOUT);
    assert_int_equal(weft__store_get(c, "missing", 50, &v, &len), WEFT_ERR_TIMEOUT);
    assert_ptr_equal(v, (void *)0x1);
    assert_int_equal(len, 77);
    /* The connection stays in step after a timed-out get. */
    assert_int_equal(weft__store_set(c, "missing", "now", 3), WEFT_OK);
    expect_stored(c, "missing", "now", 3);
    weft__store_close(c);
}

static void test_delete(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    void *v;
    size_t len;
    assert_int_equal(weft__store_delete(c, "never"), WEFT_OK);
    assert_int_equal(weft__store_set(c, "d", "1", 1), WEFT_OK);
    assert_int_equal(weft__store_delete(c, "d"), WEFT_OK);
    assert_int_equal(weft__store_get(c, "d", 0, &v, &len), WEFT_ERR_TIMEOUT);
    assert_int_equal(weft__store_set(c, "d", "2", 1), WEFT_OK);
    expect_stored(c, "d", "2", 1);
    /* A deleted counter starts again at 0. */
    int64_t r = 0;
    assert_int_equal(weft__store_add(c, "cnt", 5, &r), WEFT_OK);
    assert_int_equal(weft__store_delete(c, "cnt"), WEFT_OK);
    assert_int_equal(weft__store_add(c, "cnt", 2, &r), WEFT_OK);
    assert_int_equal(r, 2);
    weft__store_close(c);
}

static void test_add(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    int64_t r = 99;
    assert_int_equal(weft__store_add(c, "n", 0, &r), WEFT_OK);
    assert_int_equal(r, 0);
    assert_int_equal(weft__store_add(c, "n", 5, &r), WEFT_OK);
    assert_int_equal(r, 5);
    assert_int_equal(weft__store_add(c, "n", -7, NULL), WEFT_OK);
    expect_stored(c, "n", "-2", 2);

    /* A counter set as text by hand, the extremes, and overflow. */
    assert_int_equal(weft__store_set(c, "t", "41", 2), WEFT_OK);
    assert_int_equal(weft__store_add(c, "t", 1, &r), WEFT_OK);
    assert_int_equal(r, 42);
    assert_int_equal(weft__store_set(c, "max", "9223372036854775807", 19), WEFT_OK);
    r = 99;
    assert_int_equal(weft__store_add(c, "max", 1, &r), WEFT_ERR_INVALID_ARG);
    assert_int_equal(r, 99);
    assert_int_equal(weft__store_add(c, "max", -1, &r), WEFT_OK);
    assert_true(r == INT64_MAX - 1);
    assert_int_equal(weft__store_add(c, "min", INT64_MIN, &r), WEFT_OK);
    assert_true(r == INT64_MIN);
    expect_stored(c, "min", "-9223372036854775808", 20);
    assert_int_equal(weft__store_add(c, "min", -1, &r), WEFT_ERR_INVALID_ARG);

    /* Not a number: refused, the value is kept, and the connection still works. */
    const char *bad[] = {"abc", "", "12x", "-", "+5", " 5", "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(weft__store_set(c, "s", bad[i], strlen(bad[i])), WEFT_OK);
        assert_int_equal(weft__store_add(c, "s", 1, &r), WEFT_ERR_INVALID_ARG);
        expect_stored(c, "s", bad[i], strlen(bad[i]));
    }
    weft__store_close(c);
}

/* ---- waiting and concurrency ---- */

typedef struct waiter {
    const fixture_t *f;
    const char *key;
    weft_status_t st;
    void *val;
    size_t len;
    atomic_int started;
} waiter_t;

static void *wait_for_key(void *arg)
{
    waiter_t *w = arg;
    weft_store_client_t *c = client(w->f);
    atomic_store(&w->started, 1);
    w->st = weft__store_get(c, w->key, 30000, &w->val, &w->len);
    weft__store_close(c);
    return NULL;
}

static void run_woken_get(fixture_t *f, bool from_server)
{
    waiter_t w = {.f = f, .key = from_server ? "late/server" : "late/client"};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_key, &w), 0);
    while (!atomic_load(&w.started)) {
        sleep_ms(1);
    }
    sleep_ms(100); /* let the get park first; correctness does not depend on it */
    if (from_server) {
        assert_int_equal(weft__store_server_set(f->server, w.key, "srv", 3), WEFT_OK);
    } else {
        weft_store_client_t *c = client(f);
        assert_int_equal(weft__store_set(c, w.key, "cli", 3), WEFT_OK);
        weft__store_close(c);
    }
    pthread_join(t, NULL);
    assert_int_equal(w.st, WEFT_OK);
    assert_int_equal(w.len, 3);
    assert_memory_equal(w.val, from_server ? "srv" : "cli", 3);
    free(w.val);
}

static void test_get_woken_by_client(void **state)
{
    run_woken_get(*state, false);
}

static void test_get_woken_by_server_set(void **state)
{
    run_woken_get(*state, true);
}

#define ADD_THREADS 4
#define ADDS_PER_THREAD 200

typedef struct adder {
    const fixture_t *f;
    int64_t results[ADDS_PER_THREAD];
    weft_status_t st;
} adder_t;

static void *add_many(void *arg)
{
    adder_t *a = arg;
    weft_store_client_t *c = client(a->f);
    a->st = WEFT_OK;
    for (int i = 0; i < ADDS_PER_THREAD && a->st == WEFT_OK; i++) {
        a->st = weft__store_add(c, "counter", 1, &a->results[i]);
    }
    weft__store_close(c);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_add_atomic(void **state)
{
    fixture_t *f = *state;
    adder_t a[ADD_THREADS];
    pthread_t t[ADD_THREADS];
    for (int i = 0; i < ADD_THREADS; i++) {
        a[i].f = f;
        assert_int_equal(pthread_create(&t[i], NULL, add_many, &a[i]), 0);
    }
    static int64_t all[ADD_THREADS * ADDS_PER_THREAD];
    for (int i = 0; i < ADD_THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].st, WEFT_OK);
        memcpy(all + i * ADDS_PER_THREAD, a[i].results, sizeof(a[i].results));
    }
    /* Every new value 1..N handed out exactly once. */
    qsort(all, ADD_THREADS * ADDS_PER_THREAD, sizeof(all[0]), cmp_i64);
    for (int i = 0; i < ADD_THREADS * ADDS_PER_THREAD; i++) {
        assert_int_equal(all[i], i + 1);
    }
    weft_store_client_t *c = client(f);
    char expect[32];
    snprintf(expect, sizeof(expect), "%d", ADD_THREADS * ADDS_PER_THREAD);
    expect_stored(c, "counter", expect, strlen(expect));
    weft__store_close(c);
}

/* ---- watch ---- */

static void expect_event(weft_store_client_t *w, const char *key, const char *val)
{
    char *k = NULL;
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(weft__store_next_event(w, 10000, &k, &v, &len), WEFT_OK);
    assert_string_equal(k, key);
    assert_int_equal(len, strlen(val));
    assert_memory_equal(v, val, len);
    free(k);
    free(v);
}

static void test_watch(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f), *w = client(f);
    assert_int_equal(weft__store_set(c, "a/1", "v1", 2), WEFT_OK);
    assert_int_equal(weft__store_set(c, "a/2", "v2", 2), WEFT_OK);
    assert_int_equal(weft__store_set(c, "b/1", "x", 1), WEFT_OK);
    assert_int_equal(weft__store_set(c, "a", "short", 5), WEFT_OK); /* shorter than the prefix */
    assert_int_equal(weft__store_watch(w, "a/"), WEFT_OK);

    /* Existing keys, in any order. */
    bool seen[2] = {false, false};
    for (int i = 0; i < 2; i++) {
        char *k;
        void *v;
        size_t len;
        assert_int_equal(weft__store_next_event(w, 10000, &k, &v, &len), WEFT_OK);
        int idx = strcmp(k, "a/1") == 0 ? 0 : strcmp(k, "a/2") == 0 ? 1 : -1;
        assert_true(idx >= 0 && !seen[idx]);
        seen[idx] = true;
        assert_int_equal(len, 2);
        assert_memory_equal(v, idx == 0 ? "v1" : "v2", 2);
        free(k);
        free(v);
    }
    char *k = (char *)0x1;
    void *v = (void *)0x1;
    size_t len = 5;
    assert_int_equal(weft__store_next_event(w, 0, &k, &v, &len), WEFT_INPROGRESS);
    assert_ptr_equal(k, (char *)0x1);

    /* Later sets, in the order the server applied them; other prefixes never show up. */
    assert_int_equal(weft__store_set(c, "b/2", "no", 2), WEFT_OK);
    assert_int_equal(weft__store_set(c, "a/3", "v3", 2), WEFT_OK);
    assert_int_equal(weft__store_server_set(f->server, "a/4", "v4", 2), WEFT_OK);
    assert_int_equal(weft__store_set(c, "b/3", "no", 2), WEFT_OK);
    assert_int_equal(weft__store_add(c, "a/n", 3, NULL), WEFT_OK);
    assert_int_equal(weft__store_set(c, "a/1", "v1b", 3), WEFT_OK);
    expect_event(w, "a/3", "v3");
    expect_event(w, "a/4", "v4");
    expect_event(w, "a/n", "3");
    expect_event(w, "a/1", "v1b");
    assert_int_equal(weft__store_next_event(w, 20, &k, &v, &len), WEFT_INPROGRESS);

    /* The watching connection goes on serving requests; the event of its own set, which
     * came before the get's answer, waits in its queue. */
    assert_int_equal(weft__store_set(w, "a/5", "x", 1), WEFT_OK);
    assert_int_equal(weft__store_get(w, "a/1", 0, &v, &len), WEFT_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(v, "v1b", 3);
    free(v);
    expect_event(w, "a/5", "x");

    /* A second watch replaces the prefix: the keys under the new one, then its sets only. */
    assert_int_equal(weft__store_watch(w, "b/"), WEFT_OK);
    bool seen_b[2] = {false, false};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(weft__store_next_event(w, 10000, &k, &v, &len), WEFT_OK);
        int idx = strcmp(k, "b/2") == 0 ? 0 : strcmp(k, "b/3") == 0 ? 1 : -1;
        if (strcmp(k, "b/1") != 0) {
            assert_true(idx >= 0 && !seen_b[idx]);
            seen_b[idx] = true;
        }
        free(k);
        free(v);
    }
    assert_int_equal(weft__store_set(c, "a/6", "no", 2), WEFT_OK);
    assert_int_equal(weft__store_set(c, "b/4", "v", 1), WEFT_OK);
    expect_event(w, "b/4", "v");
    assert_int_equal(weft__store_next_event(w, 20, &k, &v, &len), WEFT_INPROGRESS);
    assert_true(weft__store_fd(w) >= 0);
    weft__store_close(w);
    weft__store_close(c);
    check_server_serves(f);
}

/* A prefix that ends inside a key's last part, or above its directory: the keys that
 * begin with it and only those, deleted ones gone (the store lists them by directory). */
static void test_watch_prefix_anywhere(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f), *w = client(f);
    const char *keys[] = {"p/abc", "p/ax", "p/ab/c", "p/ab/d/e", "q", "p", "pab", "p/ab", "p/gone"};
    const bool match[] = {true, false, true, true, false, false, false, true, false};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        assert_int_equal(weft__store_set(c, keys[i], keys[i], strlen(keys[i])), WEFT_OK);
    }
    assert_int_equal(weft__store_delete(c, "p/gone"), WEFT_OK);
    assert_int_equal(weft__store_watch(w, "p/ab"), WEFT_OK);
    size_t want = 0, seen = 0;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        want += match[i];
    }
    char *k;
    void *v;
    size_t len;
    while (weft__store_next_event(w, 200, &k, &v, &len) == WEFT_OK) {
        size_t i = 0;
        while (i < sizeof(keys) / sizeof(keys[0]) && strcmp(keys[i], k) != 0) {
            i++;
        }
        assert_true(i < sizeof(keys) / sizeof(keys[0]) && match[i]);
        assert_string_equal(v, k);
        seen++;
        free(k);
        free(v);
    }
    assert_int_equal(seen, want);
    weft__store_close(w);
    weft__store_close(c);
}

static void test_watch_everything(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f), *w1 = client(f), *w2 = client(f);
    assert_int_equal(weft__store_watch(w1, ""), WEFT_OK);
    assert_int_equal(weft__store_watch(w2, "x"), WEFT_OK);
    assert_int_equal(weft__store_set(c, "y", "1", 1), WEFT_OK);
    assert_int_equal(weft__store_set(c, "x", "2", 1), WEFT_OK);
    expect_event(w1, "y", "1");
    expect_event(w1, "x", "2");
    expect_event(w2, "x", "2");
    /* A watcher that went away does not disturb the others. */
    weft__store_close(w1);
    assert_int_equal(weft__store_set(c, "xx", "3", 1), WEFT_OK);
    expect_event(w2, "xx", "3");
    weft__store_close(w2);
    weft__store_close(c);
    check_server_serves(f);
}

/* ---- connecting ---- */

static int free_port(void)
{
    fixture_t tmp = {.token = "t"};
    assert_int_equal(start_server(&tmp, 0), WEFT_OK);
    weft__store_server_stop(tmp.server);
    return tmp.port;
}

typedef struct late_start {
    fixture_t f;
    weft_status_t st;
} late_start_t;

static void *start_late(void *arg)
{
    late_start_t *l = arg;
    sleep_ms(300);
    l->st = start_server(&l->f, l->f.port);
    return NULL;
}

static void test_connect_retries(void **state)
{
    (void)state;
    late_start_t l = {.f = {.token = "late-token"}};
    l.f.port = free_port();
    char hostport[64];
    snprintf(hostport, sizeof(hostport), "localhost:%d", l.f.port);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, start_late, &l), 0);
    weft_store_client_t *c = NULL;
    weft_status_t st = weft__store_connect(hostport, "late-token", 20000, NULL, &c);
    pthread_join(t, NULL);
    assert_int_equal(l.st, WEFT_OK);
    assert_int_equal(st, WEFT_OK);
    assert_int_equal(weft__store_set(c, "k", "v", 1), WEFT_OK);
    expect_stored(c, "k", "v", 1);
    weft__store_close(c);
    weft__store_server_stop(l.f.server);
}

static void test_connect_timeout(void **state)
{
    (void)state;
    char hostport[64];
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", free_port());
    weft_store_client_t *c = (weft_store_client_t *)0x1;
    log_clear();
    assert_int_equal(weft__store_connect(hostport, "t", 200, &test_logger, &c), WEFT_ERR_TIMEOUT);
    assert_ptr_equal(c, (weft_store_client_t *)0x1);
    assert_false(log_has(WEFT_LOG_WARN, "not reachable yet", hostport));
    /* A longer wait says once, while it waits, what for and for how long. */
    assert_int_equal(weft__store_connect(hostport, "t", 1500, &test_logger, &c), WEFT_ERR_TIMEOUT);
    assert_true(log_has(WEFT_LOG_WARN, "not reachable yet", "WEFT_CONNECT_TIMEOUT_MS"));
}

static void test_stop_wakes_waiter(void **state)
{
    (void)state;
    fixture_t f = {.token = "stop-token"};
    assert_int_equal(start_server(&f, 0), WEFT_OK);
    waiter_t w = {.f = &f, .key = "never"};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_key, &w), 0);
    while (!atomic_load(&w.started)) {
        sleep_ms(1);
    }
    sleep_ms(50);
    weft__store_server_stop(f.server);
    pthread_join(t, NULL);
    assert_int_equal(w.st, WEFT_ERR_IO);
}

/* ---- authentication ---- */

static void test_wrong_token(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = (weft_store_client_t *)0x1;
    char wrong[65];
    strcpy(wrong, f->token);
    wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
    assert_int_equal(weft__store_connect(f->hostport, wrong, 5000, NULL, &c), WEFT_ERR_AUTH);
    assert_int_equal(weft__store_connect(f->hostport, "short", 5000, NULL, &c), WEFT_ERR_AUTH);
    assert_ptr_equal(c, (weft_store_client_t *)0x1);
    assert_true(log_has(WEFT_LOG_WARN, "refused 127.0.0.1:", "wrong token"));
    check_server_serves(f);
}

static void test_silent_client_closed(void **state)
{
    fixture_t *f = *state;
    int fd = raw_connect(f);
    uint8_t nonce[WEFT__STORE_NONCE_LEN];
    raw_hello(fd, nonce);
    check_server_serves(f); /* the silent one does not block others meanwhile */
    raw_expect_closed(fd);  /* after WEFT__STORE_AUTH_TIMEOUT_MS */
    assert_true(log_has(WEFT_LOG_WARN, "refused 127.0.0.1:", "no authentication"));
    check_server_serves(f);
}

static void test_request_before_auth(void **state)
{
    fixture_t *f = *state;
    /* A well-formed SET without authenticating: refused, not applied. */
    int fd = raw_connect(f);
    weft_store_buf_t b = {0};
    assert_int_equal(weft__store_frame_kv(&b, WEFT__STORE_SET, "sneaky", 6, "1", 1), WEFT_OK);
    raw_send(fd, b.data, b.len);
    raw_expect_closed(fd);
    assert_true(log_has(WEFT_LOG_WARN, "refused", "before authentication"));
    /* Garbage, and an AUTH frame of the wrong size. */
    fd = raw_connect(f);
    raw_send(fd, "GET / HTTP/1.0\r\n\r\n", 18);
    raw_expect_closed(fd);
    fd = raw_connect(f);
    uint8_t hdr[WEFT__STORE_HDR_LEN + 8] = {0};
    weft__store_hdr_encode(hdr, 8, WEFT__STORE_AUTH);
    raw_send(fd, hdr, sizeof(hdr));
    raw_expect_closed(fd);

    weft_store_client_t *c = client(f);
    void *v;
    size_t len;
    assert_int_equal(weft__store_get(c, "sneaky", 0, &v, &len), WEFT_ERR_TIMEOUT);
    weft__store_close(c);
    weft__store_buf_free(&b);
}

/* ---- malformed frames after authentication ---- */

static void test_oversized_frame(void **state)
{
    fixture_t *f = *state;
    int fd = raw_auth(f);
    uint8_t hdr[WEFT__STORE_HDR_LEN];
    weft__store_hdr_encode(hdr, WEFT_STORE_MAX_FRAME + 1, WEFT__STORE_SET);
    raw_send(fd, hdr, sizeof(hdr));
    raw_expect_closed(fd);
    assert_true(log_has(WEFT_LOG_ERROR, "closing 127.0.0.1:", "oversized"));
    check_server_serves(f);

    fd = raw_auth(f);
    weft__store_hdr_encode(hdr, UINT32_MAX, WEFT__STORE_SET);
    raw_send(fd, hdr, sizeof(hdr));
    raw_expect_closed(fd);
    check_server_serves(f);
}

/* A connection the server closed while another process holds its socket too (a rank
 * weftrun forked, before its exec): the socket stays open, and what the peer sends next
 * must not reach the freed connection (epoll keeps a socket closed in one process only).
 * Under the sanitizer build a use after free fails this test. */
static void test_closed_while_shared(void **state)
{
    fixture_t *f = *state;
    int fd = raw_auth(f);
    pid_t holder = fork(); /* holds a copy of every descriptor, the server's sockets too */
    assert_true(holder >= 0);
    if (holder == 0) {
        sleep(5);
        _exit(0);
    }
    uint8_t hdr[WEFT__STORE_HDR_LEN];
    weft__store_hdr_encode(hdr, WEFT_STORE_MAX_FRAME + 1, WEFT__STORE_SET);
    raw_send(fd, hdr, sizeof(hdr));
    usleep(100 * 1000); /* the server closes it (in its own process only) */
    assert_true(log_has(WEFT_LOG_ERROR, "closing 127.0.0.1:", "oversized"));
    raw_send(fd, hdr, sizeof(hdr)); /* news on the socket the holder keeps open */
    usleep(100 * 1000);
    close(fd);
    usleep(100 * 1000);
    check_server_serves(f);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
}

static void test_truncated_frame(void **state)
{
    fixture_t *f = *state;
    /* Body cut short, then the client goes away. */
    int fd = raw_auth(f);
    uint8_t frame[WEFT__STORE_HDR_LEN + 10];
    memset(frame, 'z', sizeof(frame));
    weft__store_hdr_encode(frame, 100, WEFT__STORE_SET);
    raw_send(fd, frame, sizeof(frame));
    close(fd);
    check_server_serves(f);
    /* Header cut short. */
    fd = raw_auth(f);
    raw_send(fd, frame, 3);
    close(fd);
    check_server_serves(f);
    /* Body cut short, and the client only half-closes: the server closes its side. */
    fd = raw_auth(f);
    raw_send(fd, frame, sizeof(frame));
    shutdown(fd, SHUT_WR);
    raw_expect_closed(fd);
    assert_true(log_has(WEFT_LOG_ERROR, "closing 127.0.0.1:", "truncated"));
    check_server_serves(f);
}

static void test_unexpected_types(void **state)
{
    fixture_t *f = *state;
    const uint8_t types[] = {
        0, 13, 77, 255, WEFT__STORE_HELLO, WEFT__STORE_AUTH, WEFT__STORE_RESP, WEFT__STORE_EVENT};
    for (size_t i = 0; i < sizeof(types); i++) {
        raw_session_t r;
        int fd = raw_auth_session(f, &r);
        weft_store_buf_t b = {0};
        assert_int_equal(weft__store_frame_bytes(&b, WEFT__STORE_SET, "\0\0\0\0", 4), WEFT_OK);
        b.data[4] = types[i];
        raw_seal(&r, &b, 0); /* well sealed: refused for its type alone */
        raw_send(fd, b.data, b.len);
        raw_expect_closed(fd);
        weft__store_buf_free(&b);
        check_server_serves(f);
    }
    /* Bodies that do not match their type. */
    const struct {
        weft_store_msg_t type;
        size_t rest;
    } bad[] = {{WEFT__STORE_GET, 3},
               {WEFT__STORE_ADD, 4},
               {WEFT__STORE_DELETE, 1},
               {WEFT__STORE_WATCH, 2},
               {WEFT__STORE_SCAN, 8}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        raw_session_t r;
        int fd = raw_auth_session(f, &r);
        weft_store_buf_t b = {0};
        assert_int_equal(weft__store_frame_kv(&b, bad[i].type, "k", 1, "12345678", bad[i].rest),
                         WEFT_OK);
        raw_seal(&r, &b, 0);
        raw_send(fd, b.data, b.len);
        raw_expect_closed(fd);
        weft__store_buf_free(&b);
        check_server_serves(f);
    }
}

/* Integers read back exactly; anything else is refused rather than read as 0. */
static void test_get_i64(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    int64_t v = 7;
    assert_int_equal(weft__store_set(c, "int/ok", "-42", 3), WEFT_OK);
    assert_int_equal(weft__store_get_i64(c, "int/ok", 1000, &v), WEFT_OK);
    assert_int_equal(v, -42);
    assert_int_equal(weft__store_add(c, "int/ctr", 5, NULL), WEFT_OK);
    assert_int_equal(weft__store_get_i64(c, "int/ctr", 1000, &v), WEFT_OK);
    assert_int_equal(v, 5);
    const char *bad[] = {"", "12x", "x", "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 7;
        assert_int_equal(weft__store_set(c, "int/bad", bad[i], strlen(bad[i])), WEFT_OK);
        assert_int_equal(weft__store_get_i64(c, "int/bad", 1000, &v), WEFT_ERR_PROTOCOL);
        assert_int_equal(v, 7);
    }
    assert_int_equal(weft__store_get_i64(c, "int/absent", 0, &v), WEFT_ERR_TIMEOUT);
    weft__store_close(c);
}

/* ---- create-if-absent and leases ---- */

static void expect_nx(weft_store_client_t *c, const char *key, const char *val, const char *won,
                      int want_created)
{
    void *w = NULL;
    size_t wlen = 0;
    int created = -1;
    assert_int_equal(weft__store_set_nx(c, key, val, strlen(val), &w, &wlen, &created), WEFT_OK);
    assert_int_equal(created, want_created);
    assert_int_equal(wlen, strlen(won));
    assert_memory_equal(w, won, wlen);
    free(w);
}

/* The first proposal wins; every later caller learns it, and watchers see one event. */
static void test_set_nx(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *a = client(f), *b = client(f), *w = client(f);
    assert_int_equal(weft__store_watch(w, "nx/"), WEFT_OK);
    expect_nx(a, "nx/k", "first", "first", 1);
    expect_nx(b, "nx/k", "second", "first", 0);
    expect_nx(a, "nx/k", "", "first", 0);
    expect_nx(b, "nx/empty", "", "", 1);
    expect_event(w, "nx/k", "first");
    expect_event(w, "nx/empty", "");
    char *k;
    void *v;
    size_t len;
    assert_int_equal(weft__store_next_event(w, 100, &k, &v, &len), WEFT_INPROGRESS);
    void *x;
    size_t xl;
    assert_int_equal(weft__store_set_nx(a, "", "v", 1, &x, &xl, NULL), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_set_nx(a, "nx/z", "v", 1, NULL, &xl, NULL),
                     WEFT_ERR_INVALID_ARG);
    weft__store_close(a);
    weft__store_close(b);
    weft__store_close(w);
}

/* A lease fires when its connection drops or is not renewed, never when disarmed; only
 * the one not renewed is reported to the hosting process as lapsed. */
static void test_lease(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *w = client(f), *c = client(f);
    assert_int_equal(weft__store_watch(w, "dead/"), WEFT_OK);
    /* Dropped connection: fires at once. */
    assert_int_equal(weft__store_lease(c, "dead/1", "gone", 4, 60000), WEFT_OK);
    weft__store_close(c);
    expect_event(w, "dead/1", "gone");
    /* Renewed in time: does not fire; then disarmed and closed: does not fire either. */
    c = client(f);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(weft__store_lease(c, "dead/2", "x", 1, 400), WEFT_OK);
        sleep_ms(100);
    }
    assert_int_equal(weft__store_lease(c, "dead/2", NULL, 0, 0), WEFT_OK);
    weft__store_close(c);
    char *k;
    void *v;
    size_t len;
    assert_int_equal(weft__store_next_event(w, 300, &k, &v, &len), WEFT_INPROGRESS);
    /* Not renewed (a stopped process): fires after the ttl and the connection is closed. */
    c = client(f);
    assert_int_equal(weft__store_lease(c, "dead/3", "late", 4, 150), WEFT_OK);
    assert_true(lapsed_is(f, ""));
    expect_event(w, "dead/3", "late");
    assert_true(log_has(WEFT_LOG_WARN, "did not renew its lease", "dead/3"));
    assert_true(lapsed_is(f, "dead/3;"));
    assert_int_not_equal(weft__store_set(c, "after", "x", 1), WEFT_OK);
    weft__store_close(c);
    weft__store_close(w);
    check_server_serves(f);
}

/* A watcher that never reads is cut off; the data held by the store is capped. */
static void test_memory_bounds(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f), *w = client(f);
    size_t n = WEFT__STORE_MAX_VALUE;
    uint8_t *big = calloc(1, n);
    assert_non_null(big);
    assert_int_equal(weft__store_watch(w, "big/"), WEFT_OK);
    int sets = 0;
    while (!log_has(WEFT_LOG_WARN, "closing 127.0.0.1:", "does not read") && sets < 400) {
        assert_int_equal(weft__store_set(c, "big/same", big, n), WEFT_OK);
        sets++;
    }
    assert_true(sets * n > WEFT__STORE_MAX_OUT);
    assert_true(sets < 400);
    /* What was already on its way still arrives, then the connection ends. */
    weft_status_t st;
    char *k;
    void *v;
    size_t len;
    while ((st = weft__store_next_event(w, 10000, &k, &v, &len)) == WEFT_OK) {
        free(k);
        free(v);
    }
    assert_int_equal(st, WEFT_ERR_IO);
    weft__store_close(w);

    char key[32];
    int i;
    for (i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "fill/%d", i);
        st = weft__store_set(c, key, big, n);
        if (st != WEFT_OK) {
            break;
        }
    }
    assert_int_equal(st, WEFT_ERR_NO_MEMORY);
    assert_true((size_t)i * n <= WEFT__STORE_MAX_DATA &&
                (size_t)(i + 2) * n > WEFT__STORE_MAX_DATA);
    assert_int_equal(weft__store_delete(c, "fill/0"), WEFT_OK);
    assert_int_equal(weft__store_set(c, key, big, n), WEFT_OK);
    free(big);
    weft__store_close(c);
    check_server_serves(f);
}

/* Random frames from authenticated and unauthenticated clients (fixed seed). */
static void test_fuzz_frames(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *good = client(f);
    uint8_t buf[600];
    srand(20240611);
    for (int iter = 0; iter < 300; iter++) {
        bool auth = rand() % 4 != 0;
        int fd = auth ? raw_auth(f) : raw_connect(f);
        size_t n = (size_t)(rand() % (int)sizeof(buf));
        for (size_t i = 0; i < n; i++) {
            buf[i] = (uint8_t)rand();
        }
        if (n >= WEFT__STORE_HDR_LEN && rand() % 2 == 0) {
            /* Plausible header: small length, a real or near-real type. */
            uint32_t len = (uint32_t)(rand() % 600);
            weft__store_hdr_encode(buf, len, (weft_store_msg_t)(rand() % 12));
        }
        if (n > 0) {
            send(fd, buf, n, MSG_NOSIGNAL);
        }
        if (rand() % 2 == 0) {
            shutdown(fd, SHUT_WR);
        }
        close(fd);

        char key[32], val[32];
        snprintf(key, sizeof(key), "fuzz/%d", iter);
        snprintf(val, sizeof(val), "%d", iter * 3);
        assert_int_equal(weft__store_set(good, key, val, strlen(val)), WEFT_OK);
        expect_stored(good, key, val, strlen(val));
    }
    weft__store_close(good);
    check_server_serves(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_woken_by_client, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_woken_by_server_set, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_atomic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_nx, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_i64, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_prefix_anywhere, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_everything, setup, teardown),
        cmocka_unit_test(test_connect_retries),
        cmocka_unit_test(test_connect_timeout),
        cmocka_unit_test(test_stop_wakes_waiter),
        cmocka_unit_test_setup_teardown(test_wrong_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_client_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_before_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed_while_shared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unexpected_types, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuzz_frames, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
