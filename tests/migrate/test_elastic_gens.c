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
 *
 * weft_elastic_restore_gen on a generation split off the world (without the last member
 * when there are several: it stands for one admitted since, and takes no part): the
 * target function sees the generation's members, and the buffer it returns holds the
 * chosen step's state, checked element by element against the state computed
 * independently, and every member's blob. One member's bad arguments (NULL pointers, an
 * info without its size, a target that fails or gives no layout, a layout the restore
 * refuses) fail it on every member, and none waits; a good call works after them. The
 * world edited between the choice and the restore fails it on every member with
 * WEFT_ERR_REVOKED; after the world's repair it works.
 *
 * With --kill (run by run_fault.sh), the last member dies in the middle of a step: the
 * survivors repair the world, choose the generation and restore it through
 * weft_elastic_restore_gen over themselves, and check the restored state element by
 * element and the dead member's blob.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "groups/fault_common.h"
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
    weft_layout_t *l = snap_model(members, k, 120, 7, 2001);
    assert_non_null(l);
    return l;
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
    snap_each(f->l, my_id, f->live, snap_set_elem, &step);
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
    snap_each(f.l, my_id, f.live, snap_set_elem, &later); /* the live state moves on */
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

/* What the target function was asked for, and what it should do. */
typedef struct target_arg {
    int calls;
    int members[64], n;
    weft_status_t fail; /* returned instead of a layout when not WEFT_OK */
    int no_layout;      /* WEFT_OK without a layout */
    int other_tensors;  /* a layout the restore refuses */
} target_arg_t;

/* The model re-cut over @p members in reverse order, as the library asks. */
static weft_status_t reversed_target(void *arg, const int *members, int k, weft_layout_t **out)
{
    target_arg_t *a = arg;
    a->calls++;
    a->n = k;
    memcpy(a->members, members, (size_t)k * sizeof(int));
    if (a->fail != WEFT_OK) {
        return a->fail;
    }
    if (a->no_layout) {
        *out = NULL;
        return WEFT_OK;
    }
    if (a->other_tensors) {
        uint64_t shape[1] = {10};
        weft_layout_create(out);
        weft_layout_add_tensor(*out, "other", WEFT_F32, 1, shape, NULL);
        int t = 0;
        return weft_layout_flat(*out, &t, 1, members, k);
    }
    int rev[64];
    for (int r = 0; r < k; r++) {
        rev[r] = members[k - 1 - r];
    }
    *out = model(rev, k);
    return WEFT_OK;
}

/* The restored buffer of @p snap holds the state after @p steps over the reversed
 * @p members, and every member's blob says so. */
static void check_restored(const weft_snapshot_t *snap, const int *members, int k, void *buf,
                           size_t bytes, uint64_t steps)
{
    int rev[64];
    for (int r = 0; r < k; r++) {
        rev[r] = members[k - 1 - r];
    }
    weft_layout_t *t = model(rev, k);
    assert_int_equal(bytes, weft_snapshot_restore_bytes(snap, t));
    assert_int_equal(snap_count_wrong(t, my_id, buf, steps), 0);
    weft_layout_free(t);
    for (int r = 0; r < k; r++) {
        snap_blob_t b;
        size_t len;
        assert_int_equal(weft_snapshot_blob(snap, members[r], &b, sizeof(b), &len), WEFT_OK);
        assert_int_equal(len, sizeof(b));
        assert_int_equal(b.step, steps);
        assert_int_equal(b.seed, steps * 1000003u);
    }
}

/* A generation on a subgroup of the world: @p k first members (the others get NULL). */
typedef struct sub_gen {
    weft_group_t *sub;
    weft_layout_t *l;
    weft_snapshot_t *snap;
    unsigned char *live;
    int k;
} sub_gen_t;

static void make_sub_gen(sub_gen_t *x, int k, uint64_t steps)
{
    memset(x, 0, sizeof(*x));
    x->k = k;
    assert_int_equal(weft_group_split(world, me < k ? 0 : -1, me, &x->sub), WEFT_OK);
    if (x->sub == NULL) {
        assert_int_equal(weft_barrier(world), WEFT_OK); /* the members' below */
        return;
    }
    x->l = model(ids, k);
    weft_snapshot_params_t sp = {.size = sizeof(sp), .redundancy = k > 1 ? 1 : 0};
    assert_int_equal(weft_snapshot_create(x->sub, x->l, sizeof(snap_blob_t), &sp, &x->snap),
                     WEFT_OK);
    x->live = malloc(weft_layout_packed_bytes(x->l, my_id) + 1);
    for (uint64_t s = 1; s <= steps; s++) {
        snap_each(x->l, my_id, x->live, snap_set_elem, &s);
        assert_int_equal(snap_take(x->snap, s, x->live), WEFT_OK);
    }
    uint64_t later = steps + 1;
    snap_each(x->l, my_id, x->live, snap_set_elem, &later); /* the live state moves on */
    /* Completion is not uniform: a member may still be finishing the last snapshot's
     * collective when another has returned, and the restore that follows revokes the
     * generation's group, which would fail it there. An operation of every member on the
     * world orders them. */
    assert_int_equal(weft_barrier(world), WEFT_OK);
}

