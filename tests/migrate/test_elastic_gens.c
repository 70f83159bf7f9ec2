/*
 * weft_elastic_choose_gen on every rank of a weftrun job (1 to 4 ranks): the newest
 * generation that some member holds committed and none uncommitted, the same on every
 * member (id, root, holders), with this member's index when it holds it; the initial
 * state alone; members holding nothing (joiners); no generation at all. A generation
 * that one member holds uncommitted is passed over, and a restore from the generation
 * chosen then gives exactly the state of that generation's step, computed independently
 * element by element, and each member's blob of it, although a newer generation holds a
 * later step. Bad arguments on one member (an id twice, a snapshot missing, too many
 * generations, a choice without its size) fail on every member; a larger choice is
 * filled as far as the library knows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "snap_common.h"
#include "weft/weft.h"

static weft_ctx_t *ctx;
static weft_group_t *world;
static int me, n, my_id;
static int ids[64];

/* Generation ids the test uses: A holds steps 1 and 2, B step 3, U nothing. */
enum { GEN_A = 0, GEN_B = 5, GEN_U = 9 };

static weft_layout_t *model(const int *members, int k)
{
    uint64_t a[2] = {120, 7}, b[1] = {2001};
    weft_layout_t *l;
    weft_layout_create(&l);
    weft_layout_add_tensor(l, "a", WEFT_F32, 2, a, NULL);
    weft_layout_add_tensor(l, "b", WEFT_F64, 1, b, NULL);
    int t[2] = {0, 1};
    assert_int_equal(weft_layout_flat(l, t, 2, members, k), WEFT_OK);
    return l;
}

/* The state after @p step steps, written into this member's packed buffer of @p l. */
static void set_elem(int t, uint64_t i, void *elem, weft_dtype_t dt, void *arg)
{
    snap_reference(t, i, dt, *(uint64_t *)arg, elem);
}

static weft_gen_choice_t choose(const weft_snapshot_gen_t *gens, int k)
{
    weft_gen_choice_t c = {.size = sizeof(c)};
    assert_int_equal(weft_elastic_choose_gen(world, gens, k, &c), WEFT_OK);
    return c;
}

/* The choice, checked the same on every member: what the others chose is compared by an
 * allgather of (id, root, holders). */
static void assert_agreed(const weft_gen_choice_t *c)
{
    int32_t mine[3] = {c->id, c->root, c->holders}, all[3 * 64];
    assert_int_equal(weft_allgather(world, mine, all, 3, WEFT_I32), WEFT_OK);
    for (int r = 0; r < n; r++) {
        assert_memory_equal(all + 3 * r, mine, sizeof(mine));
    }
}

typedef struct fixture {
    weft_layout_t *l;
    weft_snapshot_t *a, *b, *u;
    unsigned char *live;
} fixture_t;

static void make_fixture(fixture_t *f)
{
    f->l = model(ids, n);
    weft_snapshot_params_t sp = {.size = sizeof(sp), .redundancy = n > 1 ? 1 : 0};
    assert_int_equal(weft_snapshot_create(world, f->l, sizeof(snap_blob_t), &sp, &f->a), WEFT_OK);
    assert_int_equal(weft_snapshot_create(world, f->l, sizeof(snap_blob_t), &sp, &f->b), WEFT_OK);
    assert_int_equal(weft_snapshot_create(world, f->l, sizeof(snap_blob_t), &sp, &f->u), WEFT_OK);
    f->live = malloc(weft_layout_packed_bytes(f->l, my_id) + 1);
}

static void free_fixture(fixture_t *f)
{
    weft_snapshot_free(f->a);
    weft_snapshot_free(f->b);
    weft_snapshot_free(f->u);
    weft_layout_free(f->l);
    free(f->live);
}

/* Take the snapshot of @p step of the state after @p step steps in @p s. */
static void take(weft_snapshot_t *s, const fixture_t *f, uint64_t step)
{
    snap_each(f->l, my_id, f->live, set_elem, &step);
    assert_int_equal(snap_take(s, step, f->live), WEFT_OK);
}

