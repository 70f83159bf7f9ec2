/*
 * What the shared-memory path of same-host groups promises beyond the results that
 * test_coll checks: every kind of collective starts with the same header step, so ranks
 * calling different kinds get WEFT_ERR_MISMATCH instead of a hang (refused arguments:
 * test_coll, which runs both paths); the segment leaves no name behind in /dev/shm; a collective abandoned
 * half way makes its group's later collectives fail at once instead of waiting forever;
 * a new segment serves a subgroup; a small broadcast's root runs ahead of its readers,
 * and a disagreement it cannot see fails the next collective on every rank; the first
 * collective after an edit runs on the segment the previous epoch made ahead of time.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/shm/shm_job.h"
#include "weft/weft.h"

static weft_ctx_t *ctx;
static weft_group_t *world;
/* The job token, read before weft_init takes it out of the environment. */
static int me, nranks;

static void expect_status(weft_status_t st, weft_status_t want, const char *what)
{
    if (st != want) {
        fail_msg("rank %d, %s: got %s, expected %s", me, what, weft_status_str(st),
                 weft_status_str(want));
    }
}

/* The group still computes the right sum after whatever a test did to it. */
static void check_sum(weft_group_t *g, size_t n)
{
    int rank, size;
    assert_int_equal(weft_group_rank(g, &rank), WEFT_OK);
    assert_int_equal(weft_group_size(g, &size), WEFT_OK);
    int64_t *in = malloc(n * sizeof(*in)), *out = malloc(n * sizeof(*out));
    assert_non_null(in);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        in[i] = (int64_t)(i * 131 + (size_t)rank * 7);
    }
    expect_status(weft_allreduce(g, in, out, n, WEFT_I64, WEFT_SUM), WEFT_OK, "allreduce");
    for (size_t i = 0; i < n; i++) {
        int64_t want = (int64_t)(i * 131) * size + 7 * (int64_t)size * (size - 1) / 2;
        if (out[i] != want) {
            fail_msg("rank %d: element %zu is %lld, expected %lld", me, i, (long long)out[i],
                     (long long)want);
        }
    }
    free(in);
    free(out);
}

static void test_kind_mismatch(void **state)
{
    (void)state;
    if (nranks < 2) {
        skip();
    }
    float buf[16] = {0}, out[16];
    const size_t big = 200000; /* past the slots: a chunked collective */
    float *bin = calloc(big, sizeof(float)), *bout = calloc(big, sizeof(float));
    assert_non_null(bin);
    assert_non_null(bout);
    bool odd = me == nranks - 1;
    weft_status_t st = odd ? weft_broadcast(world, buf, 16, WEFT_F32, 0)
                           : weft_allreduce(world, buf, out, 16, WEFT_F32, WEFT_SUM);
    expect_status(st, WEFT_ERR_MISMATCH, "broadcast against allreduce");
    st = odd ? weft_allgather(world, bin, bout, big / (size_t)nranks, WEFT_F32)
             : weft_reduce_scatter(world, bin, bout, big / (size_t)nranks, WEFT_F32, WEFT_SUM);
    expect_status(st, WEFT_ERR_MISMATCH, "allgather against reduce_scatter");
    st = odd ? weft_barrier(world) : weft_alltoall(world, bin, bout, 16, WEFT_F32);
    expect_status(st, WEFT_ERR_MISMATCH, "barrier against alltoall");
    check_sum(world, 5);
    check_sum(world, 100003);
    free(bin);
    free(bout);
}

/* Broadcast payload i of a sequence: different in every broadcast and every element. */
static float bcast_val(int i, size_t k)
{
    return (float)(i * 1000 + (int)k);
}

/* A small broadcast's root does not wait for the readers: it runs ahead of them (here by
 * far more broadcasts than the segment has slots per rank) and every reader still gets
 * every broadcast's own data. */
