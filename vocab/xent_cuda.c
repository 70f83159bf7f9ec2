/*
 * Device path of the vocabulary passes: cuBLAS GEMMs and the kernels of kernels.cu on
 * the caller's current device, on the group's CUDA stream (weft_group_set_cuda_stream;
 * the legacy default stream unless set), so the passes are ordered after the caller's
 * work there. Each pass synchronises the stream before it returns, because its results
 * feed a host-side collective.
 *
 * Division of labour: the device does the O(n * V/P) work (logits, exponentials, G, the
 * GEMMs); the host does the O(n) bookkeeping on the records the collectives reduce
 * (loss, rescaling factors, ALG2's D), which the device then reads back.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "comm/core.h"
#include "comm/device/cublas_lazy.h"
#include "vocab/kernels.h"
#include "vocab/vocab_impl.h"
#include "vocab/xent_cuda.h"

/* Copy and wait for it on @p stream. */
cudaError_t weft__vxd_copy_sync(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
    if (bytes == 0) {
        return cudaSuccess;
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
    return e == cudaSuccess ? cudaStreamSynchronize(stream) : e;
}

weft_status_t weft__vxd_cuda_fail(weft_ctx_t *ctx, cudaError_t e, const char *what)
{
    weft_status_t st = e == cudaErrorMemoryAllocation ? WEFT_ERR_NO_MEMORY
                       : e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                           ? WEFT_ERR_UNSUPPORTED
                           : WEFT_ERR_IO;
    return weft__error(ctx, st, "vocab: %s: CUDA error %d (%s)", what, (int)e,
                       cudaGetErrorString(e));
}

weft_status_t weft__vxd_blas_fail(weft_ctx_t *ctx, cublasStatus_t e, const char *what)
{
    return weft__error(ctx, e == CUBLAS_STATUS_ALLOC_FAILED ? WEFT_ERR_NO_MEMORY : WEFT_ERR_IO,
                       "vocab: %s: cuBLAS status %d", what, (int)e);
}

/* The stream of the vocabulary's group. */
cudaStream_t weft__vxd_stream(const weft_vocab_t *v)
{
    void *s = NULL;
    weft_group_cuda_stream(v->group, &s);
    return (cudaStream_t)s;
}

weft_status_t weft__vxd_copy(const weft_vocab_t *v, void *dst, const void *src, size_t bytes)
{
    cudaError_t e = weft__vxd_copy_sync(dst, src, bytes, weft__vxd_stream(v));
    return e == cudaSuccess ? WEFT_OK : weft__vxd_cuda_fail(v->ctx, e, "copy");
}

void weft__vxd_free(weft_vocab_mb_t *mb)
{
    struct weft__vocab_dev *dv = mb->dev;
    if (dv == NULL) {
        return;
    }
    cudaFree(dv->y);
    cudaFree(dv->rec);
    cudaFree(dv->coef);
    cudaFree(dv->wtok);
    cudaFree(dv->d);
    cudaFree(dv->wsum);
    cudaFree(dv->labels);
    cudaFree(dv->mloc);
    cudaFree(dv->scale);
    if (dv->blas != NULL) {
        cublasDestroy(dv->blas);
    }
    free(dv);
    mb->dev = NULL;
}

static weft_status_t dev_alloc(weft_vocab_mb_t *mb)
{
    weft_ctx_t *ctx = mb->v->ctx;
    cudaStream_t stream = weft__vxd_stream(mb->v);
    if (mb->dev != NULL) {
        int cur;
        CUDA_CHECK(ctx, cudaGetDevice(&cur), "current device");
        if (cur != mb->dev->device) {
            return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                               "vocab: microbatch buffers are on device %d, current is %d",
                               mb->dev->device, cur);
        }
        mb->dev->stream = stream;
        BLAS_CHECK(ctx, cublasSetStream(mb->dev->blas, stream), "cublasSetStream");
        return WEFT_OK;
    }
    struct weft__vocab_dev *dv = calloc(1, sizeof(*dv));
    if (dv == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "vocab: no memory for device state");
    }
    mb->dev = dv;
    dv->stream = stream;
    size_t n = mb->max_tokens, h = mb->v->hidden, len = mb->v->range.length;
    size_t f = sizeof(float);
    CUDA_CHECK(ctx, cudaGetDevice(&dv->device), "current device");
    BLAS_CHECK(ctx, cublasCreate(&dv->blas), "cublasCreate");
    BLAS_CHECK(ctx, cublasSetStream(dv->blas, stream), "cublasSetStream");
    size_t rows = mb->block > 0 ? mb->block : (len > 0 ? len : 1);
    CUDA_CHECK(ctx, cudaMalloc((void **)&dv->y, n * rows * f), "cudaMalloc");
    if (mb->block > 0) {
        CUDA_CHECK(ctx, cudaMalloc((void **)&dv->mloc, n * f), "cudaMalloc");
        CUDA_CHECK(ctx, cudaMalloc((void **)&dv->scale, n * f), "cudaMalloc");
    }
    CUDA_CHECK(ctx, cudaMalloc((void **)&dv->rec, n * weft__rec_floats(mb->algo, h) * f),
               "cudaMalloc");
    CUDA_CHECK(ctx, cudaMalloc((void **)&dv->coef, n * f), "cudaMalloc");
    CUDA_CHECK(ctx, cudaMalloc((void **)&dv->wtok, n * f), "cudaMalloc");
    CUDA_CHECK(ctx, cudaMalloc((void **)&dv->labels, n * sizeof(int64_t)), "cudaMalloc");
    if (mb->algo == WEFT_VOCAB_ALG2) {
        CUDA_CHECK(ctx, cudaMalloc((void **)&dv->d, n * h * f), "cudaMalloc");
    }
    if (mb->algo == WEFT_VOCAB_ALG2 && mb->label_smoothing > 0.0f) {
        CUDA_CHECK(ctx, cudaMalloc((void **)&dv->wsum, h * f), "cudaMalloc");
    }
    return WEFT_OK;
}

