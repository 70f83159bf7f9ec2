/*
 * The requests of the communicating vocabulary passes (C1: weft_vocab_xent_merge_start,
 * C2: weft_vocab_xent_dx_reduce_start) follow the library's one completion model
 * (include/weft/core.h): finished with weft_test()/weft_wait(), released with
 * weft_req_free(), which cancels one in flight as for any collective: the collective is
 * abandoned and the group's epoch revoked on every member (include/weft/group.h). Run by
 * weftrun with 2 and 3 ranks:
 *   - a completed pass request stays valid after its microbatch is freed;
 *   - rank 0 frees its C1 request in flight: its microbatch has failed (no loss), the
 *     others get WEFT_OK or WEFT_ERR_REVOKED, every member repairs, and the same
 *     microbatch state then runs a whole step;
 *   - rank 0 frees the microbatch with its C1 request in flight: the request then
 *     completes with WEFT_ERR_REVOKED and is still freed by the caller.
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
#include "vocab/vocab_ref.h"
#include "weft/weft.h"

#define OK(call) assert_int_equal((call), WEFT_OK)

static weft_ctx_t *g_ctx;
static weft_group_t *g_world;
/* A copy of the world split off at the start, which no abandonment on the world touches:
 * a round starts once every member is out of the last one (completion is not uniform: a
 * member may still be in a collective that another finished and then revoked). */
static weft_group_t *g_sync;
static int g_rank, g_size;

typedef struct fixture {
    xcase_t c;
    weft_vocab_t *v;
    weft_vocab_range_t r;
    float *w, *dx, *dw;
} fixture_t;

static void fixture_init(fixture_t *f)
{
    xcase_random(&f->c, 9, 8, 31, 0.8f, 2, 77);
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = f->c.V, .hidden = f->c.h};
    OK(weft_vocab_create(g_world, &vp, &f->v));
    OK(weft_vocab_local_range(f->v, &f->r));
    f->w = shard_of(&f->c, &f->r);
    f->dx = malloc(f->c.n * f->c.h * sizeof(float));
    f->dw = malloc(f->r.padded_length * f->c.h * sizeof(float) + 4);
}

static void fixture_fini(fixture_t *f)
{
    OK(weft_vocab_free(f->v));
    free(f->w);
    free(f->dx);
    free(f->dw);
    xcase_free(&f->c);
}

static weft_vocab_mb_t *make_mb(fixture_t *f, weft_vocab_algo_t algo)
{
    weft_vocab_mb_params_t mp = {.size = sizeof(mp), .algo = algo, .max_tokens = f->c.n};
    weft_vocab_mb_t *mb;
    OK(weft_vocab_mb_create(f->v, &mp, &mb));
    return mb;
}

/* Every member repairs the world until an allreduce at the new epoch passes on all. */
static void recover(void)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        OK(weft_group_repair(g_world, NULL));
        int64_t one = 1, sum = 0;
        weft_status_t st = weft_allreduce(g_world, &one, &sum, 1, WEFT_I64, WEFT_SUM);
        if (st == WEFT_OK) {
            assert_int_equal(sum, g_size);
            return;
        }
        assert_true(st == WEFT_ERR_REVOKED || st == WEFT_ERR_PEER_FAILED);
    }
    fail_msg("rank %d: the world did not recover", g_rank);
}

/* A whole step with the blocking wrappers, checked against the reference. */
static void step_ok(fixture_t *f, weft_vocab_mb_t *mb, const char *what)
{
    float g = 1.0f, loss = NAN;
    float *lt = malloc(f->c.n * sizeof(float));
    xref_t ref;
    xref_compute(&f->c, WEFT_VOCAB_MEAN, &g, &ref);
    OK(weft_vocab_xent_forward(mb, f->c.x, f->w, f->c.labels, f->c.n, lt, &loss));
    OK(weft_vocab_xent_backward(mb, &g, f->dx, f->dw));
    check_outputs(g_rank, g_size, &f->c, &ref, &f->r, lt, loss, f->dx, f->dw, what);
    xref_free(&ref);
    free(lt);
}

/* Both pass requests, waited for, outlive their microbatch; the default algorithm (a
 * zero-initialised algo) issues no C2 collective. */
