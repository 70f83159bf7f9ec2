/*
 * Row helpers of the CPU kernels of the output layer (xent_cpu.c, xent_blocked.c).
 */
#ifndef WEFT_VOCAB_XENT_ROWS_H
#define WEFT_VOCAB_XENT_ROWS_H

#include <math.h>

#include "vocab/vocab_impl.h"

/* e^{m - M} for a part with max m of a whole with max M >= m; 0 for an empty part. */
static inline float weft__rescale(float m, float big_m)
{
    return m == -INFINITY ? 0.0f : expf(m - big_m);
}

/* Column of token j's target in the shard, or -1 when the shard does not own it. */
static inline long weft__owned_col(const weft__xent_dims_t *d, int64_t label)
{
    if (label < 0 || (uint64_t)label < d->start || (uint64_t)label - d->start >= d->len) {
        return -1;
    }
    return (long)((uint64_t)label - d->start);
}

static inline float weft__row_max(const float *row, size_t len)
{
    float m = -INFINITY;
    for (size_t v = 0; v < len; v++) {
        m = row[v] > m ? row[v] : m;
    }
    return m;
}

/* row <- exp(row - m); returns the sum (0 for an empty row). */
static inline float weft__row_exp_sum(float *row, size_t len, float m)
{
    float s = 0.0f;
    for (size_t v = 0; v < len; v++) {
        row[v] = expf(row[v] - m);
        s += row[v];
    }
    return s;
}

/* The smoothed target statistic of one row of logits (before exp): (1 - ε) row[col] (col
 * >= 0: the label's column in the row) + ε / V Σ row[0, len). */
float weft__xent_target_stat(const weft__xent_dims_t *d, const float *row, size_t len, long col);

/* ALG2's B of every token: (1 - ε) W[label] where owned, + ε / V Σ_v W_v (labels >= 0);
 * wsum [h] is scratch, used with label smoothing only. */
void weft__xent_fill_b(const weft__xent_dims_t *d, const float *w, const int64_t *labels,
                       float *rec, size_t stride, float *wsum);

/* One row of G in place: row <- c * row - wtok * q (q = (1 - ε) at col, the label's
 * column in the row or -1, + ε / V everywhere); zeros for an ignored label or wtok 0. */
void weft__xent_g_row(const weft__xent_dims_t *d, float *row, size_t len, long col, int64_t label,
                      float c, float wtok);

/* ALG2's ∇X: dx[j] = wtok[j] D[j], D in the records; zero rows for ignored tokens. */
void weft__xent_dx_alg2(const weft__xent_dims_t *d, const int64_t *labels, const float *wtok,
                        const float *rec, float *dx);

#endif
