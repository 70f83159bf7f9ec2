/* Layouts: tensors, the regions each member holds, and their constructors. */
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "migrate/layout/box.h"
#include "migrate/layout/layout.h"
#include "util/array.h"

#define BOX_TEXT 256

weft_status_t weft_layout_create(weft_layout_t **layout)
{
    if (layout == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_layout_create: layout is NULL");
    }
    weft_layout_t *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "weft_layout_create: out of memory");
    }
    *layout = l;
    return WEFT_OK;
}

void weft_layout_free(weft_layout_t *l)
{
    if (l == NULL) {
        return;
    }
    for (int i = 0; i < l->nmembers; i++) {
        free(l->members[i].regions);
    }
    free(l->members);
    free(l->regions);
    free(l->tensors);
    free(l);
}

weft_status_t weft_layout_add_tensor(weft_layout_t *l, const char *name, weft_dtype_t dtype,
                                     int ndims, const uint64_t *shape, int *index)
{
    if (l == NULL || name == NULL || shape == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_layout_add_tensor: NULL argument");
    }
    size_t len = strlen(name);
    if (len == 0 || len > WEFT_LAYOUT_NAME_MAX) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_layout_add_tensor: a name needs 1 to %d characters",
                                 WEFT_LAYOUT_NAME_MAX);
    }
    size_t elem = weft_dtype_size(dtype);
    if (elem == 0) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_layout_add_tensor: tensor %s: dtype %d is not a built-in "
                                 "type",
                                 name, (int)dtype);
    }
    if (ndims < 1 || ndims > WEFT_LAYOUT_MAX_DIMS) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_layout_add_tensor: tensor %s: %d dimensions (1 to %d)", name,
                                 ndims, WEFT_LAYOUT_MAX_DIMS);
    }
    uint64_t total = 1;
    for (int d = 0; d < ndims; d++) {
        if (shape[d] == 0 || total > SIZE_MAX / elem / shape[d]) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "weft_layout_add_tensor: tensor %s: dimension %d is %llu "
                                     "(empty, or the tensor does not fit in memory)",
                                     name, d, (unsigned long long)shape[d]);
        }
        total *= shape[d];
    }
    for (int i = 0; i < l->ntensors; i++) {
        if (strcmp(l->tensors[i].name, name) == 0) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "weft_layout_add_tensor: tensor %s is already in the layout",
                                     name);
        }
    }
    if (!weft__array_reserve((void **)&l->tensors, &l->cap_tensors, (size_t)l->ntensors + 1,
                             sizeof(*l->tensors))) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "weft_layout_add_tensor: out of memory");
    }
    weft__ltensor_t *t = &l->tensors[l->ntensors];
    memset(t, 0, sizeof(*t));
    memcpy(t->name, name, len + 1);
    t->dtype = dtype;
    t->ndims = ndims;
    t->elem = elem;
    memcpy(t->shape, shape, (size_t)ndims * sizeof(*shape));
    if (index != NULL) {
        *index = l->ntensors;
    }
    l->ntensors++;
    return WEFT_OK;
}

