/*
 * Single-process test of the vocabulary-parallel output layer kernels: P shards are
 * simulated in one process (S on each shard, the records merged with the same operator
 * the collective uses, then T on each shard), and loss, ∇X and ∇W are compared with the
 * unsharded float64 reference. No communication is involved.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vocab/vocab_impl.h"
#include "vocab/vocab_ref.h"

typedef struct sim_out {
    float *loss_tok; /* [n] */
    float loss;
    float *dx; /* [n*h] */
    float *dw; /* [V*h], assembled from the shards */
} sim_out_t;

static void sim_out_free(sim_out_t *o)
{
    free(o->loss_tok);
    free(o->dx);
    free(o->dw);
}

typedef struct shard {
    weft_vocab_range_t r;
    weft__xent_dims_t d;
    float *w, *y, *rec, *mloc, *loss, *coef, *dx, *dw, *wsum;
} shard_t;

static void shard_alloc(shard_t *s, const xcase_t *c, int P, size_t align, int rank, size_t rec,
                        float eps, size_t block)
{
    memset(s, 0, sizeof(*s));
    assert_int_equal(weft_vocab_shard_range(c->V, P, align, rank, &s->r), WEFT_OK);
    size_t n = c->n, h = c->h, pl = s->r.padded_length;
    s->d = (weft__xent_dims_t){.n = n,
                               .h = h,
                               .start = s->r.start,
                               .len = s->r.length,
                               .vocab = c->V,
                               .ls = eps,
                               .block = block};
    s->wsum = malloc(h * sizeof(float) + 4);
    s->w = malloc(pl * h * sizeof(float) + 4);
    /* Padding rows are NaN: the kernels must never read them. */
    for (size_t i = 0; i < pl * h; i++) {
        s->w[i] = NAN;
    }
    memcpy(s->w, c->w + s->r.start * h, s->r.length * h * sizeof(float));
    /* A blocked shard gets the logits of one block only, as the library allocates. */
    size_t rows = weft__xent_blocked(&s->d) ? block : s->r.length;
    s->y = malloc(n * rows * sizeof(float) + 4);
    s->rec = malloc(n * rec * sizeof(float) + 4);
    s->mloc = malloc(n * sizeof(float) + 4);
    s->loss = malloc(n * sizeof(float) + 4);
    s->coef = malloc(n * sizeof(float) + 4);
    s->dx = malloc(n * h * sizeof(float) + 4);
    s->dw = malloc(pl * h * sizeof(float) + 4);
}

static void shard_free(shard_t *s)
{
    free(s->w);
    free(s->y);
    free(s->rec);
    free(s->mloc);
    free(s->loss);
    free(s->coef);
    free(s->dx);
    free(s->dw);
    free(s->wsum);
}

/* C1 without communication: combine the shards' records as the collectives would. */
static void sim_merge(shard_t *sh, int P, const xcase_t *c, weft_vocab_algo_t algo, bool reverse)
{
    size_t n = c->n, h = c->h;
    if (algo == WEFT_VOCAB_NAIVE) {
        for (size_t j = 0; j < n; j++) {
            float m = -INFINITY;
            for (int r = 0; r < P; r++) {
                m = sh[r].rec[j] > m ? sh[r].rec[j] : m;
            }
            for (int r = 0; r < P; r++) {
                sh[r].rec[j] = m;
            }
        }
        for (int r = 0; r < P; r++) {
            weft__xent_naive_sums_cpu(&sh[r].d, c->labels, sh[r].y, sh[r].rec);
        }
        for (size_t i = n; i < 3 * n; i++) {
            float s = 0.0f;
            for (int r = 0; r < P; r++) {
                s += sh[r].rec[i];
            }
            for (int r = 0; r < P; r++) {
                sh[r].rec[i] = s;
            }
        }
        return;
    }
    size_t rec = weft__rec_floats(algo, h);
    void *arg = algo == WEFT_VOCAB_ALG2 ? &h : NULL;
    float *acc = malloc(n * rec * sizeof(float) + 4);
    int first = reverse ? P - 1 : 0;
    memcpy(acc, sh[first].rec, n * rec * sizeof(float));
    for (int k = 1; k < P; k++) {
        int r = reverse ? P - 1 - k : k;
        weft__rec_merge(acc, sh[r].rec, n, arg);
    }
    for (int r = 0; r < P; r++) {
        memcpy(sh[r].rec, acc, n * rec * sizeof(float));
    }
    free(acc);
}

