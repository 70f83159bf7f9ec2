/*
 * Snapshots on every rank of a weftrun job (1 to 4 ranks), without failures: two
 * committed steps, then the live state moves on, and a restore into another layout (the
 * flat partition in reverse member order) gives exactly the state of the newest committed
 * step, computed independently element by element, and every member's blob of that step;
 * bad arguments (a snapshot in flight, a step not above the committed one, a blob too
 * long, a restore without a committed step, a buffer too small) fail on every rank, and
 * members that start different steps all get WEFT_ERR_MISMATCH; with the SSD tier every
 * committed step is written, and a snapshot of unchanged state writes under 1% of the
 * first; a budget for buddies' copies needs the SSD tier, spills what exceeds it (less
 * memory, the spilled bytes counted), fails a snapshot on every member when one cannot
 * write its spilled copies, and restores the newest committed state when nobody died.
 */
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "snap_common.h"
#include "weft/weft.h"

static weft_ctx_t *ctx;
static weft_group_t *world;
static int me, n, my_id;
static int ids[64];

static weft_layout_t *model(const int *members, int k)
{
    weft_layout_t *l = snap_model(members, k, 300, 17, 5001);
    assert_non_null(l);
    return l;
}

typedef struct check {
    uint64_t step;
    size_t wrong;
} check_t;

static void check_elem(int t, uint64_t i, void *elem, weft_dtype_t dt, void *arg)
{
    check_t *c = arg;
    uint64_t want[1];
    snap_reference(t, i, dt, c->step, want);
    c->wrong += memcmp(elem, want, weft_dtype_size(dt)) != 0;
}

static weft_status_t snapshot(weft_snapshot_t *s, uint64_t step, const void *state)
{
    char blob[64];
    int len = snprintf(blob, sizeof(blob), "step %llu member %d", (unsigned long long)step, my_id);
    weft_req_t *req = NULL;
    weft_status_t st = weft_snapshot_start(s, step, state, blob, (size_t)len, &req);
    if (st == WEFT_INPROGRESS) {
        st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
        weft_req_free(req);
    }
    return st;
}

/* Snapshots of steps 1 and 2 of the state (@p live, this member's packed buffer of @p l,
 * written by snap_set_elem), each committed on return. */
static void snapshot_steps_1_2(weft_snapshot_t *s, const weft_layout_t *l, unsigned char *live)
{
    for (uint64_t step = 1; step <= 2; step++) {
        snap_each(l, my_id, live, snap_set_elem, &step);
        assert_int_equal(snapshot(s, step, live), WEFT_OK);
        uint64_t c;
        assert_int_equal(weft_snapshot_committed(s, &c), WEFT_OK);
        assert_int_equal(c, step);
    }
}

/* The model over the members in reverse order: a target that moves every region. */
static weft_layout_t *reversed_model(void)
{
    int rev[64];
    for (int r = 0; r < n; r++) {
        rev[r] = ids[n - 1 - r];
    }
    return model(rev, n);
}

static void test_restore_newest(void **state)
{
    (void)state;
    weft_layout_t *l = model(ids, n);
    weft_snapshot_t *s;
    weft_snapshot_params_t sp = {.size = sizeof(sp), .redundancy = 2};
    assert_int_equal(weft_snapshot_create(world, l, 64, &sp, &s), WEFT_OK);
    size_t bytes = weft_layout_packed_bytes(l, my_id);
    unsigned char *live = malloc(bytes + 1);
    /* No committed step yet: a restore fails on every member. */
    unsigned char small[8];
    assert_int_equal(weft_snapshot_restore(s, l, small, sizeof(small), NULL), WEFT_ERR_INVALID_ARG);
    snapshot_steps_1_2(s, l, live);
    uint64_t later = 3;
    snap_each(l, my_id, live, snap_set_elem, &later); /* the live state moves on */
    weft_layout_t *target = reversed_model();
    size_t nb = weft_snapshot_restore_bytes(s, target);
    unsigned char *out = calloc(1, nb);
    /* An info without its size on one member: every member fails, nobody waits. */
    weft_snapshot_restored_t unsized = {.size = 0}, sized = {.size = sizeof(sized)};
    assert_int_equal(weft_snapshot_restore(s, target, out, nb, me == n - 1 ? &unsized : &sized),
                     WEFT_ERR_INVALID_ARG);
    weft_snapshot_stats_t no_stats = {.size = offsetof(weft_snapshot_stats_t, ssd_error)};
    assert_int_equal(weft_snapshot_stats(s, &no_stats), WEFT_ERR_INVALID_ARG);
    weft_snapshot_restored_t info = {.size = sizeof(info)};
    assert_int_equal(weft_snapshot_restore(s, target, out, nb, &info), WEFT_OK);
    assert_int_equal(info.step, 2);
    assert_int_equal(info.bytes_missing, 0);
    check_t c = {.step = 2};
    snap_each(target, my_id, out, check_elem, &c);
    assert_int_equal(c.wrong, 0);
    for (int r = 0; r < n; r++) {
        char got[64] = {0}, want[64];
        size_t len;
        assert_int_equal(weft_snapshot_blob(s, ids[r], got, sizeof(got) - 1, &len), WEFT_OK);
        snprintf(want, sizeof(want), "step 2 member %d", ids[r]);
        assert_int_equal(len, strlen(want));
        assert_string_equal(got, want);
    }
    /* A buffer too small on one member: every member fails. */
    assert_int_equal(weft_snapshot_restore(s, target, out, me == 0 ? 1 : nb, NULL),
                     WEFT_ERR_INVALID_ARG);
    free(out);
    free(live);
    weft_layout_free(target);
    weft_layout_free(l);
    weft_snapshot_free(s);
}

