/*
 * Migrations on every rank of a weftrun job (1 to 8 ranks): random layouts over the
 * group's members, run with several chunk sizes and windows, each rank's new buffer
 * compared byte for byte with the values the tensors were filled with (an independent,
 * sequential reference); a ZeRO re-cut from P to P-1 members; a chunk corrupted once
 * (sent again, the migration succeeds) and twice (every rank fails alike); members that
 * start different plans (every rank gets WEFT_ERR_MISMATCH) and a member whose
 * arguments are refused (every rank gets WEFT_ERR_INVALID_ARG); a failed migration
 * resumed from what members received (weft_migrate_resume); local copies large enough
 * for non-temporal stores. With WEFT_DEBUG_FAULTS set, only the check that the setting
 * switched its fault on (test_cma_refused_by_setting).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "comm/core_impl.h"
#include "comm/fault.h"
#include "layout_gen.h"
#include "migrate/engine/engine.h"
#include "migrate/engine/ring.h"
#include "weft/weft.h"

static weft_ctx_t *ctx;
static weft__faults_t *faults; /* ctx's test faults and path counters */
static weft_group_t *world;
static int me, n, my_id;
static int ids[64];
static size_t default_chunk;  /* WEFT_MIGRATE_CHUNK as set: restored after each test */
static size_t default_window; /* WEFT_MIGRATE_WINDOW likewise */

/* Run old -> new on the world and return this rank's status; checks the data on OK. */
static weft_status_t run(const weft_layout_t *old, const weft_layout_t *new,
                         const weft_migrate_params_t *mp, bool null_old)
{
    weft_plan_t *plan;
    assert_int_equal(weft_plan_create(old, new, NULL, &plan), WEFT_OK);
    size_t ob = weft_layout_packed_bytes(old, my_id), nb = weft_layout_packed_bytes(new, my_id);
    unsigned char *obuf = malloc(ob + 1), *nbuf = calloc(1, nb + 1);
    gen_fill(old, my_id, obuf);
    weft_status_t st = weft_migrate(world, plan, null_old ? NULL : obuf, nbuf, mp);
    if (st == WEFT_OK) {
        size_t wrong = gen_check(new, my_id, nbuf);
        if (wrong != 0) {
            weft_plan_print(plan, stderr);
            fail_msg("%zu of %zu bytes wrong", wrong, nb);
        }
    }
    free(obuf);
    free(nbuf);
    weft_plan_free(plan);
    return st;
}

static void test_random(void **state)
{
    (void)state;
    static const size_t chunks[] = {1, 17, 256, 4096, 1 << 20};
    for (int trial = 0; trial < 60; trial++) {
        gen_seed((uint64_t)trial + 1000);
        gen_shape_t s;
        gen_shape(&s, 24);
        weft_layout_t *old = gen_layout(&s, ids, n), *new = gen_layout(&s, ids, n);
        assert_non_null(old);
        assert_non_null(new);
        ctx->cfg.migrate_chunk = chunks[gen_rnd() % 5];
        ctx->cfg.migrate_window = (size_t)gen_in(1, 4);
        int prio[4] = {gen_in(0, 2), gen_in(0, 2), gen_in(0, 2), gen_in(0, 2)};
        weft_migrate_params_t mp = {.size = sizeof(mp),
                                    .priority = prio,
                                    .num_priorities = 4,
                                    .max_staged_bytes = (size_t)gen_in(1, 3) * 64};
        weft_status_t st = run(old, new, trial % 2 ? &mp : NULL, false);
        if (st != WEFT_OK) {
            fail_msg("trial %d: %s: %s", trial, weft_status_str(st), weft_last_error(ctx));
        }
        weft_layout_free(old);
        weft_layout_free(new);
    }
    ctx->cfg.migrate_chunk = default_chunk;
    ctx->cfg.migrate_window = default_window;
}