static void simulate(const xcase_t *c, int P, size_t align, weft_vocab_algo_t algo,
                     weft_vocab_reduction_t red, const float *grad, bool reverse, float eps,
                     size_t block, sim_out_t *o)
{
    size_t n = c->n, h = c->h;
    size_t rec = weft__rec_floats(algo, h);
    shard_t *sh = calloc((size_t)P, sizeof(*sh));
    for (int r = 0; r < P; r++) {
        shard_alloc(&sh[r], c, P, align, r, rec, eps, block);
        weft__xent_s_cpu(&sh[r].d, algo, c->x, sh[r].w, c->labels, sh[r].y, sh[r].rec, sh[r].mloc,
                         sh[r].wsum);
    }
    sim_merge(sh, P, c, algo, reverse);
    int64_t valid = weft__count_valid_labels(c->labels, n, c->V);
    assert_true(valid >= 0);
    float *wtok = malloc(n * sizeof(float) + 4);
    for (size_t j = 0; j < n; j++) {
        wtok[j] = weft__xent_token_weight(red, grad, j, c->labels[j], (size_t)valid);
    }
    o->loss_tok = calloc(n + 1, sizeof(float));
    o->dx = calloc(n * h + 1, sizeof(float));
    o->dw = calloc(c->V * h + 1, sizeof(float));
    for (int r = 0; r < P; r++) {
        double total = weft__xent_finish_c1_cpu(&sh[r].d, algo, c->labels, sh[r].rec, sh[r].mloc,
                                                sh[r].loss, sh[r].coef);
        if (r == 0) {
            memcpy(o->loss_tok, sh[r].loss, n * sizeof(float));
            o->loss =
                (float)(red == WEFT_VOCAB_MEAN ? (valid > 0 ? total / (double)valid : 0.0) : total);
        }
        /* Every shard derives the same loss from the same merged statistics. */
        assert_memory_equal(sh[r].loss, o->loss_tok, n * sizeof(float));
        weft__xent_t_cpu(&sh[r].d, algo, sh[r].r.padded_length, c->x, sh[r].w, c->labels, wtok,
                         sh[r].y, sh[r].coef, sh[r].mloc, sh[r].rec, sh[r].dx, sh[r].dw, false);
        memcpy(o->dw + sh[r].r.start * h, sh[r].dw, sh[r].r.length * h * sizeof(float));
        for (size_t i = sh[r].r.length * h; i < sh[r].r.padded_length * h; i++) {
            assert_true(sh[r].dw[i] == 0.0f); /* padding rows: zero gradient */
        }
        for (size_t i = 0; i < n * h; i++) {
            if (algo == WEFT_VOCAB_ALG2) {
                assert_true(sh[r].dx[i] == sh[0].dx[i]); /* complete on every rank */
                o->dx[i] = sh[0].dx[i];
            } else {
                o->dx[i] += sh[r].dx[i]; /* what C2 sums */
            }
        }
    }
    free(wtok);
    for (int r = 0; r < P; r++) {
        shard_free(&sh[r]);
    }
    free(sh);
}

static const char *red_name(weft_vocab_reduction_t red)
{
    return red == WEFT_VOCAB_MEAN ? "mean" : red == WEFT_VOCAB_SUM ? "sum" : "none";
}

/* Run every algorithm, P = 1..4 and both merge orders on @p c against the reference, with
 * label smoothing @p eps. */
