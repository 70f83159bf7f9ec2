/*
 * Bytes to lowercase hex and back, for the secrets and keys weft names in text (the data
 * key a rank is handed, the names in /dev/shm, the etcd root). Header-only and
 * dependency-free.
 */
#ifndef WEFT_UTIL_HEX_H
#define WEFT_UTIL_HEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* @p n bytes of @p src as 2n lowercase hex digits and a NUL into @p out (2n + 1 bytes). */
static inline void weft__hex_encode(const void *src, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* 2n lowercase hex digits of @p src into @p n bytes of @p out; false at any other character
 * (upper case included), @p out then partly written. */
static inline bool weft__hex_decode(const char *src, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < 2 * n; i++) {
        char c = src[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) {
            return false;
        }
        out[i / 2] = (uint8_t)(i % 2 == 0 ? d << 4 : out[i / 2] | d);
    }
    return true;
}

#endif
