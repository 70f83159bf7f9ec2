#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/ctx/log.h"

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

void weft__vlog(const weft_logger_t *lg, weft_log_level_t level, const char *fmt, va_list ap)
{
    char msg[1024];
    int rank = lg != NULL ? lg->rank : -1;

    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n') {
        msg[--n] = '\0';
    }
    if (lg != NULL && lg->fn != NULL) {
        lg->fn(level, rank, msg, lg->arg);
        return;
    }
    const char *prefix = (lg != NULL && lg->prefix != NULL) ? lg->prefix : "weft";
    const char *lname = (unsigned)level <= WEFT_LOG_TRACE ? level_names[level] : "?";
    /* One fprintf per line so lines of concurrent ranks do not interleave mid-line. */
    if (rank >= 0) {
        fprintf(stderr, "[%s %d] %s: %s\n", prefix, rank, lname, msg);
    } else {
        fprintf(stderr, "[%s] %s: %s\n", prefix, lname, msg);
    }
}

void weft__log(const weft_logger_t *lg, weft_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    weft__vlog(lg, level, fmt, ap);
    va_end(ap);
}

void weft__log_tl(void *arg, int level, const char *fmt, va_list ap)
{
    const weft_logger_t *lg = arg;
    if ((lg == NULL && level > WEFT_LOG_WARN) || (lg != NULL && level > (int)lg->level)) {
        return;
    }
    weft__vlog(lg, (weft_log_level_t)level, fmt, ap);
}
