/*
 * bf16 and f16 vocabularies through the public API (run by weftrun with 1..4 ranks): X
 * and W are rounded to the dtype first, so the float64 reference of the rounded values
 * is exact; the loss (accumulated in float32) must then agree as closely as a float32
 * vocabulary's, and ∇X and ∇W, rounded once to the dtype, within the dtype's rounding.
 * Every algorithm, blocked and not, with label smoothing and with accumulate_dw, and the
embedding. The
 * conversions here are the compiler's (_Float16) and plain bit rounding, not weft's.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vocab/vocab_check.h"
#include "vocab/vocab_half.h"
#include "vocab/vocab_ref.h"
#include "weft/weft.h"

static weft_ctx_t *g_ctx;
static weft_group_t *g_world;
static int g_rank, g_size;

#define OK(call) assert_int_equal((call), WEFT_OK)

/* One forward and backward (twice when @p acc: ∇W then holds two microbatches' sum). */
static void run(weft_dtype_t dt, weft_vocab_algo_t algo, float eps, size_t block, bool acc)
{
    xcase_t c;
    xcase_random(&c, 11, 16, 37, 0.7f, 4, 97);
    round_all(dt, c.x, c.n * c.h);
    round_all(dt, c.w, c.V * c.h);
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = c.V, .hidden = c.h, .dtype = dt};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    weft_vocab_mb_params_t mp = {.size = sizeof(mp),
                                 .algo = algo,
                                 .max_tokens = c.n,
                                 .label_smoothing = eps,
                                 .block_rows = block,
                                 .accumulate_dw = acc};
    weft_vocab_mb_t *mb;
    OK(weft_vocab_mb_create(v, &mp, &mb));
    float *wf = shard_of(&c, &r); /* padding rows NaN: never read, in any dtype */
    uint16_t *x = pack(dt, c.x, c.n * c.h), *w = pack(dt, wf, r.padded_length * c.h);
    uint16_t *dx = calloc(c.n * c.h + 1, 2), *dw = calloc(r.padded_length * c.h + 1, 2);
    float grad = acc ? 0.5f : 1.0f, loss = NAN, *loss_tok = malloc(c.n * sizeof(float));
    for (int k = 0; k < (acc ? 2 : 1); k++) {
        OK(weft_vocab_xent_forward(mb, x, w, c.labels, c.n, loss_tok, &loss));
        OK(weft_vocab_xent_backward(mb, &grad, dx, dw));
    }
    xref_t ref;
    float g1 = 1.0f;
    xref_compute_ls(&c, WEFT_VOCAB_MEAN, &g1, eps, &ref);
    float *dxf = unpack(dt, dx, c.n * c.h), *dwf = unpack(dt, dw, r.padded_length * c.h);
    for (size_t i = 0; i < c.n * c.h; i++) {
        dxf[i] /= grad; /* ∇X is the last microbatch's alone: grad times the reference's */
    }
    /* ∇X and ∇W are rounded once to the dtype (2^-8 or 2^-11 of an element at most, with
     * accumulate_dw twice); the losses are float32 sums of exact products. */
    double tol = dt == WEFT_BF16 ? 1e-2 : 2e-3;
    double e_l = rel_err_loss(&loss, &ref.loss, 1),
           e_lt = rel_err_loss(loss_tok, ref.loss_tok, c.n);
    double e_dx = rel_err_f(dxf, ref.dx, c.n * c.h);
    double scale = 1e-30, e_dw = 0.0;
    for (size_t i = 0; i < c.V * c.h; i++) {
        scale = fmax(scale, fabs(ref.dw[i]));
    }
    for (size_t i = 0; i < r.length * c.h; i++) {
        e_dw = fmax(e_dw, isnan(dwf[i]) ? INFINITY : fabs(dwf[i] - ref.dw[r.start * c.h + i]));
    }
    e_dw /= scale;
    for (size_t i = r.length * c.h; i < r.padded_length * c.h; i++) {
        assert_true(dw[i] == 0); /* padding rows: zero gradient */
    }
    if (e_l > REF_TOL || e_lt > REF_TOL || e_dx > tol || e_dw > tol) {
        print_error("rank %d/%d %s %s eps=%g block=%zu acc=%d: loss %.3g loss_tok %.3g dx %.3g "
                    "dw %.3g\n",
                    g_rank, g_size, weft_dtype_name(dt), weft_vocab_algo_name(algo), (double)eps,
                    block, (int)acc, e_l, e_lt, e_dx, e_dw);
        fail();
    }
    OK(weft_vocab_mb_free(mb));
    OK(weft_vocab_free(v));
    xref_free(&ref);
    free(wf);
    free(x);
    free(w);
    free(dx);
    free(dw);
    free(dxf);
    free(dwf);
    free(loss_tok);
    xcase_free(&c);
}

