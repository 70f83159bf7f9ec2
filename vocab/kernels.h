/*
 * CUDA kernels of vocab/ (kernels.cu), launched on @p stream; each returns the launch
 * status. Matrices are row-major; labels and ids are int64 in device memory. The
 * semantics match the CPU kernels in xent_cpu.c and embed.c line for line.
 */
#ifndef WEFT_VOCAB_KERNELS_H
#define WEFT_VOCAB_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Label smoothing ε enters as keep = 1 - ε and spread = ε / V (vocab_impl.h); without it
 * keep = 1 and spread = 0.
 *
 * Per row j of y [n, len]: NAIVE (rec_stride 0): rec[j] = row max, y unchanged.
 * Otherwise: rec[j*rec_stride + {0,1,2}] = {max m, Σ exp(y - m), target t} and
 * y <- exp(y - m), where t = keep * (the target logit where owned, else 0) + spread * Σ y.
 */
cudaError_t weft__vk_row_stats(size_t n, size_t len, size_t start, size_t rec_stride,
                               const int64_t *labels, float keep, float spread, float *y,
                               float *rec, cudaStream_t stream);

/* NAIVE after the max: y <- exp(y - rec[j]); rec[n + j] = sum, rec[2n + j] = t as above. */
cudaError_t weft__vk_naive_sums(size_t n, size_t len, size_t start, const int64_t *labels,
                                float keep, float spread, float *y, float *rec,
                                cudaStream_t stream);

/* ALG2: rec[j*rec_stride + 3 + h + k] = keep * w[(label - start)*h + k] where owned (else
 * 0), + spread * wsum[k] for labels >= 0 (wsum unread when spread is 0). */
cudaError_t weft__vk_gather_b(size_t n, size_t h, size_t len, size_t start, size_t rec_stride,
                              const int64_t *labels, float keep, float spread, const float *wsum,
                              const float *w, float *rec, cudaStream_t stream);

/* Blocked S (xent_blocked.c has the CPU twin): records of n tokens as empty parts
 * (m = -inf, s = t = 0, and na floats of A zero). */
cudaError_t weft__vk_rec_init(size_t n, size_t rec_stride, size_t na, float *rec,
                              cudaStream_t stream);
/* Blocked S, rows [b0, b0 + bl) of the shard [start, start + len) in y [n, bl]: merge
 * each row's max, Σ exp and smoothed target into its record, y <- exp(y - the new max),
 * scale[j] = e^{old max - new max} (0 for the first block). */
cudaError_t weft__vk_online_stats(size_t n, size_t bl, size_t b0, size_t start, size_t len,
                                  size_t rec_stride, const int64_t *labels, float keep,
                                  float spread, float *y, float *rec, float *scale,
                                  cudaStream_t stream);
/* ALG2 blocked: A[j] *= scale[j] in the records. */
cudaError_t weft__vk_scale_a(size_t n, size_t h, size_t rec_stride, const float *scale, float *rec,
                             cudaStream_t stream);
/* Blocked T: y [n, bl] (logits of rows [b0, b0 + bl)) <- wtok * (exp(y - mloc) coef - q),
 * rows of ignored tokens zero. */
cudaError_t weft__vk_make_g_blocked(size_t n, size_t bl, size_t b0, size_t start, size_t len,
                                    const int64_t *labels, float keep, float spread,
                                    const float *mloc, const float *coef, const float *wtok,
                                    float *y, cudaStream_t stream);

/* @p count elements between float32 and bf16 (@p bf16) or f16: to float32 when @p to_f32,
 * else from it, rounding to nearest even. */
cudaError_t weft__vk_convert(size_t count, int bf16, int to_f32, const void *src, void *dst,
                             cudaStream_t stream);

/* out[k] = Σ_v w[v*h + k] over the len rows of w. */
cudaError_t weft__vk_col_sum(size_t len, size_t h, const float *w, float *out, cudaStream_t stream);

/* y <- wtok * (y * coef - keep * onehot - spread), rows of ignored tokens zero. */
cudaError_t weft__vk_make_g(size_t n, size_t len, size_t start, const int64_t *labels, float keep,
                            float spread, const float *coef, const float *wtok, float *y,
                            cudaStream_t stream);

/* ALG2: dx[j] = wtok[j] * d[j] (zero for ignored tokens). */
cudaError_t weft__vk_scale_dx(size_t n, size_t h, const int64_t *labels, const float *wtok,
                              const float *d, float *dx, cudaStream_t stream);

/* out[j] = table[ids[j] - start] where the shard owns ids[j], else zeros. */
cudaError_t weft__vk_embed_lookup(size_t n, size_t h, size_t start, size_t len, const int64_t *ids,
                                  const float *table, float *out, cudaStream_t stream);

/* grad_table[ids[j] - start] += grad_out[j] where owned (atomic: ids may repeat). */
cudaError_t weft__vk_embed_scatter(size_t n, size_t h, size_t start, size_t len, const int64_t *ids,
                                   const float *grad_out, float *grad_table, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
