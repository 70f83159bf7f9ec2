/*
 * Device side of xent_dtype.c: float32 copies of bf16 / f16 tensors on the current
 * device, converted on the vocabulary's group stream.
 */
#include "vocab/kernels.h"
#include "vocab/xent_cuda.h"

weft_status_t weft__vxd_alloc_buf(const weft_vocab_t *v, size_t bytes, float **out)
{
    CUDA_CHECK(v->ctx, cudaMalloc((void **)out, bytes), "cudaMalloc");
    return WEFT_OK;
}

void weft__vxd_free_buf(float *p)
{
    cudaFree(p);
}

weft_status_t weft__vxd_convert(const weft_vocab_t *v, weft_dtype_t dtype, bool to_f32, void *dst,
                                const void *src, size_t count)
{
    cudaStream_t stream = weft__vxd_stream(v);
    CUDA_CHECK(v->ctx, weft__vk_convert(count, dtype == WEFT_BF16, to_f32, src, dst, stream),
               "dtype conversion");
    CUDA_CHECK(v->ctx, cudaStreamSynchronize(stream), "dtype conversion");
    return WEFT_OK;
}
