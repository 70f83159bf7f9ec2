/*
 * The monotonic clock every part of weft measures deadlines and waits with.
 * Header-only and dependency-free, so transports, the store and the launcher share it.
 */
#ifndef WEFT_UTIL_CLOCK_H
#define WEFT_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t weft__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline uint64_t weft__now_ms(void)
{
    return weft__now_ns() / 1000000ull;
}

/* @p ms in nanoseconds, saturating at UINT64_MAX (an "infinite" timeout stays infinite). */
static inline uint64_t weft__ms_to_ns(uint64_t ms)
{
    return ms > UINT64_MAX / 1000000ull ? UINT64_MAX : ms * 1000000ull;
}

#endif