static void check_case_blk(const xcase_t *c, weft_vocab_reduction_t red, size_t align, float eps,
                           size_t block)
{
    float *grad = malloc((c->n + 1) * sizeof(float));
    uint64_t s = 99;
    grad[0] = red == WEFT_VOCAB_NONE ? 0.5f : 1.75f;
    for (size_t j = 1; j < c->n; j++) {
        grad[j] = 0.25f + 0.5f * (ref_uniform(&s) + 1.0f);
    }
    xref_t ref;
    xref_compute_ls(c, red, grad, eps, &ref);
    for (int P = 1; P <= 4; P++) {
        for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
            if (block > 0 && algo == WEFT_VOCAB_NAIVE) {
                continue; /* refused by weft_vocab_mb_create */
            }
            for (int rev = 0; rev < 2; rev++) {
                sim_out_t o;
                simulate(c, P, align, (weft_vocab_algo_t)algo, red, grad, rev != 0, eps, block, &o);
                double e_lt = rel_err_loss(o.loss_tok, &ref.loss_tok[0], c->n);
                double e_l = rel_err_loss(&o.loss, &ref.loss, 1);
                double e_dx = rel_err_f(o.dx, ref.dx, c->n * c->h);
                double e_dw = rel_err_f(o.dw, ref.dw, c->V * c->h);
                if (e_lt > REF_TOL || e_l > REF_TOL || e_dx > REF_TOL || e_dw > REF_TOL) {
                    print_error("V=%zu P=%d align=%zu %s %s rev=%d eps=%g block=%zu: loss_tok "
                                "%.3g loss %.3g dx %.3g dw %.3g\n",
                                c->V, P, align, weft_vocab_algo_name((weft_vocab_algo_t)algo),
                                red_name(red), rev, (double)eps, block, e_lt, e_l, e_dx, e_dw);
                    fail();
                }
                sim_out_free(&o);
            }
        }
    }
    xref_free(&ref);
    free(grad);
}

static void check_case_ls(const xcase_t *c, weft_vocab_reduction_t red, size_t align, float eps)
{
    check_case_blk(c, red, align, eps, 0);
}

static void check_case(const xcase_t *c, weft_vocab_reduction_t red, size_t align)
{
    check_case_ls(c, red, align, 0.0f);
}

static void test_shard_ranges(void **state)
{
    (void)state;
    weft_vocab_range_t r;
    /* V = 5 over 4 ranks: 2, 2, 1 and an empty last shard. */
    size_t want[4][3] = {{0, 2, 2}, {2, 2, 2}, {4, 1, 2}, {6, 0, 2}};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(weft_vocab_shard_range(5, 4, 0, i, &r), WEFT_OK);
        assert_int_equal(r.start, want[i][0]);
        assert_int_equal(r.length, want[i][1]);
        assert_int_equal(r.padded_length, want[i][2]);
    }
    /* Alignment: ceil(100 / 3) = 34 -> 40 with align 8. */
    assert_int_equal(weft_vocab_shard_range(100, 3, 8, 2, &r), WEFT_OK);
    assert_int_equal(r.start, 80);
    assert_int_equal(r.length, 20);
    assert_int_equal(r.padded_length, 40);
    /* Every V, P, align: shards are disjoint, cover [0, V), equal padded lengths. */
    for (size_t V = 1; V <= 40; V++) {
        for (int P = 1; P <= 7; P++) {
            for (size_t align = 0; align <= 5; align++) {
                size_t next = 0, pl = 0;
                for (int i = 0; i < P; i++) {
                    assert_int_equal(weft_vocab_shard_range(V, P, align, i, &r), WEFT_OK);
                    if (i == 0) {
                        pl = r.padded_length;
                    }
                    assert_int_equal(r.padded_length, pl);
                    assert_int_equal(r.start, (size_t)i * pl);
                    assert_true(r.length <= pl);
                    if (r.length > 0) {
                        assert_int_equal(r.start, next);
                        next = r.start + r.length;
                    }
                }
                assert_int_equal(next, V);
                assert_true(pl * (size_t)P >= V);
                assert_int_equal(pl % (align == 0 ? 1 : align), 0);
                assert_true(pl < (V + (size_t)P - 1) / (size_t)P + (align == 0 ? 1 : align));
            }
        }
    }
    assert_int_equal(weft_vocab_shard_range(0, 2, 0, 0, &r), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_vocab_shard_range(10, 0, 0, 0, &r), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_vocab_shard_range(10, 2, 0, 2, &r), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_vocab_shard_range(10, 2, 0, -1, &r), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_vocab_shard_range(10, 2, 0, 0, NULL), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_vocab_shard_range(SIZE_MAX, 1, 16, 0, &r), WEFT_ERR_INVALID_ARG);
}

