/*
 * Shared by the snapshot tests: a toy training state whose every element is a pure
 * function of (tensor, global element index, step), so any member can compute what any
 * region must hold at any step, whatever the layout.
 */
#ifndef WEFT_TEST_SNAP_COMMON_H
#define WEFT_TEST_SNAP_COMMON_H

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

#endif
