/*
 * Inside a layout: its tensors, its regions in the order they were added, and for each
 * member (sorted by id) the indices of its regions. Shared by layout.c and the planner.
 */
#ifndef WEFT_MIGRATE_LAYOUT_H
#define WEFT_MIGRATE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "weft/migrate.h"

typedef struct weft__ltensor {
    char name[WEFT_LAYOUT_NAME_MAX + 1];
    weft_dtype_t dtype;
    int ndims;
    uint64_t shape[WEFT_LAYOUT_MAX_DIMS];
    size_t elem; /* bytes per element */
} weft__ltensor_t;

typedef struct weft__lregion {
    int member;
    int tensor;
    int index;            /* among the member's regions */
    weft_box_t box;
    size_t bytes;
    size_t packed_offset; /* in the member's packed buffer */
    /* Where the bytes are, for a source: buffer 0 (the old packed buffer) or 1 (the new
     * buffer of a failed migration, weft_migrate_resume), and the enclosing box held there
     * row-major from space_offset on. For regions added by weft_layout_add_region: 0,
     * the region's own box and packed offset. */
    int buf;
    weft_box_t space;
    size_t space_offset;
} weft__lregion_t;

typedef struct weft__lmember {
    int id;
    int nregions;
    size_t cap;
    int *regions; /* indices into weft_layout::regions, in the member's order */
    size_t packed_bytes;
} weft__lmember_t;

struct weft_layout {
    weft__ltensor_t *tensors;
    int ntensors;
    size_t cap_tensors;
    weft__lregion_t *regions;
    int nregions;
    size_t cap_regions;
    weft__lmember_t *members; /* sorted by id */
    int nmembers;
    size_t cap_members;
};

/* The member with stable id @p id, or NULL. */
const weft__lmember_t *weft__layout_member(const weft_layout_t *l, int id);

/* Whether the two layouts name the same tensors (name, dtype, shape, order); if not,
 * records why with weft__error_noctx and returns WEFT_ERR_INVALID_ARG. */
weft_status_t weft__layout_same_tensors(const weft_layout_t *a, const weft_layout_t *b);

#endif
