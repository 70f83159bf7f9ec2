/* Logging: every line carries the rank; the application may install its own sink. */
#ifndef WEFT_LOG_H
#define WEFT_LOG_H

#include <stdarg.h>

#include "weft/core.h"

typedef struct weft_logger {
    weft_log_level_t level;
    int rank; /* -1 until known */
    weft_log_fn fn; /* NULL: stderr */
    void *arg;
    const char *prefix; /* "weft" or "weftrun" */
} weft_logger_t;

/* A NULL logger logs warnings and errors to stderr. */
void weft__log(const weft_logger_t *lg, weft_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void weft__vlog(const weft_logger_t *lg, weft_log_level_t level, const char *fmt, va_list ap);
/* Adapter with the signature of weft_tl_params_t::log; arg is a weft_logger_t *. */
void weft__log_tl(void *arg, int level, const char *fmt, va_list ap);

#define WEFT_LOG(lg, lvl, ...)                                                                 \
    do {                                                                                       \
        const weft_logger_t *lg_ = (lg);                                                       \
        if ((lg_ == NULL && (lvl) <= WEFT_LOG_WARN) || (lg_ != NULL && (lvl) <= lg_->level)) { \
            weft__log(lg_, (lvl), __VA_ARGS__);                                                \
        }                                                                                      \
    } while (0)
#define WEFT_ERROR(lg, ...) WEFT_LOG(lg, WEFT_LOG_ERROR, __VA_ARGS__)
#define WEFT_WARN(lg, ...) WEFT_LOG(lg, WEFT_LOG_WARN, __VA_ARGS__)
#define WEFT_INFO(lg, ...) WEFT_LOG(lg, WEFT_LOG_INFO, __VA_ARGS__)
#define WEFT_DEBUG(lg, ...) WEFT_LOG(lg, WEFT_LOG_DEBUG, __VA_ARGS__)

#endif