static void test_bad_starts(void **state)
{
    (void)state;
    weft_layout_t *l = model(ids, n);
    weft_snapshot_t *s;
    assert_int_equal(weft_snapshot_create(world, l, 16, NULL, &s), WEFT_OK);
    unsigned char *live = calloc(1, weft_layout_packed_bytes(l, my_id) + 1);
    weft_req_t *req = NULL;
    char big[17] = {0};
    assert_int_equal(weft_snapshot_start(s, 1, live, big, sizeof(big), &req), WEFT_ERR_INVALID_ARG);
    weft_status_t st = weft_snapshot_start(s, 5, live, "x", 1, &req);
    assert_true(st == WEFT_INPROGRESS || st == WEFT_OK);
    weft_req_t *second = NULL;
    assert_int_equal(weft_snapshot_start(s, 6, live, "x", 1, &second), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_wait(req, WEFT_TIMEOUT_DEFAULT), WEFT_OK);
    weft_req_free(req);
    assert_int_equal(weft_snapshot_start(s, 5, live, "x", 1, &req), WEFT_ERR_INVALID_ARG);
    if (n > 1) {
        /* Members that start different steps: every member fails alike. */
        st = weft_snapshot_start(s, me == 0 ? 7 : 8, live, "x", 1, &req);
        assert_true(st == WEFT_INPROGRESS || st == WEFT_OK);
        assert_int_equal(weft_wait(req, WEFT_TIMEOUT_DEFAULT), WEFT_ERR_MISMATCH);
        weft_req_free(req);
    }
    /* Still usable; the reserved tensor names are refused. */
    assert_int_equal(snapshot(s, 9, live), WEFT_OK);
    weft_layout_t *bad;
    uint64_t shape[1] = {4};
    weft_layout_create(&bad);
    weft_layout_add_tensor(bad, "weft.blob.0", WEFT_U8, 1, shape, NULL);
    weft_layout_whole(bad, 0, ids[0]);
    weft_snapshot_t *s2 = NULL;
    assert_int_equal(weft_snapshot_create(world, bad, 0, NULL, &s2), WEFT_ERR_INVALID_ARG);
    weft_layout_free(bad);
    free(live);
    weft_layout_free(l);
    weft_snapshot_free(s);
}

