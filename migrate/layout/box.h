/*
 * Arithmetic on n-dimensional boxes of row-major tensors: volume, intersection,
 * difference, tiling a flat range, and copying a box between two buffers that each hold
 * an enclosing box. No allocation, no communication.
 */
#ifndef WEFT_MIGRATE_BOX_H
#define WEFT_MIGRATE_BOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/migrate.h"

/* Elements in @p b (its first @p nd dimensions). */
uint64_t weft__box_volume(const weft_box_t *b, int nd);

/* Whether @p a and @p b overlap; if so and @p out is not NULL, their intersection. */
bool weft__box_intersect(const weft_box_t *a, const weft_box_t *b, int nd, weft_box_t *out);

/* Whether @p inner lies inside @p outer. */
bool weft__box_contains(const weft_box_t *outer, const weft_box_t *inner, int nd);

/* The part of @p a outside @p b as at most 2 * nd disjoint boxes written to @p out;
 * returns how many. @p a itself (one box) when they do not overlap. */
int weft__box_subtract(const weft_box_t *a, const weft_box_t *b, int nd, weft_box_t *out);

/* Whether @p a and @p b are equal on their first @p nd dimensions. */
bool weft__box_equal(const weft_box_t *a, const weft_box_t *b, int nd);

/* Lexicographic order of offsets, then extents: <0, 0, >0. */
int weft__box_cmp(const weft_box_t *a, const weft_box_t *b, int nd);

/* If @p a and @p b are adjacent along one dimension and equal in the others, write
 * their union to @p out and return true. */
bool weft__box_merge(const weft_box_t *a, const weft_box_t *b, int nd, weft_box_t *out);

/* The row-major elements [lo, hi) of a tensor of @p shape as at most 2 * nd - 1 boxes,
 * in element order, written to @p out; returns how many. */
int weft__box_tile_range(const uint64_t *shape, int nd, uint64_t lo, uint64_t hi,
                         weft_box_t *out);

/* "[o0:o0+e0, o1:o1+e1]": a box for messages. */
void weft__box_format(const weft_box_t *b, int nd, char *buf, size_t len);

/* Copy box @p b of elements of @p elem bytes from @p src, which holds box @p src_box
 * row-major, to @p dst, which holds @p dst_box; @p b lies inside both. */
void weft__box_copy(void *dst, const weft_box_t *dst_box, const void *src,
                    const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem);

/* weft__box_copy with @p copy moving each contiguous run (device memory, say); stops
 * and returns false when @p copy does. */
typedef bool (*weft__copy_fn)(void *dst, const void *src, size_t n, void *arg);
bool weft__box_copy_with(void *dst, const weft_box_t *dst_box, const void *src,
                         const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem,
                         weft__copy_fn copy, void *arg);

#endif