/* The merge operator on hand-made records: empty shards, order, extreme maxima. */
static void test_merge_operator(void **state)
{
    (void)state;
    size_t h = 1;
    /* {m, s, t, A, B} */
    float empty[5] = {-INFINITY, 0.0f, 0.0f, 0.0f, 0.0f};
    float a[5] = {1e4f, 2.0f, 0.0f, 3.0f, 0.0f};
    float b[5] = {-1e4f, 5.0f, 7.0f, 11.0f, 13.0f};
    float acc[5];
    /* empty (+) empty stays empty, without NaN. */
    memcpy(acc, empty, sizeof(acc));
    weft__rec_merge(acc, empty, 1, &h);
    assert_true(acc[0] == -INFINITY && acc[1] == 0.0f && acc[3] == 0.0f && !isnan(acc[1]));
    /* empty (+) a == a (+) empty == a */
    memcpy(acc, empty, sizeof(acc));
    weft__rec_merge(acc, a, 1, &h);
    assert_memory_equal(acc, a, sizeof(acc));
    memcpy(acc, a, sizeof(acc));
    weft__rec_merge(acc, empty, 1, &h);
    assert_memory_equal(acc, a, sizeof(acc));
    /* a (+) b: b's sum vanishes under a max 2e4 higher; t and B add. */
    memcpy(acc, b, sizeof(acc));
    weft__rec_merge(acc, a, 1, &h);
    float want[5] = {1e4f, 2.0f, 7.0f, 3.0f, 13.0f};
    assert_memory_equal(acc, want, sizeof(acc));
    /* Rescaling: {0, 1} (+) {ln 2, 1} = {ln 2, 1.5}. */
    float c[3] = {0.0f, 1.0f, 0.5f}, d[3] = {logf(2.0f), 1.0f, 0.25f};
    weft__rec_merge(c, d, 1, NULL);
    assert_float_equal(c[0], logf(2.0f), 0.0f);
    assert_float_equal(c[1], 1.5f, 1e-6f);
    assert_float_equal(c[2], 0.75f, 0.0f);
}

static void test_random_mean(void **state)
{
    (void)state;
    size_t Vs[] = {37, 40, 5, 1};
    for (size_t i = 0; i < sizeof(Vs) / sizeof(Vs[0]); i++) {
        xcase_t c;
        xcase_random(&c, 11, 16, Vs[i], 0.7f, 4, 1234 + i);
        check_case(&c, WEFT_VOCAB_MEAN, 1);
        check_case(&c, WEFT_VOCAB_MEAN, 4);
        xcase_free(&c);
    }
}

static void test_random_sum_none(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 9, 8, 23, 0.9f, 3, 77);
    check_case(&c, WEFT_VOCAB_SUM, 1);
    check_case(&c, WEFT_VOCAB_NONE, 1);
    check_case(&c, WEFT_VOCAB_SUM, 3);
    xcase_free(&c);
}

static void test_extreme_logits(void **state)
{
    (void)state;
    xcase_t c;
    xcase_extreme(&c, 13, 6, 29, 5);
    check_case(&c, WEFT_VOCAB_MEAN, 1);
    check_case(&c, WEFT_VOCAB_SUM, 2);
    check_case(&c, WEFT_VOCAB_NONE, 1);
    xcase_free(&c);
}

/* Label smoothing against the reference: every algorithm, P = 1..4, padding (align),
 * every reduction, ignored tokens, and the extremes ε = 1 (uniform target) and logits of
 * +-1e4. */
