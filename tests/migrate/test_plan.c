/*
 * Plans on random layouts, checked element by element against a brute-force reference:
 * every element a member holds in the new layout arrives exactly once, from a member that
 * held it; what it held already is a local copy; the bytes that cross members equal the
 * lower bound; plans are deterministic; senders are balanced when every holder holds all.
 * Each plan is also executed in this process (all members' packed buffers side by side)
 * and the new buffers compared with the values the tensors were filled with.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "layout_gen.h"
#include "migrate/layout/box.h"
#include "weft/migrate.h"

#define MAXM 16 /* member ids are below this */

#define rnd gen_rnd
#define rnd_in gen_in

/* Random member ids, distinct, not contiguous. */
static int pick_members(int *ids, int n)
{
    int k = 0;
    while (k < n) {
        int id = rnd_in(0, MAXM - 1);
        bool dup = false;
        for (int i = 0; i < k; i++) {
            dup |= ids[i] == id;
        }
        if (!dup) {
            ids[k++] = id;
        }
    }
    return n;
}

static const int pool[MAXM] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* Which region of @p member's (for tensor t) contains @p c, or -1. */
static int region_of(const weft_layout_t *l, int member, int t, int nd, const uint64_t *c)
{
    for (int k = 0; k < weft_layout_num_regions(l, member); k++) {
        int tt;
        weft_box_t b;
        weft_layout_region(l, member, k, &tt, &b, NULL, NULL);
        if (tt != t) {
            continue;
        }
        bool in = true;
        for (int d = 0; d < nd; d++) {
            in &= c[d] >= b.offset[d] && c[d] < b.offset[d] + b.extent[d];
        }
        if (in) {
            return k;
        }
    }
    return -1;
}

static bool box_has(const weft_box_t *b, int nd, const uint64_t *c)
{
    for (int d = 0; d < nd; d++) {
        if (c[d] < b->offset[d] || c[d] >= b->offset[d] + b->extent[d]) {
            return false;
        }
    }
    return true;
}

/* The brute-force check of one plan. */
static void check_plan(const weft_layout_t *old, const weft_layout_t *new, const weft_plan_t *p)
{
    size_t nx = weft_plan_num_transfers(p), lower = 0;
    weft_transfer_t *xs = calloc(nx, sizeof(*xs));
    for (size_t i = 0; i < nx; i++) {
        assert_int_equal(weft_plan_transfer(p, i, &xs[i]), WEFT_OK);
    }
    for (int t = 0; t < weft_layout_num_tensors(new); t++) {
        weft_tensor_info_t ti;
        weft_layout_tensor(new, t, &ti);
        size_t elem = weft_dtype_size(ti.dtype);
        uint64_t total = ti.bytes / elem;
        for (uint64_t e = 0; e < total; e++) {
            uint64_t c[WEFT_LAYOUT_MAX_DIMS], r = e;
            for (int d = ti.ndims - 1; d >= 0; d--) {
                c[d] = r % ti.shape[d];
                r /= ti.shape[d];
            }
            for (int m = 0; m < MAXM; m++) {
                int nk = region_of(new, m, t, ti.ndims, c);
                int ok = region_of(old, m, t, ti.ndims, c);
                if (nk >= 0 && ok < 0) {
                    lower += elem;
                }
                int covers = 0, missing = 0;
                for (size_t i = 0; i < weft_plan_num_missing(p); i++) {
                    weft_transfer_t mt;
                    weft_plan_missing(p, i, &mt);
                    if (mt.dst == m && mt.tensor == t && box_has(&mt.box, ti.ndims, c)) {
                        missing++;
                        assert_int_equal(mt.dst_region, nk);
                    }
                }
                bool held = false;
                for (int h = 0; h < MAXM; h++) {
                    held |= region_of(old, h, t, ti.ndims, c) >= 0;
                }
                assert_int_equal(missing, nk >= 0 && !held ? 1 : 0);
                if (missing) {
                    lower -= elem; /* cannot move: not part of the bound */
                }
                for (size_t i = 0; i < nx; i++) {
                    if (xs[i].dst != m || xs[i].tensor != t || !box_has(&xs[i].box, ti.ndims, c)) {
                        continue;
                    }
                    covers++;
                    assert_int_equal(xs[i].dst_region, nk);
                    /* The source held it, in the region the transfer names. */
                    assert_int_equal(region_of(old, xs[i].src, t, ti.ndims, c), xs[i].src_region);
                    if (ok >= 0) {
                        assert_int_equal(xs[i].src, m); /* held already: a local copy */
                    }
                }
                assert_int_equal(covers + missing, nk >= 0 ? 1 : 0);
            }
        }
    }
    weft_plan_stats_t all = {.size = sizeof(all)};
    assert_int_equal(weft_plan_stats(p, -1, &all), WEFT_OK);
    assert_int_equal(all.bytes_lower_bound, lower);
    assert_int_equal(all.bytes_in, lower);
    assert_int_equal(all.bytes_out, lower);
    /* A size that is zero or short is refused; the struct is left as it was. */
    weft_plan_stats_t bad = {.size = 0, .bytes_in = 7};
    assert_int_equal(weft_plan_stats(p, -1, &bad), WEFT_ERR_INVALID_ARG);
    bad.size = offsetof(weft_plan_stats_t, bytes_missing);
    assert_int_equal(weft_plan_stats(p, -1, &bad), WEFT_ERR_INVALID_ARG);
    assert_int_equal(bad.bytes_in, 7);
    free(xs);
}