/* ZeRO: a flat partition of three tensors over all ranks, re-cut over all but the last. */
static void test_zero_recut(void **state)
{
    (void)state;
    uint64_t a[2] = {1000, 333}, b[1] = {4097}, c[3] = {7, 9, 11};
    weft_layout_t *old, *new;
    weft_layout_create(&old);
    weft_layout_create(&new);
    weft_layout_t *both[2] = {old, new};
    for (int i = 0; i < 2; i++) {
        weft_layout_add_tensor(both[i], "a", WEFT_F32, 2, a, NULL);
        weft_layout_add_tensor(both[i], "b", WEFT_F64, 1, b, NULL);
        weft_layout_add_tensor(both[i], "c", WEFT_BF16, 3, c, NULL);
    }
    int t[3] = {0, 1, 2};
    assert_int_equal(weft_layout_flat(old, t, 3, ids, n), WEFT_OK);
    assert_int_equal(weft_layout_flat(new, t, 3, ids, n > 1 ? n - 1 : 1), WEFT_OK);
    ctx->cfg.migrate_chunk = 64 << 10;
    assert_int_equal(run(old, new, NULL, false), WEFT_OK);
    ctx->cfg.migrate_chunk = default_chunk;
    weft_layout_free(old);
    weft_layout_free(new);
}

static int corrupt_rounds; /* flip a byte of chunk 0 in rounds below this */

static void flip(void *arg, int src, uint32_t seq, int round, void *data, size_t len)
{
    (void)arg, (void)src;
    if (seq == 0 && round < corrupt_rounds && len > 0) {
        ((unsigned char *)data)[len / 2] ^= 0x40;
    }
}

/* A tensor of @p rows x @p cols f32 sharded along @p dim, then rotated by one rank:
 * every rank receives, so every rank sees a flip. */
static void rotation_of(weft_layout_t **old, weft_layout_t **new, uint64_t rows, uint64_t cols,
                        int dim)
{
    uint64_t shape[2] = {rows, cols};
    weft_layout_create(old);
    weft_layout_create(new);
    weft_layout_add_tensor(*old, "w", WEFT_F32, 2, shape, NULL);
    weft_layout_add_tensor(*new, "w", WEFT_F32, 2, shape, NULL);
    int rot[64];
    for (int i = 0; i < n; i++) {
        rot[i] = ids[(i + 1) % n];
    }
    weft_layout_shard(*old, 0, dim, ids, n);
    weft_layout_shard(*new, 0, dim, rot, n);
}

static void rotation(weft_layout_t **old, weft_layout_t **new)
{
    rotation_of(old, new, 64, 50, 0); /* streams of 7 chunks or fewer: no ring */
}

static void test_corruption(void **state)
{
    (void)state;
    if (n < 2) {
        skip();
    }
    weft_layout_t *old, *new;
    rotation(&old, &new);
    ctx->cfg.migrate_chunk = 1000;
    faults->recv_hook = flip;
    corrupt_rounds = 1; /* once: sent again, and the data arrives intact */
    assert_int_equal(run(old, new, NULL, false), WEFT_OK);
    corrupt_rounds = 2; /* twice: every rank fails with the same status */
    weft_status_t st = run(old, new, NULL, false);
    assert_int_equal(st, WEFT_ERR_TRANSPORT);
    assert_non_null(strstr(weft_last_error(ctx), "corrupted twice"));
    faults->recv_hook = NULL;
    ctx->cfg.migrate_chunk = default_chunk;
    /* The group still works. */
    assert_int_equal(run(old, new, NULL, false), WEFT_OK);
    weft_layout_free(old);
    weft_layout_free(new);
}

/* Resume after a failure (here every member's first chunk arrives corrupted twice, so
 * the failed migration delivered everything else): the plan from what members hold now
 * moves exactly the chunks that did not arrive, and reaches the target byte for byte;
 * a flat target (a re-cut, not the failed one's layout) is reached too. */
