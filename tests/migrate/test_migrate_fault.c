/*
 * A member dies in the middle of a migration (SIGKILL from inside the engine, after it
 * received a few chunks): every survivor's migration fails with WEFT_ERR_PEER_FAILED or
 * WEFT_ERR_REVOKED; after weft_group_repair, weft_migrate_replan_flat re-cuts the ZeRO
 * partition over the survivors from what they hold, lists exactly what only the dead
 * member held; weft_migrate_resume makes the plan to the same layout from what the
 * survivors hold now, chunks received before the death included (so it misses no more
 * than the replan, and moves plus misses no more); the resumed migration leaves the missing pieces
 * untouched and fills the rest with the right bytes. Run by run_fault.sh, which counts
 * "SURVIVOR-OK".
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../groups/fault_common.h"
#include "comm/core_impl.h"
#include "comm/fault.h"
#include "layout_gen.h"
#include "migrate/layout/box.h"
#include "migrate/engine/engine.h"
#include "weft/weft.h"

static int victim;

static void die_midway(void *arg, int src, uint32_t seq, int round, void *data, size_t len)
{
    (void)arg, (void)src, (void)round, (void)data, (void)len;
    if (seq == 3) {
        raise(SIGKILL);
    }
}

static weft_layout_t *flat_layout(const int *members, int n)
{
    uint64_t a[2] = {512, 1000}, b[1] = {300000};
    weft_layout_t *l;
    weft_layout_create(&l);
    weft_layout_add_tensor(l, "w", WEFT_F32, 2, a, NULL);
    weft_layout_add_tensor(l, "m", WEFT_F64, 1, b, NULL);
    int t[2] = {0, 1};
    weft_layout_flat(l, t, 2, members, n);
    return l;
}

/* The pieces nobody holds stayed as they were; restore them from @p want, then the
 * whole buffer must equal it. Returns a reason, or NULL. */
static const char *check_new(const weft_plan_t *plan, const weft_layout_t *nl, int me,
                             unsigned char *buf, const unsigned char *want, size_t bytes)
{
    for (size_t i = 0; i < weft_plan_num_missing(plan); i++) {
        weft_transfer_t t;
        weft_plan_missing(plan, i, &t);
        if (t.dst != me) {
            continue;
        }
        weft_box_t region;
        size_t off;
        weft_tensor_info_t ti;
        weft_layout_region(nl, me, t.dst_region, NULL, &region, NULL, &off);
        weft_layout_tensor(nl, t.tensor, &ti);
        size_t elem = weft_dtype_size(ti.dtype);
        unsigned char *got = malloc(t.bytes), *orig = malloc(t.bytes);
        weft__box_copy(got, &t.box, buf + off, &region, &t.box, ti.ndims, elem);
        weft__box_copy(orig, &t.box, want + off, &region, &t.box, ti.ndims, elem);
        for (size_t k = 0; k < t.bytes; k++) {
            if (got[k] != (unsigned char)~orig[k]) {
                free(got);
                free(orig);
                return "the engine wrote into a piece nobody holds";
            }
        }
        weft__box_copy(buf + off, &region, want + off, &region, &t.box, ti.ndims, elem);
        free(got);
        free(orig);
    }
    return memcmp(buf, want, bytes) == 0 ? NULL : "wrong bytes after the replanned migration";
}

