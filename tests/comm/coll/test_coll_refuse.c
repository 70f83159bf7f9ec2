/*
 * One-sided refusals (run by weftrun on 2-4 ranks, through shared memory and, by CMake,
 * over messages with WEFT_COLL_SHM=off): one rank passes arguments it rejects itself
 * (WEFT_ERR_INVALID_ARG), the others valid ones. Every rank must return at once, the
 * others with WEFT_ERR_MISMATCH, and the group must stay in step. WEFT_TIMEOUT_MS is 60 s,
 * so a rank left waiting for the refuser would show:
 *
 *   each kind    blocking and nonblocking, refused by the first, a middle or the last rank
 *   away         a nonblocking refusal, after which the refuser stays out of weft until the
 *                others say they are done (tests/away.h): had they waited for it to come
 *                back, it never would
 *   queued       refused while an earlier collective is still outstanding (through shared
 *                memory the refusal waits for its turn), the refuser away as well
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

static weft_ctx_t *ctx;
static weft_group_t *world;
static int me, nranks;
static away_t absent; /* the markers of the refuser's absences */

enum { BIG = 200000 };
#define PROMPT_S 10.0 /* far below the 60 s timeout: nobody waited for one */
#define AWAY_LIMIT_S 30.0 /* how long the absent rank waits for the others */

static float *in, *out;
static size_t counts[8], displs[8];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A collective, with arguments this rank rejects when @p bad; blocking when !req. */
typedef weft_status_t (*coll_fn)(bool bad, int refuser, weft_req_t **req);

static weft_status_t allreduce_small(bool bad, int refuser, weft_req_t **req)
{
    const float *s = bad ? NULL : in;
    return req ? weft_iallreduce(world, s, out, 16, WEFT_F32, WEFT_SUM, req)
               : weft_allreduce(world, s, out, 16, WEFT_F32, WEFT_SUM);
}

static weft_status_t allreduce_large(bool bad, int refuser, weft_req_t **req)
{
    weft_op_t op = bad ? 99 : WEFT_SUM;
    return req ? weft_iallreduce(world, in, out, BIG, WEFT_F32, op, req)
               : weft_allreduce(world, in, out, BIG, WEFT_F32, op);
}

static weft_status_t reduce_scatter(bool bad, int refuser, weft_req_t **req)
{
    float *r = bad ? NULL : out;
    return req ? weft_ireduce_scatter(world, in, r, 8, WEFT_F32, WEFT_SUM, req)
               : weft_reduce_scatter(world, in, r, 8, WEFT_F32, WEFT_SUM);
}

static weft_status_t allgather(bool bad, int refuser, weft_req_t **req)
{
    float *r = bad ? NULL : out;
    return req ? weft_iallgather(world, in, r, BIG / 4, WEFT_F32, req)
               : weft_allgather(world, in, r, BIG / 4, WEFT_F32);
}

/* The root refuses its own broadcast (no buffer). */
static weft_status_t broadcast_root(bool bad, int refuser, weft_req_t **req)
{
    float *b = bad ? NULL : out;
    return req ? weft_ibroadcast(world, b, 16, WEFT_F32, refuser, req)
               : weft_broadcast(world, b, 16, WEFT_F32, refuser);
}

/* A reader refuses a large broadcast (a root outside the group). */
static weft_status_t broadcast_reader(bool bad, int refuser, weft_req_t **req)
{
    int root = bad ? nranks : (refuser + 1) % nranks;
    return req ? weft_ibroadcast(world, out, BIG, WEFT_F32, root, req)
               : weft_broadcast(world, out, BIG, WEFT_F32, root);
}

static weft_status_t reduce(bool bad, int refuser, weft_req_t **req)
{
    int root = bad ? -1 : 0;
    return req ? weft_ireduce(world, in, out, 1000, WEFT_F32, WEFT_MAX, root, req)
               : weft_reduce(world, in, out, 1000, WEFT_F32, WEFT_MAX, root);
}

static weft_status_t alltoall(bool bad, int refuser, weft_req_t **req)
{
    const float *s = bad ? out : in; /* in place: refused */
    return req ? weft_ialltoall(world, s, out, 4, WEFT_F32, req)
               : weft_alltoall(world, s, out, 4, WEFT_F32);
}

static weft_status_t alltoallv(bool bad, int refuser, weft_req_t **req)
{
    const size_t *sc = bad ? NULL : counts;
    return req ? weft_ialltoallv(world, in, sc, displs, out, counts, displs, WEFT_F32, req)
               : weft_alltoallv(world, in, sc, displs, out, counts, displs, WEFT_F32);
}

static void expect(weft_status_t st, weft_status_t want, const char *what, int refuser)
{
    if (st != want) {
        fail_msg("rank %d, %s refused by rank %d: got %s, expected %s (%s)", me, what, refuser,
                 weft_status_str(st), weft_status_str(want), weft_last_error(ctx));
    }
}

/* Every rank agrees on the next collective: the group is still in step. */
static void check_in_step(const char *what, int refuser)
{
    int64_t v = me + 1;
    char after[96];
    snprintf(after, sizeof(after), "the allreduce after a %s", what);
    expect(weft_allreduce(world, &v, &v, 1, WEFT_I64, WEFT_SUM), WEFT_OK, after, refuser);
    assert_true(v == (int64_t)nranks * (nranks + 1) / 2);
}

