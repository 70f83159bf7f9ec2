/*
 * bf16 and f16 values for the vocab tests, converted by the compiler (_Float16) and by
 * plain bit rounding, independently of weft's converters.
 */
#ifndef WEFT_TESTS_VOCAB_HALF_H
#define WEFT_TESTS_VOCAB_HALF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "weft/coll.h"

static inline uint16_t to16(weft_dtype_t dt, float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if (dt == WEFT_BF16) {
        if (isnan(f)) {
            return 0x7fc0;
        }
        return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static inline float from16(weft_dtype_t dt, uint16_t u)
{
    if (dt == WEFT_BF16) {
        uint32_t x = (uint32_t)u << 16;
        float f;
        memcpy(&f, &x, 4);
        return f;
    }
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

/* Round every entry of @p a to the dtype in place (the reference sees what weft sees). */
static inline void round_all(weft_dtype_t dt, float *a, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        a[i] = from16(dt, to16(dt, a[i]));
    }
}

static inline uint16_t *pack(weft_dtype_t dt, const float *a, size_t count)
{
    uint16_t *p = malloc(count * 2 + 2);
    for (size_t i = 0; i < count; i++) {
        p[i] = to16(dt, a[i]);
    }
    return p;
}

static inline float *unpack(weft_dtype_t dt, const uint16_t *p, size_t count)
{
    float *a = malloc(count * sizeof(float) + 4);
    for (size_t i = 0; i < count; i++) {
        a[i] = from16(dt, p[i]);
    }
    return a;
}

#endif
