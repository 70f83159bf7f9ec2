/*
 * CPU kernels of the vocabulary-parallel output layer (float32, OpenBLAS for the GEMMs)
 * and the merge operator of the per-token statistics records.
 *
 * Numerics: every exponential is taken of a value <= 0 (logits minus a row max), so
 * logits of +-1e4 neither overflow nor turn into NaN; a shard with no entries has the
 * max -inf, and its rescaling factor is defined as 0 rather than computed.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "vocab/vocab_impl.h"
#include "vocab/xent_rows.h"

void weft__rec_merge(void *inout, const void *in, size_t count, void *arg)
{
    size_t h = arg != NULL ? *(const size_t *)arg : 0;
    size_t stride = arg != NULL ? 3 + 2 * h : 3;
    float *a = inout;
    const float *b = in;
    for (size_t j = 0; j < count; j++, a += stride, b += stride) {
        float big_m = a[WEFT__REC_M] > b[WEFT__REC_M] ? a[WEFT__REC_M] : b[WEFT__REC_M];
        float ca = weft__rescale(a[WEFT__REC_M], big_m);
        float cb = weft__rescale(b[WEFT__REC_M], big_m);
        a[WEFT__REC_M] = big_m;
        a[WEFT__REC_S] = a[WEFT__REC_S] * ca + b[WEFT__REC_S] * cb;
        a[WEFT__REC_T] += b[WEFT__REC_T];
        float *aa = a + WEFT__REC_A;
        const float *ba = b + WEFT__REC_A;
        for (size_t k = 0; k < h; k++) {
            aa[k] = aa[k] * ca + ba[k] * cb;
        }
        for (size_t k = h; k < 2 * h; k++) {
            aa[k] += ba[k];
        }
    }
}

int64_t weft__count_valid_labels(const int64_t *labels, size_t n, size_t vocab_size)
{
    int64_t valid = 0;
    for (size_t j = 0; j < n; j++) {
        if (labels[j] >= 0 && (uint64_t)labels[j] >= vocab_size) {
            return -1;
        }
        valid += labels[j] >= 0;
    }
    return valid;
}

float weft__xent_target_stat(const weft__xent_dims_t *d, const float *row, size_t len, long col)
{
    float t = col >= 0 ? weft__ls_keep(d) * row[col] : 0.0f;
    if (d->ls > 0.0f) {
        double sum = 0.0;
        for (size_t v = 0; v < len; v++) {
            sum += row[v];
        }
        t += weft__ls_spread(d) * (float)sum;
    }
    return t;
}

void weft__xent_fill_b(const weft__xent_dims_t *d, const float *w, const int64_t *labels,
                       float *rec, size_t stride, float *wsum)
{
    size_t n = d->n, h = d->h;
    if (d->ls > 0.0f) {
        memset(wsum, 0, h * sizeof(float));
        for (size_t v = 0; v < d->len; v++) {
            cblas_saxpy((int)h, 1.0f, w + v * h, 1, wsum, 1);
        }
    }
    for (size_t j = 0; j < n; j++) {
        float *b = rec + j * stride + WEFT__REC_A + h;
        long col = weft__owned_col(d, labels[j]);
        if (d->ls == 0.0f || labels[j] < 0) {
            if (col >= 0) {
                memcpy(b, w + (size_t)col * h, h * sizeof(float));
            } else {
                memset(b, 0, h * sizeof(float));
            }
            continue;
        }
        float keep = weft__ls_keep(d), spread = weft__ls_spread(d);
        for (size_t k = 0; k < h; k++) {
            b[k] = spread * wsum[k] + (col >= 0 ? keep * w[(size_t)col * h + k] : 0.0f);
        }
    }
}

void weft__xent_s_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo, const float *x,
                      const float *w, const int64_t *labels, float *y, float *rec, float *mloc,
                      float *wsum)
{
    if (weft__xent_blocked(d)) {
        weft__xent_s_blocked_cpu(d, algo, x, w, labels, y, rec, mloc, wsum);
        return;
    }
    size_t n = d->n, h = d->h, len = d->len;
    if (n > 0 && len > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)len, (int)h, 1.0f, x,
                    (int)h, w, (int)h, 0.0f, y, (int)len);
    }
    if (algo == WEFT_VOCAB_NAIVE) {
        for (size_t j = 0; j < n; j++) {
            rec[j] = weft__row_max(y + j * len, len);
        }
        return;
    }
    size_t stride = weft__rec_floats(algo, h);
    for (size_t j = 0; j < n; j++) {
        float *row = y + j * len;
        float *r = rec + j * stride;
        long col = weft__owned_col(d, labels[j]);
        r[WEFT__REC_M] = weft__row_max(row, len);
        r[WEFT__REC_T] = weft__xent_target_stat(d, row, len, col);
        r[WEFT__REC_S] = weft__row_exp_sum(row, len, r[WEFT__REC_M]);
        mloc[j] = r[WEFT__REC_M];
    }
    if (algo != WEFT_VOCAB_ALG2 || n == 0) {
        return;
    }
    /* A_i = exp(Y - m) W_i, written straight into the records (leading dim = stride). */
    if (len > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)h, (int)len, 1.0f, y,
                    (int)len, w, (int)h, 0.0f, rec + WEFT__REC_A, (int)stride);
    } else {
        for (size_t j = 0; j < n; j++) {
            memset(rec + j * stride + WEFT__REC_A, 0, h * sizeof(float));
        }
    }
    weft__xent_fill_b(d, w, labels, rec, stride, wsum);
}

