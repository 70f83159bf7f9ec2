/*
 * Growing an array in place: capacity doubles, so appending n items costs O(n).
 * Header-only and dependency-free.
 */
#ifndef WEFT_UTIL_ARRAY_H
#define WEFT_UTIL_ARRAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Make *arr (capacity *cap elements of @p elem bytes) hold at least @p need elements.
 * false if the memory cannot be had; *arr and *cap are then unchanged. */
static inline bool weft__array_reserve(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) {
        return true;
    }
    size_t n = *cap ? *cap : 8;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem) {
            return false;
        }
        n *= 2;
    }
    void *p = realloc(*arr, n * elem);
    if (p == NULL) {
        return false;
    }
    *arr = p;
    *cap = n;
    return true;
}

#endif
