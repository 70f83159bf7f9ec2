/*
 * A replacement takes part in the restore: the last member kills itself in the middle of
 * step KILL_STEP; weftrun --replace starts a new process (WEFT_JOIN=1), which joins the
 * world; the survivors repair (which may admit it already) and grow back to the first
 * width, then restore a flat re-cut over all members, the newcomer included, from the
 * snapshots: the survivors with weft_snapshot_restore(), the newcomer with
 * weft_snapshot_restore_join(). Everyone reads the step to resume from a blob and trains
 * to the end; every element must be bitwise equal to a run without failure. Run by
 * run_fault.sh with --replace, which counts "SURVIVOR-OK" lines (the newcomer's too).
 *
 * With SNAP_SHARE_FAIL=1 the lowest holder cannot hold the plan it shares with the
 * newcomer (a test hook fails its allocation): it revokes the group, and every member's
 * restore, the newcomer's included, fails within seconds instead of waiting for it in
 * the broadcast until it calls something else, or WEFT_TIMEOUT_MS (60 s here).
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../groups/fault_common.h"
#include "comm/fault.h"
#include "migrate/snapshot/snapshot.h"
#include "snap_common.h"
#include "weft/weft.h"

#define STEPS 10
#define KILL_STEP 5

typedef struct blob {
    uint64_t step;
} blob_t;

static weft_layout_t *model(const int *members, int k)
{
    uint64_t a[1] = {30011}, b[2] = {97, 31};
    weft_layout_t *l;
    weft_layout_create(&l);
    weft_layout_add_tensor(l, "w", WEFT_F32, 1, a, NULL);
    weft_layout_add_tensor(l, "m", WEFT_F64, 2, b, NULL);
    int t[2] = {0, 1};
    weft_layout_flat(l, t, 2, members, k);
    return l;
}

static weft_layout_t *model_of(weft_group_t *g)
{
    int k, ids[64];
    weft_group_size(g, &k);
    for (int r = 0; r < k; r++) {
        weft_group_member_id(g, r, &ids[r]);
    }
    return model(ids, k);
}

static void check_elem(int t, uint64_t i, void *elem, weft_dtype_t dt, void *arg)
{
    uint64_t want[1];
    snap_reference(t, i, dt, STEPS, want);
    *(size_t *)arg += memcmp(elem, want, weft_dtype_size(dt)) != 0;
}

/* Steps @p from..STEPS on @p buf (laid out by @p l), each with an allreduce and a
 * snapshot. */