int main(void)
{
    setenv("WEFT_TIMEOUT_MS", "60000", 0);
    setenv("WEFT_MIGRATE_CHUNK", "8K", 0); /* streams of 128 chunks and more: rings */
    setenv("WEFT_MIGRATE_WINDOW", "1", 0);
    weft_ctx_t *ctx;
    weft_group_t *world;
    int me, n, id;
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK) {
        return 1;
    }
    ctx->oversubscribed = false; /* long streams go through rings here too */
    weft_group_rank(world, &me);
    weft_group_size(world, &n);
    weft_group_member_id(world, me, &id);
    int ids[64], rot[64];
    for (int r = 0; r < n; r++) {
        weft_group_member_id(world, r, &ids[r]);
    }
    for (int r = 0; r < n; r++) {
        rot[r] = ids[(r + 1) % n];
    }
    victim = ids[n - 1];
    weft_layout_t *old = flat_layout(ids, n), *rotated = flat_layout(rot, n);
    weft_plan_t *plan;
    if (weft_plan_create(old, rotated, NULL, &plan) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(NULL));
        return 1;
    }
    size_t ob = weft_layout_packed_bytes(old, id);
    unsigned char *obuf = malloc(ob), *nbuf = malloc(weft_layout_packed_bytes(rotated, id));
    gen_fill(old, id, obuf);
    if (id == victim) {
        weft__ctx_faults(ctx)->recv_hook = die_midway;
    }
    weft_req_t *req = NULL;
    weft_status_t st = weft_imigrate(world, plan, obuf, nbuf, NULL, &req);
    if (st == WEFT_INPROGRESS) {
        st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
    }
    if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
        printf("rank %d: migration returned %s\n", me, weft_status_str(st));
        SURVIVOR_FAIL(me, "the migration did not fail with the member that died in it");
        return 1;
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    if (fault_recover(world, &info) != WEFT_OK || fault_has_member(world, victim)) {
        SURVIVOR_FAIL(me, "repair");
        return 1;
    }
    weft_layout_t *nl;
    weft_plan_t *replan;
    if (weft_migrate_replan_flat(old, world, &nl, &replan) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(NULL));
        return 1;
    }
    /* What is missing is exactly what the victim held: as many bytes as its shard. */
    weft_plan_stats_t all = {.size = sizeof(all)};
    weft_plan_stats(replan, -1, &all);
    if (all.bytes_missing != weft_layout_packed_bytes(old, victim)) {
        printf("rank %d: %zu B missing, the victim held %zu B\n", me, all.bytes_missing,
               weft_layout_packed_bytes(old, victim));
        SURVIVOR_FAIL(me, "missing bytes");
        return 1;
    }
    weft_plan_t *resumed;
    if (weft_migrate_resume(world, req, old, nl, NULL, &resumed) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(ctx));
        return 1;
    }
    weft_req_free(req);
    weft_plan_stats_t rs = {.size = sizeof(rs)};
    weft_plan_stats(resumed, -1, &rs);
    /* What the survivors received from the victim is no longer missing (it moves now);
     * what they received from each other does not move again. */
    if (rs.bytes_in + rs.bytes_missing > all.bytes_in + all.bytes_missing ||
        rs.bytes_missing > all.bytes_missing) {
        printf("rank %d: resumed plan moves %zu B and misses %zu B; the replan %zu B and %zu B\n",
               me, rs.bytes_in, rs.bytes_missing, all.bytes_in, all.bytes_missing);
        SURVIVOR_FAIL(me, "the resumed plan does worse than the replan");
        return 1;
    }
    printf("rank %d: resumed plan moves %zu B (the replan %zu B), misses %zu B (%zu B)\n", me,
           rs.bytes_in, all.bytes_in, rs.bytes_missing, all.bytes_missing);
    size_t nb = weft_layout_packed_bytes(nl, id);
    unsigned char *want = malloc(nb), *buf = malloc(nb);
    gen_fill(nl, id, want);
    for (size_t i = 0; i < nb; i++) {
        buf[i] = (unsigned char)~want[i];
    }
    weft_migrate_params_t mp = {.size = sizeof(mp), .resume_buf = nbuf};
    if ((st = weft_migrate(world, resumed, obuf, buf, &mp)) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(ctx));
        return 1;
    }
    const char *why = check_new(resumed, nl, id, buf, want, nb);
    if (why != NULL) {
        SURVIVOR_FAIL(me, why);
        return 1;
    }
    printf("rank %d: %llu chunks came through same-host rings\n", me,
           (unsigned long long)weft__ctx_faults(ctx)->counts.ring_chunks);
    SURVIVOR_OK(me);
    weft_plan_free(replan);
    weft_plan_free(resumed);
    weft_plan_free(plan);
    weft_layout_free(nl);
    weft_layout_free(old);
    weft_layout_free(rotated);
    free(obuf), free(nbuf), free(want), free(buf);
    weft_finalize(ctx);
    return 0;
}
