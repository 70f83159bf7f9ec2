/* Box arithmetic for layouts and plans (see box.h). */
#include "migrate/layout/box.h"

#include <stdio.h>
#include <string.h>

uint64_t weft__box_volume(const weft_box_t *b, int nd)
{
    uint64_t v = 1;
    for (int d = 0; d < nd; d++) {
        v *= b->extent[d];
    }
    return v;
}

bool weft__box_intersect(const weft_box_t *a, const weft_box_t *b, int nd, weft_box_t *out)
{
    weft_box_t r;
    for (int d = 0; d < nd; d++) {
        uint64_t lo = a->offset[d] > b->offset[d] ? a->offset[d] : b->offset[d];
        uint64_t ahi = a->offset[d] + a->extent[d];
        uint64_t bhi = b->offset[d] + b->extent[d];
        uint64_t hi = ahi < bhi ? ahi : bhi;
        if (hi <= lo) {
            return false;
        }
        r.offset[d] = lo;
        r.extent[d] = hi - lo;
    }
    if (out != NULL) {
        for (int d = 0; d < nd; d++) {
            out->offset[d] = r.offset[d];
            out->extent[d] = r.extent[d];
        }
    }
    return true;
}

bool weft__box_contains(const weft_box_t *outer, const weft_box_t *inner, int nd)
{
    for (int d = 0; d < nd; d++) {
        if (inner->offset[d] < outer->offset[d] ||
            inner->offset[d] + inner->extent[d] > outer->offset[d] + outer->extent[d]) {
            return false;
        }
    }
    return true;
}

int weft__box_subtract(const weft_box_t *a, const weft_box_t *b, int nd, weft_box_t *out)
{
    weft_box_t in;
    if (!weft__box_intersect(a, b, nd, &in)) {
        out[0] = *a;
        return 1;
    }
    /* Peel slabs off dimension by dimension: below and above the intersection in
     * dimension d, with dimensions before d already narrowed to it. */
    weft_box_t rest = *a;
    int n = 0;
    for (int d = 0; d < nd; d++) {
        uint64_t lo = rest.offset[d], hi = rest.offset[d] + rest.extent[d];
        uint64_t ilo = in.offset[d], ihi = in.offset[d] + in.extent[d];
        if (ilo > lo) {
            out[n] = rest;
            out[n].extent[d] = ilo - lo;
            n++;
        }
        if (ihi < hi) {
            out[n] = rest;
            out[n].offset[d] = ihi;
            out[n].extent[d] = hi - ihi;
            n++;
        }
        rest.offset[d] = ilo;
        rest.extent[d] = ihi - ilo;
    }
    return n;
}

bool weft__box_equal(const weft_box_t *a, const weft_box_t *b, int nd)
{
    for (int d = 0; d < nd; d++) {
        if (a->offset[d] != b->offset[d] || a->extent[d] != b->extent[d]) {
            return false;
        }
    }
    return true;
}

int weft__box_cmp(const weft_box_t *a, const weft_box_t *b, int nd)
{
    for (int d = 0; d < nd; d++) {
        if (a->offset[d] != b->offset[d]) {
            return a->offset[d] < b->offset[d] ? -1 : 1;
        }
    }
    for (int d = 0; d < nd; d++) {
        if (a->extent[d] != b->extent[d]) {
            return a->extent[d] < b->extent[d] ? -1 : 1;
        }
    }
    return 0;
}

bool weft__box_merge(const weft_box_t *a, const weft_box_t *b, int nd, weft_box_t *out)
{
    int along = -1;
    for (int d = 0; d < nd; d++) {
        if (a->offset[d] == b->offset[d] && a->extent[d] == b->extent[d]) {
            continue;
        }
        if (along >= 0) {
            return false;
        }
        along = d;
    }
    if (along < 0) {
        return false; /* the same box: not adjacent */
    }
    const weft_box_t *first = a->offset[along] < b->offset[along] ? a : b;
    const weft_box_t *second = first == a ? b : a;
    if (first->offset[along] + first->extent[along] != second->offset[along]) {
        return false;
    }
    *out = *first;
    out->extent[along] = first->extent[along] + second->extent[along];
    return true;
}

/* Tile [lo, hi) of the sub-tensor spanned by dimensions d..nd-1, with the coordinates of
 * dimensions < d fixed in @p at. */
static int tile(const uint64_t *shape, int nd, int d, uint64_t lo, uint64_t hi, weft_box_t *at,
                weft_box_t *out)
{
    if (lo >= hi) {
        return 0;
    }
    uint64_t stride = 1;
    for (int j = d + 1; j < nd; j++) {
        stride *= shape[j];
    }
    int n = 0;
    for (int j = d + 1; j < nd; j++) { /* full extent below d unless narrowed */
        at->offset[j] = 0;
        at->extent[j] = shape[j];
    }
    uint64_t first = lo / stride, last = hi / stride; /* rows [first, last) may be whole */
    if (lo % stride != 0) {                          /* a partial first row */
        uint64_t end = (first + 1) * stride < hi ? (first + 1) * stride : hi;
        at->offset[d] = first;
        at->extent[d] = 1;
        n += tile(shape, nd, d + 1, lo - first * stride, end - first * stride, at, out + n);
        first++;
        if (end == hi) {
            return n;
        }
    }
    if (last > first) { /* whole rows */
        at->offset[d] = first;
        at->extent[d] = last - first;
        for (int j = d + 1; j < nd; j++) {
            at->offset[j] = 0;
            at->extent[j] = shape[j];
        }
        out[n++] = *at;
    }
    if (hi % stride != 0 && last * stride >= lo) { /* a partial last row */
        at->offset[d] = last;
        at->extent[d] = 1;
        n += tile(shape, nd, d + 1, 0, hi - last * stride, at, out + n);
    }
    return n;
}

