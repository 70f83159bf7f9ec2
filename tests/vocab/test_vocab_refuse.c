/*
 * The vocabulary passes when one rank rejects its own arguments (run by weftrun on 2-4
 * ranks, through shared memory and, by CMake, over messages): that rank still takes part
 * in the pass's collective as a refusal, so every rank returns WEFT_ERR_INVALID_ARG at
 * once, not after WEFT_TIMEOUT_MS (60 s here), and the group stays in step.
 *
 *   forward      a label >= V on one rank, every algorithm; the blocking forward, and S
 *                then C1 with the refuser away after its C1 until the others say they
 *                are done (tests/away.h): had they waited for it, it would never return
 *   backward     a NULL ∇X on one rank (NAIVE and ALG1, whose C2 communicates)
 *   embedding    an id >= V in the forward lookup; a root without ∇out in the backward
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "away.h"
#include "weft/weft.h"

enum { V = 50, H = 8, N = 6 };
#define PROMPT_S 10.0 /* far below the 60 s timeout */
#define AWAY_LIMIT_S 30.0 /* how long the absent rank waits for the others */

static weft_ctx_t *ctx;
static weft_group_t *world;
static int me, nranks;
static away_t absent; /* the markers of the refuser's absences */
static float x[N * H], w[V * H], dx[N * H], dw[V * H], loss_tok[N], grad[1] = {1.0f};
static int64_t labels[N], bad_labels[N];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void expect(weft_status_t st, weft_status_t want, const char *what, int refuser)
{
    if (st != want) {
        fail_msg("rank %d, %s (refuser %d): got %s, expected %s (%s)", me, what, refuser,
                 weft_status_str(st), weft_status_str(want), weft_last_error(ctx));
    }
}

static void expect_prompt(double t0, double limit, const char *what, int refuser)
{
    if (me != refuser && now_s() - t0 > limit) {
        fail_msg("rank %d: %s refused by rank %d took %.1f s", me, what, refuser, now_s() - t0);
    }
}

/* The group is still in step: the next collective agrees everywhere. */
static void check_in_step(const char *what, int refuser)
{
    int64_t v = me + 1;
    expect(weft_allreduce(world, &v, &v, 1, WEFT_I64, WEFT_SUM), WEFT_OK, what, refuser);
    assert_true(v == (int64_t)nranks * (nranks + 1) / 2);
}

static weft_vocab_t *make_vocab(void)
{
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = V, .hidden = H};
    weft_vocab_t *v;
    assert_int_equal(weft_vocab_create(world, &vp, &v), WEFT_OK);
    return v;
}

static weft_vocab_mb_t *make_mb(weft_vocab_t *v, weft_vocab_algo_t algo)
{
    weft_vocab_mb_params_t mp = {.size = sizeof(mp), .algo = algo, .max_tokens = N};
    weft_vocab_mb_t *mb;
    assert_int_equal(weft_vocab_mb_create(v, &mp, &mb), WEFT_OK);
    return mb;
}

static void forward_once(weft_vocab_mb_t *mb, int refuser, const char *what)
{
    assert_int_equal(weft_barrier(world), WEFT_OK);
    double t0 = now_s();
    weft_status_t st =
        weft_vocab_xent_forward(mb, x, w, me == refuser ? bad_labels : labels, N, loss_tok, NULL);
    expect(st, WEFT_ERR_INVALID_ARG, what, refuser);
    expect_prompt(t0, PROMPT_S, what, refuser);
    if (me != refuser && strstr(weft_last_error(ctx), "refused") == NULL) {
        fail_msg("rank %d: %s: the error does not say a rank refused: %s", me, what,
                 weft_last_error(ctx));
    }
    check_in_step(what, refuser);
    /* The next forward, with good labels everywhere, works. */
    assert_int_equal(weft_vocab_xent_forward(mb, x, w, labels, N, loss_tok, NULL), WEFT_OK);
}

static void test_forward(void **state)
{
    (void)state;
    weft_vocab_t *v = make_vocab();
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        weft_vocab_mb_t *mb = make_mb(v, (weft_vocab_algo_t)algo);
        forward_once(mb, nranks - 1, weft_vocab_algo_name((weft_vocab_algo_t)algo));
        forward_once(mb, 0, weft_vocab_algo_name((weft_vocab_algo_t)algo));
        assert_int_equal(weft_vocab_mb_free(mb), WEFT_OK);
    }
    assert_int_equal(weft_vocab_free(v), WEFT_OK);
}

/* The passes one by one: S refuses its labels, its C1 joins as a refusal and returns at
 * once, and the refuser stays away; the others' C1 does not wait for it. */
