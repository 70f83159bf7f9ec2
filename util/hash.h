/*
 * FNV-1a (64-bit): a fast, non-cryptographic hash for hash tables and for checking that
 * ranks hold the same data. Header-only and dependency-free.
 */
#ifndef WEFT_UTIL_HASH_H
#define WEFT_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define WEFT__FNV1A_SEED 1469598103934665603ull

/* Continues the FNV-1a hash @p h (start from WEFT__FNV1A_SEED) over @p len bytes. */
static inline uint64_t weft__fnv1a(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

#endif
