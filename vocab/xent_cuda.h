/*
 * What the device passes of vocab/ share (xent_cuda.c, xent_blocked_cuda.c): the
 * microbatch's device buffers and the error checks.
 */
#ifndef WEFT_VOCAB_XENT_CUDA_H
#define WEFT_VOCAB_XENT_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "vocab/vocab_impl.h"

struct weft__vocab_dev {
    cublasHandle_t blas;
    int device;
    float *y;            /* [max_n * len] logits, exp, G; [max_n * block] when blocked */
    float *rec;          /* [max_n * rec] records (NAIVE: its SoA statistics) */
    float *coef;         /* [max_n] */
    float *wtok;         /* [max_n] */
    float *d;            /* [max_n * h] ALG2's D */
    float *wsum;         /* [h] ALG2 with label smoothing: Σ of W_i's rows */
    int64_t *labels;     /* [max_n] device copy of host labels */
    float *mloc;         /* [max_n] blocked: the local maxima of S, for T */
    float *scale;        /* [max_n] blocked: each token's rescaling in the block of S */
    cudaStream_t stream; /* the group's stream, read again at every S and T */
};

/* The stream of the vocabulary's group (weft_group_set_cuda_stream). */
cudaStream_t weft__vxd_stream(const weft_vocab_t *v);
/* Copy and wait for it on @p stream. */
cudaError_t weft__vxd_copy_sync(void *dst, const void *src, size_t bytes, cudaStream_t stream);
/* The error of a failed CUDA or cuBLAS call, logged with @p what. */
weft_status_t weft__vxd_cuda_fail(weft_ctx_t *ctx, cudaError_t e, const char *what);
weft_status_t weft__vxd_blas_fail(weft_ctx_t *ctx, cublasStatus_t e, const char *what);
/* Device labels of the current microbatch (the caller's, or a copy of host labels). */
weft_status_t weft__vxd_labels(weft_vocab_mb_t *mb, const int64_t **out);

/* The blocked passes (xent_blocked_cuda.c): S after the buffers and labels are ready
 * (n > 0), T after coef and wtok are on the device. */
weft_status_t weft__vxd_s_blocked(weft_vocab_mb_t *mb, const int64_t *labels);
weft_status_t weft__vxd_t_blocked(weft_vocab_mb_t *mb, const int64_t *labels, float *dx, float *dw);

#define CUDA_CHECK(ctx, call, what)                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            return weft__vxd_cuda_fail((ctx), e_, (what));                                         \
        }                                                                                          \
    } while (0)

#define BLAS_CHECK(ctx, call, what)                                                                \
    do {                                                                                           \
        cublasStatus_t e_ = (call);                                                                \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            return weft__vxd_blas_fail((ctx), e_, (what));                                         \
        }                                                                                          \
    } while (0)

#endif