static void test_passes_away(void **state)
{
    (void)state;
    weft_vocab_t *v = make_vocab();
    int refuser = nranks - 1;
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        weft_vocab_mb_t *mb = make_mb(v, (weft_vocab_algo_t)algo);
        const char *what = weft_vocab_algo_name((weft_vocab_algo_t)algo);
        assert_int_equal(weft_barrier(world), WEFT_OK);
        if (me == refuser) {
            expect(weft_vocab_xent_logits(mb, x, w, bad_labels, N), WEFT_ERR_INVALID_ARG, what,
                   refuser);
            weft_req_t *req = NULL;
            expect(weft_vocab_xent_merge_start(mb, &req), WEFT_ERR_INVALID_ARG, what, refuser);
            assert_null(req); /* a refused pass gives no request */
            if (!away_wait(&absent, me, nranks, AWAY_LIMIT_S)) {
                fail_msg("rank %d: the others' %s C1 did not finish while it was away", me, what);
            }
        } else {
            assert_int_equal(weft_vocab_xent_logits(mb, x, w, labels, N), WEFT_OK);
            weft_req_t *req = NULL;
            weft_status_t st = weft_vocab_xent_merge_start(mb, &req);
            if (st == WEFT_INPROGRESS) {
                st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
                assert_int_equal(weft_req_free(req), WEFT_OK);
            }
            expect(st, WEFT_ERR_INVALID_ARG, what, refuser);
            away_done(&absent, me);
        }
        check_in_step(what, refuser);
        assert_int_equal(weft_vocab_mb_free(mb), WEFT_OK);
    }
    assert_int_equal(weft_vocab_free(v), WEFT_OK);
}

static void test_backward(void **state)
{
    (void)state;
    weft_vocab_t *v = make_vocab();
    weft_vocab_range_t r;
    assert_int_equal(weft_vocab_local_range(v, &r), WEFT_OK);
    int refuser = nranks / 2;
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        if (algo == WEFT_VOCAB_ALG2) {
            continue; /* no collective in its backward */
        }
        weft_vocab_mb_t *mb = make_mb(v, (weft_vocab_algo_t)algo);
        const char *what = weft_vocab_algo_name((weft_vocab_algo_t)algo);
        assert_int_equal(weft_vocab_xent_forward(mb, x, w, labels, N, loss_tok, NULL), WEFT_OK);
        assert_int_equal(weft_barrier(world), WEFT_OK);
        double t0 = now_s();
        weft_status_t st = weft_vocab_xent_backward(mb, grad, me == refuser ? NULL : dx, dw);
        expect(st, WEFT_ERR_INVALID_ARG, what, refuser);
        expect_prompt(t0, PROMPT_S, what, refuser);
        check_in_step(what, refuser);
        assert_int_equal(weft_vocab_mb_free(mb), WEFT_OK);
    }
    assert_int_equal(weft_vocab_free(v), WEFT_OK);
}

static void test_embedding(void **state)
{
    (void)state;
    weft_vocab_t *v = make_vocab();
    float out[N * H];
    int refuser = nranks - 1;
    assert_int_equal(weft_barrier(world), WEFT_OK);
    double t0 = now_s();
    weft_status_t st = weft_vocab_embed_forward(v, w, me == refuser ? bad_labels : labels, N, out);
    expect(st, WEFT_ERR_INVALID_ARG, "embedding forward", refuser);
    expect_prompt(t0, PROMPT_S, "embedding forward", refuser);
    check_in_step("embedding forward", refuser);
    /* Nonblocking, the refuser first (a root without ∇out refuses the broadcast). */
    refuser = 0;
    assert_int_equal(weft_barrier(world), WEFT_OK);
    t0 = now_s();
    weft_req_t *req = NULL;
    st = weft_vocab_embed_grad_bcast_start(v, me == refuser ? NULL : out, N, refuser, &req);
    if (st == WEFT_INPROGRESS) {
        st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
        weft_req_free(req);
    }
    expect(st, WEFT_ERR_INVALID_ARG, "embedding gradient broadcast", refuser);
    expect_prompt(t0, PROMPT_S, "embedding gradient broadcast", refuser);
    check_in_step("embedding gradient broadcast", refuser);
    assert_int_equal(weft_vocab_embed_forward(v, w, labels, N, out), WEFT_OK);
    assert_int_equal(weft_vocab_free(v), WEFT_OK);
}

int main(void)
{
    setenv("WEFT_TIMEOUT_MS", "60000", 0);
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK ||
        weft_group_rank(world, &me) != WEFT_OK || weft_group_size(world, &nranks) != WEFT_OK) {
        fprintf(stderr, "test_vocab_refuse: weft_init failed\n");
        return 1;
    }
    for (int i = 0; i < N * H; i++) {
        x[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    }
    for (int i = 0; i < V * H; i++) {
        w[i] = (float)((i * 53) % 29) / 29.0f - 0.5f;
    }
    for (int j = 0; j < N; j++) {
        labels[j] = bad_labels[j] = (j * 11) % V;
    }
    bad_labels[N / 2] = V; /* one label past the vocabulary */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_passes_away),
        cmocka_unit_test(test_backward),
        cmocka_unit_test(test_embedding),
    };
    if (!away_init(world, me, &absent)) {
        fprintf(stderr, "test_vocab_refuse: cannot make the markers' directory\n");
        return 1;
    }
    int rc = nranks < 2 ? 0 : cmocka_run_group_tests(tests, NULL, NULL);
    away_fini(world, me, &absent);
    weft_finalize(ctx);
    return rc;
}
