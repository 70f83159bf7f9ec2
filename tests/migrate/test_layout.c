/*
 * Layouts: constructors against the rules they state, computed here independently, bad
 * input with the message that names the tensor and region, and the box arithmetic the
 * planner relies on (difference, tiling of flat ranges) checked element by element.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "migrate/layout/box.h"
#include "weft/core.h"
#include "weft/elastic.h"
#include "weft/migrate.h"

static weft_layout_t *one_tensor(const char *name, int nd, const uint64_t *shape)
{
    weft_layout_t *l;
    assert_int_equal(weft_layout_create(&l), WEFT_OK);
    assert_int_equal(weft_layout_add_tensor(l, name, WEFT_F32, nd, shape, NULL), WEFT_OK);
    return l;
}

static void test_shard_rule(void **state)
{
    (void)state;
    for (uint64_t rows = 1; rows <= 20; rows++) {
        for (int n = 1; n <= 7; n++) {
            uint64_t shape[2] = {5, rows};
            weft_layout_t *l = one_tensor("w", 2, shape);
            int members[7] = {9, 3, 4, 0, 12, 6, 1};
            assert_int_equal(weft_layout_shard(l, 0, 1, members, n), WEFT_OK);
            uint64_t per = (rows + (uint64_t)n - 1) / (uint64_t)n, covered = 0;
            for (int i = 0; i < n; i++) {
                uint64_t start = per * (uint64_t)i;
                int nr = weft_layout_num_regions(l, members[i]);
                assert_int_equal(nr, start < rows ? 1 : 0);
                if (nr == 0) {
                    continue;
                }
                weft_box_t b;
                size_t bytes, off;
                assert_int_equal(weft_layout_region(l, members[i], 0, NULL, &b, &bytes, &off),
                                 WEFT_OK);
                assert_int_equal(b.offset[0], 0);
                assert_int_equal(b.extent[0], 5);
                assert_int_equal(b.offset[1], start);
                assert_int_equal(b.extent[1], rows - start < per ? rows - start : per);
                assert_int_equal(off, 0);
                assert_int_equal(bytes, 5 * b.extent[1] * 4);
                covered += b.extent[1];
            }
            assert_int_equal(covered, rows);
            assert_int_equal(weft_layout_check_complete(l), WEFT_OK);
            weft_layout_free(l);
        }
    }
}

/* weft_layout_flat: each member's packed buffer is exactly its flat range. */
static void test_flat_is_packed_range(void **state)
{
    (void)state;
    uint64_t a[3] = {3, 4, 5}, b[1] = {7}, c[2] = {2, 9};
    weft_layout_t *l;
    weft_layout_create(&l);
    weft_layout_add_tensor(l, "a", WEFT_F32, 3, a, NULL);
    weft_layout_add_tensor(l, "b", WEFT_F32, 1, b, NULL);
    weft_layout_add_tensor(l, "c", WEFT_F32, 2, c, NULL);
    int order[3] = {2, 0, 1}; /* concatenation order differs from tensor order */
    uint64_t sizes[3] = {18, 60, 7}, total = 85;
    for (int n = 1; n <= 9; n++) {
        weft_layout_t *f;
        weft_layout_create(&f);
        weft_layout_add_tensor(f, "a", WEFT_F32, 3, a, NULL);
        weft_layout_add_tensor(f, "b", WEFT_F32, 1, b, NULL);
        weft_layout_add_tensor(f, "c", WEFT_F32, 2, c, NULL);
        int members[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
        assert_int_equal(weft_layout_flat(f, order, 3, members, n), WEFT_OK);
        uint64_t per = (total + (uint64_t)n - 1) / (uint64_t)n;
        for (int m = 0; m < n; m++) {
            uint64_t lo = per * (uint64_t)m, hi = lo + per < total ? lo + per : total;
            size_t expect = lo < hi ? (size_t)(hi - lo) * 4 : 0;
            assert_int_equal(weft_layout_packed_bytes(f, m), expect);
            /* Walk its regions: each continues the flat range where the last stopped. */
            uint64_t at = lo;
            for (int k = 0; k < weft_layout_num_regions(f, m); k++) {
                int t;
                weft_box_t bx;
                size_t bytes, off;
                weft_layout_region(f, m, k, &t, &bx, &bytes, &off);
                assert_int_equal(off, (size_t)(at - lo) * 4);
                uint64_t base = 0; /* the tensor's start in the concatenation */
                for (int j = 0; order[j] != t; j++) {
                    base += sizes[j];
                }
                weft_tensor_info_t ti;
                weft_layout_tensor(f, t, &ti);
                uint64_t first = 0;
                for (int d = 0; d < ti.ndims; d++) {
                    first = first * ti.shape[d] + bx.offset[d];
                }
                assert_int_equal(base + first, at);
                at += bytes / 4;
            }
            assert_int_equal(at, hi > lo ? hi : lo);
        }
        assert_int_equal(weft_layout_check_complete(f), WEFT_OK);
        weft_layout_free(f);
    }
    weft_layout_free(l);
}

static void test_bad_input(void **state)
{
    (void)state;
    uint64_t shape[2] = {4, 6}, zero[2] = {4, 0};
    weft_layout_t *l = one_tensor("embed.weight", 2, shape);
    assert_int_equal(weft_layout_add_tensor(l, "embed.weight", WEFT_F32, 2, shape, NULL),
                     WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "already"));
    assert_int_equal(weft_layout_add_tensor(l, "z", WEFT_F32, 2, zero, NULL),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_layout_add_tensor(l, "u", WEFT_DTYPE_USER, 2, shape, NULL),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_layout_add_tensor(l, "", WEFT_F32, 2, shape, NULL),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_layout_add_tensor(l, "n", WEFT_F32, 0, shape, NULL),
                     WEFT_ERR_INVALID_ARG);

    weft_box_t out = {.offset = {2, 4}, .extent = {2, 3}}; /* columns 4..7 of 6 */
    assert_int_equal(weft_layout_add_region(l, 0, 0, &out), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "embed.weight"));
    assert_non_null(strstr(weft_last_error(NULL), "[2:4, 4:7]"));
    assert_non_null(strstr(weft_last_error(NULL), "outside"));

    weft_box_t a = {.offset = {0, 0}, .extent = {2, 6}}, b = {.offset = {1, 2}, .extent = {2, 2}};
    assert_int_equal(weft_layout_add_region(l, 0, 0, &a), WEFT_OK);
    assert_int_equal(weft_layout_add_region(l, 0, 0, &b), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "overlaps"));
    assert_int_equal(weft_layout_add_region(l, 1, 0, &b), WEFT_OK); /* another member may */
    assert_int_equal(weft_layout_add_region(l, -1, 0, &b), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_layout_add_region(l, 0, 1, &b), WEFT_ERR_INVALID_ARG);

    /* Rows 3 and the rest of row 2 are held by nobody. */
    assert_int_equal(weft_layout_check_complete(l), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "embed.weight"));
    assert_non_null(strstr(weft_last_error(NULL), "held by no member"));

    weft_layout_t *full = one_tensor("embed.weight", 2, shape);
    weft_layout_whole(full, 0, 3);
    weft_plan_t *p = NULL;
    assert_int_equal(weft_plan_create(l, full, NULL, &p), WEFT_ERR_INVALID_ARG);
    assert_null(p);
    assert_non_null(strstr(weft_last_error(NULL), "old layout"));

    uint64_t other[2] = {4, 7};
    weft_layout_t *diff = one_tensor("embed.weight", 2, other);
    weft_layout_whole(diff, 0, 0);
    assert_int_equal(weft_plan_create(full, diff, NULL, &p), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "embed.weight"));

    int dup[2] = {1, 1};
    assert_int_equal(weft_layout_shard(full, 0, 0, dup, 2), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_layout_shard(full, 0, 2, dup, 1), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_layout_replicate(full, 0, dup, 0), WEFT_ERR_INVALID_ARG);
    weft_layout_free(diff);
    weft_layout_free(full);
    weft_layout_free(l);
}

