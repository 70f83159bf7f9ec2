/*
 * Public output structs that may grow start with `size_t size`, set by the caller to the
 * sizeof it was compiled with. The library fills only what fits, so a caller built
 * against an older header keeps working when a later one appends fields, and a caller
 * built against a newer one gets zeros past what this library knows. Header-only.
 */
#ifndef WEFT_UTIL_SIZED_H
#define WEFT_UTIL_SIZED_H

#include <stddef.h>
#include <string.h>

/* Bytes up to and including field @p last of struct type @p T: the least @c size a
 * caller may pass (the struct as the ABI that introduced @c size made it). */
#define WEFT__SIZED_MIN(T, last) (offsetof(T, last) + sizeof(((T *)0)->last))

/* Copy @p full (a complete struct of @p full_size bytes, its first field its size) into
 * @p out, whose first field says how many bytes it has (at least sizeof(size_t)): the
 * fields that fit, zeros past @p full_size, and out's size field unchanged. */
static inline void weft__sized_copy(void *out, const void *full, size_t full_size)
{
    size_t have;
    memcpy(&have, out, sizeof(have));
    size_t n = have < full_size ? have : full_size;
    memcpy((char *)out + sizeof(size_t), (const char *)full + sizeof(size_t), n - sizeof(size_t));
    if (have > n) {
        memset((char *)out + n, 0, have - n);
    }
}

#endif
