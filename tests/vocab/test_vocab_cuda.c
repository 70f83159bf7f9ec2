/*
 * CUDA path of vocab/ against the CPU path and the float64 reference: the same public
 * calls on device buffers and on host buffers must agree. Exits 77 (skipped) when no
 * GPU is usable. Run alone or under weftrun (tests/vocab/gpu_check.sh does both).
 */
#include <cuda_runtime_api.h>
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
#include "vocab/vocab_ref.h"
#include "vocab/vocab_half.h"
#include "weft/weft.h"

static weft_ctx_t *g_ctx;
static weft_group_t *g_world;
static int g_rank, g_size;

#define OK(call) assert_int_equal((call), WEFT_OK)
#define CU(call) assert_int_equal((int)(call), (int)cudaSuccess)

static void *to_dev(const void *host, size_t bytes)
{
    void *d = NULL;
    CU(cudaMalloc(&d, bytes > 0 ? bytes : 4));
    if (bytes > 0) {
        CU(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    }
    return d;
}

static void from_dev(void *host, const void *dev, size_t bytes)
{
    CU(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

typedef struct run_out {
    float *loss_tok, loss, *dx, *dw;
} run_out_t;

/* One microbatch forward + backward; buffers on the device when @p dev. */
static void run(weft_vocab_t *v, const xcase_t *c, const weft_vocab_range_t *r,
                weft_vocab_algo_t algo, weft_vocab_reduction_t red, const float *grad, bool dev,
                bool dev_labels, float eps, size_t block, run_out_t *o)
{
    size_t n = c->n, h = c->h, pl = r->padded_length;
    size_t ngrad = red == WEFT_VOCAB_NONE ? n : 1;
    float *w = shard_of(c, r);
    o->loss_tok = malloc(n * sizeof(float) + 4);
    o->dx = malloc(n * h * sizeof(float) + 4);
    o->dw = malloc(pl * h * sizeof(float) + 4);
    const float *x = c->x, *wd = w, *g = grad;
    const int64_t *labels = c->labels;
    float *lt = o->loss_tok, *dx = o->dx, *dw = o->dw;
    if (dev) {
        x = to_dev(c->x, n * h * sizeof(float));
        wd = to_dev(w, pl * h * sizeof(float));
        g = to_dev(grad, ngrad * sizeof(float));
        CU(cudaMalloc((void **)&lt, n * sizeof(float) + 4));
        CU(cudaMalloc((void **)&dx, n * h * sizeof(float) + 4));
        CU(cudaMalloc((void **)&dw, pl * h * sizeof(float) + 4));
        if (dev_labels) {
            labels = to_dev(c->labels, n * sizeof(int64_t));
        }
    }
    weft_vocab_mb_params_t mp = {.size = sizeof(mp),
                                 .algo = algo,
                                 .reduction = red,
                                 .max_tokens = n,
                                 .label_smoothing = eps,
                                 .block_rows = block};
    weft_vocab_mb_t *mb;
    OK(weft_vocab_mb_create(v, &mp, &mb));
    OK(weft_vocab_xent_forward(mb, x, wd, labels, n, lt, &o->loss));
    OK(weft_vocab_xent_backward(mb, g, dx, dw));
    OK(weft_vocab_mb_free(mb));
    if (dev) {
        from_dev(o->loss_tok, lt, n * sizeof(float));
        from_dev(o->dx, dx, n * h * sizeof(float));
        from_dev(o->dw, dw, pl * h * sizeof(float));
        cudaFree((void *)x);
        cudaFree((void *)wd);
        cudaFree((void *)g);
        cudaFree(lt);
        cudaFree(dx);
        cudaFree(dw);
        if (dev_labels) {
            cudaFree((void *)labels);
        }
    }
    free(w);
}

static void run_out_free(run_out_t *o)
{
    free(o->loss_tok);
    free(o->dx);
    free(o->dw);
}

/* Device against host and (@p with_ref) the float64 reference, label smoothing @p eps. */
static void compare_case_blk(const xcase_t *c, bool with_ref, float eps, size_t block)
{
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = c->V, .hidden = c->h};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    float *grad = malloc((c->n + 1) * sizeof(float));
    for (int red = 0; red <= WEFT_VOCAB_NONE; red++) {
        for (size_t j = 0; j <= c->n; j++) {
            grad[j] = 0.5f + 0.01f * (float)j;
        }
        xref_t ref = {0};
        if (with_ref) {
            xref_compute_ls(c, (weft_vocab_reduction_t)red, grad, eps, &ref);
        }
        for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
            if (block > 0 && algo == WEFT_VOCAB_NAIVE) {
                continue; /* refused */
            }
            run_out_t host, dev;
            run(v, c, &r, (weft_vocab_algo_t)algo, (weft_vocab_reduction_t)red, grad, false, false,
                eps, block, &host);
            run(v, c, &r, (weft_vocab_algo_t)algo, (weft_vocab_reduction_t)red, grad, true,
                algo != WEFT_VOCAB_ALG1, eps, block, &dev);
            char what[64];
            snprintf(what, sizeof(what), "cuda %s red=%d eps=%g block=%zu",
                     weft_vocab_algo_name((weft_vocab_algo_t)algo), red, (double)eps, block);
            if (with_ref) {
                check_outputs(g_rank, g_size, c, &ref, &r, dev.loss_tok, dev.loss, dev.dx, dev.dw,
                              what);
            }
            /* Device against host: relative to each tensor's largest magnitude. */
            double scale = 1e-30, err = 0.0;
            for (size_t i = 0; i < r.padded_length * c->h; i++) {
                scale = fmax(scale, fabs(host.dw[i]));
                err = fmax(err, fabs((double)dev.dw[i] - host.dw[i]));
            }
            assert_true(err <= 1e-5 * scale);
            scale = 1e-30;
            err = 0.0;
            for (size_t i = 0; i < c->n * c->h; i++) {
                scale = fmax(scale, fabs(host.dx[i]));
                err = fmax(err, fabs((double)dev.dx[i] - host.dx[i]));
            }
            assert_true(err <= 1e-5 * scale);
            for (size_t j = 0; j < c->n; j++) {
                assert_true(fabs(dev.loss_tok[j] - host.loss_tok[j]) <=
                            1e-5 * fmax(1.0, fabs(host.loss_tok[j])));
            }
            run_out_free(&host);
            run_out_free(&dev);
        }
        if (with_ref) {
            xref_free(&ref);
        }
    }
    free(grad);
    OK(weft_vocab_free(v));
}

static void compare_case_ls(const xcase_t *c, bool with_ref, float eps)
{
    compare_case_blk(c, with_ref, eps, 0);
}

static void compare_case(const xcase_t *c, bool with_ref)
{
    compare_case_ls(c, with_ref, 0.0f);
}

static void test_random(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 11, 16, 37, 0.7f, 4, 1234);
    compare_case(&c, true);
    xcase_free(&c);
}