/* a \ b, checked on every element of a small grid. */
/* weft_box_copy refuses boxes whose byte count or end overflows, rather than copying
 * with wrapped strides: a box whose volume times the element size wraps to a small
 * number, and one whose offset plus extent wraps, both inside the other box by the
 * wrapped arithmetic. */
static void test_box_copy_overflow(void **state)
{
    (void)state;
    float src[4] = {1, 2, 3, 4}, dst[4] = {0};
    /* Rows of 2^62 + 1 floats: a row's stride, 2^64 + 4 bytes, wraps to 4, so row 1
     * would be read from src + 4 bytes (wrong data, or far outside src). */
    weft_box_t huge = {.offset = {0, 0}, .extent = {2, (UINT64_C(1) << 62) + 1}};
    weft_box_t row1 = {.offset = {1, 0}, .extent = {1, 1}};
    assert_int_equal(weft_box_copy(dst, &row1, src, &huge, &row1, 2, sizeof(float)),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_box_copy(dst, &huge, src, &row1, &row1, 2, sizeof(float)),
                     WEFT_ERR_INVALID_ARG);
    weft_box_t one = {.offset = {0, 0}, .extent = {1, 4}};
    /* An end past 2^64: offset + extent wraps below the offset. */
    weft_box_t wrap = {.offset = {UINT64_MAX - 1, 0}, .extent = {4, 1}};
    weft_box_t inner = {.offset = {UINT64_MAX - 1, 0}, .extent = {1, 1}};
    assert_int_equal(weft_box_copy(dst, &wrap, src, &wrap, &inner, 2, sizeof(float)),
                     WEFT_ERR_INVALID_ARG);
    for (int i = 0; i < 4; i++) {
        assert_true(dst[i] == 0.0f); /* nothing written */
    }
    /* The same call on sane boxes copies. */
    assert_int_equal(weft_box_copy(dst, &one, src, &one, &one, 2, sizeof(float)), WEFT_OK);
    assert_memory_equal(dst, src, sizeof(src));
}