static void test_resume(void **state)
{
    (void)state;
    if (n < 2) {
        skip();
    }
    weft_layout_t *old, *new, *flat;
    rotation(&old, &new);
    weft_layout_keep(old, NULL, 0, &flat);
    int t0 = 0;
    assert_int_equal(weft_layout_flat(flat, &t0, 1, ids, n), WEFT_OK);
    weft_plan_t *plan;
    assert_int_equal(weft_plan_create(old, new, NULL, &plan), WEFT_OK);
    size_t ob = weft_layout_packed_bytes(old, my_id), nb = weft_layout_packed_bytes(new, my_id);
    unsigned char *obuf = malloc(ob), *failed_buf = calloc(1, nb);
    gen_fill(old, my_id, obuf);
    ctx->cfg.migrate_chunk = 1000;
    faults->recv_hook = flip;
    corrupt_rounds = 2;
    weft_req_t *req = NULL;
    weft_status_t st = weft_imigrate(world, plan, obuf, failed_buf, NULL, &req);
    assert_true(st == WEFT_INPROGRESS || st == WEFT_OK);
    assert_int_equal(weft_wait(req, WEFT_TIMEOUT_DEFAULT), WEFT_ERR_TRANSPORT);
    faults->recv_hook = NULL;
    const weft_layout_t *targets[2] = {new, flat};
    for (int k = 0; k < 2; k++) {
        weft_plan_t *rp;
        assert_int_equal(weft_migrate_resume(world, req, old, targets[k], NULL, &rp), WEFT_OK);
        weft_plan_stats_t all = {.size = sizeof(all)}, fresh = {.size = sizeof(fresh)};
        assert_int_equal(weft_plan_stats(rp, -1, &all), WEFT_OK);
        assert_int_equal(all.bytes_missing, 0);
        if (k == 0) {
            /* Only chunk 0 of every member's region is still to come. */
            size_t region = weft_layout_packed_bytes(new, ids[0]);
            assert_int_equal(all.bytes_in, (size_t)n * (region < 1000 ? region : 1000));
        } else {
            /* Never more than a plan from the old layout alone. */
            weft_plan_t *op;
            assert_int_equal(weft_plan_create(old, flat, NULL, &op), WEFT_OK);
            weft_plan_stats(op, -1, &fresh);
            assert_true(all.bytes_in <= fresh.bytes_in);
            weft_plan_free(op);
        }
        size_t tb = weft_layout_packed_bytes(targets[k], my_id);
        unsigned char *tbuf = calloc(1, tb + 1);
        weft_migrate_params_t mp = {.size = sizeof(mp), .resume_buf = failed_buf};
        st = weft_migrate(world, rp, obuf, tbuf, &mp);
        assert_int_equal(st, WEFT_OK);
        assert_int_equal(gen_check(targets[k], my_id, tbuf), 0);
        /* Without the resume buffer, a member that must read it refuses, and all fail. */
        bool reads = false;
        for (size_t i = 0; i < weft_plan_num_transfers(rp); i++) {
            weft_transfer_t t;
            weft_plan_transfer(rp, i, &t);
            reads |= t.src == my_id && t.src_region >= weft_layout_num_regions(old, my_id);
        }
        int any = reads, anyone = 0;
        weft_allreduce(world, &any, &anyone, 1, WEFT_I32, WEFT_MAX);
        if (anyone) {
            st = weft_migrate(world, rp, obuf, tbuf, NULL);
            assert_int_equal(st, WEFT_ERR_INVALID_ARG);
        }
        free(tbuf);
        weft_plan_free(rp);
    }
    /* A member that passes no request: every member is refused, none waits. */
    weft_plan_t *rp = NULL;
    st = weft_migrate_resume(world, me == n - 1 ? NULL : req, old, new, NULL, &rp);
    assert_int_equal(st, WEFT_ERR_INVALID_ARG);
    assert_null(rp);
    /* A layout that is not the failed plan's old one is refused. */
    st = weft_migrate_resume(world, req, new, new, NULL, &rp);
    assert_int_equal(st, WEFT_ERR_INVALID_ARG);
    weft_req_free(req);
    ctx->cfg.migrate_chunk = default_chunk;
    free(obuf);
    free(failed_buf);
    weft_plan_free(plan);
    weft_layout_free(old);
    weft_layout_free(new);
    weft_layout_free(flat);
}

/* On one host the receivers read contiguous chunks from the senders' memory; where that is
 * refused, the chunks come again by message and the migration still succeeds. From a
 * sender on another host (a job over several hosts) nothing is read that way. */
static void test_cma(void **state)
{
    (void)state;
    if (n < 2) {
        skip();
    }
    weft_layout_t *old, *new;
    rotation(&old, &new);
    ctx->cfg.migrate_chunk = 1000;
    uint64_t before = atomic_load(&faults->counts.cma_reads);
    assert_int_equal(run(old, new, NULL, false), WEFT_OK);
    uint64_t used = atomic_load(&faults->counts.cma_reads) - before;
    int sender = ids[(me + n - 1) % n]; /* of this member's new shard, in the rotation */
    if (ctx->cfg.migrate_cma && ctx->peers[sender].same_host) {
        assert_true(used > 0);
    } else {
        assert_int_equal(used, 0);
    }
    faults->cma_refuse = true;
    before = atomic_load(&faults->counts.cma_reads);
    uint64_t fell_back = atomic_load(&faults->counts.cma_fallbacks);
    assert_int_equal(run(old, new, NULL, false), WEFT_OK);
    assert_int_equal(atomic_load(&faults->counts.cma_reads), before);
    assert_int_equal(atomic_load(&faults->counts.cma_fallbacks) > fell_back, used > 0);
    faults->cma_refuse = false;
    ctx->cfg.migrate_chunk = default_chunk;
    weft_layout_free(old);
    weft_layout_free(new);
}