static void test_empty_shards(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 7, 8, 3, 1.0f, 3, 9);
    compare_case(&c, true);
    xcase_free(&c);
}

static void test_extreme(void **state)
{
    (void)state;
    xcase_t c;
    xcase_extreme(&c, 13, 6, 29, 5);
    compare_case(&c, true);
    xcase_free(&c);
}

static void test_larger(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 300, 128, 3001, 0.3f, 7, 42); /* row kernels see > 1 block of threads */
    compare_case(&c, false);
    xcase_free(&c);
}

/* The blocked layer on the device against the blocked layer on the host (and the
 * reference): blocks of 1 and 5 rows, with label smoothing, and a large case where a
 * block spans several thread blocks' worth of rows. */
static void test_blocked(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 11, 16, 37, 0.7f, 4, 1234);
    compare_case_blk(&c, true, 0.0f, 1);
    compare_case_blk(&c, true, 0.2f, 5);
    xcase_free(&c);
    xcase_extreme(&c, 13, 6, 29, 5);
    compare_case_blk(&c, true, 0.0f, 4);
    xcase_free(&c);
    xcase_random(&c, 300, 128, 3001, 0.3f, 7, 42);
    compare_case_blk(&c, false, 0.1f, 700);
    xcase_free(&c);
}

/* One bf16 or f16 microbatch forward and backward; buffers on the device when @p dev.
 * Returns ∇X and ∇W unpacked to float32 (∇W of the padded shard), and the loss. */
