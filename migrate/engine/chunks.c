/* Cutting transfers into chunks, and finding a chunk in a packed buffer. */
#include <stdlib.h>

#include "migrate/engine/engine.h"
#include "util/array.h"

static bool push(weft_mig_chunk_t **arr, uint32_t *n, size_t *cap, const weft_mig_chunk_t *c)
{
    if (!weft__array_reserve((void **)arr, cap, (size_t)*n + 1, sizeof(**arr))) {
        return false;
    }
    (*arr)[(*n)++] = *c;
    return true;
}

bool weft__mig_cut(const weft__xfer_t *x, uint32_t xi, size_t chunk, int prio,
                   weft_mig_chunk_t **arr, uint32_t *n, size_t *cap)
{
    int nd = x->ndims;
    /* The outermost dimension d whose rows (everything inside it) fit one chunk. */
    int d = 0;
    size_t row = x->t.bytes / x->t.box.extent[0];
    while (d < nd - 1 && row > chunk) {
        d++;
        row /= x->t.box.extent[d];
    }
    uint64_t rows = row >= chunk ? 1 : chunk / row;
    weft_mig_chunk_t c = {.x = xi, .order = xi, .prio = prio, .box = x->t.box};
    uint64_t idx[WEFT_LAYOUT_MAX_DIMS] = {0}; /* odometer over dimensions < d */
    for (;;) {
        for (int j = 0; j < d; j++) {
            c.box.offset[j] = x->t.box.offset[j] + idx[j];
            c.box.extent[j] = 1;
        }
        uint64_t lo = x->t.box.offset[d], hi = lo + x->t.box.extent[d];
        for (uint64_t at = lo; at < hi; at += rows) {
            c.box.offset[d] = at;
            c.box.extent[d] = hi - at < rows ? hi - at : rows;
            c.bytes = (size_t)c.box.extent[d] * row;
            if (!push(arr, n, cap, &c)) {
                return false;
            }
        }
        int j = d - 1;
        while (j >= 0 && ++idx[j] == x->t.box.extent[j]) {
            idx[j] = 0;
            j--;
        }
        if (j < 0) {
            return true;
        }
    }
}

static int cmp_chunk(const void *pa, const void *pb)
{
    const weft_mig_chunk_t *a = pa, *b = pb;
    if (a->prio != b->prio) {
        return a->prio > b->prio ? -1 : 1;
    }
    if (a->order != b->order) {
        return a->order < b->order ? -1 : 1;
    }
    /* Chunks of one transfer: by position. */
    for (int d = 0; d < WEFT_LAYOUT_MAX_DIMS; d++) {
        if (a->box.offset[d] != b->box.offset[d]) {
            return a->box.offset[d] < b->box.offset[d] ? -1 : 1;
        }
    }
    return 0;
}

void weft__mig_sort(weft_mig_chunk_t *c, uint32_t n)
{
    if (n > 1) {
        qsort(c, n, sizeof(*c), cmp_chunk);
    }
}

bool weft__mig_contiguous(const weft_box_t *region, size_t packed, const weft_box_t *b, int nd,
                          size_t elem, size_t *offset)
{
    int k = 0;
    while (k < nd - 1 && b->extent[k] == 1) {
        k++;
    }
    for (int j = k + 1; j < nd; j++) {
        if (b->extent[j] != region->extent[j]) {
            return false;
        }
    }
    uint64_t idx = 0;
    for (int j = 0; j < nd; j++) {
        idx = idx * region->extent[j] + (b->offset[j] - region->offset[j]);
    }
    *offset = packed + (size_t)idx * elem;
    return true;
}