/* Device labels of the current microbatch (the caller's, or a copy of host labels). */
weft_status_t weft__vxd_labels(weft_vocab_mb_t *mb, const int64_t **out)
{
    cudaStream_t stream = mb->dev->stream;
    if (weft__vocab_is_device(mb->labels_user)) {
        *out = mb->labels_user;
        return WEFT_OK;
    }
    CUDA_CHECK(mb->v->ctx,
               weft__vxd_copy_sync(mb->dev->labels, mb->labels, mb->n * sizeof(int64_t), stream),
               "labels to device");
    *out = mb->dev->labels;
    return WEFT_OK;
}

weft_status_t weft__vxd_s(weft_vocab_mb_t *mb)
{
    weft_ctx_t *ctx = mb->v->ctx;
    weft_status_t st = dev_alloc(mb);
    if (st != WEFT_OK || mb->n == 0) {
        return st;
    }
    cudaStream_t stream = mb->dev->stream;
    struct weft__vocab_dev *dv = mb->dev;
    const int64_t *labels;
    if ((st = weft__vxd_labels(mb, &labels)) != WEFT_OK) {
        return st;
    }
    if (mb->block > 0) {
        return weft__vxd_s_blocked(mb, labels);
    }
    int n = (int)mb->n, h = (int)mb->v->hidden, len = (int)mb->v->range.length;
    size_t start = mb->v->range.start;
    size_t stride = weft__rec_floats(mb->algo, (size_t)h);
    const float one = 1.0f, zero = 0.0f;
    if (len > 0) {
        /* Row-major Y = X Wᵀ is column-major Yᵀ = W Xᵀ. */
        BLAS_CHECK(ctx,
                   cublasSgemm(dv->blas, CUBLAS_OP_T, CUBLAS_OP_N, len, n, h, &one, mb->w, h, mb->x,
                               h, &zero, dv->y, len),
                   "Y = X W^T");
    }
    bool naive = mb->algo == WEFT_VOCAB_NAIVE;
    weft__xent_dims_t d = weft__vocab_mb_dims(mb);
    float keep = weft__ls_keep(&d), spread = weft__ls_spread(&d);
    CUDA_CHECK(ctx,
               weft__vk_row_stats(mb->n, (size_t)len, start, naive ? 0 : stride, labels, keep,
                                  spread, dv->y, dv->rec, stream),
               "row statistics");
    if (mb->algo == WEFT_VOCAB_ALG2) {
        if (len > 0) {
            /* A = exp(Y - m) W into the records: column-major Aᵀ = Wᵀ Eᵀ, ld = stride. */
            BLAS_CHECK(ctx,
                       cublasSgemm(dv->blas, CUBLAS_OP_N, CUBLAS_OP_N, h, n, len, &one, mb->w, h,
                                   dv->y, len, &zero, dv->rec + WEFT__REC_A, (int)stride),
                       "A = E W");
        } else {
            CUDA_CHECK(ctx,
                       cudaMemset2DAsync(dv->rec + WEFT__REC_A, stride * sizeof(float), 0,
                                         (size_t)h * sizeof(float), mb->n, stream),
                       "A = 0");
        }
        if (spread != 0.0f) {
            CUDA_CHECK(ctx, weft__vk_col_sum((size_t)len, (size_t)h, mb->w, dv->wsum, stream),
                       "column sums of W");
        }
        CUDA_CHECK(ctx,
                   weft__vk_gather_b(mb->n, (size_t)h, (size_t)len, start, stride, labels, keep,
                                     spread, dv->wsum, mb->w, dv->rec, stream),
                   "B");
    }
    size_t rec_floats = naive ? mb->n : mb->n * stride;
    CUDA_CHECK(ctx, weft__vxd_copy_sync(mb->rec, dv->rec, rec_floats * sizeof(float), stream),
               "records to host");
    for (size_t j = 0; !naive && j < mb->n; j++) {
        mb->mloc[j] = mb->rec[j * stride + WEFT__REC_M];
    }
    return WEFT_OK;
}

