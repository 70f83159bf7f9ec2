/*
 * bf16 and f16 vocabularies (weft_vocab_params_t.dtype): the output layer's passes run
 * in float32 on float32 copies of X and W, and ∇X and ∇W are rounded to the caller's
 * dtype once they are complete, so every product is accumulated in float32 (as cuBLAS's
 * CUBLAS_COMPUTE_32F and PyTorch's CPU matmul do for bf16). The copies live in the memory
 * of the call (host, or the device through kernels.cu):
 *   X   per microbatch (mb->xf): T needs it after other microbatches' passes;
 *   W   per vocabulary (v->wf), converted again at every S and T (W stays unchanged from
 *       S to T by the contract, but another microbatch may have used other weights);
 *   ∇W  per vocabulary (v->dwf), loaded from the caller's first when accumulating;
 *   ∇X  per microbatch (mb->dxf): C2 reduces it in float32 before it is rounded.
 * For a float32 vocabulary nothing is copied: the views are the caller's buffers.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/reduce.h"
#include "comm/core.h"
#include "vocab/vocab_impl.h"

static void free_buf(float *p, bool dev)
{
    if (dev) {
#ifdef WEFT_HAVE_CUDA
        weft__vxd_free_buf(p);
#endif
    } else {
        free(p);
    }
}

/* A float32 buffer of @p count elements in host or device memory, kept across calls. */
static weft_status_t scratch(const weft_vocab_t *v, bool dev, float **buf, bool *buf_dev,
                             size_t count)
{
    if (*buf != NULL && *buf_dev == dev) {
        return WEFT_OK;
    }
    free_buf(*buf, *buf_dev);
    *buf = NULL;
    size_t bytes = (count > 0 ? count : 1) * sizeof(float);
    if (dev) {
#ifdef WEFT_HAVE_CUDA
        weft_status_t st = weft__vxd_alloc_buf(v, bytes, buf);
        if (st != WEFT_OK) {
            return st;
        }
#endif
    } else if ((*buf = malloc(bytes)) == NULL) {
        return weft__error(v->ctx, WEFT_ERR_NO_MEMORY, "vocab: no memory for %zu float32 copies",
                           count);
    }
    *buf_dev = dev;
    return WEFT_OK;
}

static weft_status_t to_f32(const weft_vocab_t *v, bool dev, float *dst, const void *src,
                            size_t count)
{
    if (dev) {
#ifdef WEFT_HAVE_CUDA
        return weft__vxd_convert(v, v->dtype, true, dst, src, count);
#endif
    }
    const uint16_t *s = src;
    if (v->dtype == WEFT_BF16) {
        for (size_t i = 0; i < count; i++) {
            dst[i] = weft__bf16_to_f32(s[i]);
        }
    } else {
        for (size_t i = 0; i < count; i++) {
            dst[i] = weft__f16_to_f32(s[i]);
        }
    }
    return WEFT_OK;
}

static weft_status_t from_f32(const weft_vocab_t *v, bool dev, void *dst, const float *src,
                              size_t count)
{
    if (dev) {
#ifdef WEFT_HAVE_CUDA
        return weft__vxd_convert(v, v->dtype, false, dst, (void *)src, count);
#endif
    }
    uint16_t *d = dst;
    if (v->dtype == WEFT_BF16) {
        for (size_t i = 0; i < count; i++) {
            d[i] = weft__f32_to_bf16(src[i]);
        }
    } else {
        for (size_t i = 0; i < count; i++) {
            d[i] = weft__f32_to_f16(src[i]);
        }
    }
    return WEFT_OK;
}

size_t weft__vocab_elem_size(const weft_vocab_t *v)
{
    return v->dtype == WEFT_F32 ? sizeof(float) : sizeof(uint16_t);
}

/* W of the shard in float32 (padding rows are never read, so only real rows convert). */
static weft_status_t w_view(weft_vocab_mb_t *mb)
{
    weft_vocab_t *v = mb->v;
    size_t rows = v->range.padded_length, h = v->hidden;
    weft_status_t st = scratch(v, mb->on_device, &v->wf, &v->wf_dev, rows * h);
    if (st == WEFT_OK && v->range.length > 0) {
        st = to_f32(v, mb->on_device, v->wf, mb->w_user, v->range.length * h);
    }
    mb->w = v->wf;
    return st;
}

weft_status_t weft__vx_s_views(weft_vocab_mb_t *mb, const void *x, const void *w)
{
    weft_vocab_t *v = mb->v;
    mb->x_user = x;
    mb->w_user = w;
    if (v->dtype == WEFT_F32) {
        mb->x = x;
        mb->w = w;
        return WEFT_OK;
    }
    size_t h = v->hidden;
    weft_status_t st = scratch(v, mb->on_device, &mb->xf, &mb->xf_dev, mb->max_tokens * h);
    if (st == WEFT_OK && mb->n > 0) {
        st = to_f32(v, mb->on_device, mb->xf, x, mb->n * h);
    }
    mb->x = mb->xf;
    return st == WEFT_OK ? w_view(mb) : st;
}

weft_status_t weft__vx_t_views(weft_vocab_mb_t *mb, void *dx, void *dw, float **dxf, float **dwf)
{
    weft_vocab_t *v = mb->v;
    mb->dx_user = dx;
    mb->dw_user = dw;
    if (v->dtype == WEFT_F32) {
        *dxf = dx;
        *dwf = dw;
        return WEFT_OK;
    }
    size_t h = v->hidden, pl = v->range.padded_length;
    weft_status_t st = w_view(mb);
    if (st == WEFT_OK) {
        st = scratch(v, mb->on_device, &mb->dxf, &mb->dxf_dev, mb->max_tokens * h);
    }
    if (st == WEFT_OK) {
        st = scratch(v, mb->on_device, &v->dwf, &v->dwf_dev, pl * h);
    }
    if (st == WEFT_OK && mb->accumulate_dw) {
        st = to_f32(v, mb->on_device, v->dwf, dw, pl * h);
    }
    *dxf = mb->dxf;
    *dwf = v->dwf;
    return st;
}

weft_status_t weft__vx_t_store(weft_vocab_mb_t *mb)
{
    weft_vocab_t *v = mb->v;
    if (v->dtype == WEFT_F32) {
        return WEFT_OK;
    }
    weft_status_t st =
        from_f32(v, mb->on_device, mb->dw_user, v->dwf, v->range.padded_length * v->hidden);
    if (st == WEFT_OK && mb->algo == WEFT_VOCAB_ALG2) {
        st = weft__vx_dx_store(mb); /* complete after T */
    }
    return st;
}

weft_status_t weft__vx_dx_store(weft_vocab_mb_t *mb)
{
    weft_vocab_t *v = mb->v;
    if (v->dtype == WEFT_F32 || mb->n == 0) {
        return WEFT_OK;
    }
    return from_f32(v, mb->on_device, mb->dx_user, mb->dxf, mb->n * v->hidden);
}

void weft__vx_free_mb(weft_vocab_mb_t *mb)
{
    free_buf(mb->xf, mb->xf_dev);
    free_buf(mb->dxf, mb->dxf_dev);
}

void weft__vx_free_vocab(weft_vocab_t *v)
{
    free_buf(v->wf, v->wf_dev);
    free_buf(v->dwf, v->dwf_dev);
}
