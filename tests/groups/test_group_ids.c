/*
 * Group ids and tag ids over many splits (run by weftrun on 2 and 3 ranks).
 *
 *   churn      two long-lived subgroups, then thousands of subgroups split off and freed
 *              (one or two at a time): a new group's tag id is never one a live group of
 *              this process has, its members agree on both ids, its id is new in the
 *              job, and collectives on it and on a long-lived group in flight at once
 *              each get their own data
 *   many_live  subgroups kept until the 4095 tag ids are all in use: the next split
 *              fails on every member with WEFT_ERR_NO_MEMORY and says why; freeing one
 *              makes its tag id, and only it, available again
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/core_impl.h"
#include "weft/weft.h"

static weft_ctx_t *ctx;
static weft_group_t *world;
static int me, nranks;

#define OK(call) assert_int_equal((call), WEFT_OK)

/* No other live group of this process has @p g's tag id. */
static void check_unique(const weft_group_t *g)
{
    for (const weft_group_t *o = ctx->groups; o != NULL; o = o->next) {
        if (o != g && o->tag_id == g->tag_id) {
            fail_msg("rank %d: groups %u and %u share tag id %u", me, g->id, o->id, g->tag_id);
        }
    }
    assert_true(g->tag_id > 0 && g->tag_id < WEFT_TAG_MAX_GROUPS);
}

/* Every member of @p g has the same id and tag id. */
static void check_agreed(weft_group_t *g)
{
    int size;
    OK(weft_group_size(g, &size));
    uint32_t mine[2] = {g->id, g->tag_id}, *all = calloc(2 * (size_t)size, sizeof(uint32_t));
    assert_non_null(all);
    OK(weft_allgather(g, mine, all, 2, WEFT_I32));
    for (int i = 0; i < size; i++) {
        assert_int_equal(all[2 * i], mine[0]);
        assert_int_equal(all[2 * i + 1], mine[1]);
    }
    free(all);
}

/* An allreduce on @p a in flight while one runs on @p b: each gets its own sum. */
static void check_no_crosstalk(weft_group_t *a, weft_group_t *b)
{
    int asize, bsize;
    OK(weft_group_size(a, &asize));
    OK(weft_group_size(b, &bsize));
    int64_t x = 1000 + me, y = 7 * (me + 1), xs = x, ys = y;
    weft_req_t *req = NULL;
    weft_status_t st = weft_iallreduce(a, &xs, &xs, 1, WEFT_I64, WEFT_SUM, &req);
    assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
    OK(weft_allreduce(b, &ys, &ys, 1, WEFT_I64, WEFT_SUM));
    OK(weft_wait(req, WEFT_TIMEOUT_DEFAULT));
    weft_req_free(req);
    int64_t xa = 0, ya = 0;
    /* The sums over the members (member ids are world ranks: nobody was replaced). */
    for (int i = 0; i < asize; i++) {
        int w;
        OK(weft_group_member_id(a, i, &w));
        xa += 1000 + w;
    }
    for (int i = 0; i < bsize; i++) {
        int w;
        OK(weft_group_member_id(b, i, &w));
        ya += 7 * (w + 1);
    }
    assert_true(xs == xa);
    assert_true(ys == ya);
}

static void test_churn(void **state)
{
    (void)state;
    weft_group_t *all, *half;
    OK(weft_group_split(world, 0, me, &all));
    OK(weft_group_split(world, me % 2, me, &half));
    check_unique(all);
    check_unique(half);
    uint32_t last_id = half->id > all->id ? half->id : all->id;
    enum { ROUNDS = 5000 };
    for (int i = 0; i < ROUNDS; i++) {
        /* One group of everyone, or one per parity (two new groups in one split). */
        int color = i % 3 == 0 ? 0 : me % 2;
        weft_group_t *g;
        OK(weft_group_split(world, color, -me, &g));
        check_unique(g);
        if (g->id <= last_id) {
            fail_msg("rank %d: group id %u handed out again", me, g->id);
        }
        last_id = g->id > last_id ? g->id : last_id;
        if (i % 250 == 0) {
            check_agreed(g);
            check_no_crosstalk(i % 2 ? all : half, g);
        }
        OK(weft_group_free(g));
    }
    check_no_crosstalk(all, half);
    OK(weft_group_free(half));
    OK(weft_group_free(all));
}

static void test_many_live(void **state)
{
    (void)state;
    enum { MAX = WEFT_TAG_MAX_GROUPS };
    weft_group_t **live = calloc(MAX, sizeof(*live));
    assert_non_null(live);
    int n = 0;
    weft_status_t st;
    for (;;) {
        weft_group_t *g = NULL;
        st = weft_group_split(world, 0, me, &g);
        if (st != WEFT_OK) {
            break;
        }
        assert_true(n < MAX - 1);
        live[n++] = g;
    }
    /* Every tag id but the world's is taken, each once. */
    assert_int_equal(st, WEFT_ERR_NO_MEMORY);
    assert_non_null(strstr(weft_last_error(ctx), "no tag id left"));
    assert_int_equal(n, MAX - 1);
    for (int i = 0; i < n; i++) {
        check_unique(live[i]);
    }
    check_agreed(live[n / 2]);
    /* Free one: the next split gets its tag id, the only one free. */
    uint32_t freed = live[1234]->tag_id;
    OK(weft_group_free(live[1234]));
    OK(weft_group_split(world, 0, me, &live[1234]));
    assert_int_equal(live[1234]->tag_id, freed);
    check_no_crosstalk(live[1234], live[0]);
    for (int i = 0; i < n; i++) {
        OK(weft_group_free(live[i]));
    }
    free(live);
    weft_group_t *g;
    OK(weft_group_split(world, 0, me, &g)); /* all available again */
    OK(weft_group_free(g));
}

int main(void)
{
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK ||
        weft_group_rank(world, &me) != WEFT_OK || weft_group_size(world, &nranks) != WEFT_OK) {
        fprintf(stderr, "test_group_ids: weft_init failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_churn),
        cmocka_unit_test(test_many_live),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    weft_finalize(ctx);
    return rc;
}