static weft_status_t train(weft_group_t *g, const weft_layout_t *l, void *buf, uint64_t from,
                           weft_snapshot_t *snap, int id, int victim)
{
    weft_status_t st = WEFT_OK;
    for (uint64_t step = from; step <= STEPS && st == WEFT_OK; step++) {
        if (id == victim && step == KILL_STEP) {
            raise(SIGKILL);
        }
        snap_each(l, id, buf, snap_step_elem, &step);
        double one = 1, sum = 0;
        st = weft_allreduce(g, &one, &sum, 1, WEFT_F64, WEFT_SUM);
        blob_t b = {step};
        weft_req_t *req = NULL;
        if (st == WEFT_OK &&
            (st = weft_snapshot_start(snap, step, buf, &b, sizeof(b), &req)) == WEFT_INPROGRESS) {
            st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
        }
        weft_req_free(req);
    }
    return st;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* SNAP_SHARE_FAIL: the restore (started at @p t0) must have failed, and soon. The member
 * that failed first waits 5 s before it calls anything else, so the others' restores
 * end within 4 s only if its revocation told them (its next collective would too). */
static int share_fail_done(weft_ctx_t *ctx, int me, weft_status_t st, double t0,
                           weft_snapshot_t *snap, weft_layout_t *nl, void *nbuf)
{
    double took = now_s() - t0;
    printf("rank %d: restore %s after %.2f s: %s\n", me, weft_status_str(st), took,
           weft_last_error(ctx));
    if (weft__ctx_faults(ctx)->snap_share_fail) {
        struct timespec five = {5, 0};
        nanosleep(&five, NULL);
    }
    weft_snapshot_free(snap);
    weft_layout_free(nl);
    free(nbuf);
    if (st == WEFT_OK || took > 4) {
        SURVIVOR_FAIL(me, "the failed share did not fail every member at once");
        weft_finalize(ctx);
        return 1;
    }
    SURVIVOR_OK(me);
    weft_finalize(ctx);
    return 0;
}

int main(void)
{
    setenv("WEFT_TIMEOUT_MS", "60000", 0);
    weft_ctx_t *ctx;
    weft_group_t *world = NULL;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        return 1;
    }
    const char *join = getenv("WEFT_JOIN"), *sf = getenv("SNAP_SHARE_FAIL");
    bool joiner = join != NULL && strcmp(join, "1") == 0;
    bool share_fail = sf != NULL && strcmp(sf, "1") == 0;
    int me, n, id;
    weft_layout_t *nl;
    weft_snapshot_t *snap = NULL;
    weft_snapshot_restored_t got = {.size = sizeof(got)};
    unsigned char *nbuf;
    weft_status_t st;
    if (joiner) {
        if ((st = weft_group_join(ctx, "world", 60000, &world)) != WEFT_OK) {
            printf("newcomer: join: %s\n", weft_status_str(st));
            return 1;
        }
        weft_group_rank(world, &me);
        weft_group_member_id(world, me, &id);
        nl = model_of(world);
        size_t nb = weft_layout_packed_bytes(nl, id);
        nbuf = malloc(nb + 1);
        double t0 = now_s();
        st = weft_snapshot_restore_join(world, nl, nbuf, nb, &snap, &got);
        if (share_fail) {
            return share_fail_done(ctx, me, st, t0, snap, nl, nbuf);
        }
        if (st != WEFT_OK) {
            SURVIVOR_FAIL(me, weft_last_error(ctx));
            return 1;
        }
    } else {
        weft_ctx_world(ctx, &world);
        weft_group_rank(world, &me);
        weft_group_size(world, &n);
        weft_group_member_id(world, me, &id);
        int ids[64];
        for (int r = 0; r < n; r++) {
            weft_group_member_id(world, r, &ids[r]);
        }
        int victim = ids[n - 1];
        weft_layout_t *l = model(ids, n);
        if (weft_snapshot_create(world, l, sizeof(blob_t), NULL, &snap) != WEFT_OK) {
            SURVIVOR_FAIL(me, weft_last_error(NULL));
            return 1;
        }
        unsigned char *buf = malloc(weft_layout_packed_bytes(l, id) + 1);
        snap_each(l, id, buf, snap_init_elem, NULL);
        st = train(world, l, buf, 1, snap, id, victim);
        if (id == victim) {
            raise(SIGKILL); /* it saw a failure before its own step came */
        }
        if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
            SURVIVOR_FAIL(me, "the step with the dead member did not fail");
            return 1;
        }
        /* Repair (which may admit the newcomer already), then grow back to n. */
        weft_edit_info_t info = {.size = sizeof(info)};
        int size = 0;
        st = weft_group_repair(world, &info);
        weft_group_size(world, &size);
        while (st == WEFT_OK && size < n) {
            weft_edit_info_t grown = {.size = sizeof(grown)};
            st = weft_group_grow(world, n - size, 30000, &grown);
            weft_group_size(world, &size);
        }
        if (st != WEFT_OK || fault_has_member(world, victim)) {
            SURVIVOR_FAIL(me, "repair and grow");
            return 1;
        }
        weft_group_rank(world, &me);
        nl = model_of(world);
        size_t nb = weft_snapshot_restore_bytes(snap, nl);
        nbuf = malloc(nb);
        weft__ctx_faults(ctx)->snap_share_fail = share_fail && me == 0; /* the lowest holder */
        double t0 = now_s();
        st = weft_snapshot_restore(snap, nl, nbuf, nb, &got);
        if (share_fail) {
            free(buf);
            weft_layout_free(l);
            return share_fail_done(ctx, me, st, t0, snap, nl, nbuf);
        }
        if (st != WEFT_OK) {
            SURVIVOR_FAIL(me, weft_last_error(ctx));
            return 1;
        }
        free(buf);
        weft_layout_free(l);
    }
    /* Everyone, the newcomer included, resumes from the step in a blob. */
    int first;
    weft_group_member_id(world, 0, &first);
    blob_t b = {0};
    size_t len = 0;
    if (got.bytes_missing != 0 || weft_snapshot_blob(snap, first, &b, sizeof(b), &len) != WEFT_OK ||
        b.step != got.step || got.step < KILL_STEP - 2) {
        printf("rank %d: restored step %llu, %zu B missing, blob step %llu\n", me,
               (unsigned long long)got.step, got.bytes_missing, (unsigned long long)b.step);
        SURVIVOR_FAIL(me, "restore");
        return 1;
    }
    printf("rank %d%s: restored step %llu (%zu B moved)\n", me, joiner ? " (newcomer)" : "",
           (unsigned long long)got.step, got.bytes_moved);
    weft_snapshot_free(snap);
    if (weft_snapshot_create(world, nl, sizeof(blob_t), NULL, &snap) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(NULL));
        return 1;
    }
    st = train(world, nl, nbuf, got.step + 1, snap, id, -1);
    size_t wrong = 0;
    snap_each(nl, id, nbuf, check_elem, &wrong);
    if (st != WEFT_OK || wrong != 0) {
        printf("rank %d: %s, %zu elements differ from the run without failure\n", me,
               weft_status_str(st), wrong);
        SURVIVOR_FAIL(me, "the state after the failure is not the state without it");
        return 1;
    }
    SURVIVOR_OK(me);
    weft_snapshot_free(snap);
    weft_layout_free(nl);
    free(nbuf);
    weft_finalize(ctx);
    return 0;
}