/* Run with WEFT_DEBUG_FAULTS=cma_refuse in the environment (CMakeLists.txt; builds with
 * NDEBUG ignore it, and main skips there): weft_init switched the fault on, so where this
 * member's sender shares its host every read of its memory failed and the chunks came
 * again by message; the migration succeeds all the same. */
static void test_cma_refused_by_setting(void **state)
{
    (void)state;
    if (n < 2) {
        skip();
    }
    assert_true(faults->cma_refuse);
    assert_int_equal(faults->ring_refuse, 0);
    assert_false(faults->snap_share_fail);
    weft_layout_t *old, *new;
    rotation(&old, &new);
    ctx->cfg.migrate_chunk = 1000;
    uint64_t reads = atomic_load(&faults->counts.cma_reads);
    uint64_t fell_back = atomic_load(&faults->counts.cma_fallbacks);
    assert_int_equal(run(old, new, NULL, false), WEFT_OK);
    assert_int_equal(atomic_load(&faults->counts.cma_reads), reads);
    int sender = ids[(me + n - 1) % n]; /* of this member's new shard, in the rotation */
    if (ctx->cfg.migrate_cma && ctx->peers[sender].same_host) {
        assert_true(atomic_load(&faults->counts.cma_fallbacks) > fell_back);
    } else {
        assert_int_equal(atomic_load(&faults->counts.cma_fallbacks), fell_back);
    }
    ctx->cfg.migrate_chunk = default_chunk;
    weft_layout_free(old);
    weft_layout_free(new);
}

/* Run old -> new and return how many chunks this rank took from a ring. */
static uint64_t ring_run(const weft_layout_t *old, const weft_layout_t *new, weft_status_t want)
{
    uint64_t before = atomic_load(&faults->counts.ring_chunks);
    assert_int_equal(run(old, new, NULL, false), want);
    return atomic_load(&faults->counts.ring_chunks) - before;
}

/* Streams of 128 chunks or more between ranks on one host go through the receiver's ring
 * (here also where the host runs more ranks than cores, which gives none): rows
 * (contiguous) and columns (gathered into the ring, scattered out of it) arrive intact.
 * A chunk corrupted in the ring once is sent again; twice, every rank fails. Where the
 * sender cannot map the ring, or the receiver cannot make one, or the host runs more
 * ranks than cores, the chunks go the other ways and the migration still succeeds.
 * Members that disagree on WEFT_MIGRATE_SHM all fail. */
static void test_ring(void **state)
{
    (void)state;
    if (n < 2) {
        skip();
    }
    int sender = ids[(me + n - 1) % n]; /* of this member's new shard */
    bool ring = ctx->cfg.migrate_shm && ctx->peers[sender].same_host;
    bool over = ctx->oversubscribed;
    ctx->oversubscribed = false;
    ctx->cfg.migrate_chunk = 400; /* 2 rows of 50 floats, 4 rows of 25 */
    for (int dim = 0; dim < 2; dim++) {
        weft_layout_t *old, *new;
        rotation_of(&old, &new, dim == 0 ? 256 * (uint64_t)n : 512,
                    dim == 0 ? 50 : 25 * (uint64_t)n, dim);
        uint64_t used = ring_run(old, new, WEFT_OK);
        if (ring) {
            assert_int_equal(used, 128); /* every chunk of the stream, once */
        } else {
            assert_int_equal(used, 0);
        }
        faults->recv_hook = flip;
        corrupt_rounds = 1;
        used = ring_run(old, new, WEFT_OK);
        assert_int_equal(used, ring ? 129 : 0); /* chunk 0 came twice */
        corrupt_rounds = 2;
        ring_run(old, new, WEFT_ERR_TRANSPORT);
        assert_non_null(strstr(weft_last_error(ctx), "corrupted twice"));
        faults->recv_hook = NULL;
        for (int refuse = 1; refuse <= 3; refuse++) {
            faults->ring_refuse = refuse < 3 ? refuse : 0;
            ctx->oversubscribed = refuse == 3;
            uint64_t cma = atomic_load(&faults->counts.cma_reads);
            assert_int_equal(ring_run(old, new, WEFT_OK), 0);
            if (dim == 0 && ring && ctx->cfg.migrate_cma) {
                assert_true(atomic_load(&faults->counts.cma_reads) > cma);
            }
            faults->ring_refuse = 0;
            ctx->oversubscribed = false;
        }
        int shm = ctx->cfg.migrate_shm;
        ctx->cfg.migrate_shm = me == 0 ? !shm : shm;
        ring_run(old, new, WEFT_ERR_MISMATCH);
        ctx->cfg.migrate_shm = shm;
        weft_layout_free(old);
        weft_layout_free(new);
    }
    ctx->cfg.migrate_chunk = default_chunk;
    ctx->oversubscribed = over;
}