/* Where member @p id is, or would be inserted, in the sorted member table. */
static int member_pos(const weft_layout_t *l, int id)
{
    int lo = 0, hi = l->nmembers;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (l->members[mid].id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

const weft__lmember_t *weft__layout_member(const weft_layout_t *l, int id)
{
    int at = member_pos(l, id);
    return at < l->nmembers && l->members[at].id == id ? &l->members[at] : NULL;
}

/* The member entry for @p id, created in sorted position if new; NULL on no memory. */
static weft__lmember_t *member_slot(weft_layout_t *l, int id)
{
    int lo = member_pos(l, id);
    if (lo < l->nmembers && l->members[lo].id == id) {
        return &l->members[lo];
    }
    if (!weft__array_reserve((void **)&l->members, &l->cap_members, (size_t)l->nmembers + 1,
                             sizeof(*l->members))) {
        return NULL;
    }
    memmove(&l->members[lo + 1], &l->members[lo], (size_t)(l->nmembers - lo) * sizeof(*l->members));
    memset(&l->members[lo], 0, sizeof(*l->members));
    l->members[lo].id = id;
    l->nmembers++;
    return &l->members[lo];
}

weft_status_t weft_layout_add_region(weft_layout_t *l, int member, int tensor,
                                     const weft_box_t *box)
{
    if (l == NULL || box == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_layout_add_region: NULL argument");
    }
    if (member < 0 || tensor < 0 || tensor >= l->ntensors) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_layout_add_region: member %d, tensor %d: no such %s", member,
                                 tensor, member < 0 ? "member (ids are >= 0)" : "tensor");
    }
    const weft__ltensor_t *t = &l->tensors[tensor];
    char text[BOX_TEXT];
    weft__box_format(box, t->ndims, text, sizeof(text));
    for (int d = 0; d < t->ndims; d++) {
        if (box->extent[d] == 0 || box->offset[d] >= t->shape[d] ||
            box->extent[d] > t->shape[d] - box->offset[d]) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "weft_layout_add_region: tensor %s region %s of member %d "
                                     "is %s (dimension %d of %llu)",
                                     t->name, text, member,
                                     box->extent[d] == 0 ? "empty" : "outside the tensor", d,
                                     (unsigned long long)t->shape[d]);
        }
    }
    const weft__lmember_t *m = weft__layout_member(l, member);
    for (int i = 0; m != NULL && i < m->nregions; i++) {
        const weft__lregion_t *r = &l->regions[m->regions[i]];
        if (r->tensor == tensor && weft__box_intersect(&r->box, box, t->ndims, NULL)) {
            char other[BOX_TEXT];
            weft__box_format(&r->box, t->ndims, other, sizeof(other));
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "weft_layout_add_region: tensor %s region %s of member %d "
                                     "overlaps its region %s: a member holds each element once",
                                     t->name, text, member, other);
        }
    }
    if (!weft__array_reserve((void **)&l->regions, &l->cap_regions, (size_t)l->nregions + 1,
                             sizeof(*l->regions))) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "weft_layout_add_region: out of memory");
    }
    weft__lmember_t *ms = member_slot(l, member);
    if (ms == NULL || !weft__array_reserve((void **)&ms->regions, &ms->cap,
                                           (size_t)ms->nregions + 1, sizeof(int))) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "weft_layout_add_region: out of memory");
    }
    weft__lregion_t *r = &l->regions[l->nregions];
    memset(r, 0, sizeof(*r));
    r->member = member;
    r->tensor = tensor;
    r->index = ms->nregions;
    for (int d = 0; d < t->ndims; d++) {
        r->box.offset[d] = box->offset[d];
        r->box.extent[d] = box->extent[d];
    }
    r->bytes = (size_t)weft__box_volume(box, t->ndims) * t->elem;
    r->packed_offset = ms->packed_bytes;
    r->space = r->box;
    r->space_offset = r->packed_offset;
    ms->packed_bytes += r->bytes;
    ms->regions[ms->nregions++] = l->nregions++;
    return WEFT_OK;
}

static weft_status_t check_tensor(const weft_layout_t *l, int tensor, const char *fn)
{
    if (l == NULL || tensor < 0 || tensor >= l->ntensors) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "%s: no tensor %d", fn, tensor);
    }
    return WEFT_OK;
}

static weft_status_t check_members(const int *members, int n, const char *fn)
{
    if (members == NULL || n < 1) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "%s: no members", fn);
    }
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++) {
            if (members[i] == members[j]) {
                return weft__error_noctx(WEFT_ERR_INVALID_ARG, "%s: member %d is listed twice", fn,
                                         members[i]);
            }
        }
    }
    return WEFT_OK;
}

static uint64_t tensor_elems(const weft__ltensor_t *t)
{
    uint64_t v = 1;
    for (int d = 0; d < t->ndims; d++) {
        v *= t->shape[d];
    }
    return v;
}

static void whole_box(const weft__ltensor_t *t, weft_box_t *b)
{
    memset(b, 0, sizeof(*b));
    for (int d = 0; d < t->ndims; d++) {
        b->extent[d] = t->shape[d];
    }
}