static void test_label_smoothing(void **state)
{
    (void)state;
    static const float eps[] = {0.1f, 0.35f, 1.0f};
    for (size_t e = 0; e < sizeof(eps) / sizeof(eps[0]); e++) {
        xcase_t c;
        xcase_random(&c, 11, 16, 37, 0.7f, 4, 4321 + e);
        check_case_ls(&c, WEFT_VOCAB_MEAN, 1, eps[e]);
        check_case_ls(&c, WEFT_VOCAB_MEAN, 4, eps[e]);
        check_case_ls(&c, WEFT_VOCAB_SUM, 1, eps[e]);
        check_case_ls(&c, WEFT_VOCAB_NONE, 3, eps[e]);
        xcase_free(&c);
    }
    xcase_t c;
    xcase_extreme(&c, 13, 6, 29, 5);
    check_case_ls(&c, WEFT_VOCAB_MEAN, 1, 0.1f);
    check_case_ls(&c, WEFT_VOCAB_NONE, 2, 0.1f);
    xcase_free(&c);
}

/* Blocked S and T against the reference: blocks of 1 row, of a few rows not dividing the
 * shard, and one row short of it; with label smoothing, padding, every reduction and the
 * extreme logits (where the running max of a token changes from block to block). */
static void test_blocked(void **state)
{
    (void)state;
    static const size_t blocks[] = {1, 3, 8};
    for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
        xcase_t c;
        xcase_random(&c, 11, 16, 37, 0.7f, 4, 555 + b);
        check_case_blk(&c, WEFT_VOCAB_MEAN, 1, 0.0f, blocks[b]);
        check_case_blk(&c, WEFT_VOCAB_SUM, 4, 0.0f, blocks[b]);
        check_case_blk(&c, WEFT_VOCAB_NONE, 1, 0.2f, blocks[b]);
        xcase_free(&c);
        xcase_extreme(&c, 13, 6, 29, 5);
        check_case_blk(&c, WEFT_VOCAB_MEAN, 1, 0.0f, blocks[b]);
        check_case_blk(&c, WEFT_VOCAB_NONE, 2, 0.1f, blocks[b]);
        xcase_free(&c);
    }
    xcase_t c;
    xcase_random(&c, 9, 8, 40, 0.9f, 3, 77); /* blocks from 1 row to the whole of each shard */
    for (size_t b = 1; b <= 40; b += 6) {
        check_case_blk(&c, WEFT_VOCAB_MEAN, 1, 0.0f, b);
    }
    xcase_free(&c);
}

/* All labels ignored: zero loss and gradients, no NaN (mean has nothing to divide). */
static void test_all_ignored(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 4, 8, 10, 1.0f, 1, 3);
    for (size_t j = 0; j < c.n; j++) {
        assert_true(c.labels[j] < 0);
    }
    float g = 1.0f;
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        sim_out_t o;
        simulate(&c, 3, 1, (weft_vocab_algo_t)algo, WEFT_VOCAB_MEAN, &g, false, 0.0f, 0, &o);
        assert_true(o.loss == 0.0f);
        for (size_t i = 0; i < c.n; i++) {
            assert_true(o.loss_tok[i] == 0.0f);
        }
        for (size_t i = 0; i < c.n * c.h; i++) {
            assert_true(o.dx[i] == 0.0f);
        }
        for (size_t i = 0; i < c.V * c.h; i++) {
            assert_true(o.dw[i] == 0.0f);
        }
        sim_out_free(&o);
    }
    xcase_free(&c);
}

/* No tokens at all: nothing is read or written, and nothing breaks. */
static void test_zero_tokens(void **state)
{
    (void)state;
    xcase_t c;
    xcase_random(&c, 0, 4, 7, 1.0f, 0, 1);
    float g = 1.0f;
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        sim_out_t o;
        simulate(&c, 2, 1, (weft_vocab_algo_t)algo, WEFT_VOCAB_MEAN, &g, false, 0.0f, 0, &o);
        assert_true(o.loss == 0.0f);
        for (size_t i = 0; i < c.V * c.h; i++) {
            assert_true(o.dw[i] == 0.0f);
        }
        sim_out_free(&o);
    }
    xcase_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_ranges),   cmocka_unit_test(test_merge_operator),
        cmocka_unit_test(test_zero_tokens),    cmocka_unit_test(test_all_ignored),
        cmocka_unit_test(test_random_mean),    cmocka_unit_test(test_random_sum_none),
        cmocka_unit_test(test_extreme_logits), cmocka_unit_test(test_label_smoothing),
        cmocka_unit_test(test_blocked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
