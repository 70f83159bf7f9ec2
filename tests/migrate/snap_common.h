/*
 * Shared by the snapshot tests: a toy training state whose every element is a pure
 * function of (tensor, global element index, step), so any member can compute what any
 * region must hold at any step, whatever the layout.
 */
#ifndef WEFT_TEST_SNAP_COMMON_H
#define WEFT_TEST_SNAP_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "weft/weft.h"

/* One training step of element @p i of tensor @p t: deterministic, bitwise reproducible,
 * different at every step. */
static inline double snap_update(int t, uint64_t i, uint64_t step, double x)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(step * 40503u) ^ (uint32_t)t;
    return x * 0.75 + (double)(h % 1000) * 1e-3;
}

static inline double snap_initial(int t, uint64_t i)
{
    return (double)((i * 7 + (uint64_t)t * 13) % 101) * 0.25;
}

/* Apply @p fn(t, global index, arg, element pointer) to every element @p member holds
 * in @p l, its packed buffer being @p buf. Tensors are F64 or F32. */
typedef void (*snap_elem_fn)(int t, uint64_t i, void *elem, weft_dtype_t dt, void *arg);
static inline void snap_each(const weft_layout_t *l, int member, void *buf, snap_elem_fn fn,
                             void *arg)
{
    for (int k = 0; k < weft_layout_num_regions(l, member); k++) {
        int t;
        weft_box_t b;
        size_t off;
        weft_layout_region(l, member, k, &t, &b, NULL, &off);
        weft_tensor_info_t ti;
        weft_layout_tensor(l, t, &ti);
        size_t elem = weft_dtype_size(ti.dtype);
        uint64_t idx[WEFT_LAYOUT_MAX_DIMS] = {0}, n = 1;
        for (int d = 0; d < ti.ndims; d++) {
            n *= b.extent[d];
        }
        for (uint64_t e = 0; e < n; e++) {
            uint64_t g = 0;
            for (int d = 0; d < ti.ndims; d++) {
                g = g * ti.shape[d] + b.offset[d] + idx[d];
            }
            fn(t, g, (char *)buf + off + e * elem, ti.dtype, arg);
            for (int d = ti.ndims - 1; d >= 0 && ++idx[d] == b.extent[d]; d--) {
                idx[d] = 0;
            }
        }
    }
}

static inline double snap_load(const void *p, weft_dtype_t dt)
{
    if (dt == WEFT_F32) {
        float f;
        memcpy(&f, p, sizeof(f));
        return f;
    }
    double d;
    memcpy(&d, p, sizeof(d));
    return d;
}

static inline void snap_store(void *p, weft_dtype_t dt, double v)
{
    if (dt == WEFT_F32) {
        float f = (float)v;
        memcpy(p, &f, sizeof(f));
    } else {
        memcpy(p, &v, sizeof(v));
    }
}

/* The bytes element @p i of tensor @p t of type @p dt holds after @p steps steps (each
 * step rounds to the type, as the training loop does), written to @p out. */
static inline void snap_reference(int t, uint64_t i, weft_dtype_t dt, uint64_t steps, void *out)
{
    snap_store(out, dt, snap_initial(t, i));
    for (uint64_t s = 1; s <= steps; s++) {
        snap_store(out, dt, snap_update(t, i, s, snap_load(out, dt)));
    }
}

/* snap_each callback: the state after *@p arg (uint64_t) steps. */
static inline void snap_set_elem(int t, uint64_t i, void *elem, weft_dtype_t dt, void *arg)
{
    snap_reference(t, i, dt, *(uint64_t *)arg, elem);
}

/* The toy model of the snapshot tests: tensor 0 "a", F32 [@p rows, @p cols], and tensor 1
 * "b", F64 [@p len], cut flat over @p members[0..k) (weft_layout_flat). NULL when it
 * cannot be made. */
static inline weft_layout_t *snap_model(const int *members, int k, uint64_t rows, uint64_t cols,
                                        uint64_t len)
{
    uint64_t a[2] = {rows, cols}, b[1] = {len};
    int t[2] = {0, 1};
    weft_layout_t *l;
    if (weft_layout_create(&l) != WEFT_OK) {
        return NULL;
    }
    if (weft_layout_add_tensor(l, "a", WEFT_F32, 2, a, NULL) != WEFT_OK ||
        weft_layout_add_tensor(l, "b", WEFT_F64, 1, b, NULL) != WEFT_OK ||
        weft_layout_flat(l, t, 2, members, k) != WEFT_OK) {
        weft_layout_free(l);
        return NULL;
    }
    return l;
}

/* snap_each callbacks: the initial value; one training step (@p arg: the step number). */
static inline void snap_init_elem(int t, uint64_t i, void *elem, weft_dtype_t dt, void *arg)
{
    (void)arg;
    snap_store(elem, dt, snap_initial(t, i));
}

static inline void snap_step_elem(int t, uint64_t i, void *elem, weft_dtype_t dt, void *arg)
{
    snap_store(elem, dt, snap_update(t, i, *(uint64_t *)arg, snap_load(elem, dt)));
}

/* The blob the snapshot fault tests store with each step: the step, and a seed that
 * stands for RNG state (it must come back with the step). */
typedef struct snap_blob {
    uint64_t step;
    uint64_t seed;
} snap_blob_t;

/* One training step on member @p id's shard (@p buf, its packed buffer of @p l), then the
 * loss allreduce, which fails once a member is gone. */
static inline weft_status_t snap_train_step(weft_group_t *g, const weft_layout_t *l, int id,
                                            void *buf, uint64_t step)
{
    snap_each(l, id, buf, snap_step_elem, &step);
    double loss = 1.0, sum = 0;
    return weft_allreduce(g, &loss, &sum, 1, WEFT_F64, WEFT_SUM);
}

/* The snapshot of @p step of @p buf, with the blob {step, step * 1000003}, waited for. */
static inline weft_status_t snap_take(weft_snapshot_t *s, uint64_t step, const void *buf)
{
    snap_blob_t b = {step, step * 1000003u};
    weft_req_t *req = NULL;
    weft_status_t st = weft_snapshot_start(s, step, buf, &b, sizeof(b), &req);
    if (st == WEFT_INPROGRESS) {
        st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
    }
    weft_req_free(req);
    return st;
}

typedef struct snap_check {
    uint64_t steps;
    size_t wrong;
} snap_check_t;

static inline void snap_check_elem(int t, uint64_t i, void *elem, weft_dtype_t dt, void *arg)
{
    snap_check_t *c = arg;
    uint64_t want[1];
    snap_reference(t, i, dt, c->steps, want);
    c->wrong += memcmp(elem, want, weft_dtype_size(dt)) != 0;
}

/* Elements of member @p id's packed buffer of @p l that differ, bit for bit, from the
 * state after @p steps steps without a failure. */
static inline size_t snap_count_wrong(const weft_layout_t *l, int id, void *buf, uint64_t steps)
{
    snap_check_t c = {steps, 0};
    snap_each(l, id, buf, snap_check_elem, &c);
    return c.wrong;
}

#endif