static void free_sub_gen(sub_gen_t *x)
{
    weft_snapshot_free(x->snap);
    weft_layout_free(x->l);
    free(x->live);
    if (x->sub != NULL) {
        weft_group_free(x->sub);
    }
}

/* The generation chosen and restored through the library: the members of the
 * generation's group (all but the last when there are several) restore the state of its
 * step over themselves; the last member, not in it, takes no part. */
static void test_restore_gen(void **state)
{
    (void)state;
    sub_gen_t x;
    int k = n > 1 ? n - 1 : 1;
    make_sub_gen(&x, k, 2);
    weft_snapshot_gen_t gens[1] = {{GEN_A, x.snap}};
    weft_gen_choice_t c = choose(gens, x.sub != NULL ? 1 : 0);
    assert_int_equal(c.id, GEN_A);
    assert_int_equal(c.holders, k);
    assert_int_equal(c.index, x.sub != NULL ? 0 : -1);
    if (x.sub != NULL) {
        target_arg_t a = {0};
        void *buf = NULL;
        size_t bytes = 0;
        weft_snapshot_restored_t info = {.size = sizeof(info)};
        assert_int_equal(weft_elastic_restore_gen(x.snap, x.sub, world, reversed_target, &a, &buf,
                                                  &bytes, &info),
                         WEFT_OK);
        assert_int_equal(a.calls, 1);
        assert_int_equal(a.n, k);
        assert_memory_equal(a.members, ids, (size_t)k * sizeof(int));
        assert_non_null(buf);
        assert_int_equal(info.step, 2);
        assert_int_equal(info.bytes_missing, 0);
        check_restored(x.snap, ids, k, buf, bytes, 2);
        assert_int_equal(weft_mem_free(buf, bytes), WEFT_OK);
        uint32_t epoch;
        assert_int_equal(weft_group_epoch(x.sub, &epoch), WEFT_OK);
        assert_true(epoch > 0); /* revoked and repaired: a fresh epoch */
    }
    free_sub_gen(&x);
}

/* Call weft_elastic_restore_gen with this member's arguments spoiled by @p spoil when it
 * is group rank @p who of the generation (NULL or a value: see below), and expect @p want
 * on every member, with the outputs untouched. */
enum { SPOIL_NONE, SPOIL_INFO_SIZE, SPOIL_BUF, SPOIL_BYTES, SPOIL_TARGET, SPOIL_SNAP, SPOIL_WORLD };

static void restore_spoiled(sub_gen_t *x, int who, int spoil, target_arg_t *a, weft_status_t want)
{
    void *buf = (void *)&buf, *sentinel = buf;
    size_t bytes = 12345;
    weft_snapshot_restored_t info = {.size = sizeof(info)};
    int mine = me == who;
    if (mine && spoil == SPOIL_INFO_SIZE) {
        info.size = 0;
    }
    weft_status_t st =
        weft_elastic_restore_gen(mine && spoil == SPOIL_SNAP ? NULL : x->snap, x->sub,
                                 mine && spoil == SPOIL_WORLD ? NULL : world,
                                 mine && spoil == SPOIL_TARGET ? NULL : reversed_target, a,
                                 mine && spoil == SPOIL_BUF ? NULL : &buf,
                                 mine && spoil == SPOIL_BYTES ? NULL : &bytes, &info);
    if (st != want) {
        printf("rank %d: spoil %d by %d: %s: %s\n", me, spoil, who, weft_status_str(st),
               weft_last_error(ctx));
    }
    assert_int_equal(st, want);
    assert_ptr_equal(buf, sentinel);
    assert_int_equal(bytes, 12345);
    assert_int_equal(info.step, 0);
    /* Completion is not uniform: the next call's revocation would fail a member still
     * finishing this one. An operation of every member on the world orders them. */
    assert_int_equal(weft_barrier(world), WEFT_OK);
}

/* One member's bad arguments, or its target's failure, fail the call on every member,
 * none waits; the snapshot stays usable and a good call works after them. */