static void test_box_subtract(void **state)
{
    (void)state;
    uint64_t seed = 12345;
    for (int trial = 0; trial < 2000; trial++) {
        weft_box_t a, b, out[2 * WEFT_LAYOUT_MAX_DIMS];
        int nd = 1 + trial % 3;
        for (int d = 0; d < nd; d++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            a.offset[d] = (seed >> 33) % 5;
            a.extent[d] = 1 + (seed >> 40) % 5;
            b.offset[d] = (seed >> 45) % 7;
            b.extent[d] = 1 + (seed >> 50) % 5;
        }
        int n = weft__box_subtract(&a, &b, nd, out);
        assert_true(n <= 2 * nd);
        for (uint64_t x = 0; x < 12; x++) {
            for (uint64_t y = 0; y < (nd > 1 ? 12u : 1u); y++) {
                for (uint64_t z = 0; z < (nd > 2 ? 12u : 1u); z++) {
                    uint64_t c[3] = {x, y, z};
                    bool in_a = true, in_b = true;
                    for (int d = 0; d < nd; d++) {
                        in_a &= c[d] >= a.offset[d] && c[d] < a.offset[d] + a.extent[d];
                        in_b &= c[d] >= b.offset[d] && c[d] < b.offset[d] + b.extent[d];
                    }
                    int hits = 0;
                    for (int k = 0; k < n; k++) {
                        bool in = true;
                        for (int d = 0; d < nd; d++) {
                            in &= c[d] >= out[k].offset[d] &&
                                  c[d] < out[k].offset[d] + out[k].extent[d];
                        }
                        hits += in;
                    }
                    assert_int_equal(hits, in_a && !in_b ? 1 : 0);
                }
            }
        }
    }
}

/* Tiling [lo, hi) of a 3-d tensor: boxes in element order, covering exactly the range. */
static void test_tile_range(void **state)
{
    (void)state;
    const uint64_t shape[3] = {3, 4, 5};
    for (uint64_t lo = 0; lo <= 60; lo++) {
        for (uint64_t hi = lo; hi <= 60; hi++) {
            weft_box_t out[6];
            int n = weft__box_tile_range(shape, 3, lo, hi, out);
            assert_true(n <= 5);
            uint64_t at = lo;
            for (int k = 0; k < n; k++) {
                uint64_t first = (out[k].offset[0] * 4 + out[k].offset[1]) * 5 + out[k].offset[2];
                assert_int_equal(first, at);
                /* Row-major contiguous: the box's elements are consecutive. */
                assert_true(out[k].extent[2] == 5 || (out[k].extent[1] == 1 && out[k].extent[0] == 1));
                assert_true(out[k].extent[1] == 4 || out[k].extent[0] == 1);
                at += weft__box_volume(&out[k], 3);
            }
            assert_int_equal(at, hi);
        }
    }
}