static void test_bcast_run_ahead(void **state)
{
    (void)state;
    if (nranks < 2) {
        skip();
    }
    enum { N = 1200, COUNT = 33 }; /* a root's 600 broadcasts use every slot, many times */
    float buf[COUNT];
    for (int i = 0; i < N; i++) {
        int root = i < N / 2 ? 0 : nranks - 1;
        for (size_t k = 0; k < COUNT; k++) {
            buf[k] = me == root ? bcast_val(i, k) : -1.0f;
        }
        if (me != root && i % 200 == 0) {
            usleep(20000); /* the root is far ahead now */
        }
        expect_status(weft_broadcast(world, buf, COUNT, WEFT_F32, root), WEFT_OK, "broadcast");
        for (size_t k = 0; k < COUNT; k++) {
            if (buf[k] != bcast_val(i, k)) {
                fail_msg("rank %d, broadcast %d: element %zu is %g, expected %g", me, i, k,
                         (double)buf[k], (double)bcast_val(i, k));
            }
        }
    }
    check_sum(world, 5);
}

/*
 * Disagreements on small broadcasts. A non-root that disagrees with the root's header
 * gets WEFT_ERR_MISMATCH from the broadcast itself; ranks that cannot see it there (the
 * root, and readers that agree with it) see it in the group's next collective that is not
 * a small broadcast, which fails on every rank with its output untouched. Then the group
 * is in step again.
 */
static void test_bcast_late_mismatch(void **state)
{
    (void)state;
    if (nranks < 2) {
        skip();
    }
    bool odd = me == nranks - 1;
    float buf[8], in[4] = {1, 2, 3, 4}, out[4];
    /* A count that only the last rank has: it compares with root 0 and sees it. */
    memset(buf, 0, sizeof(buf));
    weft_status_t st = weft_broadcast(world, buf, odd ? 8 : 7, WEFT_F32, 0);
    expect_status(st, odd ? WEFT_ERR_MISMATCH : WEFT_OK, "broadcast, count");
    /* Followed by more broadcasts that agree: they work, and report nothing. */
    for (int i = 0; i < 3; i++) {
        buf[0] = me == 0 ? (float)i : -1.0f;
        expect_status(weft_broadcast(world, buf, 1, WEFT_F32, 0), WEFT_OK, "broadcast after");
        assert_true(buf[0] == (float)i);
    }
    memset(out, 0x5a, sizeof(out));
    expect_status(weft_allreduce(world, in, out, 4, WEFT_F32, WEFT_SUM), WEFT_ERR_MISMATCH,
                  "allreduce after a broadcast that disagreed");
    for (size_t k = 0; k < sizeof(out); k++) {
        assert_int_equal(((unsigned char *)out)[k], 0x5a);
    }
    check_sum(world, 9);
    /* A root that only the last rank believes in: it is a root of its own, so nobody
     * may see it in the broadcast; the barrier after it fails everywhere. */
    int root = odd ? nranks - 1 : 0;
    st = weft_broadcast(world, buf, 2, WEFT_F32, root);
    if (st != WEFT_OK && st != WEFT_ERR_MISMATCH) {
        fail_msg("rank %d: broadcast with two roots: %s", me, weft_status_str(st));
    }
    expect_status(weft_barrier(world), WEFT_ERR_MISMATCH, "barrier after two roots");
    check_sum(world, 100003);
}

/* Every member has attached to the segments made so far, so none of the job's names
 * ("weft-<job>-", comm/shm/shm_job.h) is left in /dev/shm but the world's next control
 * segment, made ahead of time (comm/shm/shm_seg.c); the subgroups of earlier tests are freed,
 * and their spares with them. */
static void test_no_name_left(void **state)
{
    (void)state;
    check_sum(world, 3);
    if (me != 0 || nranks < 2) {
        return;
    }
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "weft-%s-", weft__shm_ctx_job(ctx));
    DIR *d = opendir(WEFT_SHM_DIR);
    if (d == NULL) {
        return; /* no /dev/shm: shm_open lives elsewhere, nothing to look at */
    }
    uint32_t epoch;
    assert_int_equal(weft_group_epoch(world, &epoch), WEFT_OK);
    char spare[32];
    snprintf(spare, sizeof(spare), "-0-%u-ctl", epoch + 1);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        bool is_spare = n > strlen(spare) && strcmp(e->d_name + n - strlen(spare), spare) == 0;
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && !is_spare) {
            closedir(d);
            fail_msg("/dev/shm/%s is left behind", e->d_name);
        }
    }
    closedir(d);
}

