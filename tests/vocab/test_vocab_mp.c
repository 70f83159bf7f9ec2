/*
 * Multi-rank test of the vocabulary-parallel output layer and embedding through the
 * public API (run by weftrun with 1..4 ranks). Every rank builds the same full inputs
 * from a seed, keeps its own shard of W, and compares loss, ∇X and its rows of ∇W with
 * the unsharded float64 reference; the number of collectives each algorithm issues is
 * read from weft_group_coll_count().
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vocab/vocab_check.h"
#include "vocab/vocab_ref.h"
#include "weft/weft.h"

static weft_ctx_t *g_ctx;
static weft_group_t *g_world;
static int g_rank, g_size;

#define OK(call) assert_int_equal((call), WEFT_OK)

static uint64_t coll_count(void)
{
    uint64_t c = 0;
    OK(weft_group_coll_count(g_world, &c));
    return c;
}

/* Collectives of one microbatch: {forward, backward}. */
static const uint64_t expected_colls[WEFT_VOCAB_ALGO_COUNT][2] = {
    [WEFT_VOCAB_NAIVE] = {2, 1}, [WEFT_VOCAB_ALG1] = {1, 1}, [WEFT_VOCAB_ALG2] = {1, 0}};

static void make_grad(const xcase_t *c, weft_vocab_reduction_t red, float *grad)
{
    uint64_t s = 5;
    grad[0] = red == WEFT_VOCAB_NONE ? 0.75f : 1.5f;
    for (size_t j = 1; j < c->n; j++) {
        grad[j] = 0.5f + 0.5f * ref_uniform(&s);
    }
}

/* Forward and backward with the blocking wrappers, counting collectives. */
static void run_blocking(const xcase_t *c, weft_vocab_algo_t algo, weft_vocab_reduction_t red,
                         size_t align, float eps, size_t block)
{
    weft_vocab_params_t vp = {
        .size = sizeof(vp), .vocab_size = c->V, .hidden = c->h, .align = align};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    weft_vocab_mb_params_t mp = {.size = sizeof(mp),
                                 .algo = algo,
                                 .reduction = red,
                                 .max_tokens = c->n + 3,
                                 .label_smoothing = eps,
                                 .block_rows = block};
    weft_vocab_mb_t *mb;
    OK(weft_vocab_mb_create(v, &mp, &mb));
    weft_vocab_mem_t mem = {.size = sizeof(mem)}, whole = {.size = sizeof(whole)};
    OK(weft_vocab_mb_memory(mb, c->n, &mem));
    OK(weft_vocab_xent_memory(v, algo, c->n, &whole));
    size_t rows = block > 0 && block < r.length ? block : r.length;
    /* A block holds block rows of logits where the whole shard held all of them. */
    assert_int_equal(whole.peak - mem.peak, c->n * (r.length - rows) * sizeof(float));
    float *w = shard_of(c, &r);
    float *grad = malloc((c->n + 1) * sizeof(float));
    make_grad(c, red, grad);
    xref_t ref;
    xref_compute_ls(c, red, grad, eps, &ref);
    float *loss_tok = malloc((c->n + 1) * sizeof(float));
    float *dx = malloc((c->n * c->h + 1) * sizeof(float));
    float *dw = malloc(r.padded_length * c->h * sizeof(float) + 4);
    float loss = NAN;
    /* Run twice: a microbatch state is reusable once its last pass completed. */
    for (int rep = 0; rep < 2; rep++) {
        uint64_t c0 = coll_count();
        OK(weft_vocab_xent_forward(mb, c->x, w, c->labels, c->n, loss_tok, &loss));
        uint64_t c1 = coll_count();
        OK(weft_vocab_xent_backward(mb, grad, dx, dw));
        uint64_t c2 = coll_count();
        assert_int_equal(c1 - c0, expected_colls[algo][0]);
        assert_int_equal(c2 - c1, expected_colls[algo][1]);
        /* The microbatch's own account agrees, with the bytes each algorithm reduces. */
        weft_vocab_mb_stats_t st = {.size = sizeof(st)};
        OK(weft_vocab_mb_stats(mb, &st));
        assert_int_equal(st.collectives, expected_colls[algo][0] + expected_colls[algo][1]);
        size_t f = sizeof(float), want_bytes[WEFT_VOCAB_ALGO_COUNT] = {
                                      [WEFT_VOCAB_NAIVE] = 3 * c->n * f + c->n * c->h * f,
                                      [WEFT_VOCAB_ALG1] = 3 * c->n * f + c->n * c->h * f,
                                      [WEFT_VOCAB_ALG2] = (3 + 2 * c->h) * c->n * f};
        assert_int_equal(st.comm_bytes, want_bytes[algo]);
        char what[96];
        snprintf(what, sizeof(what), "%s red=%d align=%zu eps=%g block=%zu",
                 weft_vocab_algo_name(algo), (int)red, align, (double)eps, block);
        check_outputs(g_rank, g_size, c, &ref, &r, loss_tok, loss, dx, dw, what);
    }
    OK(weft_vocab_mb_free(mb));
    OK(weft_vocab_free(v));
    free(w);
    free(grad);
    free(loss_tok);
    free(dx);
    free(dw);
    xref_free(&ref);
}