weft_status_t weft__vxd_naive_sums(weft_vocab_mb_t *mb)
{
    weft_ctx_t *ctx = mb->v->ctx;
    struct weft__vocab_dev *dv = mb->dev;
    cudaStream_t stream = dv->stream;
    size_t n = mb->n;
    if (n == 0) {
        return WEFT_OK;
    }
    const int64_t *labels;
    weft_status_t st = weft__vxd_labels(mb, &labels);
    if (st != WEFT_OK) {
        return st;
    }
    CUDA_CHECK(ctx, weft__vxd_copy_sync(dv->rec, mb->rec, n * sizeof(float), stream),
               "max to device");
    weft__xent_dims_t d = weft__vocab_mb_dims(mb);
    CUDA_CHECK(ctx,
               weft__vk_naive_sums(n, mb->v->range.length, mb->v->range.start, labels,
                                   weft__ls_keep(&d), weft__ls_spread(&d), dv->y, dv->rec, stream),
               "sums");
    CUDA_CHECK(ctx, weft__vxd_copy_sync(mb->rec + n, dv->rec + n, 2 * n * sizeof(float), stream),
               "sums to host");
    return WEFT_OK;
}

/* ∇W_i = Gᵀ X (column-major ∇W_iᵀ = Xᵀ G); padding rows zero unless accumulating. */
static weft_status_t dev_dw(weft_vocab_mb_t *mb, float *dw)
{
    weft_ctx_t *ctx = mb->v->ctx;
    cudaStream_t stream = mb->dev->stream;
    int n = (int)mb->n, h = (int)mb->v->hidden, len = (int)mb->v->range.length;
    size_t pl = mb->v->range.padded_length;
    const float one = 1.0f, beta = mb->accumulate_dw ? 1.0f : 0.0f;
    if (len > 0 && n > 0) {
        BLAS_CHECK(ctx,
                   cublasSgemm(mb->dev->blas, CUBLAS_OP_N, CUBLAS_OP_T, h, len, n, &one, mb->x, h,
                               mb->dev->y, len, &beta, dw, h),
                   "dW = G^T X");
    } else if (!mb->accumulate_dw) {
        CUDA_CHECK(ctx, cudaMemsetAsync(dw, 0, (size_t)len * (size_t)h * sizeof(float), stream),
                   "dW = 0");
    }
    if (!mb->accumulate_dw && pl > (size_t)len) {
        CUDA_CHECK(ctx,
                   cudaMemsetAsync(dw + (size_t)len * (size_t)h, 0,
                                   (pl - (size_t)len) * (size_t)h * sizeof(float), stream),
                   "dW padding");
    }
    return WEFT_OK;
}

