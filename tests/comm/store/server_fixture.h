/*
 * The store tests' fixture: an in-process server on a free port of 127.0.0.1 with a fresh
 * token, the test logger (log_capture.h) and a record of the leases that lapsed.
 */
#ifndef WEFT_TESTS_STORE_SERVER_FIXTURE_H
#define WEFT_TESTS_STORE_SERVER_FIXTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/store/store.h"
#include "log_capture.h"

typedef struct fixture {
    weft_store_server_t *server;
    pthread_mutex_t lapse_lock;
    char lapsed[256]; /* the keys on_lapse was called with, each followed by ';' */
    char token[65];
    char hostport[64];
    int port;
} fixture_t;

static inline void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000},
              NULL);
}

static void note_lapse(void *arg, const char *key)
{
    fixture_t *f = arg;
    pthread_mutex_lock(&f->lapse_lock);
    size_t n = strlen(f->lapsed);
    snprintf(f->lapsed + n, sizeof(f->lapsed) - n, "%s;", key);
    pthread_mutex_unlock(&f->lapse_lock);
}

static inline bool lapsed_is(fixture_t *f, const char *want)
{
    pthread_mutex_lock(&f->lapse_lock);
    bool same = strcmp(f->lapsed, want) == 0;
    pthread_mutex_unlock(&f->lapse_lock);
    return same;
}

/* Start the fixture's server on @p port (0: a free one). */
static inline weft_status_t start_server(fixture_t *f, int port)
{
    weft_store_server_params_t p = {.size = sizeof(p),
                                    .bind_addr = NULL,
                                    .port = port,
                                    .token = f->token,
                                    .logger = &test_logger,
                                    .on_lapse = note_lapse,
                                    .on_lapse_arg = f};
    weft_status_t st = weft__store_server_start(&p, &f->server);
    if (st == WEFT_OK) {
        f->port = weft__store_server_port(f->server);
        snprintf(f->hostport, sizeof(f->hostport), "127.0.0.1:%d", f->port);
    }
    return st;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    pthread_mutex_init(&f->lapse_lock, NULL);
    log_clear();
    assert_int_equal(weft__store_make_token(f->token), WEFT_OK);
    assert_int_equal(start_server(f, 0), WEFT_OK);
    assert_true(f->port > 0 && f->port < 65536);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    weft__store_server_stop(f->server);
    pthread_mutex_destroy(&f->lapse_lock);
    free(f);
    return 0;
}

#endif
