/* Reading a layout back: tensors, regions, packed buffers, and whether it is complete. */
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "migrate/layout/box.h"
#include "migrate/layout/layout.h"
#include "util/array.h"

int weft_layout_num_tensors(const weft_layout_t *l)
{
    return l != NULL ? l->ntensors : 0;
}

weft_status_t weft_layout_tensor(const weft_layout_t *l, int index, weft_tensor_info_t *info)
{
    if (l == NULL || info == NULL || index < 0 || index >= l->ntensors) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_layout_tensor: no tensor %d", index);
    }
    const weft__ltensor_t *t = &l->tensors[index];
    memset(info, 0, sizeof(*info));
    info->name = t->name;
    info->dtype = t->dtype;
    info->ndims = t->ndims;
    info->bytes = t->elem;
    for (int d = 0; d < t->ndims; d++) {
        info->shape[d] = t->shape[d];
        info->bytes *= (size_t)t->shape[d];
    }
    return WEFT_OK;
}

weft_status_t weft_layout_find(const weft_layout_t *l, const char *name, int *index)
{
    if (l == NULL || name == NULL || index == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_layout_find: NULL argument");
    }
    for (int i = 0; i < l->ntensors; i++) {
        if (strcmp(l->tensors[i].name, name) == 0) {
            *index = i;
            return WEFT_OK;
        }
    }
    return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_layout_find: no tensor %s", name);
}

int weft_layout_num_regions(const weft_layout_t *l, int member)
{
    const weft__lmember_t *m = l != NULL ? weft__layout_member(l, member) : NULL;
    return m != NULL ? m->nregions : 0;
}

weft_status_t weft_layout_region(const weft_layout_t *l, int member, int k, int *tensor,
                                 weft_box_t *box, size_t *bytes, size_t *packed_offset)
{
    const weft__lmember_t *m = l != NULL ? weft__layout_member(l, member) : NULL;
    if (m == NULL || k < 0 || k >= m->nregions) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_layout_region: member %d has no region %d", member, k);
    }
    const weft__lregion_t *r = &l->regions[m->regions[k]];
    if (tensor != NULL) {
        *tensor = r->tensor;
    }
    if (box != NULL) {
        *box = r->box;
    }
    if (bytes != NULL) {
        *bytes = r->bytes;
    }
    if (packed_offset != NULL) {
        *packed_offset = r->packed_offset;
    }
    return WEFT_OK;
}

size_t weft_layout_packed_bytes(const weft_layout_t *l, int member)
{
    const weft__lmember_t *m = l != NULL ? weft__layout_member(l, member) : NULL;
    return m != NULL ? m->packed_bytes : 0;
}

/* Subtract every region of @p tensor from the whole tensor; WEFT_OK if nothing is left,
 * else a box nobody holds in @p hole. */
static weft_status_t find_hole(const weft_layout_t *l, int tensor, weft_box_t *hole)
{
    const weft__ltensor_t *t = &l->tensors[tensor];
    int nd = t->ndims;
    size_t n = 1, cap_left = 0, cap_next = 0;
    weft_box_t *left = NULL, *next = NULL;
    weft_status_t st = WEFT_OK;
    if (!weft__array_reserve((void **)&left, &cap_left, 1, sizeof(*left))) {
        return WEFT_ERR_NO_MEMORY;
    }
    memset(&left[0], 0, sizeof(left[0]));
    for (int d = 0; d < nd; d++) {
        left[0].extent[d] = t->shape[d];
    }
    for (int i = 0; i < l->nregions && n > 0 && st == WEFT_OK; i++) {
        const weft__lregion_t *r = &l->regions[i];
        if (r->tensor != tensor) {
            continue;
        }
        size_t m = 0;
        for (size_t k = 0; k < n; k++) {
            if (!weft__array_reserve((void **)&next, &cap_next, m + 2 * (size_t)nd,
                                     sizeof(*next))) {
                st = WEFT_ERR_NO_MEMORY;
                break;
            }
            m += (size_t)weft__box_subtract(&left[k], &r->box, nd, &next[m]);
        }
        weft_box_t *swap = left;
        size_t swap_cap = cap_left;
        left = next;
        cap_left = cap_next;
        next = swap;
        cap_next = swap_cap;
        n = m;
    }
    if (st == WEFT_OK && n > 0) {
        *hole = left[0];
        st = WEFT_ERR_INVALID_ARG;
    }
    free(left);
    free(next);
    return st;
}

weft_status_t weft_layout_check_complete(const weft_layout_t *l)
{
    if (l == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_layout_check_complete: NULL layout");
    }
    for (int i = 0; i < l->ntensors; i++) {
        weft_box_t hole;
        weft_status_t st = find_hole(l, i, &hole);
        if (st == WEFT_ERR_NO_MEMORY) {
            return weft__error_noctx(st, "weft_layout_check_complete: out of memory");
        }
        if (st != WEFT_OK) {
            char text[256];
            weft__box_format(&hole, l->tensors[i].ndims, text, sizeof(text));
            return weft__error_noctx(st, "tensor %s region %s is held by no member",
                                     l->tensors[i].name, text);
        }
    }
    return WEFT_OK;
}

weft_status_t weft__layout_same_tensors(const weft_layout_t *a, const weft_layout_t *b)
{
    if (a->ntensors != b->ntensors) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "the layouts name %d and %d tensors: they must name the same",
                                 a->ntensors, b->ntensors);
    }
    for (int i = 0; i < a->ntensors; i++) {
        const weft__ltensor_t *x = &a->tensors[i], *y = &b->tensors[i];
        bool same = strcmp(x->name, y->name) == 0 && x->dtype == y->dtype && x->ndims == y->ndims;
        for (int d = 0; same && d < x->ndims; d++) {
            same = x->shape[d] == y->shape[d];
        }
        if (!same) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "tensor %d differs between the layouts (%s, %s vs %s, %s): "
                                     "name, dtype and shape must agree",
                                     i, x->name, weft_dtype_name(x->dtype), y->name,
                                     weft_dtype_name(y->dtype));
        }
    }
    return WEFT_OK;
}