/* ∇X: ALG2 from D; otherwise this shard's G W_i, staged to the host for C2. */
static weft_status_t dev_dx(weft_vocab_mb_t *mb, const int64_t *labels, float *dx)
{
    weft_ctx_t *ctx = mb->v->ctx;
    struct weft__vocab_dev *dv = mb->dev;
    cudaStream_t stream = dv->stream;
    int n = (int)mb->n, h = (int)mb->v->hidden, len = (int)mb->v->range.length;
    size_t bytes = (size_t)n * (size_t)h * sizeof(float);
    if (mb->algo == WEFT_VOCAB_ALG2) {
        CUDA_CHECK(ctx, weft__vk_scale_dx(mb->n, (size_t)h, labels, dv->wtok, dv->d, dx, stream),
                   "dX = w D");
        CUDA_CHECK(ctx, cudaStreamSynchronize(stream), "T");
        return WEFT_OK;
    }
    const float one = 1.0f, zero = 0.0f;
    if (len > 0) {
        BLAS_CHECK(ctx,
                   cublasSgemm(dv->blas, CUBLAS_OP_N, CUBLAS_OP_N, h, n, len, &one, mb->w, h, dv->y,
                               len, &zero, dx, h),
                   "dX_i = G W");
    } else {
        CUDA_CHECK(ctx, cudaMemsetAsync(dx, 0, bytes, stream), "dX_i = 0");
    }
    CUDA_CHECK(ctx, weft__vxd_copy_sync(mb->dx_host, dx, bytes, stream), "dX to host");
    return WEFT_OK;
}

weft_status_t weft__vxd_t(weft_vocab_mb_t *mb, float *dx, float *dw)
{
    weft_ctx_t *ctx = mb->v->ctx;
    weft_status_t st = dev_alloc(mb);
    if (st != WEFT_OK) {
        return st;
    }
    struct weft__vocab_dev *dv = mb->dev;
    cudaStream_t stream = dv->stream;
    size_t n = mb->n, h = mb->v->hidden;
    const int64_t *labels = NULL;
    if (n > 0) {
        if ((st = weft__vxd_labels(mb, &labels)) != WEFT_OK) {
            return st;
        }
        CUDA_CHECK(ctx, weft__vxd_copy_sync(dv->coef, mb->coef, n * sizeof(float), stream),
                   "coef to device");
        CUDA_CHECK(ctx, weft__vxd_copy_sync(dv->wtok, mb->wtok, n * sizeof(float), stream),
                   "weights to device");
        if (mb->algo == WEFT_VOCAB_ALG2) {
            size_t stride = weft__rec_floats(mb->algo, h) * sizeof(float);
            CUDA_CHECK(ctx,
                       cudaMemcpy2DAsync(dv->d, h * sizeof(float), mb->rec + WEFT__REC_A, stride,
                                         h * sizeof(float), n, cudaMemcpyHostToDevice, stream),
                       "D to device");
        }
        if (mb->block > 0) {
            return weft__vxd_t_blocked(mb, labels, dx, dw);
        }
        weft__xent_dims_t d = weft__vocab_mb_dims(mb);
        CUDA_CHECK(ctx,
                   weft__vk_make_g(n, mb->v->range.length, mb->v->range.start, labels,
                                   weft__ls_keep(&d), weft__ls_spread(&d), dv->coef, dv->wtok,
                                   dv->y, stream),
                   "G");
    }
    if ((st = dev_dw(mb, dw)) != WEFT_OK) {
        return st;
    }
    if (n == 0) {
        CUDA_CHECK(ctx, cudaStreamSynchronize(stream), "T");
        return WEFT_OK;
    }
    return dev_dx(mb, labels, dx);
}