/* Run the plan in this process and compare every new buffer with the fill values. */
static void execute_plan(const weft_layout_t *old, const weft_layout_t *new, const weft_plan_t *p)
{
    unsigned char *ob[MAXM] = {0}, *nb[MAXM] = {0};
    for (int m = 0; m < MAXM; m++) {
        ob[m] = calloc(1, weft_layout_packed_bytes(old, m) + 1);
        nb[m] = calloc(1, weft_layout_packed_bytes(new, m) + 1);
        gen_fill(old, m, ob[m]);
    }
    for (size_t i = 0; i < weft_plan_num_transfers(p); i++) {
        weft_transfer_t x;
        weft_plan_transfer(p, i, &x);
        weft_tensor_info_t ti;
        weft_layout_tensor(old, x.tensor, &ti);
        weft_box_t sb, db;
        size_t soff, doff;
        weft_layout_region(old, x.src, x.src_region, NULL, &sb, NULL, &soff);
        weft_layout_region(new, x.dst, x.dst_region, NULL, &db, NULL, &doff);
        weft__box_copy(nb[x.dst] + doff, &db, ob[x.src] + soff, &sb, &x.box, ti.ndims,
                       weft_dtype_size(ti.dtype));
    }
    for (int m = 0; m < MAXM; m++) {
        assert_int_equal(gen_check(new, m, nb[m]), 0);
        free(ob[m]);
        free(nb[m]);
    }
}

static void test_random_plans(void **state)
{
    (void)state;
    for (int trial = 0; trial < 400; trial++) {
        gen_shape_t s;
        gen_shape(&s, 9);
        weft_layout_t *old = gen_layout(&s, pool, MAXM), *new = gen_layout(&s, pool, MAXM);
        weft_plan_params_t pp = {.size = sizeof(pp), .balance_bytes = (size_t)rnd_in(1, 64)};
        weft_plan_t *p, *again;
        assert_int_equal(weft_plan_create(old, new, &pp, &p), WEFT_OK);
        check_plan(old, new, p);
        execute_plan(old, new, p);
        /* Deterministic: the same layouts give the same plan. */
        assert_int_equal(weft_plan_create(old, new, &pp, &again), WEFT_OK);
        assert_int_equal(weft_plan_digest(p), weft_plan_digest(again));
        assert_int_equal(weft_plan_num_transfers(p), weft_plan_num_transfers(again));
        weft_plan_free(again);
        weft_plan_free(p);
        weft_layout_free(old);
        weft_layout_free(new);
    }
}