static void run_dtype(weft_dtype_t dt)
{
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        run(dt, (weft_vocab_algo_t)algo, 0.0f, 0, false);
        run(dt, (weft_vocab_algo_t)algo, 0.1f, 0, true);
        if (algo != WEFT_VOCAB_NAIVE) {
            run(dt, (weft_vocab_algo_t)algo, 0.0f, 3, false);
        }
    }
}

static void test_bf16(void **state)
{
    (void)state;
    run_dtype(WEFT_BF16);
}

static void test_f16(void **state)
{
    (void)state;
    run_dtype(WEFT_F16);
}

/* Another dtype is refused at creation; on the device the embedding takes float32 only
 * (checked where a GPU runs test_vocab_cuda). */
static void test_refusals(void **state)
{
    (void)state;
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = 10, .hidden = 4, .dtype = WEFT_F64};
    weft_vocab_t *v;
    assert_int_equal(weft_vocab_create(g_world, &vp, &v), WEFT_ERR_INVALID_ARG);
}

/* The embedding in bf16 and f16 (host memory): the forward gives the table's rows exactly
 * (one rank holds each, the others add zeros); the backward broadcasts rank 0's gradient
 * and adds it into each rank's rows, in float32 with each add rounded: within one
 * rounding per add of the exact sum. */
static void embed_half(weft_dtype_t dt)
{
    const size_t V = 23, h = 6, n = 9;
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = V, .hidden = h, .dtype = dt};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    uint64_t seed = 31;
    float *table = malloc(V * h * sizeof(float)), *g = malloc(n * h * sizeof(float));
    for (size_t i = 0; i < V * h; i++) {
        table[i] = ref_uniform(&seed);
    }
    for (size_t i = 0; i < n * h; i++) {
        g[i] = ref_uniform(&seed);
    }
    round_all(dt, table, V * h);
    round_all(dt, g, n * h);
    int64_t ids[9] = {0, 22, 5, 5, 11, 0, 17, 5, 21}; /* repeats, both ends */
    uint16_t *shard = calloc(r.padded_length * h + 1, 2);
    uint16_t *all = pack(dt, table, V * h);
    memcpy(shard, all + r.start * h, r.length * h * 2);
    uint16_t *out = calloc(n * h, 2);
    OK(weft_vocab_embed_forward(v, shard, ids, n, out));
    for (size_t j = 0; j < n; j++) {
        assert_memory_equal(out + j * h, all + (size_t)ids[j] * h, h * 2);
    }
    /* Only rank 0's gradient counts: the others hold garbage that the broadcast replaces. */
    uint16_t *gout = g_rank == 0 ? pack(dt, g, n * h) : calloc(n * h, 2);
    if (g_rank != 0) {
        memset(gout, 0x7f, n * h * 2);
    }
    uint16_t *gtab = calloc(r.padded_length * h + 1, 2);
    OK(weft_vocab_embed_backward(v, gout, ids, n, 0, gtab));
    double tol = dt == WEFT_BF16 ? 1.0 / 256 : 1.0 / 2048;
    for (size_t row = 0; row < r.length; row++) {
        for (size_t k = 0; k < h; k++) {
            double exact = 0.0, mag = 0.0;
            int adds = 0;
            for (size_t j = 0; j < n; j++) {
                if ((size_t)ids[j] == r.start + row) {
                    exact += g[j * h + k];
                    mag = fmax(mag, fabs(exact));
                    adds++;
                }
            }
            double got = from16(dt, gtab[row * h + k]);
            assert_true(fabs(got - exact) <= adds * tol * fmax(mag, 1e-30) + 1e-30);
        }
    }
    for (size_t i = r.length * h; i < r.padded_length * h; i++) {
        assert_true(gtab[i] == 0); /* padding rows untouched */
    }
    OK(weft_vocab_free(v));
    free(table);
    free(g);
    free(shard);
    free(all);
    free(out);
    free(gout);
    free(gtab);
}

static void test_embedding_half(void **state)
{
    (void)state;
    embed_half(WEFT_BF16);
    embed_half(WEFT_F16);
}

int main(void)
{
    if (weft_init(NULL, &g_ctx) != WEFT_OK || weft_ctx_world(g_ctx, &g_world) != WEFT_OK ||
        weft_group_rank(g_world, &g_rank) != WEFT_OK ||
        weft_group_size(g_world, &g_size) != WEFT_OK) {
        fprintf(stderr, "test_vocab_dtype: weft_init failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_embedding_half),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    weft_finalize(g_ctx);
    return rc;
}