static void run_all_opts(const xcase_t *c, size_t align, float eps, size_t block)
{
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        for (int red = 0; red <= WEFT_VOCAB_NONE && (block == 0 || algo != WEFT_VOCAB_NAIVE);
             red++) {
            run_blocking(c, (weft_vocab_algo_t)algo, (weft_vocab_reduction_t)red, align, eps,
                         block);
        }
    }
}

static void run_all_ls(const xcase_t *c, size_t align, float eps)
{
    run_all_opts(c, align, eps, 0);
}

/* The blocked output layer over real collectives: the same results, collectives and
 * bytes as the whole shard at once, with less memory. */
static void test_blocked(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 11, 16, 37, 0.7f, 4, 1357);
    run_all_opts(&c, 1, 0.0f, 4);
    run_all_opts(&c, 4, 0.2f, 3);
    run_all_opts(&c, 1, 0.0f, 1000); /* more than a shard: the whole shard */
    xcase_free(&c);
    xcase_random(&c, 7, 8, 5, 1.0f, 3, 99); /* empty shards at 4 ranks */
    run_all_opts(&c, 2, 0.0f, 1);
    xcase_free(&c);
}

static void run_all(const xcase_t *c, size_t align)
{
    run_all_ls(c, align, 0.0f);
}

/* Label smoothing over real collectives: the same collectives and bytes as without. */
static void test_label_smoothing(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 11, 16, 37, 0.7f, 4, 2468);
    run_all_ls(&c, 1, 0.2f);
    run_all_ls(&c, 4, 1.0f);
    xcase_free(&c);
    xcase_random(&c, 7, 8, 5, 1.0f, 3, 99); /* empty shards at 4 ranks */
    run_all_ls(&c, 2, 0.3f);
    xcase_free(&c);
}

static void test_random_not_divisible(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 11, 16, 37, 0.7f, 4, 1234); /* 37 is prime: never divisible by P > 1 */
    run_all(&c, 1);
    run_all(&c, 4);
    xcase_free(&c);
}

static void test_small_vocab_empty_shards(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 7, 8, 5, 1.0f, 3, 99); /* 4 ranks: shards of 2, 2, 1 and 0 */
    run_all(&c, 1);
    run_all(&c, 2); /* padded length 2: ranks 3.. hold nothing */
    xcase_free(&c);
}

static void test_extreme_logits(void **state)
{
    (void)state;
    xcase_t c;
    xcase_extreme(&c, 13, 6, 29, 5);
    run_all(&c, 1);
    xcase_free(&c);
}

