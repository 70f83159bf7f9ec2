/*
 * The vocabulary-parallel output layer against PyTorch: loads the inputs and the
 * results of torch.nn.functional.cross_entropy saved by gen_torch_data.py in
 * tests/vocab/data/ (argv[1]) and runs every algorithm on this rank's shard.
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
static const char *g_dir;

#define OK(call) assert_int_equal((call), WEFT_OK)

typedef struct torch_case {
    xcase_t c;
    weft_vocab_reduction_t red;
    float *grad;
    xref_t ref;
} torch_case_t;

static void read_exact(FILE *f, void *buf, size_t bytes)
{
    assert_int_equal(fread(buf, 1, bytes, f), bytes);
}

/* Load a case written by gen_torch_data.py (layout documented there). */
static void load_case(const char *name, torch_case_t *t)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        print_error("cannot open %s\n", path);
        fail();
    }
    char magic[8];
    int32_t hdr[5];
    read_exact(f, magic, sizeof(magic));
    assert_memory_equal(magic, "WEFTVX01", 8);
    read_exact(f, hdr, sizeof(hdr));
    size_t n = (size_t)hdr[0], h = (size_t)hdr[1], V = (size_t)hdr[2], ngrad = (size_t)hdr[4];
    assert_true(n > 0 && n < 1024 && h > 0 && h < 1024 && V > 0 && V < 4096);
    assert_true(hdr[3] >= 0 && hdr[3] <= 2);
    t->red = (weft_vocab_reduction_t)hdr[3];
    assert_int_equal(ngrad, t->red == WEFT_VOCAB_NONE ? n : 1);
    xcase_alloc(&t->c, n, h, V);
    read_exact(f, t->c.x, n * h * sizeof(float));
    read_exact(f, t->c.w, V * h * sizeof(float));
    read_exact(f, t->c.labels, n * sizeof(int64_t));
    t->grad = malloc(ngrad * sizeof(float));
    read_exact(f, t->grad, ngrad * sizeof(float));
    t->ref.loss_tok = malloc(n * sizeof(double));
    t->ref.dx = malloc(n * h * sizeof(double));
    t->ref.dw = malloc(V * h * sizeof(double));
    read_exact(f, t->ref.loss_tok, n * sizeof(double));
    read_exact(f, &t->ref.loss, sizeof(double));
    read_exact(f, t->ref.dx, n * h * sizeof(double));
    read_exact(f, t->ref.dw, V * h * sizeof(double));
    char extra;
    assert_int_equal(fread(&extra, 1, 1, f), 0); /* nothing left over */
    fclose(f);
}

static void run_case(const char *name)
{
    torch_case_t t;
    load_case(name, &t);
    const xcase_t *c = &t.c;
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = c->V, .hidden = c->h};
    weft_vocab_t *v;
    OK(weft_vocab_create(g_world, &vp, &v));
    weft_vocab_range_t r;
    OK(weft_vocab_local_range(v, &r));
    float *w = shard_of(c, &r);
    float *loss_tok = malloc(c->n * sizeof(float)), loss;
    float *dx = malloc(c->n * c->h * sizeof(float));
    float *dw = malloc(r.padded_length * c->h * sizeof(float) + 4);
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        weft_vocab_mb_params_t mp = {.size = sizeof(mp),
                                     .algo = (weft_vocab_algo_t)algo,
                                     .reduction = t.red,
                                     .max_tokens = c->n};
        weft_vocab_mb_t *mb;
        OK(weft_vocab_mb_create(v, &mp, &mb));
        OK(weft_vocab_xent_forward(mb, c->x, w, c->labels, c->n, loss_tok, &loss));
        OK(weft_vocab_xent_backward(mb, t.grad, dx, dw));
        char what[64];
        snprintf(what, sizeof(what), "torch %s %s", name,
                 weft_vocab_algo_name((weft_vocab_algo_t)algo));
        check_outputs(g_rank, g_size, c, &t.ref, &r, loss_tok, loss, dx, dw, what);
        OK(weft_vocab_mb_free(mb));
    }
    OK(weft_vocab_free(v));
    free(w);
    free(loss_tok);
    free(dx);
    free(dw);
    free(t.grad);
    xref_free(&t.ref);
    xcase_free(&t.c);
}

static void test_torch_mean(void **state)
{
    (void)state;
    run_case("mean.bin");
}

static void test_torch_sum(void **state)
{
    (void)state;
    run_case("sum.bin");
}

static void test_torch_none(void **state)
{
    (void)state;
    run_case("none.bin");
}

static void test_torch_extreme(void **state)
{
    (void)state;
    run_case("extreme.bin");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_vocab_torch DATA_DIR\n");
        return 2;
    }
    g_dir = argv[1];
    if (weft_init(NULL, &g_ctx) != WEFT_OK || weft_ctx_world(g_ctx, &g_world) != WEFT_OK ||
        weft_group_rank(g_world, &g_rank) != WEFT_OK ||
        weft_group_size(g_world, &g_size) != WEFT_OK) {
        fprintf(stderr, "test_vocab_torch: weft_init failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_mean),
        cmocka_unit_test(test_torch_sum),
        cmocka_unit_test(test_torch_none),
        cmocka_unit_test(test_torch_extreme),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    weft_finalize(g_ctx);
    return rc;
}