/* Rank 0 starts a collective on a subgroup and frees it unfinished; the subgroup's next
 * collective fails at once on rank 0. The world is untouched. */
static void test_abandoned(void **state)
{
    (void)state;
    if (nranks < 2) {
        skip();
    }
    weft_group_t *sub = NULL;
    assert_int_equal(weft_group_split(world, me < 2 ? 0 : 1, me, &sub), WEFT_OK);
    check_sum(sub, 10); /* maps the subgroup's own segment */
    /* Abandoning revokes what is still in flight in the epoch (include/weft/group.h):
     * rank 1 must be out of that allreduce before rank 0 abandons the next one. */
    expect_status(weft_barrier(world), WEFT_OK, "barrier on the world");
    if (me == 0) {
        float x = 1, y = 0;
        weft_req_t *req = NULL;
        weft_status_t st = weft_iallreduce(sub, &x, &y, 1, WEFT_F32, WEFT_SUM, &req);
        expect_status(st, WEFT_INPROGRESS, "iallreduce nobody else joins");
        weft_req_free(req);
        expect_status(weft_allreduce(sub, &x, &y, 1, WEFT_F32, WEFT_SUM), WEFT_ERR_REVOKED,
                      "allreduce after an abandoned one");
    }
    assert_int_equal(weft_group_free(sub), WEFT_OK);
    check_sum(world, 1000);
}

/* Bytes of the world's control segment of @p epoch as this process maps it, or 0. */
static size_t mapped_ctl_bytes(uint32_t epoch)
{
    char want[48], line[512];
    snprintf(want, sizeof(want), "-0-%u-ctl", epoch);
    FILE *f = fopen("/proc/self/maps", "r");
    size_t bytes = 0;
    while (f != NULL && bytes == 0 && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (strstr(line, want) != NULL && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
            bytes = hi - lo;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return bytes;
}

/* Every member revokes the world after a few collectives and repairs it: the first
 * collective of the new epoch maps no new segment but takes over the one the old epoch
 * made and mapped for it, sized for the largest group (comm/shm/shm_seg.c, ctl_len_max:
 * 256 members' counters and 512 slots of 4 KiB, WEFT_SHM_SMALL_MAX as set here), where a
 * segment made for this group would be at least 64 KiB smaller. */
static void test_next_epoch_ready(void **state)
{
    (void)state;
    if (nranks < 2) {
        skip();
    }
    for (int i = 0; i < 4; i++) {
        check_sum(world, 5);
    }
    uint32_t before, after;
    assert_int_equal(weft_group_epoch(world, &before), WEFT_OK);
    assert_int_equal(weft_group_revoke(world), WEFT_OK);
    weft_edit_info_t info = {.size = sizeof(info)};
    assert_int_equal(weft_group_repair(world, &info), WEFT_OK);
    assert_int_equal(weft_group_epoch(world, &after), WEFT_OK);
    assert_int_equal(after, before + 1);
    check_sum(world, 7);
    size_t spare = 64 + 256 * 256 + 512 * (size_t)(((40 + 4096) + 63) / 64 * 64);
    size_t got = mapped_ctl_bytes(after);
    if (got < spare) {
        fail_msg("rank %d: epoch %u maps a %zu-byte control segment, not the %zu-byte one "
                 "made ahead of time", me, after, got, spare);
    }
    check_sum(world, 9);
}

static int setup(void **state)
{
    (void)state;
    setenv("WEFT_COLL_SHM", "on", 1);
    setenv("WEFT_SHM_SMALL_MAX", "4K", 1);
    setenv("WEFT_TIMEOUT_MS", "60000", 1);
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK ||
        weft_group_rank(world, &me) != WEFT_OK || weft_group_size(world, &nranks) != WEFT_OK) {
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return weft_finalize(ctx) == WEFT_OK ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kind_mismatch),
        cmocka_unit_test(test_next_epoch_ready),
        cmocka_unit_test(test_bcast_run_ahead),
        cmocka_unit_test(test_bcast_late_mismatch),
        cmocka_unit_test(test_no_name_left),
        cmocka_unit_test(test_abandoned),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