void weft__xent_naive_sums_cpu(const weft__xent_dims_t *d, const int64_t *labels, float *y,
                               float *rec)
{
    size_t n = d->n, len = d->len;
    for (size_t j = 0; j < n; j++) {
        float *row = y + j * len;
        long col = weft__owned_col(d, labels[j]);
        rec[2 * n + j] = weft__xent_target_stat(d, row, len, col);
        rec[n + j] = weft__row_exp_sum(row, len, rec[j]);
    }
}

double weft__xent_finish_c1_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo,
                                const int64_t *labels, float *rec, const float *mloc, float *loss,
                                float *coef)
{
    size_t n = d->n, h = d->h;
    size_t stride = algo == WEFT_VOCAB_NAIVE ? 1 : weft__rec_floats(algo, h);
    double total = 0.0;
    for (size_t j = 0; j < n; j++) {
        float big_m, big_s, t;
        if (algo == WEFT_VOCAB_NAIVE) {
            big_m = rec[j];
            big_s = rec[n + j];
            t = rec[2 * n + j];
            coef[j] = 1.0f / big_s;
        } else {
            const float *r = rec + j * stride;
            big_m = r[WEFT__REC_M];
            big_s = r[WEFT__REC_S];
            t = r[WEFT__REC_T];
            coef[j] = weft__rescale(mloc[j], big_m) / big_s;
        }
        if (labels[j] < 0) {
            loss[j] = 0.0f;
            continue;
        }
        /* log S >= 0 since the max entry contributes 1; M - t is exact when close. */
        loss[j] = (big_m - t) + logf(big_s);
        total += loss[j];
        if (algo == WEFT_VOCAB_ALG2) {
            float *a = rec + j * stride + WEFT__REC_A;
            const float *b = a + h;
            float inv_s = 1.0f / big_s;
            for (size_t k = 0; k < h; k++) {
                a[k] = a[k] * inv_s - b[k];
            }
        }
    }
    return total;
}

void weft__xent_g_row(const weft__xent_dims_t *d, float *row, size_t len, long col, int64_t label,
                      float c, float wtok)
{
    if (label < 0 || wtok == 0.0f) {
        memset(row, 0, len * sizeof(float));
        return;
    }
    for (size_t v = 0; v < len; v++) {
        row[v] *= c;
    }
    if (col >= 0) {
        row[col] -= weft__ls_keep(d) * wtok;
    }
    if (d->ls > 0.0f) {
        float q = weft__ls_spread(d) * wtok;
        for (size_t v = 0; v < len; v++) {
            row[v] -= q;
        }
    }
}

void weft__xent_dx_alg2(const weft__xent_dims_t *d, const int64_t *labels, const float *wtok,
                        const float *rec, float *dx)
{
    size_t n = d->n, h = d->h, stride = weft__rec_floats(WEFT_VOCAB_ALG2, h);
    for (size_t j = 0; j < n; j++) {
        const float *dj = rec + j * stride + WEFT__REC_A;
        for (size_t k = 0; k < h; k++) {
            dx[j * h + k] = labels[j] < 0 ? 0.0f : wtok[j] * dj[k];
        }
    }
}

void weft__xent_t_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo, size_t padded_len,
                      const float *x, const float *w, const int64_t *labels, const float *wtok,
                      float *y, const float *coef, const float *mloc, const float *rec, float *dx,
                      float *dw, bool accumulate)
{
    if (weft__xent_blocked(d)) {
        weft__xent_t_blocked_cpu(d, algo, padded_len, x, w, labels, wtok, y, coef, mloc, rec, dx,
                                 dw, accumulate);
        return;
    }
    size_t n = d->n, h = d->h, len = d->len;
    /* G = wtok * (p - q), in place of y; ignored tokens give zero rows. An empty shard
     * has no y at all. */
    for (size_t j = 0; j < n && len > 0; j++) {
        weft__xent_g_row(d, y + j * len, len, weft__owned_col(d, labels[j]), labels[j],
                         coef[j] * wtok[j], wtok[j]);
    }
    /* ∇W_i = Gᵀ X; padding rows stay zero. */
    if (len > 0 && n > 0) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)len, (int)h, (int)n, 1.0f, y,
                    (int)len, x, (int)h, accumulate ? 1.0f : 0.0f, dw, (int)h);
    } else if (!accumulate) {
        memset(dw, 0, len * h * sizeof(float));
    }
    if (!accumulate && padded_len > len) {
        memset(dw + len * h, 0, (padded_len - len) * h * sizeof(float));
    }
    if (algo == WEFT_VOCAB_ALG2) {
        weft__xent_dx_alg2(d, labels, wtok, rec, dx);
        return;
    }
    /* ∇X_i = G W_i: this shard's part of ∇X, summed over the group by C2. */
    if (len > 0 && n > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)h, (int)len, 1.0f, y,
                    (int)len, w, (int)h, 0.0f, dx, (int)h);
    } else {
        memset(dx, 0, n * h * sizeof(float));
    }
}