/* Two microbatches in flight at once, driven with the nonblocking passes. */
static void test_pipelined_nonblocking(void **state)
{
    (void)state;
    xcase_t c[2];
    xcase_random(&c[0], 9, 8, 31, 0.8f, 5, 11);
    xcase_random(&c[1], 6, 8, 31, 0.8f, 2, 12);
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = 31, .hidden = 8};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        weft_vocab_mb_t *mb[2];
        float *w[2], *dx[2], *dw[2], g = 2.0f;
        xref_t ref[2];
        for (int k = 0; k < 2; k++) {
            weft_vocab_mb_params_t mp = {.size = sizeof(mp),
                                         .algo = (weft_vocab_algo_t)algo,
                                         .reduction = WEFT_VOCAB_SUM,
                                         .max_tokens = 9};
            OK(weft_vocab_mb_create(v, &mp, &mb[k]));
            w[k] = shard_of(&c[k], &r);
            dx[k] = malloc(c[k].n * c[k].h * sizeof(float));
            dw[k] = malloc(r.padded_length * c[k].h * sizeof(float) + 4);
            xref_compute(&c[k], WEFT_VOCAB_SUM, &g, &ref[k]);
        }
        uint64_t c0 = coll_count();
        weft_req_t *req[2];
        for (int k = 0; k < 2; k++) {
            OK(weft_vocab_xent_logits(mb[k], c[k].x, w[k], c[k].labels, c[k].n));
            weft_status_t st = weft_vocab_xent_merge_start(mb[k], &req[k]);
            assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
            assert_true((st == WEFT_OK) == (req[k] == NULL));
        }
        /* Drive both by polling, the way a schedule overlaps them with other work; odd
         * ranks poll in the other order, so completions are seen in different orders. */
        weft_status_t st[2];
        int first = g_rank % 2;
        do {
            st[first] = weft_test(req[first]);
            st[1 - first] = weft_test(req[1 - first]);
            assert_true(st[0] == WEFT_OK || st[0] == WEFT_INPROGRESS);
            assert_true(st[1] == WEFT_OK || st[1] == WEFT_INPROGRESS);
        } while (st[0] == WEFT_INPROGRESS || st[1] == WEFT_INPROGRESS);
        for (int k = 0; k < 2; k++) {
            OK(weft_req_free(req[k]));
        }
        for (int k = 1; k >= 0; k--) { /* T in the other order than S */
            OK(weft_vocab_xent_grad(mb[k], &g, dx[k], dw[k]));
            weft_status_t st = weft_vocab_xent_dx_reduce_start(mb[k], &req[k]);
            assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
        }
        for (int k = 0; k < 2; k++) {
            OK(weft_wait(req[k], WEFT_TIMEOUT_DEFAULT));
            OK(weft_req_free(req[k]));
            float *lt = malloc(c[k].n * sizeof(float)), loss;
            OK(weft_vocab_xent_loss(mb[k], lt, &loss));
            check_outputs(g_rank, g_size, &c[k], &ref[k], &r, lt, loss, dx[k], dw[k], "pipelined");
            free(lt);
        }
        uint64_t per_mb = expected_colls[algo][0] + expected_colls[algo][1];
        assert_int_equal(coll_count() - c0, 2 * per_mb);
        for (int k = 0; k < 2; k++) {
            OK(weft_vocab_mb_free(mb[k]));
            free(w[k]);
            free(dx[k]);
            free(dw[k]);
            xref_free(&ref[k]);
        }
    }
    OK(weft_vocab_free(v));
    xcase_free(&c[0]);
    xcase_free(&c[1]);
}

/* accumulate_dw adds into ∇W_i; padding rows are left as they are. */
static void test_accumulate_dw(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 8, 4, 19, 1.0f, 0, 21);
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = c.V, .hidden = c.h};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    weft_vocab_mb_params_t mp = {.size = sizeof(mp),
                                 .algo = WEFT_VOCAB_ALG2,
                                 .reduction = WEFT_VOCAB_MEAN,
                                 .max_tokens = c.n,
                                 .accumulate_dw = 1};
    weft_vocab_mb_t *mb;
    OK(weft_vocab_mb_create(v, &mp, &mb));
    float *w = shard_of(&c, &r), g = 1.0f, loss;
    float *dx = malloc(c.n * c.h * sizeof(float));
    float *dw = malloc(r.padded_length * c.h * sizeof(float) + 4);
    for (size_t i = 0; i < r.padded_length * c.h; i++) {
        dw[i] = 0.5f;
    }
    xref_t ref;
    xref_compute(&c, WEFT_VOCAB_MEAN, &g, &ref);
    for (int rep = 0; rep < 2; rep++) {
        OK(weft_vocab_xent_forward(mb, c.x, w, c.labels, c.n, NULL, &loss));
        OK(weft_vocab_xent_backward(mb, &g, dx, dw));
    }
    for (size_t i = 0; i < r.length * c.h; i++) {
        assert_float_equal(dw[i], 0.5 + 2.0 * ref.dw[r.start * c.h + i], 1e-5);
    }
    for (size_t i = r.length * c.h; i < r.padded_length * c.h; i++) {
        assert_true(dw[i] == 0.5f);
    }
    OK(weft_vocab_mb_free(mb));
    OK(weft_vocab_free(v));
    free(w);
    free(dx);
    free(dw);
    xref_free(&ref);
    xcase_free(&c);
}

