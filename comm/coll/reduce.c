/*
 * Reduction kernels. Each (dtype, op) pair has a two-operand kernel (inout op= in) and a
 * three-operand kernel (out = a op b), both plain loops over restrict-qualified arrays so
 * that GCC vectorises them without runtime alias checks. The three-operand form lets ring
 * algorithms write a received chunk combined with the local input straight into the output
 * buffer instead of copying the input there first.
 *
 * The library is built at -O2, where GCC only vectorises loops its "very cheap" cost model
 * accepts; these loops are the hot path of every reduction, so this file asks for -O3
 * (check with -fopt-info-vec-optimized: every kernel below reports "loop vectorized").
 *
 * Half-precision conversions are branch-free (selects instead of ifs) so the loops that
 * use them vectorise too; they are exact IEEE conversions with round-to-nearest-even.
 */
#pragma GCC optimize("O3")

#include <string.h>

#include "comm/coll/reduce.h"

/* ---- half-precision conversions ---- */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    int32_t exp = (h >> 10) & 0x1f;
    int32_t man = h & 0x3ff;
    /* Rebias the exponent from 15 to 127 and widen the mantissa from 10 to 23 bits. */
    uint32_t normal = ((uint32_t)(exp + 112) << 23) | ((uint32_t)man << 13);
    /* Infinity keeps a zero mantissa; NaN keeps its payload (and its quiet bit). */
    uint32_t special = 0x7f800000u | ((uint32_t)man << 13);
    /* Zero and subnormals are man * 2^-24, exact in float. */
    uint32_t sub = f32_bits((float)man * 0x1p-24f);
    /* Masks instead of branches keep the loops that call this vectorisable. */
    uint32_t is_sub = 0u - (uint32_t)(exp == 0);
    uint32_t is_special = 0u - (uint32_t)(exp == 31);
    uint32_t bits = (sub & is_sub) | (special & is_special) | (normal & ~(is_sub | is_special));
    return bits_f32(bits | sign);
}

static inline uint16_t float_to_half(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t a = (int32_t)(x & 0x7fffffffu); /* magnitude; signed compares vectorise best */
    /* Normal half: rebias, then round the 13 dropped bits to nearest even; a carry out of
     * the mantissa correctly bumps the exponent. */
    uint32_t odd = ((uint32_t)a >> 13) & 1u;
    uint32_t normal = ((uint32_t)a - 0x38000000u + 0xfffu + odd) >> 13;
    /* Below the smallest normal half (2^-14): adding 0.5 puts the value's bits at the
     * position of half subnormals (ulp of 0.5 is 2^-24), so the FPU rounds to nearest
     * even for us; subtracting 0.5's bits leaves the subnormal half. */
    uint32_t sub = f32_bits(bits_f32((uint32_t)a) + 0.5f) - 0x3f000000u;
    /* NaN: quiet, keep the top of the payload. */
    uint32_t nan = 0x7e00u | (((uint32_t)a >> 13) & 0x3ffu);
    /* 65520 and above round to infinity (65504 is the largest half; ties go to even). */
    uint32_t is_nan = 0u - (uint32_t)(a > 0x7f800000);
    uint32_t is_inf = ~is_nan & (0u - (uint32_t)(a >= 0x477ff000));
    uint32_t is_sub = 0u - (uint32_t)(a < 0x38800000);
    uint32_t is_normal = ~(is_nan | is_inf | is_sub);
    uint32_t h = (nan & is_nan) | (0x7c00u & is_inf) | (sub & is_sub) | (normal & is_normal);
    return (uint16_t)(h | sign);
}

static inline float bf16_to_float(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

static inline uint16_t float_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    /* Round the 16 dropped bits to nearest even; overflow becomes infinity by carry. */
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x40u;
    return (uint16_t)((int32_t)(x & 0x7fffffffu) > 0x7f800000 ? nan : rounded);
}

float weft__f16_to_f32(uint16_t h)
{
    return half_to_float(h);
}

uint16_t weft__f32_to_f16(float f)
{
    return float_to_half(f);
}

float weft__bf16_to_f32(uint16_t b)
{
    return bf16_to_float(b);
}

uint16_t weft__f32_to_bf16(float f)
{
    return float_to_bf16(f);
}

/* ---- operators ---- */

#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
/* NaN-propagating: a NaN in either operand gives NaN (a comparison with NaN is false). */
#define OP_FMAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define OP_FMIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define OP_IMAX(a, b) ((a) > (b) ? (a) : (b))
#define OP_IMIN(a, b) ((a) < (b) ? (a) : (b))
/* Signed sum and product wrap: computed in the unsigned type of the same width. */
#define OP_WSUM32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define OP_WPROD32(a, b) ((int32_t)((uint32_t)(a) * (uint32_t)(b)))
#define OP_WSUM64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define OP_WPROD64(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
#define OP_U8SUM(a, b) ((uint8_t)((a) + (b)))
#define OP_U8PROD(a, b) ((uint8_t)((a) * (b)))

