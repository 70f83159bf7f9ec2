/*
 * A lost store: connections that share a health record fail together, at once, and
 * leave the one report of the loss to their owner instead of logging every failure.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "comm/store/store.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_lines;
static char last_line[512];

static void capture(weft_log_level_t level, int rank, const char *msg, void *arg)
{
    (void)level;
    (void)rank;
    (void)arg;
    pthread_mutex_lock(&log_lock);
    log_lines++;
    snprintf(last_line, sizeof(last_line), "%s", msg);
    pthread_mutex_unlock(&log_lock);
}

static weft_logger_t test_logger = {
    .level = WEFT_LOG_DEBUG, .rank = -1, .fn = capture, .arg = NULL, .prefix = "test"};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct fixture {
    weft_store_server_t *server;
    char token[65];
    char hostport[64];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(weft__store_make_token(f->token), WEFT_OK);
    weft_store_server_params_t p = {.size = sizeof(p), .token = f->token};
    assert_int_equal(weft__store_server_start(&p, &f->server), WEFT_OK);
    snprintf(f->hostport, sizeof(f->hostport), "127.0.0.1:%d", weft__store_server_port(f->server));
    log_lines = 0;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    weft__store_server_stop(f->server); /* NULL once a test stopped it */
    free(f);
    return 0;
}

static weft_store_client_t *client(const fixture_t *f, weft_store_health_t *h)
{
    weft_store_client_t *c = NULL;
    assert_int_equal(weft__store_connect(f->hostport, f->token, 10000, &test_logger, &c), WEFT_OK);
    weft__store_share_health(c, h);
    return c;
}

/* Reachable: nothing is lost, nothing to report. */
static void test_healthy(void **state)
{
    fixture_t *f = *state;
    weft_store_health_t h = {0};
    weft_store_client_t *c = client(f, &h);
    assert_int_equal(weft__store_set(c, "k", "v", 1), WEFT_OK);
    assert_int_equal(weft__store_lost_ns(&h), 0);
    assert_string_equal(weft__store_lost_cause(&h), "");
    assert_false(weft__store_claim_report(&h));
    assert_string_equal(h.addr, f->hostport);
    weft__store_close(c);
    assert_int_equal(log_lines, 0);
}

/* The store dies: the first call to notice loses it for all, the others fail at once,
 * none of them logs, and exactly one claim of the report succeeds. */
static void test_lost_together(void **state)
{
    fixture_t *f = *state;
    weft_store_health_t h = {0};
    weft_store_client_t *req = client(f, &h), *other = client(f, &h), *watch = client(f, &h);
    weft_store_client_t *alone = client(f, NULL);
    assert_int_equal(weft__store_watch(watch, "w/"), WEFT_OK);
    weft__store_server_stop(f->server);
    f->server = NULL;

    void *val;
    size_t len;
    uint64_t t0 = now_ns();
    assert_int_equal(weft__store_get(req, "never", 60000, &val, &len), WEFT_ERR_IO);
    assert_true(now_ns() - t0 < 5000000000ull); /* the closed connection, not the wait */
    uint64_t lost = weft__store_lost_ns(&h);
    assert_true(lost >= t0);
    assert_non_null(strstr(weft__store_lost_cause(&h), "the store closed the connection"));
    assert_int_equal(log_lines, 0);

    /* The others fail at once, without the network, however often they are called. */
    t0 = now_ns();
    for (int i = 0; i < 10000; i++) {
        assert_int_equal(weft__store_add(other, "n", 1, NULL), WEFT_ERR_IO);
        assert_int_equal(weft__store_get(other, "k", 1000, &val, &len), WEFT_ERR_IO);
    }
    assert_true(now_ns() - t0 < 1000000000ull);
    char *key;
    assert_int_equal(weft__store_next_event(watch, 1000, &key, &val, &len), WEFT_ERR_IO);
    assert_int_equal(weft__store_lease(other, "l", "x", 1, 100), WEFT_ERR_IO);
    assert_int_equal(weft__store_lost_ns(&h), lost); /* the first loss is the one kept */
    assert_int_equal(log_lines, 0);

    assert_true(weft__store_claim_report(&h));
    assert_false(weft__store_claim_report(&h));

    /* A connection of its own still says for itself what went wrong, once. */
    assert_int_equal(weft__store_set(alone, "k", "v", 1), WEFT_ERR_IO);
    assert_int_equal(weft__store_set(alone, "k", "v", 1), WEFT_ERR_IO);
    assert_int_equal(log_lines, 1);
    assert_non_null(strstr(last_line, f->hostport));

    weft__store_close(req);
    weft__store_close(other);
    weft__store_close(watch);
    weft__store_close(alone);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_healthy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_together, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