/* A directory every rank sees: rank 0 makes it, the others learn its name. */
static void shared_tmpdir(char *dir, size_t len)
{
    memset(dir, 0, len);
    if (me == 0) {
        snprintf(dir, len, "/tmp/weft-snapshot-XXXXXX");
        assert_non_null(mkdtemp(dir));
    }
    assert_int_equal(weft_broadcast(world, dir, len, WEFT_U8, 0), WEFT_OK);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* The SSD tier: every committed step is written to each member's directory; a second
 * snapshot of unchanged state writes under 1% of the first (only the blob changed). */
static void test_ssd_tier(void **state)
{
    (void)state;
    char dir[64];
    shared_tmpdir(dir, sizeof(dir));
    weft_layout_t *l = model(ids, n);
    weft_snapshot_t *s;
    weft_snapshot_params_t sp = {.size = sizeof(sp), .ssd_dir = dir};
    assert_int_equal(weft_snapshot_create(world, l, 64, &sp, &s), WEFT_OK);
    unsigned char *live = malloc(weft_layout_packed_bytes(l, my_id) + 1);
    uint64_t one = 1;
    snap_each(l, my_id, live, snap_set_elem, &one);
    weft_snapshot_stats_t st1 = {.size = sizeof(st1)}, st2 = {.size = sizeof(st2)};
    assert_int_equal(snapshot(s, 1, live), WEFT_OK);
    assert_int_equal(weft_snapshot_stats(s, &st1), WEFT_OK);
    assert_int_equal(snapshot(s, 2, live), WEFT_OK); /* the state did not change */
    assert_int_equal(weft_snapshot_stats(s, &st2), WEFT_OK);
    assert_int_equal(st1.ssd_status, WEFT_OK);
    assert_int_equal(st2.ssd_status, WEFT_OK);
    assert_true(st1.have_durable && st1.durable == 1);
    assert_true(st2.have_durable && st2.durable == 2);
    assert_true(st1.ssd_bytes_written >= weft_layout_packed_bytes(l, my_id));
    if (st2.ssd_bytes_written * 100 >= st1.ssd_bytes_written) {
        fail_msg("second snapshot wrote %llu B, the first %llu B",
                 (unsigned long long)st2.ssd_bytes_written,
                 (unsigned long long)st1.ssd_bytes_written);
    }
    free(live);
    weft_layout_free(l);
    weft_snapshot_free(s);
    assert_int_equal(weft_barrier(world), WEFT_OK);
    if (me == 0) {
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
}

/* A budget for buddies' copies: refused without an SSD directory; 1 byte spills every
 * buddy copy (the copy buffers shrink by them), a budget as large as the buffers spills
 * nothing; snapshots commit with spilled copies; one member unable to write them fails
 * the snapshot everywhere (WEFT_ERR_IO, the previous step stays committed); a restore
 * with everyone alive takes that step from the members' own memory, reading no spilled
 * file. */
static void test_budget(void **state)
{
    (void)state;
    weft_layout_t *l = model(ids, n);
    weft_snapshot_t *s = NULL, *plain = NULL, *roomy = NULL;
    /* One host for all, whatever hosts the members run on (the namespace bed runs this
     * too): each member is the buddy of the previous one, as the sizes below expect. */
    int one_host[64] = {0};
    weft_snapshot_params_t sp = {.size = sizeof(sp), .buddy_mem_bytes = 1, .host_of = one_host,
                                 .num_members = 64};
    assert_int_equal(weft_snapshot_create(world, l, 64, &sp, &s), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "ssd_dir"));
    char dir[64];
    shared_tmpdir(dir, sizeof(dir));
    sp.ssd_dir = dir;
    weft_snapshot_params_t one = {.size = sizeof(one), .host_of = one_host, .num_members = 64};
    assert_int_equal(weft_snapshot_create(world, l, 64, &one, &plain), WEFT_OK);
    assert_int_equal(weft_snapshot_create(world, l, 64, &sp, &s), WEFT_OK);
    weft_snapshot_stats_t st = {.size = sizeof(st)};
    assert_int_equal(weft_snapshot_stats(s, &st), WEFT_OK);
    size_t own = weft_layout_packed_bytes(l, my_id);
    if (n > 1) {
        int buddy_of = ids[(me + n - 1) % n]; /* this member is the buddy of the previous */
        assert_int_equal(st.spill_bytes, weft_layout_packed_bytes(l, buddy_of));
        assert_int_equal(weft_snapshot_bytes(plain) - weft_snapshot_bytes(s), 2 * st.spill_bytes);
    } else {
        assert_int_equal(st.spill_bytes, 0);
    }
    weft_snapshot_free(plain);
    sp.buddy_mem_bytes = 2 * st.spill_bytes; /* the buddy's regions fit exactly */
    weft_snapshot_params_t sp2 = sp;
    char dir2[80];
    snprintf(dir2, sizeof(dir2), "%s/roomy", dir);
    sp2.ssd_dir = dir2;
    assert_int_equal(weft_snapshot_create(world, l, 64, &sp2, &roomy), WEFT_OK);
    weft_snapshot_stats_t st2 = {.size = sizeof(st2)};
    assert_int_equal(weft_snapshot_stats(roomy, &st2), WEFT_OK);
    assert_int_equal(st2.spill_bytes, 0);
    weft_snapshot_free(roomy);
    unsigned char *live = malloc(own + 1);
    snapshot_steps_1_2(s, l, live);
    char mdir[128], away[140];
    snprintf(mdir, sizeof(mdir), "%s/member-%d", dir, my_id);
    snprintf(away, sizeof(away), "%s.away", mdir);
    if (n > 1) {
        /* Member 1 cannot write its spilled copies of step 3 (its directory is removed
         * under it: the tier writes relative to the directory it opened, so renaming it
         * away would not stop it): the step commits nowhere, and step 2 stays the newest. */
        if (me == 1) {
            assert_int_equal(rename(mdir, away), 0);
            assert_int_equal(nftw(away, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
        }
        assert_int_equal(weft_barrier(world), WEFT_OK);
        uint64_t three = 3;
        snap_each(l, my_id, live, snap_set_elem, &three);
        assert_int_equal(snapshot(s, 3, live), WEFT_ERR_IO);
        uint64_t committed = 0;
        assert_int_equal(weft_snapshot_committed(s, &committed), WEFT_OK);
        assert_int_equal(committed, 2);
    }
    uint64_t three = 3;
    snap_each(l, my_id, live, snap_set_elem, &three); /* the live state moves on */
    weft_layout_t *t = reversed_model();
    size_t nb = weft_snapshot_restore_bytes(s, t);
    unsigned char *nbuf = malloc(nb);
    weft_snapshot_restored_t got = {.size = sizeof(got)};
    assert_int_equal(weft_snapshot_restore(s, t, nbuf, nb, &got), WEFT_OK);
    assert_int_equal(got.step, 2);
    assert_int_equal(got.bytes_missing, 0);
    check_t c = {.step = 2};
    snap_each(t, my_id, nbuf, check_elem, &c);
    assert_int_equal(c.wrong, 0);
    assert_int_equal(weft_snapshot_stats(s, &st), WEFT_OK);
    assert_int_equal(st.spill_read_bytes, 0);
    assert_int_equal(st.spill_read_failed, 0);
    /* The newest step written to this member's directory: step 3 where it could be. */
    assert_true(st.have_durable && st.durable == (uint64_t)(n > 1 && me != 1 ? 3 : 2));
    free(nbuf);
    free(live);
    weft_layout_free(t);
    weft_layout_free(l);
    weft_snapshot_free(s);
    assert_int_equal(weft_barrier(world), WEFT_OK);
    if (me == 0) {
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
}

/* Restores from live buffers that hold the committed step: into a buffer of its own, the
 * state of that step; into the live buffer itself with a target that moves the live
 * regions (any re-cut but the same layout), refused on every member (it would overwrite
 * what it still has to read), but allowed, in place, where the target keeps them (one
 * member); one member without a live buffer makes everyone restore from the copies. */
static void test_restore_live(void **state)
{
    (void)state;
    weft_layout_t *l = model(ids, n);
    weft_snapshot_t *s;
    assert_int_equal(weft_snapshot_create(world, l, 64, NULL, &s), WEFT_OK);
    size_t own = weft_layout_packed_bytes(l, my_id);
    unsigned char *live = malloc(own + 1);
    snapshot_steps_1_2(s, l, live);
    weft_layout_t *t = reversed_model();
    size_t nb = weft_snapshot_restore_bytes(s, t);
    unsigned char *nbuf = malloc(nb);
    weft_snapshot_stats_t st = {.size = sizeof(st)};
    for (int pass = 0; pass < 2; pass++) { /* every member live; member 0 without */
        memset(nbuf, 0xa5, nb);
        weft_snapshot_restored_t got = {.size = sizeof(got)};
        const void *mine = pass == 1 && me == 0 ? NULL : live;
        assert_int_equal(weft_snapshot_restore_live(s, t, mine, nbuf, nb, &got), WEFT_OK);
        assert_int_equal(got.step, 2);
        assert_int_equal(got.bytes_missing, 0);
        check_t c = {.step = 2};
        snap_each(t, my_id, nbuf, check_elem, &c);
        assert_int_equal(c.wrong, 0);
        assert_int_equal(weft_snapshot_stats(s, &st), WEFT_OK);
        assert_int_equal(st.restore_in_place_bytes, 0);
    }
    /* The live buffer as the new one. */
    unsigned char *grown = malloc(nb > own ? nb : own);
    memcpy(grown, live, own);
    weft_snapshot_restored_t got = {.size = sizeof(got)};
    weft_status_t rc = weft_snapshot_restore_live(s, t, grown, grown, nb, &got);
    if (n == 1) { /* the reversed layout is the same: everything stays in place */
        assert_int_equal(rc, WEFT_OK);
        assert_int_equal(weft_snapshot_stats(s, &st), WEFT_OK);
        assert_int_equal(st.restore_in_place_bytes, own);
        check_t c = {.step = 2};
        snap_each(t, my_id, grown, check_elem, &c);
        assert_int_equal(c.wrong, 0);
    } else {
        assert_int_equal(rc, WEFT_ERR_INVALID_ARG);
    }
    free(grown);
    free(nbuf);
    free(live);
    weft_layout_free(t);
    weft_layout_free(l);
    weft_snapshot_free(s);
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
        fprintf(stderr, "test_snapshot: init: %s\n", weft_last_error(ctx));
        return 1;
    }
    for (int r = 0; r < n; r++) {
        weft_group_member_id(world, r, &ids[r]);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_restore_newest, after_test),
        cmocka_unit_test_teardown(test_bad_starts, after_test),
        cmocka_unit_test_teardown(test_ssd_tier, after_test),
        cmocka_unit_test_teardown(test_budget, after_test),
        cmocka_unit_test_teardown(test_restore_live, after_test),
    };
    char name[32];
    snprintf(name, sizeof(name), "snapshot rank %d of %d", me, n);
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    weft_finalize(ctx);
    return failed;
}