/* Batch shares: the global batch exactly, contiguous, even within one sample. */
static void test_batch_share(void **state)
{
    (void)state;
    for (uint64_t global = 1; global <= 70; global++) {
        for (int width = 1; width <= 9 && (uint64_t)width <= global; width++) {
            uint64_t next = 0, lo = UINT64_MAX, hi = 0;
            for (int r = 0; r < width; r++) {
                weft_batch_share_t b = {.size = sizeof(b)};
                uint64_t micro = (global + (uint64_t)r) % 5; /* 0: one micro-batch */
                assert_int_equal(weft_batch_share(global, width, r, micro, &b), WEFT_OK);
                assert_int_equal(b.first, next);
                next += b.samples;
                lo = b.samples < lo ? b.samples : lo;
                hi = b.samples > hi ? b.samples : hi;
                assert_true(b.micro_size >= 1 && (micro == 0 || b.micro_size <= micro));
                assert_int_equal((b.micro_batches - 1) * b.micro_size + b.last_micro, b.samples);
                assert_true(b.last_micro >= 1 && b.last_micro <= b.micro_size);
                assert_true(b.grad_scale == 1.0 / (double)global);
            }
            assert_int_equal(next, global);
            assert_true(hi - lo <= 1);
        }
    }
    weft_batch_share_t b = {.size = sizeof(b)};
    assert_int_equal(weft_batch_share(3, 4, 0, 0, &b), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_batch_share(8, 4, 4, 0, &b), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_batch_share(8, 0, 0, 0, &b), WEFT_ERR_INVALID_ARG);
    /* The caller's size: zero or short is refused, untouched; a larger one is filled as
     * far as this library knows, zeros beyond, its size kept. */
    assert_int_equal(weft_batch_share(8, 4, 0, 0, NULL), WEFT_ERR_INVALID_ARG);
    b.size = 0;
    assert_int_equal(weft_batch_share(8, 4, 0, 0, &b), WEFT_ERR_INVALID_ARG);
    b.size = offsetof(weft_batch_share_t, grad_scale);
    assert_int_equal(weft_batch_share(8, 4, 0, 0, &b), WEFT_ERR_INVALID_ARG);
    struct {
        weft_batch_share_t b;
        uint64_t later;
    } big;
    memset(&big, 0xff, sizeof(big));
    big.b.size = sizeof(big);
    assert_int_equal(weft_batch_share(8, 4, 1, 0, &big.b), WEFT_OK);
    assert_int_equal(big.b.size, sizeof(big));
    assert_int_equal(big.b.first, 2);
    assert_int_equal(big.b.samples, 2);
    assert_int_equal(big.later, 0);
}

/* How many of @p members hold each element of tensor @p t (row-major, up to 3 dims). */
static void coverage(const weft_layout_t *l, int t, const int *members, int n, int *count,
                     size_t len)
{
    weft_tensor_info_t ti;
    weft_layout_tensor(l, t, &ti);
    memset(count, 0, len * sizeof(int));
    for (int m = 0; m < n; m++) {
        for (int k = 0; k < weft_layout_num_regions(l, members[m]); k++) {
            int tt;
            weft_box_t b;
            weft_layout_region(l, members[m], k, &tt, &b, NULL, NULL);
            if (tt != t) {
                continue;
            }
            uint64_t sh[3] = {1, 1, 1}, off[3] = {0, 0, 0}, ext[3] = {1, 1, 1};
            for (int d = 0; d < ti.ndims; d++) {
                sh[3 - ti.ndims + d] = ti.shape[d];
                off[3 - ti.ndims + d] = b.offset[d];
                ext[3 - ti.ndims + d] = b.extent[d];
            }
            for (uint64_t i = off[0]; i < off[0] + ext[0]; i++) {
                for (uint64_t j = off[1]; j < off[1] + ext[1]; j++) {
                    for (uint64_t q = off[2]; q < off[2] + ext[2]; q++) {
                        size_t e = (size_t)((i * sh[1] + j) * sh[2] + q);
                        assert_true(e < len);
                        count[e]++;
                    }
                }
            }
        }
    }
}

/* weft_layout_absorb: members keep their regions first, at their packed offsets; every
 * element is held after it as often as before by the members who stay, and once more
 * where only leavers held it; only the leavers' bytes move. */