/* Two migrations of @p plan started at once, into @p nb1 and @p nb2 (cleared first, @p nb
 * bytes each): both succeed with the right bytes. */
static void two_at_once(const weft_plan_t *plan, const weft_layout_t *new, const void *obuf,
                        unsigned char *nb1, unsigned char *nb2, size_t nb)
{
    memset(nb1, 0, nb);
    memset(nb2, 0, nb);
    weft_req_t *r1 = NULL, *r2 = NULL;
    assert_int_equal(weft_imigrate(world, plan, obuf, nb1, NULL, &r1), WEFT_INPROGRESS);
    assert_int_equal(weft_imigrate(world, plan, obuf, nb2, NULL, &r2), WEFT_INPROGRESS);
    assert_int_equal(weft_wait(r1, WEFT_TIMEOUT_DEFAULT), WEFT_OK);
    assert_int_equal(weft_wait(r2, WEFT_TIMEOUT_DEFAULT), WEFT_OK);
    weft_req_free(r1);
    weft_req_free(r2);
    assert_int_equal(gen_check(new, my_id, nb1), 0);
    assert_int_equal(gen_check(new, my_id, nb2), 0);
}

/* Rings are kept between migrations: a second migration with the same geometry makes
 * and maps none; a stream that failed gives its ring up; two migrations at once between
 * the same members use two rings, and one of them is kept afterwards. */
