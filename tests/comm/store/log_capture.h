/*
 * The store tests' logger: every message at WARN and above is kept in a buffer, one line
 * each ("<level> <message>"), so a test can check what the store or a client said.
 */
#ifndef WEFT_TESTS_STORE_LOG_CAPTURE_H
#define WEFT_TESTS_STORE_LOG_CAPTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/ctx/log.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[1 << 16];
static size_t log_len;

static void capture(weft_log_level_t level, int rank, const char *msg, void *arg)
{
    (void)rank;
    (void)arg;
    pthread_mutex_lock(&log_lock);
    int n = snprintf(log_text + log_len, sizeof(log_text) - log_len, "%d %s\n", (int)level, msg);
    if (n > 0 && (size_t)n < sizeof(log_text) - log_len) {
        log_len += (size_t)n;
    }
    pthread_mutex_unlock(&log_lock);
}

/* True when one captured line at @p level holds both @p a and @p b. */
static bool log_has(weft_log_level_t level, const char *a, const char *b)
{
    bool found = false;
    pthread_mutex_lock(&log_lock);
    char *copy = strdup(log_text);
    pthread_mutex_unlock(&log_lock);
    assert_non_null(copy);
    char *save;
    for (char *line = strtok_r(copy, "\n", &save); line != NULL && !found;
         line = strtok_r(NULL, "\n", &save)) {
        found = atoi(line) == (int)level && strstr(line, a) != NULL && strstr(line, b) != NULL;
    }
    free(copy);
    return found;
}

static inline void log_clear(void)
{
    pthread_mutex_lock(&log_lock);
    log_len = 0;
    log_text[0] = '\0';
    pthread_mutex_unlock(&log_lock);
}

static weft_logger_t test_logger = {
    .level = WEFT_LOG_WARN, .rank = -1, .fn = capture, .arg = NULL, .prefix = "test"};

#endif