static void test_absorb(void **state)
{
    (void)state;
    uint64_t a[2] = {10, 3}, b[1] = {17}, c[2] = {8, 6};
    weft_layout_t *l;
    weft_layout_create(&l);
    weft_layout_add_tensor(l, "a", WEFT_F32, 2, a, NULL);
    weft_layout_add_tensor(l, "b", WEFT_F32, 1, b, NULL);
    weft_layout_add_tensor(l, "c", WEFT_F32, 2, c, NULL);
    int all[5] = {10, 11, 12, 13, 14}, order[2] = {0, 1};
    /* a and b flat over 10..13; c column-sharded over 11 and 12, and rows 2..5 of its
     * columns 0..2 held by 13 as well (replicated with 11). */
    assert_int_equal(weft_layout_flat(l, order, 2, all, 4), WEFT_OK);
    weft_box_t left = {{0, 0}, {8, 3}}, right = {{0, 3}, {8, 3}}, mid = {{2, 0}, {4, 3}};
    assert_int_equal(weft_layout_add_region(l, 11, 2, &left), WEFT_OK);
    assert_int_equal(weft_layout_add_region(l, 12, 2, &right), WEFT_OK);
    assert_int_equal(weft_layout_add_region(l, 13, 2, &mid), WEFT_OK);
    const struct {
        int members[5], n;
    } cases[] = {
        {{10, 11, 13}, 3},     /* 12 leaves: its flat range and c's right half */
        {{10, 12}, 2},         /* 11 and 13 leave: c's middle rows were held by both */
        {{10, 11, 12, 13}, 4}, /* nobody leaves: the layout is kept */
        {{13, 14, 10}, 3},     /* 11 and 12 leave, 14 is new, the order is not by id */
    };
    int before[80], after[80], leavers[80];
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const int *m = cases[ci].members, n = cases[ci].n;
        weft_layout_t *x = NULL, *kept = NULL;
        assert_int_equal(weft_layout_absorb(l, m, n, &x), WEFT_OK);
        assert_int_equal(weft_layout_check_complete(x), WEFT_OK);
        for (int i = 0; i < n; i++) { /* its own regions first, where they were */
            int k0 = weft_layout_num_regions(l, m[i]);
            assert_true(weft_layout_num_regions(x, m[i]) >= k0);
            for (int k = 0; k < k0; k++) {
                int t0, t1;
                weft_box_t b0, b1;
                size_t off0, off1;
                weft_layout_region(l, m[i], k, &t0, &b0, NULL, &off0);
                weft_layout_region(x, m[i], k, &t1, &b1, NULL, &off1);
                assert_int_equal(t0, t1);
                assert_memory_equal(&b0, &b1, sizeof(b0));
                assert_int_equal(off0, off1);
            }
        }
        int gone[5], ng = 0; /* the reference: the leavers by hand */
        for (int i = 0; i < 4; i++) {
            bool stays = false;
            for (int j = 0; j < n; j++) {
                stays |= m[j] == all[i];
            }
            if (!stays) {
                gone[ng++] = all[i];
            }
        }
        size_t moved = 0;
        for (int t = 0; t < 3; t++) {
            weft_tensor_info_t ti;
            weft_layout_tensor(l, t, &ti);
            size_t len = (size_t)ti.shape[0] * (ti.ndims > 1 ? (size_t)ti.shape[1] : 1);
            coverage(l, t, m, n, before, len);
            coverage(x, t, m, n, after, len);
            coverage(l, t, gone, ng, leavers, len);
            for (size_t e = 0; e < len; e++) {
                int expect = before[e] + (before[e] == 0 && leavers[e] > 0);
                assert_int_equal(after[e], expect);
                moved += before[e] == 0 && leavers[e] > 0 ? 4 : 0;
            }
        }
        /* Only the leavers' parts move: the plan's lower bound is exactly their bytes. */
        weft_plan_params_t pp = {.size = sizeof(pp), .allow_missing = 1};
        weft_plan_t *p = NULL;
        weft_plan_stats_t ps = {.size = sizeof(ps)};
        assert_int_equal(weft_layout_keep(l, all, 4, &kept), WEFT_OK);
        assert_int_equal(weft_plan_create(kept, x, &pp, &p), WEFT_OK);
        assert_int_equal(weft_plan_stats(p, -1, &ps), WEFT_OK);
        assert_int_equal(ps.bytes_lower_bound, moved);
        assert_int_equal(ps.bytes_missing, 0);
        weft_plan_free(p);
        weft_layout_free(kept);
        weft_layout_free(x);
    }
    weft_layout_t *x = NULL;
    int twice[2] = {10, 10};
    assert_int_equal(weft_layout_absorb(l, twice, 2, &x), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "twice"));
    assert_int_equal(weft_layout_absorb(l, all, 0, &x), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_layout_absorb(NULL, all, 1, &x), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_layout_absorb(l, all, 1, NULL), WEFT_ERR_INVALID_ARG);
    assert_null(x);
    weft_layout_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_rule),
        cmocka_unit_test(test_box_copy_overflow),
        cmocka_unit_test(test_flat_is_packed_range),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_box_subtract),
        cmocka_unit_test(test_tile_range),
        cmocka_unit_test(test_batch_share),
        cmocka_unit_test(test_absorb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