static void run_half(weft_vocab_t *v, const xcase_t *c, const weft_vocab_range_t *r,
                     weft_dtype_t dt, weft_vocab_algo_t algo, size_t block, bool dev, run_out_t *o)
{
    size_t n = c->n, h = c->h, pl = r->padded_length;
    float *wf = shard_of(c, r), g = 1.0f;
    uint16_t *x = pack(dt, c->x, n * h), *w = pack(dt, wf, pl * h);
    uint16_t *dx = calloc(n * h + 1, 2), *dw = calloc(pl * h + 1, 2);
    void *xd = x, *wd = w, *dxd = dx, *dwd = dw;
    const float *gd = &g;
    if (dev) {
        xd = to_dev(x, n * h * 2);
        wd = to_dev(w, pl * h * 2);
        dxd = to_dev(dx, n * h * 2);
        dwd = to_dev(dw, pl * h * 2);
        gd = to_dev(&g, sizeof(g));
    }
    weft_vocab_mb_params_t mp = {
        .size = sizeof(mp), .algo = algo, .max_tokens = n, .block_rows = block};
    weft_vocab_mb_t *mb;
    OK(weft_vocab_mb_create(v, &mp, &mb));
    OK(weft_vocab_xent_forward(mb, xd, wd, c->labels, n, NULL, &o->loss));
    OK(weft_vocab_xent_backward(mb, gd, dxd, dwd));
    OK(weft_vocab_mb_free(mb));
    if (dev) {
        from_dev(dx, dxd, n * h * 2);
        from_dev(dw, dwd, pl * h * 2);
        cudaFree(xd);
        cudaFree(wd);
        cudaFree(dxd);
        cudaFree(dwd);
        cudaFree((void *)gd);
    }
    o->loss_tok = NULL;
    o->dx = unpack(dt, dx, n * h);
    o->dw = unpack(dt, dw, pl * h);
    free(wf);
    free(x);
    free(w);
    free(dx);
    free(dw);
}

/* bf16 and f16 vocabularies: the device's conversions and float32 passes against the
 * host's, every algorithm, blocked and not. */
static void test_half(void **state)
{
    (void)state;
    static const weft_dtype_t dts[] = {WEFT_BF16, WEFT_F16};
    for (size_t k = 0; k < 2; k++) {
        xcase_t c;
        xcase_random(&c, 300, 128, 3001, 0.3f, 7, 42);
        round_all(dts[k], c.x, c.n * c.h);
        round_all(dts[k], c.w, c.V * c.h);
        weft_vocab_params_t vp = {
            .size = sizeof(vp), .vocab_size = c.V, .hidden = c.h, .dtype = dts[k]};
        weft_vocab_t *v;
        OK(weft_vocab_create(g_world, &vp, &v));
        weft_vocab_range_t r;
        OK(weft_vocab_local_range(v, &r));
        for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
            for (size_t block = 0; block <= 700; block += 700) {
                if (block > 0 && algo == WEFT_VOCAB_NAIVE) {
                    continue;
                }
                run_out_t host, dev;
                run_half(v, &c, &r, dts[k], (weft_vocab_algo_t)algo, block, false, &host);
                run_half(v, &c, &r, dts[k], (weft_vocab_algo_t)algo, block, true, &dev);
                assert_true(fabs(host.loss - dev.loss) <= 1e-5 * fmax(1.0, fabs(host.loss)));
                /* One rounding to the dtype apart at most. */
                double tol = dts[k] == WEFT_BF16 ? 1e-2 : 2e-3, sx = 1e-30, ex = 0.0;
                for (size_t i = 0; i < c.n * c.h; i++) {
                    sx = fmax(sx, fabs(host.dx[i]));
                    ex = fmax(ex, fabs((double)dev.dx[i] - host.dx[i]));
                }
                assert_true(ex <= tol * sx);
                double sw = 1e-30, ew = 0.0;
                for (size_t i = 0; i < r.padded_length * c.h; i++) {
                    sw = fmax(sw, fabs(host.dw[i]));
                    ew = fmax(ew, fabs((double)dev.dw[i] - host.dw[i]));
                }
                assert_true(ew <= tol * sw);
                run_out_free(&host);
                run_out_free(&dev);
            }
        }
        OK(weft_vocab_free(v));
        xcase_free(&c);
    }
}

