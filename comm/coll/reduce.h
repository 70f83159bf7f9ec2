/*
 * Reduction kernels: element-wise combination of two arrays for every built-in dtype and
 * operator, plus the f16/bf16 <-> float conversions they use. Half-precision types are
 * widened to float, combined in float and rounded back to nearest-even, one element at a
 * time. Integer sum and prod wrap around (two's complement) instead of overflowing.
 * max/min of floating-point values propagate NaN.
 *
 * The kernels are plain loops written so that the compiler vectorises them (reduce.c is
 * compiled at -O3 whatever the build type).
 */
#ifndef WEFT_REDUCE_H
#define WEFT_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/coll.h"

/* inout[i] = inout[i] (op) in[i] for a built-in dtype and op. The arrays must not overlap. */
void weft__reduce_builtin(void *inout, const void *in, size_t count, weft_dtype_t dtype,
                          weft_op_t op);

/*
 * out[i] = a[i] (op) b[i]. @p out may be the same pointer as @p a or @p b (the operators are
 * commutative); otherwise no two arrays may overlap.
 */
void weft__reduce3_builtin(void *out, const void *a, const void *b, size_t count,
                           weft_dtype_t dtype, weft_op_t op);

/* buf[i] /= n for @p count elements of a built-in @p dtype: WEFT_AVG's last step (floats
 * divide, half types in float; integers divide toward zero). */
void weft__reduce_average(void *buf, size_t count, weft_dtype_t dtype, int n);

/* True when @p op is a built-in operator that @p dtype supports. */
bool weft__reduce_builtin_ok(weft_dtype_t dtype, weft_op_t op);

/*
 * A resolved reduction: a built-in (dtype, op) or a user operator's params. Collectives
 * resolve once at start so the progress path does no lookups.
 */
typedef struct weft_reducer {
    weft_dtype_t dtype;
    weft_op_t op;
    size_t elem_size;
    weft_user_reduce_fn user_fn; /* NULL for built-in operators */
    void *user_arg;
} weft_reducer_t;

/* inout = inout (op) in, @p count elements. */
void weft__reducer_apply(const weft_reducer_t *r, void *inout, const void *in, size_t count);
/* out = a (op) b; out may equal a or b, otherwise no overlap. */
void weft__reducer_apply3(const weft_reducer_t *r, void *out, const void *a, const void *b,
                          size_t count);

/* ---- half-precision conversions (exposed for tests) ---- */
float weft__f16_to_f32(uint16_t h);
uint16_t weft__f32_to_f16(float f); /* round to nearest even; NaN stays NaN (quiet) */
float weft__bf16_to_f32(uint16_t b);
uint16_t weft__f32_to_bf16(float f); /* round to nearest even; NaN stays NaN (quiet) */

#endif