/*
 * The kernels are built for several instruction sets and the loader picks the widest the
 * CPU has (GCC function multi-versioning): the baseline x86-64 target only has 16-byte
 * SSE2 vectors, and the reductions of large shared-memory collectives ran 1.25x faster
 * with 32-byte ones (weft-perf allreduce, 8 MiB, 2 ranks).
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KERNEL
#endif

typedef void (*kernel2_fn)(void *inout, const void *in, size_t n);
typedef void (*kernel3_fn)(void *out, const void *a, const void *b, size_t n);

/* Kernels of a type whose elements are combined directly. */
#define DIRECT_KERNELS(name, T, OP)                                                                \
    KERNEL static void k2_##name(void *restrict inout_, const void *restrict in_, size_t n)               \
    {                                                                                              \
        T *io = inout_;                                                                            \
        const T *in = in_;                                                                         \
        for (size_t i = 0; i < n; i++) {                                                           \
            io[i] = OP(io[i], in[i]);                                                              \
        }                                                                                          \
    }                                                                                              \
    KERNEL static void k3_##name(void *restrict out_, const void *restrict a_, const void *restrict b_,   \
                          size_t n)                                                                \
    {                                                                                              \
        T *out = out_;                                                                             \
        const T *a = a_;                                                                           \
        const T *b = b_;                                                                           \
        for (size_t i = 0; i < n; i++) {                                                           \
            out[i] = OP(a[i], b[i]);                                                               \
        }                                                                                          \
    }

/* Kernels of a 16-bit float type: widen, combine in float, round back. */
#define HALF_KERNELS(name, TO_F, FROM_F, OP)                                                       \
    KERNEL static void k2_##name(void *restrict inout_, const void *restrict in_, size_t n)               \
    {                                                                                              \
        uint16_t *io = inout_;                                                                     \
        const uint16_t *in = in_;                                                                  \
        for (size_t i = 0; i < n; i++) {                                                           \
            io[i] = FROM_F(OP(TO_F(io[i]), TO_F(in[i])));                                          \
        }                                                                                          \
    }                                                                                              \
    KERNEL static void k3_##name(void *restrict out_, const void *restrict a_, const void *restrict b_,   \
                          size_t n)                                                                \
    {                                                                                              \
        uint16_t *out = out_;                                                                      \
        const uint16_t *a = a_;                                                                    \
        const uint16_t *b = b_;                                                                    \
        for (size_t i = 0; i < n; i++) {                                                           \
            out[i] = FROM_F(OP(TO_F(a[i]), TO_F(b[i])));                                           \
        }                                                                                          \
    }

DIRECT_KERNELS(f32_sum, float, OP_SUM)
DIRECT_KERNELS(f32_prod, float, OP_PROD)
DIRECT_KERNELS(f32_max, float, OP_FMAX)
DIRECT_KERNELS(f32_min, float, OP_FMIN)
DIRECT_KERNELS(f64_sum, double, OP_SUM)
DIRECT_KERNELS(f64_prod, double, OP_PROD)
DIRECT_KERNELS(f64_max, double, OP_FMAX)
DIRECT_KERNELS(f64_min, double, OP_FMIN)
HALF_KERNELS(f16_sum, half_to_float, float_to_half, OP_SUM)
HALF_KERNELS(f16_prod, half_to_float, float_to_half, OP_PROD)
HALF_KERNELS(f16_max, half_to_float, float_to_half, OP_FMAX)
HALF_KERNELS(f16_min, half_to_float, float_to_half, OP_FMIN)
HALF_KERNELS(bf16_sum, bf16_to_float, float_to_bf16, OP_SUM)
HALF_KERNELS(bf16_prod, bf16_to_float, float_to_bf16, OP_PROD)
HALF_KERNELS(bf16_max, bf16_to_float, float_to_bf16, OP_FMAX)
HALF_KERNELS(bf16_min, bf16_to_float, float_to_bf16, OP_FMIN)
DIRECT_KERNELS(i32_sum, int32_t, OP_WSUM32)
DIRECT_KERNELS(i32_prod, int32_t, OP_WPROD32)
DIRECT_KERNELS(i32_max, int32_t, OP_IMAX)
DIRECT_KERNELS(i32_min, int32_t, OP_IMIN)
DIRECT_KERNELS(i64_sum, int64_t, OP_WSUM64)
DIRECT_KERNELS(i64_prod, int64_t, OP_WPROD64)
DIRECT_KERNELS(i64_max, int64_t, OP_IMAX)
DIRECT_KERNELS(i64_min, int64_t, OP_IMIN)
DIRECT_KERNELS(u8_sum, uint8_t, OP_U8SUM)
DIRECT_KERNELS(u8_prod, uint8_t, OP_U8PROD)
DIRECT_KERNELS(u8_max, uint8_t, OP_IMAX)
DIRECT_KERNELS(u8_min, uint8_t, OP_IMIN)