weft_status_t weft_layout_shard(weft_layout_t *l, int tensor, int dim, const int *members, int n)
{
    weft_status_t st = check_tensor(l, tensor, "weft_layout_shard");
    if (st == WEFT_OK) {
        st = check_members(members, n, "weft_layout_shard");
    }
    if (st != WEFT_OK) {
        return st;
    }
    const weft__ltensor_t *t = &l->tensors[tensor];
    if (dim < 0 || dim >= t->ndims) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_layout_shard: tensor %s has no dimension %d", t->name, dim);
    }
    uint64_t rows = t->shape[dim];
    uint64_t per = rows / (uint64_t)n + (rows % (uint64_t)n != 0);
    weft_box_t b;
    whole_box(t, &b);
    for (int i = 0; i < n; i++) {
        uint64_t start = per * (uint64_t)i;
        if (start >= rows) {
            break;
        }
        b.offset[dim] = start;
        b.extent[dim] = rows - start < per ? rows - start : per;
        if ((st = weft_layout_add_region(l, members[i], tensor, &b)) != WEFT_OK) {
            return st;
        }
    }
    return WEFT_OK;
}

weft_status_t weft_layout_flat(weft_layout_t *l, const int *tensors, int ntensors,
                               const int *members, int n)
{
    if (l == NULL || tensors == NULL || ntensors < 1) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_layout_flat: no tensors");
    }
    weft_status_t st = check_members(members, n, "weft_layout_flat");
    uint64_t total = 0;
    for (int i = 0; i < ntensors && st == WEFT_OK; i++) {
        st = check_tensor(l, tensors[i], "weft_layout_flat");
        for (int j = 0; j < i && st == WEFT_OK; j++) {
            if (tensors[j] == tensors[i]) {
                st = weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                       "weft_layout_flat: tensor %s is listed twice",
                                       l->tensors[tensors[i]].name);
            }
        }
        if (st == WEFT_OK) {
            total += tensor_elems(&l->tensors[tensors[i]]);
        }
    }
    if (st != WEFT_OK) {
        return st;
    }
    uint64_t per = total / (uint64_t)n + (total % (uint64_t)n != 0);
    /* Walk the concatenation once: member i owns [i * per, (i + 1) * per). */
    uint64_t base = 0;
    for (int i = 0; i < ntensors; i++) {
        const weft__ltensor_t *t = &l->tensors[tensors[i]];
        uint64_t v = tensor_elems(t);
        for (int m = (int)(base / per); m < n && per * (uint64_t)m < base + v; m++) {
            uint64_t lo = per * (uint64_t)m, hi = lo + per;
            lo = lo > base ? lo - base : 0;
            hi = hi - base < v ? hi - base : v;
            weft_box_t boxes[2 * WEFT_LAYOUT_MAX_DIMS];
            int nb = weft__box_tile_range(t->shape, t->ndims, lo, hi, boxes);
            for (int k = 0; k < nb; k++) {
                if ((st = weft_layout_add_region(l, members[m], tensors[i], &boxes[k])) !=
                    WEFT_OK) {
                    return st;
                }
            }
        }
        base += v;
    }
    return WEFT_OK;
}

weft_status_t weft_layout_whole(weft_layout_t *l, int tensor, int member)
{
    weft_status_t st = check_tensor(l, tensor, "weft_layout_whole");
    if (st != WEFT_OK) {
        return st;
    }
    weft_box_t b;
    whole_box(&l->tensors[tensor], &b);
    return weft_layout_add_region(l, member, tensor, &b);
}

weft_status_t weft_layout_replicate(weft_layout_t *l, int tensor, const int *members, int n)
{
    weft_status_t st = check_tensor(l, tensor, "weft_layout_replicate");
    if (st == WEFT_OK) {
        st = check_members(members, n, "weft_layout_replicate");
    }
    for (int i = 0; i < n && st == WEFT_OK; i++) {
        st = weft_layout_whole(l, tensor, members[i]);
    }
    return st;
}