static void test_ring_kept(void **state)
{
    (void)state;
    if (n < 2 || !ctx->cfg.migrate_shm) {
        skip(); /* alike on every rank */
    }
    /* This member receives from the one before it and sends to the one after it. */
    uint64_t in = ctx->peers[ids[(me + n - 1) % n]].same_host ? 1 : 0;
    uint64_t out = ctx->peers[ids[(me + 1) % n]].same_host ? 1 : 0;
    bool over = ctx->oversubscribed;
    ctx->oversubscribed = false;
    weft_layout_t *old, *new;
    rotation_of(&old, &new, 512 * (uint64_t)n, 50, 0);
    ctx->cfg.migrate_chunk = 800; /* 4 rows: 128 chunks; a geometry no other test uses */
    weft__faults_t *f = weft__ctx_faults(ctx);
    uint64_t made = f->counts.rings_made, mapped = f->counts.rings_mapped;
    assert_int_equal(ring_run(old, new, WEFT_OK), 128 * in);
    assert_int_equal(f->counts.rings_made - made, in);     /* as the receiver */
    assert_int_equal(f->counts.rings_mapped - mapped, out); /* as the sender */
    assert_int_equal(ring_run(old, new, WEFT_OK), 128 * in);
    assert_int_equal(f->counts.rings_made - made, in);
    assert_int_equal(f->counts.rings_mapped - mapped, out);
    faults->recv_hook = flip;
    corrupt_rounds = 2;
    ring_run(old, new, WEFT_ERR_TRANSPORT);
    faults->recv_hook = NULL;
    assert_int_equal(f->counts.rings_made - made, in);
    assert_int_equal(ring_run(old, new, WEFT_OK), 128 * in);
    assert_int_equal(f->counts.rings_made - made, 2 * in); /* the failed stream's ring went */
    assert_int_equal(f->counts.rings_mapped - mapped, 2 * out);
    /* Two at once: the second cannot take the first's ring. */
    weft_plan_t *plan;
    assert_int_equal(weft_plan_create(old, new, NULL, &plan), WEFT_OK);
    size_t ob = weft_layout_packed_bytes(old, my_id), nb = weft_layout_packed_bytes(new, my_id);
    unsigned char *obuf = malloc(ob), *nb1 = calloc(1, nb), *nb2 = calloc(1, nb);
    gen_fill(old, my_id, obuf);
    two_at_once(plan, new, obuf, nb1, nb2, nb);
    assert_int_equal(f->counts.rings_made - made, 3 * in);
    assert_int_equal(ring_run(old, new, WEFT_OK), 128 * in);
    assert_int_equal(f->counts.rings_made - made, 3 * in); /* one of the two was kept */
    /* A budget of one ring: the second of two at once goes without (by CMA), and the
     * idle ring is freed to make room when another geometry needs one. */
    f->ring_budget = WEFT_RING_HDR + 8 * 800; /* 128 chunks: 8 slots */
    uint64_t got = atomic_load(&faults->counts.ring_chunks);
    two_at_once(plan, new, obuf, nb1, nb2, nb);
    assert_int_equal(atomic_load(&faults->counts.ring_chunks) - got, 128 * in);
    assert_int_equal(f->counts.rings_made - made, 3 * in);
    f->ring_budget = WEFT_RING_HDR + 8 * 1200;
    ctx->cfg.migrate_chunk = 1200; /* 6 rows: 128 chunks, a geometry no ring kept has */
    weft_layout_t *o2, *n2;
    rotation_of(&o2, &n2, 768 * (uint64_t)n, 50, 0);
    assert_int_equal(ring_run(o2, n2, WEFT_OK), 128 * in);
    assert_int_equal(f->counts.rings_made - made, 4 * in);
    weft_layout_free(o2);
    weft_layout_free(n2);
    f->ring_budget = 0;
    free(obuf);
    free(nb1);
    free(nb2);
    weft_plan_free(plan);
    ctx->cfg.migrate_chunk = default_chunk;
    ctx->oversubscribed = over;
    weft_layout_free(old);
    weft_layout_free(new);
}

static void test_disagreement(void **state)
{
    (void)state;
    if (n < 2) {
        skip();
    }
    weft_layout_t *old, *new;
    rotation(&old, &new);
    /* Rank 0 plans to keep everything where it is; the others plan the rotation. */
    weft_status_t st = run(old, me == 0 ? old : new, NULL, false);
    assert_int_equal(st, WEFT_ERR_MISMATCH);
    /* Chunk sizes that differ are a disagreement too. */
    ctx->cfg.migrate_chunk = me == 0 ? 4096 : 8192;
    assert_int_equal(run(old, new, NULL, false), WEFT_ERR_MISMATCH);
    ctx->cfg.migrate_chunk = default_chunk;
    /* The last rank forgets its old buffer: everyone fails, nobody waits for it. */
    st = run(old, new, NULL, me == n - 1);
    assert_int_equal(st, WEFT_ERR_INVALID_ARG);
    if (me == n - 1) {
        assert_non_null(strstr(weft_last_error(ctx), "old buffer is NULL"));
    } else {
        assert_non_null(strstr(weft_last_error(ctx), "another member"));
    }
    assert_int_equal(run(old, new, NULL, false), WEFT_OK);
    weft_layout_free(old);
    weft_layout_free(new);
}

/* With the progress thread, a migration advances while the caller does something else
 * (a step of compute, here a sleep) and has completed at the first test afterwards. */
