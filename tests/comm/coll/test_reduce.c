/*
 * Reduction kernels and half-precision conversions against independent references:
 * halves are decoded with ldexp, rounding is checked against a search over the sorted
 * table of every finite half (ties to the even pattern), and every kernel is compared
 * element by element with a scalar loop written here.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/coll/reduce.h"

/* ---- independent references ---- */

static double ref_half_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0) {
        v = ldexp((double)m, -24);
    } else if (e == 31) {
        v = m == 0 ? INFINITY : NAN;
    } else {
        v = ldexp(1.0 + m / 1024.0, e - 15);
    }
    return s ? -v : v;
}

/* Round @p x (finite or not) to the nearest half, ties to the even bit pattern. */
static uint16_t ref_to_half(double x)
{
    if (isnan(x)) {
        return 0x7e00;
    }
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a >= 65520.0) {
        return sign | 0x7c00;
    }
    /* Positive finite halves 0x0000..0x7bff increase with their bit pattern. */
    int lo = 0, hi = 0x7bff;
    while (lo < hi) { /* largest pattern with value <= a */
        int mid = (lo + hi + 1) / 2;
        if (ref_half_value((uint16_t)mid) <= a) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    if (lo == 0x7bff) {
        return sign | 0x7bff; /* between 65504 and 65520 */
    }
    double below = ref_half_value((uint16_t)lo), above = ref_half_value((uint16_t)(lo + 1));
    int pick;
    if (a - below < above - a) {
        pick = lo;
    } else if (a - below > above - a) {
        pick = lo + 1;
    } else {
        pick = (lo & 1) ? lo + 1 : lo;
    }
    return sign | (uint16_t)pick;
}

static float bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint32_t float_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static uint16_t ref_to_bf16(float f)
{
    if (isnan(f)) {
        return 0x7fc0;
    }
    uint32_t x = float_to_bits(f);
    if (isinf(f)) {
        return (uint16_t)(x >> 16);
    }
    /* The two candidates: truncated toward zero, and the next bf16 away from zero (past
     * the largest finite one that is infinity, at the boundary 2^128). */
    uint32_t lo = x & 0xffff0000u, hi = lo + 0x10000u;
    double v = f, vlo = bits_to_float(lo);
    double vhi = ((hi >> 23) & 0xff) == 0xff ? copysign(ldexp(1.0, 128), v) : bits_to_float(hi);
    double dlo = fabs(v - vlo), dhi = fabs(vhi - v);
    uint32_t pick;
    if (dlo < dhi) {
        pick = lo;
    } else if (dlo > dhi) {
        pick = hi;
    } else {
        pick = ((lo >> 16) & 1) ? hi : lo;
    }
    return (uint16_t)(pick >> 16);
}

static bool half_is_nan(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

static bool bf16_is_nan(uint16_t b)
{
    return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
}

/* ---- conversions ---- */

static void test_f16_decode_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = weft__f16_to_f32((uint16_t)h);
        double ref = ref_half_value((uint16_t)h);
        if (isnan(ref)) {
            assert_true(isnan(f));
        } else {
            assert_true((double)f == ref);
            assert_int_equal(signbit(f) != 0, signbit(ref) != 0); /* -0 stays -0 */
        }
    }
}

static void test_f16_roundtrip_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t back = weft__f32_to_f16(weft__f16_to_f32((uint16_t)h));
        if (half_is_nan((uint16_t)h)) {
            assert_true(half_is_nan(back));
            assert_int_equal(back & 0x8000, h & 0x8000);
        } else {
            assert_int_equal(back, h);
        }
    }
}

/* Every tie between neighbouring halves, and one float ulp either side of it. */
static void test_f16_rounding_ties(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double mid = (ref_half_value((uint16_t)h) + ref_half_value((uint16_t)(h + 1))) / 2;
        float fm = (float)mid;
        assert_true((double)fm == mid); /* 12 significant bits: exact in float */
        float fs[3] = {fm, nextafterf(fm, 0.0f), nextafterf(fm, INFINITY)};
        for (int i = 0; i < 3; i++) {
            assert_int_equal(weft__f32_to_f16(fs[i]), ref_to_half(fs[i]));
            assert_int_equal(weft__f32_to_f16(-fs[i]), ref_to_half(-fs[i]));
        }
    }
}