weft_status_t weft__vxd_dx_upload(weft_vocab_mb_t *mb)
{
    cudaStream_t stream = mb->dev->stream;
    size_t bytes = mb->n * mb->v->hidden * sizeof(float);
    if (bytes == 0) {
        return WEFT_OK;
    }
    CUDA_CHECK(mb->v->ctx, weft__vxd_copy_sync(mb->dx, mb->dx_host, bytes, stream), "dX to device");
    return WEFT_OK;
}

/* Device ids for a kernel: the caller's, or a temporary copy (*tmp, to cudaFree). */
static weft_status_t dev_ids(const weft_vocab_t *v, const int64_t *ids_user,
                             const int64_t *ids_host, size_t n, const int64_t **out, int64_t **tmp)
{
    cudaStream_t stream = weft__vxd_stream(v);
    *tmp = NULL;
    if (weft__vocab_is_device(ids_user)) {
        *out = ids_user;
        return WEFT_OK;
    }
    CUDA_CHECK(v->ctx, cudaMalloc((void **)tmp, n * sizeof(int64_t)), "cudaMalloc");
    cudaError_t e = weft__vxd_copy_sync(*tmp, ids_host, n * sizeof(int64_t), stream);
    if (e != cudaSuccess) {
        cudaFree(*tmp);
        *tmp = NULL;
        return weft__vxd_cuda_fail(v->ctx, e, "ids to device");
    }
    *out = *tmp;
    return WEFT_OK;
}

weft_status_t weft__vxd_embed_lookup(const weft_vocab_t *v, const float *table,
                                     const int64_t *ids_user, const int64_t *ids_host, size_t n,
                                     float *out)
{
    cudaStream_t stream = weft__vxd_stream(v);
    const int64_t *ids;
    int64_t *tmp;
    weft_status_t st = dev_ids(v, ids_user, ids_host, n, &ids, &tmp);
    if (st != WEFT_OK) {
        return st;
    }
    cudaError_t e = weft__vk_embed_lookup(n, v->hidden, v->range.start, v->range.length, ids, table,
                                          out, stream);
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(stream);
    }
    cudaFree(tmp);
    return e == cudaSuccess ? WEFT_OK : weft__vxd_cuda_fail(v->ctx, e, "embedding lookup");
}

weft_status_t weft__vxd_embed_scatter(const weft_vocab_t *v, const float *grad_out,
                                      const int64_t *ids_user, const int64_t *ids_host, size_t n,
                                      float *grad_table)
{
    cudaStream_t stream = weft__vxd_stream(v);
    const int64_t *ids;
    int64_t *tmp;
    weft_status_t st = dev_ids(v, ids_user, ids_host, n, &ids, &tmp);
    if (st != WEFT_OK) {
        return st;
    }
    cudaError_t e = weft__vk_embed_scatter(n, v->hidden, v->range.start, v->range.length, ids,
                                           grad_out, grad_table, stream);
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(stream);
    }
    cudaFree(tmp);
    return e == cudaSuccess ? WEFT_OK : weft__vxd_cuda_fail(v->ctx, e, "embedding scatter");
}
