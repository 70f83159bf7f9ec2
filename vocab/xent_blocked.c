/*
 * The output layer without its logits: passes S and T of ALG1/ALG2 over blocks of the
 * shard's rows, so a microbatch holds n x block floats of logits instead of n x len.
 *
 * S walks the blocks once and keeps, per token, the running softmax statistics as the
 * merge operator does across shards: the max m so far, s = Σ exp(Y - m) rescaled by
 * e^{m_old - m_new} whenever the max grows, and for ALG2 A = Σ exp(Y - m) W rescaled
 * alike (then the block's exp(Y_b - m) W_b added by a GEMM). The record C1 merges is the
 * one the unblocked S makes, so the collective and its bytes do not change.
 *
 * T computes each block's logits again (the price of not keeping them: one more GEMM of
 * n x block x h per block), turns them into G = wtok (exp(Y - m) coef - q) with the
 * statistics of C1, and takes ∇W_b = G_bᵀ X and, for ALG1, ∇X += G_b W_b.
 */
#include <cblas.h>
#include <string.h>

#include "vocab/vocab_impl.h"
#include "vocab/xent_rows.h"

/* The label's column in the block [b0, b0 + bl) of the shard, or -1. */
static long block_col(const weft__xent_dims_t *d, int64_t label, size_t b0, size_t bl)
{
    long col = weft__owned_col(d, label);
    return col >= (long)b0 && col < (long)(b0 + bl) ? col - (long)b0 : -1;
}

/* Y_b = X W_bᵀ into y [n * bl]. */
static void block_logits(const weft__xent_dims_t *d, const float *x, const float *w, size_t b0,
                         size_t bl, float *y)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)d->n, (int)bl, (int)d->h, 1.0f, x,
                (int)d->h, w + b0 * d->h, (int)d->h, 0.0f, y, (int)bl);
}

void weft__xent_s_blocked_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo, const float *x,
                              const float *w, const int64_t *labels, float *y, float *rec,
                              float *mloc, float *wsum)
{
    size_t n = d->n, h = d->h, len = d->len, blk = d->block;
    size_t stride = weft__rec_floats(algo, h);
    bool alg2 = algo == WEFT_VOCAB_ALG2;
    for (size_t j = 0; j < n; j++) {
        float *r = rec + j * stride;
        r[WEFT__REC_M] = -INFINITY;
        r[WEFT__REC_S] = 0.0f;
        r[WEFT__REC_T] = 0.0f;
        if (alg2) {
            memset(r + WEFT__REC_A, 0, h * sizeof(float));
        }
    }
    for (size_t b0 = 0; b0 < len && n > 0; b0 += blk) {
        size_t bl = len - b0 < blk ? len - b0 : blk;
        block_logits(d, x, w, b0, bl, y);
        for (size_t j = 0; j < n; j++) {
            float *row = y + j * bl;
            float *r = rec + j * stride;
            r[WEFT__REC_T] += weft__xent_target_stat(d, row, bl, block_col(d, labels[j], b0, bl));
            float bm = weft__row_max(row, bl);
            float m = r[WEFT__REC_M] > bm ? r[WEFT__REC_M] : bm;
            float sc = weft__rescale(r[WEFT__REC_M], m);
            r[WEFT__REC_S] = r[WEFT__REC_S] * sc + weft__row_exp_sum(row, bl, m);
            if (alg2 && sc != 1.0f) {
                cblas_sscal((int)h, sc, r + WEFT__REC_A, 1);
            }
            r[WEFT__REC_M] = m;
        }
        if (alg2) {
            /* A += exp(Y_b - m) W_b, straight into the records (leading dim = stride). */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)h, (int)bl, 1.0f, y,
                        (int)bl, w + b0 * h, (int)h, 1.0f, rec + WEFT__REC_A, (int)stride);
        }
    }
    for (size_t j = 0; j < n; j++) {
        mloc[j] = rec[j * stride + WEFT__REC_M];
    }
    if (alg2) {
        weft__xent_fill_b(d, w, labels, rec, stride, wsum);
    }
}

void weft__xent_t_blocked_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo, size_t padded_len,
                              const float *x, const float *w, const int64_t *labels,
                              const float *wtok, float *y, const float *coef, const float *mloc,
                              const float *rec, float *dx, float *dw, bool accumulate)
{
    size_t n = d->n, h = d->h, len = d->len, blk = d->block;
    bool alg2 = algo == WEFT_VOCAB_ALG2;
    for (size_t b0 = 0; b0 < len && n > 0; b0 += blk) {
        size_t bl = len - b0 < blk ? len - b0 : blk;
        block_logits(d, x, w, b0, bl, y);
        for (size_t j = 0; j < n; j++) {
            float *row = y + j * bl;
            if (labels[j] >= 0 && wtok[j] != 0.0f) {
                for (size_t v = 0; v < bl; v++) {
                    row[v] = expf(row[v] - mloc[j]);
                }
            }
            weft__xent_g_row(d, row, bl, block_col(d, labels[j], b0, bl), labels[j],
                             coef[j] * wtok[j], wtok[j]);
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)bl, (int)h, (int)n, 1.0f, y,
                    (int)bl, x, (int)h, accumulate ? 1.0f : 0.0f, dw + b0 * h, (int)h);
        if (!alg2) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)h, (int)bl, 1.0f, y,
                        (int)bl, w + b0 * h, (int)h, b0 == 0 ? 0.0f : 1.0f, dx, (int)h);
        }
    }
    if (!accumulate) {
        size_t from = n > 0 ? len : 0; /* with no tokens no block ran: every row is zero */
        memset(dw + from * h, 0, (padded_len - from) * h * sizeof(float));
    }
    if (alg2) {
        weft__xent_dx_alg2(d, labels, wtok, rec, dx);
    }
}
