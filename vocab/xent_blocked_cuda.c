/*
 * The blocked output layer on the device: xent_blocked.c's passes with cuBLAS GEMMs and
 * the kernels of kernels.cu, on the group's stream. The same records leave S, so C1 and
 * the host's bookkeeping do not change; T computes each block's logits again.
 */
#include "comm/device/cublas_lazy.h"
#include "vocab/kernels.h"
#include "vocab/xent_cuda.h"

/* Y_b = X W_bᵀ into the microbatch's y [n, bl]. */
static weft_status_t block_logits(weft_vocab_mb_t *mb, const float *wb, size_t bl)
{
    const float one = 1.0f, zero = 0.0f;
    int n = (int)mb->n, h = (int)mb->v->hidden;
    /* Row-major Y_b = X W_bᵀ is column-major Y_bᵀ = W_b Xᵀ. */
    BLAS_CHECK(mb->v->ctx,
               cublasSgemm(mb->dev->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)bl, n, h, &one, wb, h,
                           mb->x, h, &zero, mb->dev->y, (int)bl),
               "Y_b = X W_b^T");
    return WEFT_OK;
}

weft_status_t weft__vxd_s_blocked(weft_vocab_mb_t *mb, const int64_t *labels)
{
    weft_ctx_t *ctx = mb->v->ctx;
    weft_status_t st;
    struct weft__vocab_dev *dv = mb->dev;
    cudaStream_t stream = dv->stream;
    weft__xent_dims_t d = weft__vocab_mb_dims(mb);
    size_t n = d.n, h = d.h, len = d.len, blk = d.block;
    size_t stride = weft__rec_floats(mb->algo, h);
    bool alg2 = mb->algo == WEFT_VOCAB_ALG2;
    float keep = weft__ls_keep(&d), spread = weft__ls_spread(&d);
    const float one = 1.0f;
    CUDA_CHECK(ctx, weft__vk_rec_init(n, stride, alg2 ? h : 0, dv->rec, stream), "records");
    for (size_t b0 = 0; b0 < len; b0 += blk) {
        size_t bl = len - b0 < blk ? len - b0 : blk;
        const float *wb = mb->w + b0 * h;
        if ((st = block_logits(mb, wb, bl)) != WEFT_OK) {
            return st;
        }
        CUDA_CHECK(ctx,
                   weft__vk_online_stats(n, bl, b0, d.start, len, stride, labels, keep, spread,
                                         dv->y, dv->rec, dv->scale, stream),
                   "block statistics");
        if (alg2) {
            CUDA_CHECK(ctx, weft__vk_scale_a(n, h, stride, dv->scale, dv->rec, stream),
                       "A rescaled");
            BLAS_CHECK(ctx,
                       cublasSgemm(dv->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)h, (int)n, (int)bl,
                                   &one, wb, (int)h, dv->y, (int)bl, &one, dv->rec + WEFT__REC_A,
                                   (int)stride),
                       "A += E_b W_b");
        }
    }
    if (alg2) {
        if (spread != 0.0f) {
            CUDA_CHECK(ctx, weft__vk_col_sum(len, h, mb->w, dv->wsum, stream), "column sums of W");
        }
        CUDA_CHECK(ctx,
                   weft__vk_gather_b(n, h, len, d.start, stride, labels, keep, spread, dv->wsum,
                                     mb->w, dv->rec, stream),
                   "B");
    }
    CUDA_CHECK(ctx, weft__vxd_copy_sync(mb->rec, dv->rec, n * stride * sizeof(float), stream),
               "records to host");
    for (size_t j = 0; j < n; j++) {
        mb->mloc[j] = mb->rec[j * stride + WEFT__REC_M];
    }
    return WEFT_OK;
}

weft_status_t weft__vxd_t_blocked(weft_vocab_mb_t *mb, const int64_t *labels, float *dx, float *dw)
{
    weft_ctx_t *ctx = mb->v->ctx;
    weft_status_t st;
    struct weft__vocab_dev *dv = mb->dev;
    cudaStream_t stream = dv->stream;
    weft__xent_dims_t d = weft__vocab_mb_dims(mb);
    size_t n = d.n, h = d.h, len = d.len, blk = d.block;
    size_t pl = mb->v->range.padded_length;
    bool alg2 = mb->algo == WEFT_VOCAB_ALG2;
    const float one = 1.0f, beta_w = mb->accumulate_dw ? 1.0f : 0.0f;
    CUDA_CHECK(ctx, weft__vxd_copy_sync(dv->mloc, mb->mloc, n * sizeof(float), stream),
               "maxima to device");
    for (size_t b0 = 0; b0 < len; b0 += blk) {
        size_t bl = len - b0 < blk ? len - b0 : blk;
        const float *wb = mb->w + b0 * h;
        if ((st = block_logits(mb, wb, bl)) != WEFT_OK) {
            return st;
        }
        CUDA_CHECK(ctx,
                   weft__vk_make_g_blocked(n, bl, b0, d.start, len, labels, weft__ls_keep(&d),
                                           weft__ls_spread(&d), dv->mloc, dv->coef, dv->wtok, dv->y,
                                           stream),
                   "G_b");
        /* ∇W_b = G_bᵀ X: column-major ∇W_bᵀ = Xᵀ G_b. */
        BLAS_CHECK(ctx,
                   cublasSgemm(dv->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)h, (int)bl, (int)n, &one,
                               mb->x, (int)h, dv->y, (int)bl, &beta_w, dw + b0 * h, (int)h),
                   "dW_b = G_b^T X");
        if (!alg2) {
            const float beta_x = b0 == 0 ? 0.0f : 1.0f;
            BLAS_CHECK(ctx,
                       cublasSgemm(dv->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)h, (int)n, (int)bl,
                                   &one, wb, (int)h, dv->y, (int)bl, &beta_x, dx, (int)h),
                       "dX_i += G_b W_b");
        }
    }
    if (!mb->accumulate_dw && pl > len) {
        CUDA_CHECK(ctx, cudaMemsetAsync(dw + len * h, 0, (pl - len) * h * sizeof(float), stream),
                   "dW padding");
    }
    if (alg2) {
        CUDA_CHECK(ctx, weft__vk_scale_dx(n, h, labels, dv->wtok, dv->d, dx, stream), "dX = w D");
        CUDA_CHECK(ctx, cudaStreamSynchronize(stream), "T");
        return WEFT_OK;
    }
    CUDA_CHECK(ctx, weft__vxd_copy_sync(mb->dx_host, dx, n * h * sizeof(float), stream),
               "dX to host");
    return WEFT_OK;
}