#define N_BUILTIN_OPS 4 /* WEFT_SUM .. WEFT_MIN */
#define ROW(t)                                                                                     \
    {                                                                                              \
        k2_##t##_sum, k2_##t##_prod, k2_##t##_max, k2_##t##_min                                    \
    }
#define ROW3(t)                                                                                    \
    {                                                                                              \
        k3_##t##_sum, k3_##t##_prod, k3_##t##_max, k3_##t##_min                                    \
    }

/* Indexed by weft_dtype_t (WEFT_F32 .. WEFT_U8), then by operator. */
static const kernel2_fn kernels2[WEFT_DTYPE_USER][N_BUILTIN_OPS] = {
    ROW(f32), ROW(f64), ROW(f16), ROW(bf16), ROW(i32), ROW(i64), ROW(u8),
};
static const kernel3_fn kernels3[WEFT_DTYPE_USER][N_BUILTIN_OPS] = {
    ROW3(f32), ROW3(f64), ROW3(f16), ROW3(bf16), ROW3(i32), ROW3(i64), ROW3(u8),
};

#define AVERAGE(type, p, count, n)                                                                 \
    do {                                                                                           \
        type *v_ = (type *)(p);                                                                    \
        for (size_t i_ = 0; i_ < (count); i_++) {                                                  \
            v_[i_] = (type)(v_[i_] / (n));                                                         \
        }                                                                                          \
    } while (0)

void weft__reduce_average(void *buf, size_t count, weft_dtype_t dtype, int n)
{
    uint16_t *h = buf;
    switch (dtype) {
    case WEFT_F32:
        AVERAGE(float, buf, count, (float)n);
        break;
    case WEFT_F64:
        AVERAGE(double, buf, count, (double)n);
        break;
    case WEFT_F16:
        for (size_t i = 0; i < count; i++) {
            h[i] = float_to_half(half_to_float(h[i]) / (float)n);
        }
        break;
    case WEFT_BF16:
        for (size_t i = 0; i < count; i++) {
            h[i] = float_to_bf16(bf16_to_float(h[i]) / (float)n);
        }
        break;
    case WEFT_I32:
        AVERAGE(int32_t, buf, count, (int32_t)n);
        break;
    case WEFT_I64:
        AVERAGE(int64_t, buf, count, (int64_t)n);
        break;
    case WEFT_U8:
        AVERAGE(uint8_t, buf, count, (unsigned)n);
        break;
    default:
        break;
    }
}

bool weft__reduce_builtin_ok(weft_dtype_t dtype, weft_op_t op)
{
    return (unsigned)dtype < WEFT_DTYPE_USER && op >= 0 && op < N_BUILTIN_OPS;
}

void weft__reduce_builtin(void *inout, const void *in, size_t count, weft_dtype_t dtype,
                          weft_op_t op)
{
    kernels2[dtype][op](inout, in, count);
}

void weft__reduce3_builtin(void *out, const void *a, const void *b, size_t count,
                           weft_dtype_t dtype, weft_op_t op)
{
    if (out == a) {
        kernels2[dtype][op](out, b, count);
    } else if (out == b) {
        kernels2[dtype][op](out, a, count); /* every built-in operator commutes */
    } else {
        kernels3[dtype][op](out, a, b, count);
    }
}

void weft__reducer_apply(const weft_reducer_t *r, void *inout, const void *in, size_t count)
{
    if (count == 0) {
        return;
    }
    if (r->user_fn != NULL) {
        r->user_fn(inout, in, count, r->user_arg);
    } else {
        kernels2[r->dtype][r->op](inout, in, count);
    }
}

void weft__reducer_apply3(const weft_reducer_t *r, void *out, const void *a, const void *b,
                          size_t count)
{
    if (count == 0) {
        return;
    }
    if (r->user_fn == NULL) {
        weft__reduce3_builtin(out, a, b, count, r->dtype, r->op);
    } else if (out == a) {
        r->user_fn(out, b, count, r->user_arg);
    } else if (out == b) {
        r->user_fn(out, a, count, r->user_arg); /* user operators must commute */
    } else {
        memcpy(out, a, count * r->elem_size);
        r->user_fn(out, b, count, r->user_arg);
    }
}