/*
 * One collective that @p refuser rejects: nonblocking when @p nb; with @p away the refuser
 * stays out of weft after its refusal until the others are done (never, if they waited for
 * it). The others must be done in time.
 */
static void refused_once(coll_fn fn, const char *what, int refuser, bool nb, bool away)
{
    assert_int_equal(weft_barrier(world), WEFT_OK);
    double t0 = now_s();
    weft_req_t *req = NULL;
    weft_status_t st = fn(me == refuser, refuser, nb ? &req : NULL);
    if (me == refuser) {
        expect(st, WEFT_ERR_INVALID_ARG, what, refuser);
        assert_null(req);
        if (away && !away_wait(&absent, me, nranks, AWAY_LIMIT_S)) {
            fail_msg("rank %d: the others did not finish a %s while it was away", me, what);
        }
    } else {
        if (st == WEFT_INPROGRESS) {
            st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
            weft_req_free(req);
        }
        expect(st, WEFT_ERR_MISMATCH, what, refuser);
        if (away) {
            away_done(&absent, me);
        } else if (now_s() - t0 > PROMPT_S) {
            fail_msg("rank %d: %s refused by rank %d took %.1f s", me, what, refuser, now_s() - t0);
        }
    }
    check_in_step(what, refuser);
}

static const struct {
    coll_fn fn;
    const char *what;
} kinds[] = {
    {allreduce_small, "small allreduce"},
    {allreduce_large, "large allreduce"},
    {reduce_scatter, "reduce_scatter"},
    {allgather, "allgather"},
    {broadcast_root, "small broadcast"},
    {broadcast_reader, "large broadcast"},
    {reduce, "reduce"},
    {alltoall, "alltoall"},
    {alltoallv, "alltoallv"},
};

static void test_each_kind(void **state)
{
    (void)state;
    int refusers[] = {0, nranks / 2, nranks - 1};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        for (int r = 0; r < 3; r++) {
            if (r > 0 && refusers[r] == refusers[r - 1]) {
                continue;
            }
            refused_once(kinds[k].fn, kinds[k].what, refusers[r], false, false);
            refused_once(kinds[k].fn, kinds[k].what, refusers[r], true, false);
        }
    }
}

static void test_away(void **state)
{
    (void)state;
    refused_once(allreduce_small, "small allreduce", nranks - 1, true, true);
    refused_once(allreduce_large, "large allreduce", nranks - 1, true, true);
}

/* An allreduce still outstanding everywhere when @p refuser refuses the next one. */
static void queued_once(int refuser, bool away)
{
    assert_int_equal(weft_barrier(world), WEFT_OK);
    double t0 = now_s();
    int64_t a = me + 1;
    weft_req_t *first = NULL, *req = NULL;
    weft_status_t st = weft_iallreduce(world, &a, &a, 1, WEFT_I64, WEFT_SUM, &first);
    assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
    if (me == refuser) {
        st = away ? allreduce_small(true, refuser, &req) : allreduce_small(true, refuser, NULL);
        expect(st, WEFT_ERR_INVALID_ARG, "queued allreduce", refuser);
        if (away && !away_wait(&absent, me, nranks, AWAY_LIMIT_S)) {
            fail_msg("rank %d: the others did not finish a queued refusal while it was away", me);
        }
    } else {
        expect(allreduce_small(false, refuser, NULL), WEFT_ERR_MISMATCH, "queued allreduce",
               refuser);
        if (away) {
            away_done(&absent, me);
        } else if (now_s() - t0 > PROMPT_S) {
            fail_msg("rank %d: a queued refusal took %.1f s", me, now_s() - t0);
        }
    }
    assert_int_equal(weft_wait(first, WEFT_TIMEOUT_DEFAULT), WEFT_OK);
    weft_req_free(first);
    assert_true(a == (int64_t)nranks * (nranks + 1) / 2);
    check_in_step("queued allreduce", refuser);
}

static void test_queued(void **state)
{
    (void)state;
    queued_once(nranks - 1, false);
    queued_once(0, false);
    const char *pt = getenv("WEFT_PROGRESS_THREAD");
    if (pt == NULL || strcmp(pt, "off") != 0) {
        queued_once(nranks - 1, true); /* its turn comes while it is away: the thread's */
    }
}

int main(void)
{
    setenv("WEFT_TIMEOUT_MS", "60000", 0);
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK ||
        weft_group_rank(world, &me) != WEFT_OK || weft_group_size(world, &nranks) != WEFT_OK ||
        nranks > 8) {
        fprintf(stderr, "test_coll_refuse: weft_init failed\n");
        return 1;
    }
    in = calloc(BIG, sizeof(float));
    out = calloc((size_t)BIG * (size_t)nranks, sizeof(float));
    for (int i = 0; i < nranks; i++) {
        counts[i] = 2;
        displs[i] = 2 * (size_t)i;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_kind),
        cmocka_unit_test(test_away),
        cmocka_unit_test(test_queued),
    };
    if (!away_init(world, me, &absent)) {
        fprintf(stderr, "test_coll_refuse: cannot make the markers' directory\n");
        return 1;
    }
    int rc = nranks < 2 ? 0 : cmocka_run_group_tests(tests, NULL, NULL);
    away_fini(world, me, &absent);
    free(in);
    free(out);
    weft_finalize(ctx);
    return rc;
}