static void test_choose(void **state)
{
    (void)state;
    fixture_t f;
    make_fixture(&f);
    /* Nothing committed in A yet: only the initial state can be restored. */
    weft_snapshot_gen_t gens[3] = {{WEFT_GEN_START, NULL}, {GEN_A, f.a}, {GEN_B, f.b}};
    weft_gen_choice_t c = choose(gens, 2);
    assert_int_equal(c.id, WEFT_GEN_START);
    assert_int_equal(c.index, 0);
    assert_int_equal(c.root, 0);
    assert_int_equal(c.holders, n);
    /* A committed: it is chosen, newer than the initial state. */
    take(f.a, &f, 1);
    take(f.a, &f, 2);
    c = choose(gens, 2);
    assert_int_equal(c.id, GEN_A);
    assert_int_equal(c.index, 1);
    assert_int_equal(c.holders, n);
    /* B committed everywhere, listed in any order: B. */
    take(f.b, &f, 3);
    weft_snapshot_gen_t shuffled[3] = {gens[2], gens[0], gens[1]};
    c = choose(shuffled, 3);
    assert_int_equal(c.id, GEN_B);
    assert_int_equal(c.index, 0);
    assert_int_equal(c.root, 0);
    assert_int_equal(c.holders, n);
    assert_agreed(&c);
    /* Only group rank n-1 holds A; the others hold nothing (joiners): A, from n-1. */
    c = choose(gens + 1, me == n - 1 ? 1 : 0);
    assert_int_equal(c.id, GEN_A);
    assert_int_equal(c.index, me == n - 1 ? 0 : -1);
    assert_int_equal(c.root, n - 1);
    assert_int_equal(c.holders, 1);
    /* Nobody holds anything: the state is lost, on every member alike. */
    c = choose(NULL, 0);
    assert_int_equal(c.id, WEFT_GEN_NONE);
    assert_int_equal(c.index, -1);
    assert_int_equal(c.root, -1);
    assert_int_equal(c.holders, 0);
    free_fixture(&f);
}

/* B held uncommitted by the last member (its first snapshot closed without it): A is
 * chosen, and restoring from it gives step 2 exactly, not B's step 3 nor the live state. */
static void test_uncommitted_passed_over(void **state)
{
    (void)state;
    fixture_t f;
    make_fixture(&f);
    take(f.a, &f, 1);
    take(f.a, &f, 2);
    take(f.b, &f, 3);
    uint64_t later = 4;
    snap_each(f.l, my_id, f.live, set_elem, &later); /* the live state moves on */
    weft_snapshot_gen_t gens[2] = {{GEN_A, f.a}, {GEN_B, me == n - 1 ? f.u : f.b}};
    weft_gen_choice_t c = choose(gens, 2);
    assert_int_equal(c.id, GEN_A);
    assert_int_equal(c.index, 0);
    assert_int_equal(c.holders, n);
    assert_agreed(&c);

    int rev[64];
    for (int r = 0; r < n; r++) {
        rev[r] = ids[n - 1 - r];
    }
    weft_layout_t *target = model(rev, n);
    assert_ptr_equal(gens[c.index].snap, f.a);
    size_t nb = weft_snapshot_restore_bytes(f.a, target);
    unsigned char *out = calloc(1, nb);
    weft_snapshot_restored_t info = {.size = sizeof(info)};
    assert_int_equal(weft_snapshot_restore(f.a, target, out, nb, &info), WEFT_OK);
    assert_int_equal(info.step, 2);
    assert_int_equal(info.bytes_missing, 0);
    snap_check_t chk = {.steps = 2};
    snap_each(target, my_id, out, snap_check_elem, &chk);
    assert_int_equal(chk.wrong, 0);
    for (int r = 0; r < n; r++) {
        snap_blob_t b;
        size_t len;
        assert_int_equal(weft_snapshot_blob(f.a, ids[r], &b, sizeof(b), &len), WEFT_OK);
        assert_int_equal(len, sizeof(b));
        assert_int_equal(b.step, 2);
        assert_int_equal(b.seed, 2 * 1000003u);
    }
    free(out);
    weft_layout_free(target);
    free_fixture(&f);
}

