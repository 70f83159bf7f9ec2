/*
 * Inside a plan: its transfers with what the engine needs to run them without the
 * layouts (the enclosing regions' boxes and where they sit in the packed buffers).
 */
#ifndef WEFT_MIGRATE_PLAN_H
#define WEFT_MIGRATE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "weft/migrate.h"

typedef struct weft__xfer {
    weft_transfer_t t;
    int ndims;
    size_t elem;
    weft_box_t src_box;  /* the source region, in the old layout */
    size_t src_packed;   /* its offset in the source's buffer src_buf */
    int src_buf;         /* 0: the old packed buffer; 1: weft_migrate_params_t.resume_buf */
    weft_box_t dst_box;  /* the destination region, in the new layout */
    size_t dst_packed;   /* its offset in the destination's buffer dst_buf */
    int dst_buf;         /* 0: the new packed buffer; 1: the second one (weft__mig_ext_t) */
} weft__xfer_t;

struct weft_plan {
    weft__xfer_t *xfers; /* sorted by src, dst, tensor, dst_region, src_region, box */
    size_t nxfers;
    weft__xfer_t *missing; /* what no member of the old layout held (src = -1) */
    size_t nmissing;
    size_t lower_bound;  /* bytes that must move */
    uint64_t digest;
};

/* Compute the transfers of @p plan (plan.c's weft_plan_create does the checks first). */
weft_status_t weft__plan_build(weft_plan_t *plan, const weft_layout_t *old_layout,
                               const weft_layout_t *new_layout, const weft_plan_params_t *p);

#endif