static void test_restore_gen_refused(void **state)
{
    (void)state;
    sub_gen_t x;
    make_sub_gen(&x, n, 3);
    int last = n - 1;
    int spoils[] = {SPOIL_INFO_SIZE, SPOIL_BUF, SPOIL_BYTES, SPOIL_TARGET, SPOIL_SNAP, SPOIL_WORLD};
    for (size_t i = 0; i < sizeof(spoils) / sizeof(spoils[0]); i++) {
        target_arg_t a = {0};
        restore_spoiled(&x, (int)i % 2 == 0 ? last : 0, spoils[i], &a, WEFT_ERR_INVALID_ARG);
        assert_true(a.calls <= 1);
    }
    /* The target fails on the last member: its status on every member. */
    target_arg_t fails = {.fail = me == last ? WEFT_ERR_UNSUPPORTED : WEFT_OK};
    restore_spoiled(&x, -1, SPOIL_NONE, &fails, WEFT_ERR_UNSUPPORTED);
    assert_int_equal(fails.calls, 1);
    target_arg_t none = {.no_layout = me == 0};
    restore_spoiled(&x, -1, SPOIL_NONE, &none, WEFT_ERR_INVALID_ARG);
    /* A layout of other tensors on one member: weft_snapshot_restore refuses on all. */
    target_arg_t other = {.other_tensors = me == last};
    restore_spoiled(&x, -1, SPOIL_NONE, &other, WEFT_ERR_INVALID_ARG);
    /* A NULL generation group: refused on this member only, nothing to wait for. */
    void *buf = NULL;
    size_t bytes = 0;
    target_arg_t a = {0};
    assert_int_equal(
        weft_elastic_restore_gen(x.snap, NULL, world, reversed_target, &a, &buf, &bytes, NULL),
        WEFT_ERR_INVALID_ARG);
    assert_int_equal(a.calls, 0);
    /* And then a good one, without info. */
    assert_int_equal(
        weft_elastic_restore_gen(x.snap, x.sub, world, reversed_target, &a, &buf, &bytes, NULL),
        WEFT_OK);
    assert_int_equal(a.calls, 1);
    check_restored(x.snap, ids, n, buf, bytes, 3);
    weft_mem_free(buf, bytes);
    free_sub_gen(&x);
}

/* The world is edited between the choice and the restore (member 0 revokes it, as a
 * member that left an operation on a failure does): WEFT_ERR_REVOKED on every member,
 * whether it saw the edit itself or learnt it in the agreement; after the recovery loop's
 * repair of the world, the restore works. */
static void test_restore_gen_world_edited(void **state)
{
    (void)state;
    sub_gen_t x;
    make_sub_gen(&x, n, 2);
    weft_group_t *order; /* orders the revocations after every member's last operation */
    assert_int_equal(weft_group_split(world, 0, me, &order), WEFT_OK);
    weft_snapshot_gen_t gens[1] = {{GEN_A, x.snap}};
    assert_int_equal(choose(gens, 1).id, GEN_A);    /* every member is past its snapshots */
    assert_int_equal(weft_barrier(order), WEFT_OK); /* ... and past the choice */
    uint32_t before, after;
    weft_group_epoch(world, &before);
    if (me == 0) {
        assert_int_equal(weft_group_revoke(world), WEFT_OK);
    }
    target_arg_t a = {0};
    void *buf = NULL;
    size_t bytes = 0;
    weft_status_t st =
        weft_elastic_restore_gen(x.snap, x.sub, world, reversed_target, &a, &buf, &bytes, NULL);
    assert_int_equal(st, WEFT_ERR_REVOKED);
    assert_null(buf);
    assert_int_equal(weft_group_repair(world, NULL), WEFT_OK); /* the recovery loop's */
    weft_group_epoch(world, &after);
    assert_true(after > before);
    assert_int_equal(weft_barrier(world), WEFT_OK);
    a.calls = 0;
    assert_int_equal(
        weft_elastic_restore_gen(x.snap, x.sub, world, reversed_target, &a, &buf, &bytes, NULL),
        WEFT_OK);
    assert_int_equal(a.calls, 1);
    check_restored(x.snap, ids, n, buf, bytes, 2);
    weft_mem_free(buf, bytes);
    assert_int_equal(weft_barrier(world), WEFT_OK);
    weft_group_free(order);
    free_sub_gen(&x);
}

#define KILL_STEPS 8
#define KILL_STEP 5

static weft_status_t flat_target(void *arg, const int *members, int k, weft_layout_t **out)
{
    (void)arg;
    *out = model(members, k);
    return WEFT_OK;
}

/* --kill: the last member dies in the middle of step KILL_STEP; the survivors restore the
 * generation through weft_elastic_restore_gen over themselves. */