static void test_f16_edges(void **state)
{
    (void)state;
    assert_int_equal(weft__f32_to_f16(0.0f), 0x0000);
    assert_int_equal(weft__f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(weft__f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(weft__f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(weft__f32_to_f16(65520.0f), 0x7c00); /* tie rounds to even: infinity */
    assert_int_equal(weft__f32_to_f16(FLT_MAX), 0x7c00);
    assert_int_equal(weft__f32_to_f16(-FLT_MAX), 0xfc00);
    assert_int_equal(weft__f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(weft__f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(weft__f32_to_f16(0x1p-24f), 0x0001); /* smallest subnormal */
    assert_int_equal(weft__f32_to_f16(0x1p-25f), 0x0000); /* tie: to even (zero) */
    assert_int_equal(weft__f32_to_f16(0x1.8p-25f), 0x0001);
    assert_int_equal(weft__f32_to_f16(0x1p-14f), 0x0400);     /* smallest normal */
    assert_int_equal(weft__f32_to_f16(0x1.ff8p-15f), 0x03ff); /* largest subnormal */
    assert_int_equal(weft__f32_to_f16(0x1.ffcp-15f), 0x0400); /* tie: up into normals */
    assert_int_equal(weft__f32_to_f16(FLT_MIN), 0x0000);
    assert_int_equal(weft__f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(weft__f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    assert_int_equal(weft__f32_to_f16(1.0f + 0x1.8p-11f), 0x3c01);
    assert_true(half_is_nan(weft__f32_to_f16(NAN)));
    assert_true(half_is_nan(weft__f32_to_f16(bits_to_float(0x7f800001u)))); /* tiny payload */
    assert_true(half_is_nan(weft__f32_to_f16(bits_to_float(0xffc00000u))));
    assert_true(isinf(weft__f16_to_f32(0x7c00)) && weft__f16_to_f32(0x7c00) > 0);
    assert_true(isnan(weft__f16_to_f32(0x7c01))); /* signalling NaN stays NaN */
    /* A pseudo-random sweep over the whole float range. */
    uint32_t x = 12345;
    for (int i = 0; i < 200000; i++) {
        x = x * 1664525u + 1013904223u;
        float f = bits_to_float(x);
        uint16_t got = weft__f32_to_f16(f);
        if (isnan(f)) {
            assert_true(half_is_nan(got));
        } else {
            assert_int_equal(got, ref_to_half(f));
        }
    }
}

static void test_bf16(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 0x10000; b++) {
        float f = weft__bf16_to_f32((uint16_t)b);
        assert_int_equal(float_to_bits(f), b << 16);
        uint16_t back = weft__f32_to_bf16(f);
        if (bf16_is_nan((uint16_t)b)) {
            assert_true(bf16_is_nan(back));
        } else {
            assert_int_equal(back, b);
        }
    }
    assert_int_equal(weft__f32_to_bf16(FLT_MAX), 0x7f80); /* rounds up to infinity */
    assert_int_equal(weft__f32_to_bf16(-FLT_MAX), 0xff80);
    assert_int_equal(weft__f32_to_bf16(bits_to_float(0x3f808000u)), 0x3f80); /* tie, even */
    assert_int_equal(weft__f32_to_bf16(bits_to_float(0x3f818000u)), 0x3f82); /* tie, odd */
    assert_int_equal(weft__f32_to_bf16(bits_to_float(0x3f808001u)), 0x3f81);
    assert_true(bf16_is_nan(weft__f32_to_bf16(bits_to_float(0x7f800001u)))); /* not inf */
    assert_true(bf16_is_nan(weft__f32_to_bf16(NAN)));
    assert_int_equal(weft__f32_to_bf16(-0.0f), 0x8000);
    uint32_t x = 777;
    for (int i = 0; i < 200000; i++) {
        x = x * 1664525u + 1013904223u;
        float f = bits_to_float(x);
        uint16_t got = weft__f32_to_bf16(f);
        if (isnan(f)) {
            assert_true(bf16_is_nan(got));
        } else {
            assert_int_equal(got, ref_to_bf16(f));
        }
    }
}

/* ---- kernels ---- */

#define N_ELEMS 1031 /* odd, not a multiple of any vector width: exercises loop tails */

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Random values of a dtype; floats in a range where products stay finite. */
static void fill_random(void *buf, size_t n, weft_dtype_t dt)
{
    for (size_t i = 0; i < n; i++) {
        double v = ((double)(rnd() % 20001) - 10000.0) / 1000.0; /* [-10, 10] */
        switch (dt) {
        case WEFT_F32:
            ((float *)buf)[i] = (float)v;
            break;
        case WEFT_F64:
            ((double *)buf)[i] = v;
            break;
        case WEFT_F16:
            ((uint16_t *)buf)[i] = ref_to_half(v);
            break;
        case WEFT_BF16:
            ((uint16_t *)buf)[i] = ref_to_bf16((float)v);
            break;
        case WEFT_I32:
            ((int32_t *)buf)[i] = (int32_t)rnd();
            break;
        case WEFT_I64:
            ((int64_t *)buf)[i] = (int64_t)rnd();
            break;
        case WEFT_U8:
            ((uint8_t *)buf)[i] = (uint8_t)rnd();
            break;
        default:
            break;
        }
    }
}

static double fop(weft_op_t op, double a, double b)
{
    switch (op) {
    case WEFT_SUM:
        return a + b;
    case WEFT_PROD:
        return a * b;
    case WEFT_MAX:
        return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b);
    default:
        return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b);
    }
}

static uint64_t uop(weft_op_t op, uint64_t a, uint64_t b, int64_t sa, int64_t sb, bool sgn)
{
    switch (op) {
    case WEFT_SUM:
        return a + b;
    case WEFT_PROD:
        return a * b;
    case WEFT_MAX:
        return sgn ? (uint64_t)(sa > sb ? sa : sb) : (a > b ? a : b);
    default:
        return sgn ? (uint64_t)(sa < sb ? sa : sb) : (a < b ? a : b);
    }
}

/* Reference a (op) b of element i, compared with got[i]. */
static void check_elem(weft_dtype_t dt, weft_op_t op, const void *a, const void *b, const void *got,
                       size_t i)
{
    switch (dt) {
    case WEFT_F32: {
        float r = (float)fop(op, ((const float *)a)[i], ((const float *)b)[i]);
        float g = ((const float *)got)[i];
        if (op == WEFT_SUM) { /* a float sum rounded once: same as the float op */
            r = ((const float *)a)[i] + ((const float *)b)[i];
        } else if (op == WEFT_PROD) {
            r = ((const float *)a)[i] * ((const float *)b)[i];
        }
        assert_true(isnan(r) ? isnan(g) : float_to_bits(r) == float_to_bits(g));
        break;
    }
    case WEFT_F64: {
        double r = fop(op, ((const double *)a)[i], ((const double *)b)[i]);
        double g = ((const double *)got)[i];
        assert_true(isnan(r) ? isnan(g) : r == g);
        break;
    }
    case WEFT_F16:
    case WEFT_BF16: {
        uint16_t ha = ((const uint16_t *)a)[i], hb = ((const uint16_t *)b)[i];
        float fa = dt == WEFT_F16 ? (float)ref_half_value(ha) : bits_to_float((uint32_t)ha << 16);
        float fb = dt == WEFT_F16 ? (float)ref_half_value(hb) : bits_to_float((uint32_t)hb << 16);
        float fr = op == WEFT_SUM ? fa + fb : op == WEFT_PROD ? fa * fb : (float)fop(op, fa, fb);
        uint16_t r = dt == WEFT_F16 ? ref_to_half(fr) : ref_to_bf16(fr);
        uint16_t g = ((const uint16_t *)got)[i];
        if (dt == WEFT_F16 ? half_is_nan(r) : bf16_is_nan(r)) {
            assert_true(dt == WEFT_F16 ? half_is_nan(g) : bf16_is_nan(g));
        } else {
            assert_int_equal(g, r);
        }
        break;
    }
    case WEFT_I32: {
        int32_t x = ((const int32_t *)a)[i], y = ((const int32_t *)b)[i];
        uint32_t r = (uint32_t)uop(op, (uint32_t)x, (uint32_t)y, x, y, true);
        assert_int_equal((uint32_t)((const int32_t *)got)[i], r);
        break;
    }
    case WEFT_I64: {
        int64_t x = ((const int64_t *)a)[i], y = ((const int64_t *)b)[i];
        uint64_t r = uop(op, (uint64_t)x, (uint64_t)y, x, y, true);
        assert_true((uint64_t)((const int64_t *)got)[i] == r);
        break;
    }
    case WEFT_U8: {
        uint8_t x = ((const uint8_t *)a)[i], y = ((const uint8_t *)b)[i];
        assert_int_equal(((const uint8_t *)got)[i], (uint8_t)uop(op, x, y, x, y, false));
        break;
    }
    default:
        fail();
    }
}

/* Every dtype and op; two-operand and all three-operand aliasings; unaligned starts. */
static void test_kernels_all(void **state)
{
    (void)state;
    for (int dt = WEFT_F32; dt <= WEFT_U8; dt++) {
        size_t es = weft_dtype_size((weft_dtype_t)dt);
        for (weft_op_t op = WEFT_SUM; op <= WEFT_MIN; op++) {
            assert_true(weft__reduce_builtin_ok((weft_dtype_t)dt, op));
            for (size_t shift = 0; shift < 2; shift++) {
                size_t n = N_ELEMS - shift;
                uint8_t *a = malloc((N_ELEMS + 1) * es), *b = malloc((N_ELEMS + 1) * es);
                uint8_t *o = malloc((N_ELEMS + 1) * es), *w = malloc((N_ELEMS + 1) * es);
                uint8_t *pa = a + shift * es, *pb = b + shift * es, *po = o + shift * es;
                fill_random(pa, n, (weft_dtype_t)dt);
                fill_random(pb, n, (weft_dtype_t)dt);
                /* out separate */
                weft__reduce3_builtin(po, pa, pb, n, (weft_dtype_t)dt, op);
                for (size_t i = 0; i < n; i++) {
                    check_elem((weft_dtype_t)dt, op, pa, pb, po, i);
                }
                /* out == a, out == b, two-operand */
                memcpy(w, pa, n * es);
                weft__reduce3_builtin(w, w, pb, n, (weft_dtype_t)dt, op);
                assert_memory_equal(w, po, n * es);
                memcpy(w, pb, n * es);
                weft__reduce3_builtin(w, pa, w, n, (weft_dtype_t)dt, op);
                assert_memory_equal(w, po, n * es);
                memcpy(w, pa, n * es);
                weft__reduce_builtin(w, pb, n, (weft_dtype_t)dt, op);
                assert_memory_equal(w, po, n * es);
                free(a);
                free(b);
                free(o);
                free(w);
            }
        }
    }
    assert_false(weft__reduce_builtin_ok(WEFT_DTYPE_USER, WEFT_SUM));
    assert_false(weft__reduce_builtin_ok(WEFT_F32, 4));
    assert_false(weft__reduce_builtin_ok(WEFT_F32, -1));
}

static void test_special_values(void **state)
{
    (void)state;
    float a[6] = {INFINITY, -INFINITY, NAN, 1.0f, -0.0f, 3.0f};
    float b[6] = {-INFINITY, -INFINITY, 2.0f, NAN, 0.0f, -3.0f};
    float o[6];
    weft__reduce3_builtin(o, a, b, 6, WEFT_F32, WEFT_SUM);
    assert_true(isnan(o[0]) && isinf(o[1]) && o[1] < 0 && isnan(o[2]) && isnan(o[3]));
    assert_true(o[4] == 0.0f && !signbit(o[4]) && o[5] == 0.0f);
    weft__reduce3_builtin(o, a, b, 6, WEFT_F32, WEFT_MAX);
    assert_true(isinf(o[0]) && o[0] > 0 && isnan(o[2]) && isnan(o[3]) && o[5] == 3.0f);
    weft__reduce3_builtin(o, a, b, 6, WEFT_F32, WEFT_MIN);
    assert_true(isinf(o[0]) && o[0] < 0 && isnan(o[2]) && isnan(o[3]) && o[5] == -3.0f);
    /* Half types: NaN propagates, overflow to infinity, inf - inf = NaN. */
    uint16_t h1[4] = {0x7bff, 0x7c00, 0x7e00, 0x3c00}; /* 65504, inf, NaN, 1 */
    uint16_t h2[4] = {0x7bff, 0xfc00, 0x3c00, 0x7e00};
    uint16_t ho[4];
    weft__reduce3_builtin(ho, h1, h2, 4, WEFT_F16, WEFT_SUM);
    assert_int_equal(ho[0], 0x7c00);
    assert_true(half_is_nan(ho[1]) && half_is_nan(ho[2]) && half_is_nan(ho[3]));
    weft__reduce3_builtin(ho, h1, h2, 4, WEFT_F16, WEFT_MAX);
    assert_true(half_is_nan(ho[2]) && half_is_nan(ho[3]) && ho[1] == 0x7c00);
    uint16_t b1[2] = {0x7f7f, 0x7fc0}, b2[2] = {0x7f7f, 0x3f80}, bo[2];
    weft__reduce3_builtin(bo, b1, b2, 2, WEFT_BF16, WEFT_SUM);
    assert_int_equal(bo[0], 0x7f80);
    assert_true(bf16_is_nan(bo[1]));
    /* Integer wrap-around. */
    int32_t i1[2] = {INT32_MAX, INT32_MIN}, i2[2] = {1, -1}, io[2];
    weft__reduce3_builtin(io, i1, i2, 2, WEFT_I32, WEFT_SUM);
    assert_int_equal(io[0], INT32_MIN);
    assert_int_equal(io[1], INT32_MAX);
    uint8_t u1[1] = {200}, u2[1] = {100}, uo[1];
    weft__reduce3_builtin(uo, u1, u2, 1, WEFT_U8, WEFT_SUM);
    assert_int_equal(uo[0], 44);
}

/* A user operator: pairs (max, count) combined element-wise. */
typedef struct pair {
    int32_t max, n;
} pair_t;

static void pair_op(void *inout, const void *in, size_t count, void *arg)
{
    pair_t *io = inout;
    const pair_t *x = in;
    (*(int *)arg)++;
    for (size_t i = 0; i < count; i++) {
        io[i].max = io[i].max > x[i].max ? io[i].max : x[i].max;
        io[i].n += x[i].n;
    }
}

static void test_reducer_user(void **state)
{
    (void)state;
    int calls = 0;
    weft_reducer_t r = {.dtype = WEFT_DTYPE_USER,
                        .op = WEFT_OP_USER_FIRST,
                        .elem_size = sizeof(pair_t),
                        .user_fn = pair_op,
                        .user_arg = &calls};
    pair_t a[3] = {{1, 1}, {5, 2}, {-3, 3}}, b[3] = {{4, 10}, {2, 20}, {-1, 30}}, o[3];
    weft__reducer_apply3(&r, o, a, b, 3);
    assert_int_equal(o[0].max, 4);
    assert_int_equal(o[1].max, 5);
    assert_int_equal(o[2].max, -1);
    assert_int_equal(o[2].n, 33);
    assert_int_equal(a[0].max, 1);        /* inputs untouched */
    weft__reducer_apply3(&r, b, a, b, 3); /* out == b */
    assert_memory_equal(b, o, sizeof(o));
    weft__reducer_apply(&r, a, a + 1, 0); /* count 0: no call */
    assert_int_equal(calls, 2);
    weft_reducer_t f = {.dtype = WEFT_F64, .op = WEFT_SUM, .elem_size = 8};
    double d1[2] = {1.5, 2.5}, d2[2] = {0.25, -2.5};
    weft__reducer_apply(&f, d1, d2, 2);
    assert_true(d1[0] == 1.75 && d1[1] == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_decode_all),
        cmocka_unit_test(test_f16_roundtrip_all),
        cmocka_unit_test(test_f16_rounding_ties),
        cmocka_unit_test(test_f16_edges),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_kernels_all),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_reducer_user),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