int weft__box_tile_range(const uint64_t *shape, int nd, uint64_t lo, uint64_t hi,
                         weft_box_t *out)
{
    weft_box_t at;
    memset(&at, 0, sizeof(at));
    return tile(shape, nd, 0, lo, hi, &at, out);
}

void weft__box_format(const weft_box_t *b, int nd, char *buf, size_t len)
{
    size_t used = 0;
    int w = snprintf(buf, len, "[");
    used = w > 0 ? (size_t)w : 0;
    for (int d = 0; d < nd && used < len; d++) {
        w = snprintf(buf + used, len - used, "%s%llu:%llu", d ? ", " : "",
                     (unsigned long long)b->offset[d],
                     (unsigned long long)(b->offset[d] + b->extent[d]));
        used += w > 0 ? (size_t)w : 0;
    }
    if (used < len) {
        snprintf(buf + used, len - used, "]");
    }
}

static bool host_copy(void *dst, const void *src, size_t n, void *arg)
{
    (void)arg;
    memcpy(dst, src, n);
    return true;
}

void weft__box_copy(void *dst, const weft_box_t *dst_box, const void *src,
                    const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem)
{
    (void)weft__box_copy_with(dst, dst_box, src, src_box, b, nd, elem, host_copy, NULL);
}

bool weft__box_copy_with(void *dst, const weft_box_t *dst_box, const void *src,
                         const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem,
                         weft__copy_fn copy, void *arg)
{
    /* Dimensions from k on are whole in all three boxes: one memcpy covers them. */
    int k = nd - 1;
    size_t run = b->extent[nd - 1] * elem;
    while (k > 0 && b->extent[k] == src_box->extent[k] && b->extent[k] == dst_box->extent[k]) {
        k--;
        run *= b->extent[k];
    }
    uint64_t sstride[WEFT_LAYOUT_MAX_DIMS], dstride[WEFT_LAYOUT_MAX_DIMS];
    uint64_t s = 1, t = 1;
    for (int d = nd - 1; d >= 0; d--) {
        sstride[d] = s;
        dstride[d] = t;
        s *= src_box->extent[d];
        t *= dst_box->extent[d];
    }
    uint64_t idx[WEFT_LAYOUT_MAX_DIMS] = {0}; /* odometer over dimensions < k */
    for (;;) {
        uint64_t so = 0, dof = 0;
        for (int d = 0; d < nd; d++) {
            uint64_t c = b->offset[d] + (d < k ? idx[d] : 0);
            so += (c - src_box->offset[d]) * sstride[d];
            dof += (c - dst_box->offset[d]) * dstride[d];
        }
        if (!copy((char *)dst + dof * elem, (const char *)src + so * elem, run, arg)) {
            return false;
        }
        int d = k - 1;
        while (d >= 0 && ++idx[d] == b->extent[d]) {
            idx[d] = 0;
            d--;
        }
        if (d < 0) {
            return true;
        }
    }
}

/* Whether the bytes of @p b (@p elem each, row-major) and its end in every dimension fit
 * in 64 bits: the caller's boxes come from outside, and the copy's strides and offsets are
 * products and sums of them. */
static bool box_addressable(const weft_box_t *b, int nd, size_t elem)
{
    uint64_t bytes = elem, end;
    for (int d = 0; d < nd; d++) {
        if (__builtin_add_overflow(b->offset[d], b->extent[d], &end) ||
            __builtin_mul_overflow(bytes, b->extent[d], &bytes)) {
            return false;
        }
    }
    return bytes <= SIZE_MAX;
}

weft_status_t weft_box_copy(void *dst, const weft_box_t *dst_box, const void *src,
                            const weft_box_t *src_box, const weft_box_t *box, int ndims,
                            size_t elem)
{
    if (dst == NULL || dst_box == NULL || src == NULL || src_box == NULL || box == NULL ||
        ndims < 1 || ndims > WEFT_LAYOUT_MAX_DIMS || elem == 0 ||
        !box_addressable(dst_box, ndims, elem) || !box_addressable(src_box, ndims, elem) ||
        !box_addressable(box, ndims, elem) || !weft__box_contains(dst_box, box, ndims) ||
        !weft__box_contains(src_box, box, ndims)) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft__box_copy(dst, dst_box, src, src_box, box, ndims, elem);
    return WEFT_OK;
}