static void test_label_smoothing(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 11, 16, 37, 0.7f, 4, 1234);
    compare_case_ls(&c, true, 0.2f);
    xcase_free(&c);
    xcase_random(&c, 7, 8, 3, 1.0f, 3, 9); /* empty shards */
    compare_case_ls(&c, true, 1.0f);
    xcase_free(&c);
    xcase_random(&c, 300, 128, 3001, 0.3f, 7, 42);
    compare_case_ls(&c, false, 0.1f);
    xcase_free(&c);
}

static void test_embedding(void **state)
{
    (void)state;
    size_t V = 23, h = 5, n = 12;
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = V, .hidden = h};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    uint64_t s = 17;
    float *table = malloc(V * h * sizeof(float)), *grad = malloc(n * h * sizeof(float));
    int64_t ids[12];
    for (size_t i = 0; i < V * h; i++) {
        table[i] = ref_uniform(&s);
    }
    for (size_t j = 0; j < n; j++) {
        ids[j] = (int64_t)(ref_rng(&s) % V);
        for (size_t k = 0; k < h; k++) {
            grad[j * h + k] = (float)((j * h + k) % 7) - 3.0f;
        }
    }
    ids[3] = ids[7] = ids[9];
    float *shard = shard_of(&(xcase_t){.n = n, .h = h, .V = V, .w = table}, &r);
    float *d_shard = to_dev(shard, r.padded_length * h * sizeof(float));
    int64_t *d_ids = to_dev(ids, sizeof(ids));
    float *d_out = to_dev(grad, n * h * sizeof(float)); /* garbage to overwrite */
    OK(weft_vocab_embed_forward(v, d_shard, d_ids, n, d_out));
    float *out = malloc(n * h * sizeof(float));
    from_dev(out, d_out, n * h * sizeof(float));
    for (size_t j = 0; j < n; j++) {
        assert_memory_equal(out + j * h, table + (size_t)ids[j] * h, h * sizeof(float));
    }
    /* Backward from the last rank; host ids with device tensors. */
    float *d_grad = to_dev(grad, n * h * sizeof(float));
    if (g_rank != g_size - 1) {
        CU(cudaMemset(d_grad, 0xff, n * h * sizeof(float)));
    }
    float *zero = calloc(r.padded_length * h + 1, sizeof(float));
    float *d_dtab = to_dev(zero, r.padded_length * h * sizeof(float));
    OK(weft_vocab_embed_backward(v, d_grad, ids, n, g_size - 1, d_dtab));
    from_dev(zero, d_dtab, r.padded_length * h * sizeof(float));
    for (size_t row = 0; row < r.length; row++) {
        for (size_t k = 0; k < h; k++) {
            double want = 0.0;
            for (size_t j = 0; j < n; j++) {
                want += (size_t)ids[j] == r.start + row ? grad[j * h + k] : 0.0;
            }
            assert_float_equal(zero[row * h + k], want, 1e-6);
        }
    }
    cudaFree(d_shard);
    cudaFree(d_ids);
    cudaFree(d_out);
    cudaFree(d_grad);
    cudaFree(d_dtab);
    free(table);
    free(grad);
    free(shard);
    free(out);
    free(zero);
    OK(weft_vocab_free(v));
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_vocab_cuda: no usable GPU, skipped\n");
        return 77;
    }
    if (weft_init(NULL, &g_ctx) != WEFT_OK || weft_ctx_world(g_ctx, &g_world) != WEFT_OK ||
        weft_group_rank(g_world, &g_rank) != WEFT_OK ||
        weft_group_size(g_world, &g_size) != WEFT_OK) {
        fprintf(stderr, "test_vocab_cuda: weft_init failed\n");
        return 1;
    }
    cudaSetDevice(g_rank % ndev);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_empty_shards),
        cmocka_unit_test(test_extreme),
        cmocka_unit_test(test_larger),
        cmocka_unit_test(test_label_smoothing),
        cmocka_unit_test(test_blocked),
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_embedding),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    weft_finalize(g_ctx);
    return rc;
}