static int kill_main(void)
{
    int victim = ids[n - 1];
    weft_group_t *sub;
    if (weft_group_split(world, 0, me, &sub) != WEFT_OK) {
        SURVIVOR_FAIL(me, "split");
        return 1;
    }
    weft_layout_t *l = model(ids, n);
    weft_snapshot_t *snap;
    weft_snapshot_params_t sp = {.size = sizeof(sp), .redundancy = 1};
    if (weft_snapshot_create(sub, l, sizeof(snap_blob_t), &sp, &snap) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(ctx));
        return 1;
    }
    unsigned char *live = malloc(weft_layout_packed_bytes(l, my_id) + 1);
    snap_each(l, my_id, live, snap_init_elem, NULL);
    weft_status_t st = WEFT_OK;
    for (uint64_t step = 1; step <= KILL_STEPS && st == WEFT_OK; step++) {
        if (my_id == victim && step == KILL_STEP) {
            raise(SIGKILL);
        }
        st = snap_train_step(world, l, my_id, live, step);
        if (st == WEFT_OK) {
            st = snap_take(snap, step, live);
        }
    }
    if (my_id == victim || (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED)) {
        SURVIVOR_FAIL(me, "the step with the dead member did not fail");
        return 1;
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    if (fault_recover(world, &info) != WEFT_OK || fault_has_member(world, victim)) {
        SURVIVOR_FAIL(me, "repair");
        return 1;
    }
    weft_snapshot_gen_t gens[1] = {{GEN_A, snap}};
    weft_gen_choice_t c = {.size = sizeof(c)};
    if (weft_elastic_choose_gen(world, gens, 1, &c) != WEFT_OK || c.id != GEN_A || c.index != 0 ||
        c.holders != n - 1) {
        SURVIVOR_FAIL(me, "choose");
        return 1;
    }
    void *buf = NULL;
    size_t bytes = 0;
    weft_snapshot_restored_t got = {.size = sizeof(got)};
    st = weft_elastic_restore_gen(snap, sub, world, flat_target, NULL, &buf, &bytes, &got);
    if (st != WEFT_OK) {
        printf("rank %d: restore: %s: %s\n", me, weft_status_str(st), weft_last_error(ctx));
        SURVIVOR_FAIL(me, "restore");
        return 1;
    }
    int left[64], k;
    weft_group_size(sub, &k);
    for (int r = 0; r < k; r++) {
        weft_group_member_id(sub, r, &left[r]);
    }
    weft_layout_t *t = model(left, k);
    size_t wrong = snap_count_wrong(t, my_id, buf, got.step);
    snap_blob_t vb = {0, 0};
    size_t len = 0;
    if (k != n - 1 || got.bytes_missing != 0 || wrong != 0 ||
        bytes != weft_snapshot_restore_bytes(snap, t) ||
        (got.step != KILL_STEP - 1 && got.step != KILL_STEP - 2) ||
        weft_snapshot_blob(snap, victim, &vb, sizeof(vb), &len) != WEFT_OK || len != sizeof(vb) ||
        vb.step != got.step || vb.seed != got.step * 1000003u) {
        printf("rank %d: %d members, restored step %llu, %zu B missing, %zu elements wrong, "
               "the dead member's blob says step %llu\n",
               me, k, (unsigned long long)got.step, got.bytes_missing, wrong,
               (unsigned long long)vb.step);
        SURVIVOR_FAIL(me, "the restored state is not the state of its step");
        return 1;
    }
    printf("rank %d: restored step %llu through weft_elastic_restore_gen: %zu B moved, %zu B "
           "copied locally\n",
           me, (unsigned long long)got.step, got.bytes_moved, got.bytes_local);
    SURVIVOR_OK(me);
    weft_mem_free(buf, bytes);
    weft_layout_free(t);
    weft_layout_free(l);
    weft_snapshot_free(snap);
    weft_group_free(sub);
    free(live);
    weft_finalize(ctx);
    return 0;
}

static int after_test(void **state)
{
    (void)state;
    return weft_barrier(world) == WEFT_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    int kill = argc > 1 && strcmp(argv[1], "--kill") == 0;
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
    if (kill) {
        return kill_main();
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_choose, after_test),
        cmocka_unit_test_teardown(test_uncommitted_passed_over, after_test),
        cmocka_unit_test_teardown(test_bad_arguments, after_test),
        cmocka_unit_test_teardown(test_restore_gen, after_test),
        cmocka_unit_test_teardown(test_restore_gen_refused, after_test),
        cmocka_unit_test_teardown(test_restore_gen_world_edited, after_test),
    };
    char name[40];
    snprintf(name, sizeof(name), "elastic gens rank %d of %d", me, n);
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    weft_finalize(ctx);
    return failed;
}