/* One member's bad arguments fail the call on every member, none waits. */
static void test_bad_arguments(void **state)
{
    (void)state;
    fixture_t f;
    make_fixture(&f);
    take(f.a, &f, 1);
    weft_gen_choice_t c = {.size = sizeof(c)};
    weft_snapshot_gen_t good[1] = {{GEN_A, f.a}};
    weft_snapshot_gen_t twice[2] = {{GEN_A, f.a}, {GEN_A, f.a}};
    weft_snapshot_gen_t no_snap[1] = {{GEN_A, NULL}};
    weft_snapshot_gen_t below[1] = {{-2, f.a}};
    weft_snapshot_gen_t many[WEFT_ELASTIC_MAX_GENS + 1];
    for (int i = 0; i <= WEFT_ELASTIC_MAX_GENS; i++) {
        many[i] = (weft_snapshot_gen_t){i, f.a};
    }
    const weft_snapshot_gen_t *bad[] = {twice, no_snap, below, many};
    int nbad[] = {2, 1, 1, WEFT_ELASTIC_MAX_GENS + 1};
    for (int k = 0; k < 4; k++) {
        int mine = me == n - 1;
        assert_int_equal(
            weft_elastic_choose_gen(world, mine ? bad[k] : good, mine ? nbad[k] : 1, &c),
            WEFT_ERR_INVALID_ARG);
    }
    assert_int_equal(weft_elastic_choose_gen(world, good, -1, &c), WEFT_ERR_INVALID_ARG);
    /* A choice without its size, or none, on one member. */
    weft_gen_choice_t unsized = {.size = 0};
    assert_int_equal(weft_elastic_choose_gen(world, good, 1, me == 0 ? &unsized : &c),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_elastic_choose_gen(world, good, 1, me == 0 ? NULL : &c),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_elastic_choose_gen(NULL, good, 1, &c), WEFT_ERR_INVALID_ARG);
    /* A larger struct (a caller built against a later header): filled, zeros beyond. */
    struct {
        weft_gen_choice_t c;
        int64_t later;
    } big;
    memset(&big, 0xff, sizeof(big));
    big.c.size = sizeof(big);
    assert_int_equal(weft_elastic_choose_gen(world, good, 1, &big.c), WEFT_OK);
    assert_int_equal(big.c.size, sizeof(big));
    assert_int_equal(big.c.id, GEN_A);
    assert_int_equal(big.c.holders, n);
    assert_int_equal(big.later, 0);
    free_fixture(&f);
}

static int after_test(void **state)
{
    (void)state;
    return weft_barrier(world) == WEFT_OK ? 0 : -1;
}

int main(void)
{
    setenv("WEFT_TIMEOUT_MS", "60000", 0);
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK ||
        weft_group_rank(world, &me) != WEFT_OK || weft_group_size(world, &n) != WEFT_OK ||
        weft_group_member_id(world, me, &my_id) != WEFT_OK || n > 64) {
        fprintf(stderr, "test_elastic_gens: init: %s\n", weft_last_error(ctx));
        return 1;
    }
    for (int r = 0; r < n; r++) {
        weft_group_member_id(world, r, &ids[r]);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_choose, after_test),
        cmocka_unit_test_teardown(test_uncommitted_passed_over, after_test),
        cmocka_unit_test_teardown(test_bad_arguments, after_test),
    };
    char name[40];
    snprintf(name, sizeof(name), "elastic gens rank %d of %d", me, n);
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    weft_finalize(ctx);
    return failed;
}