static void test_completed_requests(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f);
    for (int algo = 0; algo < WEFT_VOCAB_ALGO_COUNT; algo++) {
        weft_vocab_mb_t *mb = make_mb(&f, (weft_vocab_algo_t)algo);
        float g = 1.0f, loss;
        weft_req_t *c1 = NULL, *c2 = NULL;
        OK(weft_vocab_xent_logits(mb, f.c.x, f.w, f.c.labels, f.c.n));
        weft_status_t st = weft_vocab_xent_merge_start(mb, &c1);
        assert_true(st == WEFT_INPROGRESS ? c1 != NULL : st == WEFT_OK && c1 == NULL);
        OK(weft_wait(c1, WEFT_TIMEOUT_DEFAULT));
        OK(weft_vocab_xent_loss(mb, NULL, &loss));
        OK(weft_vocab_xent_grad(mb, &g, f.dx, f.dw));
        uint64_t c0 = 0, c_after = 0;
        OK(weft_group_coll_count(g_world, &c0));
        st = weft_vocab_xent_dx_reduce_start(mb, &c2);
        OK(weft_group_coll_count(g_world, &c_after));
        if (algo == WEFT_VOCAB_ALG2) {
            assert_int_equal(st, WEFT_OK);
            assert_null(c2);
            assert_int_equal(c_after, c0);
        }
        OK(weft_wait(c2, WEFT_TIMEOUT_DEFAULT));
        OK(weft_vocab_mb_free(mb));
        OK(weft_test(c1)); /* completed before the free: still valid, still OK */
        OK(weft_test(c2));
        OK(weft_req_free(c1));
        OK(weft_req_free(c2));
    }
    weft_vocab_mb_params_t zero = {.size = sizeof(zero), .max_tokens = 1};
    assert_int_equal(zero.algo, WEFT_VOCAB_ALG2);
    fixture_fini(&f);
}

/* Rank 0 frees its C1 request in flight (or, with @p free_mb, the microbatch under it). */
static void cancel_round(bool free_mb)
{
    fixture_t f;
    fixture_init(&f);
    weft_vocab_mb_t *mb = make_mb(&f, WEFT_VOCAB_ALG1);
    OK(weft_barrier(g_sync));
    OK(weft_vocab_xent_logits(mb, f.c.x, f.w, f.c.labels, f.c.n));
    weft_req_t *req = NULL;
    weft_status_t st = weft_vocab_xent_merge_start(mb, &req);
    if (g_rank == 0) {
        assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
        bool in_flight = st == WEFT_INPROGRESS;
        if (free_mb) {
            OK(weft_vocab_mb_free(mb));
            mb = NULL;
            if (in_flight) {
                assert_int_equal(weft_test(req), WEFT_ERR_REVOKED);
                assert_int_equal(weft_wait(req, WEFT_TIMEOUT_DEFAULT), WEFT_ERR_REVOKED);
            }
        }
        OK(weft_req_free(req)); /* in flight: the collective is abandoned */
        if (in_flight && !free_mb) {
            float loss;
            assert_int_equal(weft_vocab_xent_loss(mb, NULL, &loss), WEFT_ERR_INVALID_ARG);
            float g = 1.0f;
            assert_int_equal(weft_vocab_xent_grad(mb, &g, f.dx, f.dw), WEFT_ERR_INVALID_ARG);
        }
    } else {
        /* Finished before the cancel, or revoked by it (a start may be revoked too). */
        if (st == WEFT_INPROGRESS) {
            st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
            OK(weft_req_free(req));
        }
        if (st != WEFT_OK && st != WEFT_ERR_REVOKED) {
            fail_msg("rank %d: C1 beside a cancel: %s", g_rank, weft_status_str(st));
        }
    }
    recover();
    OK(weft_barrier(g_sync));
    if (mb == NULL) {
        mb = make_mb(&f, WEFT_VOCAB_ALG1);
    }
    step_ok(&f, mb, free_mb ? "after a freed microbatch" : "after a cancelled C1");
    OK(weft_vocab_mb_free(mb));
    fixture_fini(&f);
}

static void test_cancel_by_req_free(void **state)
{
    (void)state;
    cancel_round(false);
}

static void test_cancel_by_mb_free(void **state)
{
    (void)state;
    cancel_round(true);
}

int main(void)
{
    if (weft_init(NULL, &g_ctx) != WEFT_OK || weft_ctx_world(g_ctx, &g_world) != WEFT_OK ||
        weft_group_rank(g_world, &g_rank) != WEFT_OK ||
        weft_group_size(g_world, &g_size) != WEFT_OK) {
        fprintf(stderr, "test_vocab_req: weft_init failed\n");
        return 1;
    }
    if (weft_group_split(g_world, 0, g_rank, &g_sync) != WEFT_OK) {
        fprintf(stderr, "test_vocab_req: split failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completed_requests),
        cmocka_unit_test(test_cancel_by_req_free),
        cmocka_unit_test(test_cancel_by_mb_free),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    weft_group_free(g_sync);
    weft_finalize(g_ctx);
    return rc;
}