static void test_background(void **state)
{
    (void)state;
    if (n < 2 || !ctx->cfg.progress_thread) {
        skip();
    }
    weft_layout_t *old, *new;
    rotation(&old, &new);
    weft_plan_t *plan;
    assert_int_equal(weft_plan_create(old, new, NULL, &plan), WEFT_OK);
    size_t ob = weft_layout_packed_bytes(old, my_id), nb = weft_layout_packed_bytes(new, my_id);
    unsigned char *obuf = malloc(ob), *nbuf = calloc(1, nb);
    gen_fill(old, my_id, obuf);
    ctx->cfg.migrate_chunk = 1024; /* many chunks: many steps the thread must take */
    weft_req_t *req = NULL;
    weft_status_t st = weft_imigrate(world, plan, obuf, nbuf, NULL, &req);
    assert_true(st == WEFT_INPROGRESS || st == WEFT_OK);
    /* Every byte must arrive while this thread makes no weft call at all (it only looks
     * at its buffer); a loaded machine may take a while, so the wait is generous. Then
     * the close: weft_test only reads the status of a request the thread keeps up with. */
    struct timespec nap = {0, 50 * 1000 * 1000};
    int naps = 0;
    while (gen_check(new, my_id, nbuf) != 0 && naps++ < 600) {
        nanosleep(&nap, NULL);
    }
    assert_int_equal(gen_check(new, my_id, nbuf), 0);
    while ((st = weft_test(req)) == WEFT_INPROGRESS && naps++ < 1200) {
        nanosleep(&nap, NULL);
    }
    assert_int_equal(st, WEFT_OK); /* done without being waited for */
    weft_req_free(req);
    ctx->cfg.migrate_chunk = default_chunk;
    free(obuf);
    free(nbuf);
    weft_plan_free(plan);
    weft_layout_free(old);
    weft_layout_free(new);
}

/* Local copies large enough to be written with non-temporal stores (at least
 * WEFT__MIG_STREAM_MIN): every member holds a whole tensor and keeps a column shard of
 * it, rows of 255 floats (1020 B runs at offsets that are not multiples of 16) copied out
 * of the whole, 4.6 MiB per member, checked against the fill. */
static void test_large_local(void **state)
{
    (void)state;
    uint64_t shape[2] = {4700, 255 * (uint64_t)n};
    weft_layout_t *old, *new;
    weft_layout_create(&old);
    weft_layout_create(&new);
    weft_layout_add_tensor(old, "w", WEFT_F32, 2, shape, NULL);
    weft_layout_add_tensor(new, "w", WEFT_F32, 2, shape, NULL);
    assert_int_equal(weft_layout_replicate(old, 0, ids, n), WEFT_OK);
    assert_int_equal(weft_layout_shard(new, 0, 1, ids, n), WEFT_OK);
    assert_true(weft_layout_packed_bytes(new, my_id) >= WEFT__MIG_STREAM_MIN);
    assert_int_equal(run(old, new, NULL, false), WEFT_OK);
    weft_layout_free(old);
    weft_layout_free(new);
}

static int after_test(void **state)
{
    (void)state;
    return weft_barrier(world) == WEFT_OK ? 0 : -1;
}

#define MIG_TEST(f) cmocka_unit_test_teardown(f, after_test)

int main(void)
{
    /* Set: run test_cma_refused_by_setting alone. */
    const char *debug_faults = getenv("WEFT_DEBUG_FAULTS");
#ifdef NDEBUG
    if (debug_faults != NULL) {
        printf("test_migrate: builds with NDEBUG ignore WEFT_DEBUG_FAULTS: skipped\n");
        return 77; /* SKIP_RETURN_CODE */
    }
#endif
    setenv("WEFT_TIMEOUT_MS", "60000", 0);
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK ||
        weft_group_rank(world, &me) != WEFT_OK || weft_group_size(world, &n) != WEFT_OK ||
        weft_group_member_id(world, me, &my_id) != WEFT_OK || n > 64) {
        fprintf(stderr, "test_migrate: init: %s\n", weft_last_error(ctx));
        return 1;
    }
    for (int r = 0; r < n; r++) {
        weft_group_member_id(world, r, &ids[r]);
    }
    faults = weft__ctx_faults(ctx);
    default_chunk = ctx->cfg.migrate_chunk;
    default_window = ctx->cfg.migrate_window;
    const struct CMUnitTest tests[] = {
        MIG_TEST(test_random),       MIG_TEST(test_zero_recut), MIG_TEST(test_corruption),
        MIG_TEST(test_disagreement), MIG_TEST(test_resume),     MIG_TEST(test_cma),
        MIG_TEST(test_background),   MIG_TEST(test_large_local), MIG_TEST(test_ring),
        MIG_TEST(test_ring_kept),
    };
    const struct CMUnitTest by_setting[] = {MIG_TEST(test_cma_refused_by_setting)};
    char name[48];
    snprintf(name, sizeof(name), "migrate rank %d of %d", me, n);
    int failed = debug_faults != NULL
                     ? cmocka_run_group_tests_name(name, by_setting, NULL, NULL)
                     : cmocka_run_group_tests_name(name, tests, NULL, NULL);
    weft_finalize(ctx);
    return failed;
}