/* Bad labels and passes out of order fail on every rank alike, before communicating,
 * and leave the outputs alone. */
static void test_errors(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 4, 4, 10, 1.0f, 0, 8);
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = c.V, .hidden = c.h};
    weft_vocab_t *v;
    assert_int_equal(weft_vocab_create(NULL, &vp, &v), WEFT_ERR_INVALID_ARG);
    weft_vocab_params_t bad = vp;
    bad.hidden = 0;
    assert_int_equal(weft_vocab_create(g_world, &bad, &v), WEFT_ERR_INVALID_ARG);
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    weft_vocab_mb_params_t mp = {.size = sizeof(mp), .algo = WEFT_VOCAB_ALG1, .max_tokens = 4};
    weft_vocab_mb_t *mb;
    weft_vocab_mb_params_t badmp = mp;
    badmp.max_tokens = 0;
    assert_int_equal(weft_vocab_mb_create(v, &badmp, &mb), WEFT_ERR_INVALID_ARG);
    badmp = mp;
    badmp.algo = (weft_vocab_algo_t)7;
    assert_int_equal(weft_vocab_mb_create(v, &badmp, &mb), WEFT_ERR_INVALID_ARG);
    static const float bad_eps[] = {-0.01f, 1.01f, NAN, INFINITY};
    for (size_t i = 0; i < sizeof(bad_eps) / sizeof(bad_eps[0]); i++) {
        badmp = mp;
        badmp.label_smoothing = bad_eps[i];
        assert_int_equal(weft_vocab_mb_create(v, &badmp, &mb), WEFT_ERR_INVALID_ARG);
    }
    badmp = mp;
    badmp.algo = WEFT_VOCAB_NAIVE;
    badmp.block_rows = 2;
    assert_int_equal(weft_vocab_mb_create(v, &badmp, &mb), WEFT_ERR_INVALID_ARG);
    /* A caller built before label_smoothing existed passes a smaller size: no smoothing,
     * whatever follows its struct. */
    badmp = mp;
    badmp.label_smoothing = NAN;
    badmp.size = offsetof(weft_vocab_mb_params_t, label_smoothing);
    OK(weft_vocab_mb_create(v, &badmp, &mb));
    OK(weft_vocab_mb_free(mb));
    OK(weft_vocab_mb_create(v, &mp, &mb));
    assert_int_equal(weft_vocab_free(v), WEFT_ERR_INVALID_ARG); /* mb still alive */
    float *w = shard_of(&c, &r), g = 1.0f, loss = 42.0f, lt[4] = {7, 7, 7, 7};
    float *dx = malloc(c.n * c.h * sizeof(float));
    float *dw = malloc(r.padded_length * c.h * sizeof(float) + 4);
    uint64_t c0 = coll_count();
    c.labels[2] = (int64_t)c.V; /* out of range */
    assert_int_equal(weft_vocab_xent_forward(mb, c.x, w, c.labels, c.n, lt, &loss),
                     WEFT_ERR_INVALID_ARG);
    assert_true(loss == 42.0f && lt[0] == 7.0f);
    assert_int_equal(weft_vocab_xent_loss(mb, lt, &loss), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_vocab_xent_grad(mb, &g, dx, dw), WEFT_ERR_INVALID_ARG);
    weft_req_t *req = NULL;
    assert_int_equal(weft_vocab_xent_merge_start(mb, &req), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_vocab_xent_dx_reduce_start(mb, &req), WEFT_ERR_INVALID_ARG);
    assert_null(req); /* a refused pass gives no request */
    assert_int_equal(weft_vocab_xent_logits(mb, c.x, w, c.labels, 5), WEFT_ERR_INVALID_ARG);
    assert_int_equal(coll_count(), c0); /* nothing was communicated */
    c.labels[2] = 1;
    OK(weft_vocab_xent_forward(mb, c.x, w, c.labels, c.n, lt, &loss));
    assert_int_equal(weft_vocab_xent_merge_start(mb, &req), WEFT_ERR_INVALID_ARG); /* twice */
    assert_null(req);
    OK(weft_vocab_xent_backward(mb, &g, dx, dw));
    assert_int_equal(weft_vocab_xent_grad(mb, &g, dx, dw), WEFT_ERR_INVALID_ARG); /* T twice */
    OK(weft_vocab_mb_free(mb));
    OK(weft_vocab_free(v));
    free(w);
    free(dx);
    free(dw);
    xcase_free(&c);
}