/* Survivors of random layouts: what only the others held is listed, nothing else. */
static void test_missing(void **state)
{
    (void)state;
    for (int trial = 0; trial < 200; trial++) {
        gen_shape_t s;
        gen_shape(&s, 7);
        weft_layout_t *old = gen_layout(&s, pool, MAXM), *new = gen_layout(&s, pool, MAXM);
        int alive[MAXM], na = 0;
        for (int m = 0; m < MAXM; m++) {
            if (rnd() % 3 != 0) {
                alive[na++] = m;
            }
        }
        weft_layout_t *kept;
        assert_int_equal(weft_layout_keep(old, alive, na, &kept), WEFT_OK);
        for (int k = 0; k < na; k++) { /* packed buffers unchanged */
            assert_int_equal(weft_layout_packed_bytes(kept, alive[k]),
                             weft_layout_packed_bytes(old, alive[k]));
        }
        weft_plan_params_t pp = {.size = sizeof(pp), .allow_missing = 1};
        weft_plan_t *p;
        assert_int_equal(weft_plan_create(kept, new, &pp, &p), WEFT_OK);
        check_plan(kept, new, p);
        if (weft_plan_num_missing(p) > 0) { /* refused without allow_missing */
            weft_plan_t *q = NULL;
            assert_int_equal(weft_plan_create(kept, new, NULL, &q), WEFT_ERR_INVALID_ARG);
            assert_non_null(strstr(weft_last_error(NULL), "held by no member"));
        }
        weft_plan_free(p);
        weft_layout_free(kept);
        weft_layout_free(old);
        weft_layout_free(new);
    }
}

/* Every holder holds everything (replication): the most any member sends is within one
 * slab of an even share. */
static void test_balance_replicated(void **state)
{
    (void)state;
    for (int trial = 0; trial < 100; trial++) {
        int k = rnd_in(1, 4), nnew = rnd_in(1, 6), ids[MAXM];
        pick_members(ids, k + nnew);
        uint64_t shape[2] = {(uint64_t)rnd_in(1, 64), (uint64_t)rnd_in(1, 64)};
        weft_layout_t *old, *new;
        weft_layout_create(&old);
        weft_layout_create(&new);
        weft_layout_add_tensor(old, "w", WEFT_F32, 2, shape, NULL);
        weft_layout_add_tensor(new, "w", WEFT_F32, 2, shape, NULL);
        assert_int_equal(weft_layout_replicate(old, 0, ids, k), WEFT_OK);
        assert_int_equal(weft_layout_shard(new, 0, rnd_in(0, 1), ids + k, nnew), WEFT_OK);
        size_t slab = (size_t)rnd_in(4, 512);
        weft_plan_params_t pp = {.size = sizeof(pp), .balance_bytes = slab};
        weft_plan_t *p;
        assert_int_equal(weft_plan_create(old, new, &pp, &p), WEFT_OK);
        weft_plan_stats_t all = {.size = sizeof(all)};
        weft_plan_stats(p, -1, &all);
        size_t row = shape[1] * 4; /* a slab is at least one row of the outer dimension */
        size_t piece = slab > row ? slab : row;
        assert_true(all.max_bytes_out <= (all.bytes_out + (size_t)k - 1) / (size_t)k + piece);
        weft_plan_free(p);
        weft_layout_free(old);
        weft_layout_free(new);
    }
}

/* A same-host holder is chosen over a less loaded one on another host. */
static void test_same_host_preferred(void **state)
{
    (void)state;
    uint64_t shape[1] = {1000};
    weft_layout_t *old, *new;
    weft_layout_create(&old);
    weft_layout_create(&new);
    weft_layout_add_tensor(old, "w", WEFT_F32, 1, shape, NULL);
    weft_layout_add_tensor(new, "w", WEFT_F32, 1, shape, NULL);
    int holders[2] = {0, 1};
    weft_layout_replicate(old, 0, holders, 2);
    weft_layout_whole(new, 0, 3);
    int host_of[4] = {0, 1, 0, 1}; /* member 3 shares host 1 with member 1 */
    weft_plan_params_t pp = {.size = sizeof(pp), .host_of = host_of, .num_members = 4,
                             .balance_bytes = 400};
    weft_plan_t *p;
    assert_int_equal(weft_plan_create(old, new, &pp, &p), WEFT_OK);
    for (size_t i = 0; i < weft_plan_num_transfers(p); i++) {
        weft_transfer_t t;
        weft_plan_transfer(p, i, &t);
        assert_int_equal(t.src, 1);
    }
    weft_plan_free(p);
    weft_plan_free(NULL);
    weft_layout_free(old);
    weft_layout_free(new);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_plans),
        cmocka_unit_test(test_missing),
        cmocka_unit_test(test_balance_replicated),
        cmocka_unit_test(test_same_host_preferred),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
