/*
 * Random tensors and layouts for the migration tests, from a seeded generator so that
 * every rank of a job builds the same ones.
 */
#ifndef WEFT_TEST_LAYOUT_GEN_H
#define WEFT_TEST_LAYOUT_GEN_H

#include <stdint.h>

#include "weft/migrate.h"

typedef struct gen_shape {
    int ntensors;
    int nd[4];
    uint64_t dims[4][WEFT_LAYOUT_MAX_DIMS];
    weft_dtype_t dtype[4];
} gen_shape_t;

void gen_seed(uint64_t seed);
uint64_t gen_rnd(void);
int gen_in(int lo, int hi); /* [lo, hi] */
/* Up to 4 tensors of 1 to 3 dimensions, each at most @p max_dim long. */
void gen_shape(gen_shape_t *s, int max_dim);
/* A layout of @p s over a random non-empty subset of @p pool: flat, sharded, whole,
 * replicated or random boxes with up to three holders each. Always complete. */
weft_layout_t *gen_layout(const gen_shape_t *s, const int *pool, int npool);
/* The value of byte @p i of element @p g (row-major index) of tensor @p t. */
static inline unsigned char gen_byte(int t, uint64_t g, size_t i)
{
    return (unsigned char)(g * 7 + i * 3 + (uint64_t)t * 101 + 1);
}
/* Fill @p member's packed buffer of @p l with gen_byte values. */
void gen_fill(const weft_layout_t *l, int member, unsigned char *buf);
/* Bytes of @p member's packed buffer of @p l that differ from gen_byte values. */
size_t gen_check(const weft_layout_t *l, int member, const unsigned char *buf);

#endif