/* No tokens: the collectives still happen (every rank must issue the same ones). */
static void test_zero_tokens(void **state)
{
    (void)state;
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = 9, .hidden = 3};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    float w[64], dw[64], dx[1], x[1], loss = -1.0f, g = 1.0f;
    int64_t labels[1];
    memset(w, 0, sizeof(w));
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        weft_vocab_mb_params_t mp = {
            .size = sizeof(mp), .algo = (weft_vocab_algo_t)algo, .max_tokens = 1};
        weft_vocab_mb_t *mb;
        OK(weft_vocab_mb_create(v, &mp, &mb));
        uint64_t c0 = coll_count();
        OK(weft_vocab_xent_forward(mb, x, w, labels, 0, NULL, &loss));
        assert_true(loss == 0.0f);
        for (size_t i = 0; i < r.padded_length * 3; i++) {
            dw[i] = 3.0f;
        }
        OK(weft_vocab_xent_backward(mb, &g, dx, dw));
        for (size_t i = 0; i < r.padded_length * 3; i++) {
            assert_true(dw[i] == 0.0f);
        }
        assert_int_equal(coll_count() - c0, expected_colls[algo][0] + expected_colls[algo][1]);
        OK(weft_vocab_mb_free(mb));
    }
    OK(weft_vocab_free(v));
}

/* The memory query against the sizes each algorithm must keep (independently listed). */
static void test_memory_query(void **state)
{
    (void)state;
    size_t V = 1000, h = 64, n = 128;
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = V, .hidden = h};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    size_t logits = n * r.length * 4;
    weft_vocab_mem_t m[WEFT_VOCAB_ALGO_COUNT];
    for (int a = 0; a < WEFT_VOCAB_ALGO_COUNT; a++) {
        m[a] = (weft_vocab_mem_t){.size = sizeof(m[a])};
        OK(weft_vocab_xent_memory(v, (weft_vocab_algo_t)a, n, &m[a]));
    }
    /* NAIVE: logits + (max, sum, target); then exp + (loss, coef). */
    assert_int_equal(m[WEFT_VOCAB_NAIVE].s_to_c1, logits + 3 * n * 4);
    assert_int_equal(m[WEFT_VOCAB_NAIVE].c1_to_t, logits + 2 * n * 4);
    /* ALG1: exp + (m, s, t) records + local max. */
    assert_int_equal(m[WEFT_VOCAB_ALG1].s_to_c1, logits + 4 * n * 4);
    assert_int_equal(m[WEFT_VOCAB_ALG1].c1_to_t, logits + 2 * n * 4);
    /* ALG2: also A and B [n, h] each until C1, then D [n, h] until T. */
    assert_int_equal(m[WEFT_VOCAB_ALG2].s_to_c1, logits + (3 + 2 * h) * n * 4 + n * 4);
    assert_int_equal(m[WEFT_VOCAB_ALG2].c1_to_t, logits + 2 * n * 4 + n * h * 4);
    for (int a = 0; a < WEFT_VOCAB_ALGO_COUNT; a++) {
        assert_int_equal(m[a].peak, m[a].s_to_c1 > m[a].c1_to_t ? m[a].s_to_c1 : m[a].c1_to_t);
    }
    weft_vocab_mem_t bad = {.size = 0};
    assert_int_equal(weft_vocab_xent_memory(v, WEFT_VOCAB_ALG1, n, &bad), WEFT_ERR_INVALID_ARG);
    OK(weft_vocab_free(v));
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
    }
    ids[3] = ids[7] = ids[9]; /* repeated ids accumulate */
    float *shard = shard_of(&(xcase_t){.n = n, .h = h, .V = V, .w = table}, &r);
    float *out = malloc(n * h * sizeof(float));
    memset(out, 0xff, n * h * sizeof(float)); /* NaN garbage: every element is written */
    uint64_t c0 = coll_count();
    OK(weft_vocab_embed_forward(v, shard, ids, n, out));
    assert_int_equal(coll_count() - c0, 1);
    for (size_t j = 0; j < n; j++) {
        assert_memory_equal(out + j * h, table + (size_t)ids[j] * h, h * sizeof(float));
    }
    /* Backward: ∇out known on the last rank only; the others hold garbage. */
    int root = g_size - 1;
    for (size_t i = 0; i < n * h; i++) {
        grad[i] = g_rank == root ? (float)(i % 7) - 3.0f : NAN;
    }
    float *dtab = calloc(r.padded_length * h + 1, sizeof(float));
    c0 = coll_count();
    OK(weft_vocab_embed_backward(v, grad, ids, n, root, dtab));
    assert_int_equal(coll_count() - c0, 1);
    /* Every rank holds ∇out now: scatter again without communication (accumulates). */
    c0 = coll_count();
    OK(weft_vocab_embed_backward(v, grad, ids, n, -1, dtab));
    assert_int_equal(coll_count() - c0, 0);
    for (size_t row = 0; row < r.padded_length; row++) {
        for (size_t k = 0; k < h; k++) {
            double want = 0.0;
            for (size_t j = 0; j < n && row < r.length; j++) {
                want +=
                    (size_t)ids[j] == r.start + row ? 2.0 * ((double)((j * h + k) % 7) - 3.0) : 0.0;
            }
            assert_float_equal(dtab[row * h + k], want, 1e-6);
        }
    }
    /* Nonblocking forward, and an id outside [0, V) fails before communicating. */
    weft_req_t *req = NULL;
    weft_status_t st = weft_vocab_iembed_forward(v, shard, ids, n, out, &req);
    assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
    OK(weft_wait(req, WEFT_TIMEOUT_DEFAULT));
    weft_req_free(req);
    ids[0] = (int64_t)V;
    c0 = coll_count();
    assert_int_equal(weft_vocab_embed_forward(v, shard, ids, n, out), WEFT_ERR_INVALID_ARG);
    assert_int_equal(coll_count(), c0);
    OK(weft_vocab_free(v));
    free(table);
    free(grad);
    free(shard);
    free(out);
    free(dtab);
}

int main(void)
{
    if (weft_init(NULL, &g_ctx) != WEFT_OK || weft_ctx_world(g_ctx, &g_world) != WEFT_OK ||
        weft_group_rank(g_world, &g_rank) != WEFT_OK ||
        weft_group_size(g_world, &g_size) != WEFT_OK) {
        fprintf(stderr, "test_vocab_mp: weft_init failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_query),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_zero_tokens),
        cmocka_unit_test(test_small_vocab_empty_shards),
        cmocka_unit_test(test_random_not_divisible),
        cmocka_unit_test(test_extreme_logits),
        cmocka_unit_test(test_label_smoothing),
        cmocka_unit_test(test_blocked),
        cmocka_unit_test(test_pipelined_nonblocking),
        cmocka_unit_test(test_accumulate_dw),
        cmocka_unit_test(test_embedding),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    weft_finalize(g_ctx);
    return rc;
}
