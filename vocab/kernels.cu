/*
 * CUDA kernels of the vocabulary-parallel output layer and embedding. The GEMMs are
 * cuBLAS calls in xent_cuda.c; these are the row-wise and element-wise parts.
 * Row kernels use one block per token; exponentials are of values <= 0 only.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "vocab/kernels.h"

#define ROW_THREADS 256
#define ELEM_THREADS 256

namespace
{

/* Owned column of a label in the shard [start, start + len), or -1. */
__device__ __forceinline__ long long owned_col(int64_t label, size_t start, size_t len)
{
    if (label < 0 || (uint64_t)label < start || (uint64_t)label - start >= len) {
        return -1;
    }
    return (long long)((uint64_t)label - start);
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

/* Reduce over the block; every thread gets the result. */
template <bool IS_MAX> __device__ float block_reduce(float v, float *shared)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) {
        shared[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        float x = lane < nwarps ? shared[lane] : (IS_MAX ? -INFINITY : 0.0f);
        x = IS_MAX ? warp_max(x) : warp_sum(x);
        if (lane == 0) {
            shared[32] = x;
        }
    }
    __syncthreads();
    float r = shared[32];
    __syncthreads(); /* shared is reused by the next reduction */
    return r;
}

/* y <- exp(y - m) over one row; returns the row's sum on every thread. */
__device__ float row_exp_sum(float *row, size_t len, float m, float *shared)
{
    float s = 0.0f;
    for (size_t v = threadIdx.x; v < len; v += blockDim.x) {
        float e = expf(row[v] - m);
        row[v] = e;
        s += e;
    }
    return block_reduce<false>(s, shared);
}

/* Σ of one row (before exp), on every thread; 0 when label smoothing is off. */
__device__ float row_sum(const float *row, size_t len, float spread, float *shared)
{
    if (spread == 0.0f) {
        return 0.0f;
    }
    float s = 0.0f;
    for (size_t v = threadIdx.x; v < len; v += blockDim.x) {
        s += row[v];
    }
    return block_reduce<false>(s, shared);
}

__global__ void row_stats_kernel(size_t len, size_t start, size_t rec_stride, const int64_t *labels,
                                 float keep, float spread, float *y, float *rec)
{
    __shared__ float shared[33];
    size_t j = blockIdx.x;
    float *row = y + j * len;
    float m = -INFINITY;
    for (size_t v = threadIdx.x; v < len; v += blockDim.x) {
        m = fmaxf(m, row[v]);
    }
    m = block_reduce<true>(m, shared);
    if (rec_stride == 0) {
        if (threadIdx.x == 0) {
            rec[j] = m;
        }
        return;
    }
    long long col = owned_col(labels[j], start, len);
    /* read before the row turns into exp */
    float t = (col >= 0 ? keep * row[col] : 0.0f) + spread * row_sum(row, len, spread, shared);
    __syncthreads();
    float s = row_exp_sum(row, len, m, shared);
    if (threadIdx.x == 0) {
        float *r = rec + j * rec_stride;
        r[0] = m;
        r[1] = s;
        r[2] = t;
    }
}

__global__ void naive_sums_kernel(size_t n, size_t len, size_t start, const int64_t *labels,
                                  float keep, float spread, float *y, float *rec)
{
    __shared__ float shared[33];
    size_t j = blockIdx.x;
    float *row = y + j * len;
    long long col = owned_col(labels[j], start, len);
    float t = (col >= 0 ? keep * row[col] : 0.0f) + spread * row_sum(row, len, spread, shared);
    __syncthreads();
    float s = row_exp_sum(row, len, rec[j], shared);
    if (threadIdx.x == 0) {
        rec[n + j] = s;
        rec[2 * n + j] = t;
    }
}

__global__ void gather_b_kernel(size_t n, size_t h, size_t len, size_t start, size_t rec_stride,
                                const int64_t *labels, float keep, float spread, const float *wsum,
                                const float *w, float *rec)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * h;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / h, k = i % h;
        long long col = owned_col(labels[j], start, len);
        float b = col >= 0 ? keep * w[(size_t)col * h + k] : 0.0f;
        if (spread != 0.0f && labels[j] >= 0) {
            b += spread * wsum[k];
        }
        rec[j * rec_stride + 3 + h + k] = b;
    }
}

/* Blocked S: the records start as an empty part (m = -inf, s = t = 0, A = 0). */
__global__ void rec_init_kernel(size_t n, size_t rec_stride, size_t na, float *rec)
{
    size_t per = 3 + na;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * per;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / per, k = i % per;
        rec[j * rec_stride + k] = k == 0 ? -INFINITY : 0.0f;
    }
}

/* Blocked S, one block of rows [b0, b0 + bl) of the shard: merge the block's statistics
 * into the token's record, y <- exp(y - m_new), scale[j] = e^{m_old - m_new}. */
__global__ void online_stats_kernel(size_t bl, size_t b0, size_t start, size_t len,
                                    size_t rec_stride, const int64_t *labels, float keep,
                                    float spread, float *y, float *rec, float *scale)
{
    __shared__ float shared[33];
    size_t j = blockIdx.x;
    float *row = y + j * bl;
    float *r = rec + j * rec_stride;
    float bm = -INFINITY;
    for (size_t v = threadIdx.x; v < bl; v += blockDim.x) {
        bm = fmaxf(bm, row[v]);
    }
    bm = block_reduce<true>(bm, shared);
    long long col = owned_col(labels[j], start, len);
    long long c = col >= (long long)b0 && col < (long long)(b0 + bl) ? col - (long long)b0 : -1;
    float t = (c >= 0 ? keep * row[c] : 0.0f) + spread * row_sum(row, bl, spread, shared);
    float m_old = r[0];
    float m = fmaxf(m_old, bm);
    float sc = m_old == -INFINITY ? 0.0f : expf(m_old - m);
    __syncthreads();
    float s = row_exp_sum(row, bl, m, shared); /* ends with a barrier: r[0] was read by all */
    if (threadIdx.x == 0) {
        r[0] = m;
        r[1] = r[1] * sc + s;
        r[2] += t;
        scale[j] = sc;
    }
}

__global__ void scale_a_kernel(size_t n, size_t h, size_t rec_stride, const float *scale,
                               float *rec)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * h;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / h, k = i % h;
        rec[j * rec_stride + 3 + k] *= scale[j];
    }
}

/* Blocked T: y (the block's logits again) <- wtok * (exp(y - mloc) coef - q). */
__global__ void make_g_blocked_kernel(size_t n, size_t bl, size_t b0, size_t start, size_t len,
                                      const int64_t *labels, float keep, float spread,
                                      const float *mloc, const float *coef, const float *wtok,
                                      float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * bl;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / bl, v = i % bl;
        float wj = wtok[j];
        if (labels[j] < 0 || wj == 0.0f) {
            y[i] = 0.0f;
            continue;
        }
        float g = expf(y[i] - mloc[j]) * (coef[j] * wj) - spread * wj;
        if (owned_col(labels[j], start, len) == (long long)(b0 + v)) {
            g -= keep * wj;
        }
        y[i] = g;
    }
}

__global__ void col_sum_kernel(size_t len, size_t h, const float *w, float *out)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < h;
         k += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (size_t v = 0; v < len; v++) {
            s += w[v * h + k];
        }
        out[k] = s;
    }
}

__global__ void make_g_kernel(size_t n, size_t len, size_t start, const int64_t *labels, float keep,
                              float spread, const float *coef, const float *wtok, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * len;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / len, v = i % len;
        float wj = wtok[j];
        if (labels[j] < 0 || wj == 0.0f) {
            y[i] = 0.0f;
            continue;
        }
        float g = y[i] * (coef[j] * wj);
        if (owned_col(labels[j], start, len) == (long long)v) {
            g -= keep * wj;
        }
        if (spread != 0.0f) {
            g -= spread * wj;
        }
        y[i] = g;
    }
}

__global__ void scale_dx_kernel(size_t n, size_t h, const int64_t *labels, const float *wtok,
                                const float *d, float *dx)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * h;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / h;
        dx[i] = labels[j] < 0 ? 0.0f : wtok[j] * d[i];
    }
}

__global__ void embed_lookup_kernel(size_t n, size_t h, size_t start, size_t len,
                                    const int64_t *ids, const float *table, float *out)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * h;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / h, k = i % h;
        long long row = owned_col(ids[j], start, len);
        out[i] = row >= 0 ? table[(size_t)row * h + k] : 0.0f;
    }
}

__global__ void embed_scatter_kernel(size_t n, size_t h, size_t start, size_t len,
                                     const int64_t *ids, const float *grad_out, float *grad_table)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * h;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / h, k = i % h;
        long long row = owned_col(ids[j], start, len);
        if (row >= 0) {
            atomicAdd(&grad_table[(size_t)row * h + k], grad_out[i]);
        }
    }
}

/* bf16 / f16 <-> float32, rounding to nearest even on the way out. */
__global__ void convert_kernel(size_t count, int bf16, int to_f32, const void *src, void *dst)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        if (to_f32) {
            ((float *)dst)[i] = bf16 ? __bfloat162float(((const __nv_bfloat16 *)src)[i])
                                     : __half2float(((const __half *)src)[i]);
        } else if (bf16) {
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(((const float *)src)[i]);
        } else {
            ((__half *)dst)[i] = __float2half_rn(((const float *)src)[i]);
        }
    }
}

/* Grid for a grid-stride loop over @p count elements. */
unsigned elem_blocks(size_t count)
{
    size_t b = (count + ELEM_THREADS - 1) / ELEM_THREADS;
    return (unsigned)(b == 0 ? 1 : (b > 65535 ? 65535 : b));
}

} // namespace

extern "C" {

cudaError_t weft__vk_row_stats(size_t n, size_t len, size_t start, size_t rec_stride,
                               const int64_t *labels, float keep, float spread, float *y,
                               float *rec, cudaStream_t stream)
{
    if (n == 0) {
        return cudaSuccess;
    }
    row_stats_kernel<<<(unsigned)n, ROW_THREADS, 0, stream>>>(len, start, rec_stride, labels, keep,
                                                              spread, y, rec);
    return cudaGetLastError();
}

cudaError_t weft__vk_naive_sums(size_t n, size_t len, size_t start, const int64_t *labels,
                                float keep, float spread, float *y, float *rec, cudaStream_t stream)
{
    if (n == 0) {
        return cudaSuccess;
    }
    naive_sums_kernel<<<(unsigned)n, ROW_THREADS, 0, stream>>>(n, len, start, labels, keep, spread,
                                                               y, rec);
    return cudaGetLastError();
}

cudaError_t weft__vk_gather_b(size_t n, size_t h, size_t len, size_t start, size_t rec_stride,
                              const int64_t *labels, float keep, float spread, const float *wsum,
                              const float *w, float *rec, cudaStream_t stream)
{
    gather_b_kernel<<<elem_blocks(n * h), ELEM_THREADS, 0, stream>>>(
        n, h, len, start, rec_stride, labels, keep, spread, wsum, w, rec);
    return cudaGetLastError();
}

cudaError_t weft__vk_rec_init(size_t n, size_t rec_stride, size_t na, float *rec,
                              cudaStream_t stream)
{
    rec_init_kernel<<<elem_blocks(n * (3 + na)), ELEM_THREADS, 0, stream>>>(n, rec_stride, na, rec);
    return cudaGetLastError();
}

cudaError_t weft__vk_online_stats(size_t n, size_t bl, size_t b0, size_t start, size_t len,
                                  size_t rec_stride, const int64_t *labels, float keep,
                                  float spread, float *y, float *rec, float *scale,
                                  cudaStream_t stream)
{
    if (n == 0) {
        return cudaSuccess;
    }
    online_stats_kernel<<<(unsigned)n, ROW_THREADS, 0, stream>>>(
        bl, b0, start, len, rec_stride, labels, keep, spread, y, rec, scale);
    return cudaGetLastError();
}

cudaError_t weft__vk_scale_a(size_t n, size_t h, size_t rec_stride, const float *scale, float *rec,
                             cudaStream_t stream)
{
    scale_a_kernel<<<elem_blocks(n * h), ELEM_THREADS, 0, stream>>>(n, h, rec_stride, scale, rec);
    return cudaGetLastError();
}

cudaError_t weft__vk_make_g_blocked(size_t n, size_t bl, size_t b0, size_t start, size_t len,
                                    const int64_t *labels, float keep, float spread,
                                    const float *mloc, const float *coef, const float *wtok,
                                    float *y, cudaStream_t stream)
{
    make_g_blocked_kernel<<<elem_blocks(n * bl), ELEM_THREADS, 0, stream>>>(
        n, bl, b0, start, len, labels, keep, spread, mloc, coef, wtok, y);
    return cudaGetLastError();
}

cudaError_t weft__vk_convert(size_t count, int bf16, int to_f32, const void *src, void *dst,
                             cudaStream_t stream)
{
    if (count == 0) {
        return cudaSuccess;
    }
    convert_kernel<<<elem_blocks(count), ELEM_THREADS, 0, stream>>>(count, bf16, to_f32, src, dst);
    return cudaGetLastError();
}

cudaError_t weft__vk_col_sum(size_t len, size_t h, const float *w, float *out, cudaStream_t stream)
{
    col_sum_kernel<<<elem_blocks(h), ELEM_THREADS, 0, stream>>>(len, h, w, out);
    return cudaGetLastError();
}

cudaError_t weft__vk_make_g(size_t n, size_t len, size_t start, const int64_t *labels, float keep,
                            float spread, const float *coef, const float *wtok, float *y,
                            cudaStream_t stream)
{
    make_g_kernel<<<elem_blocks(n * len), ELEM_THREADS, 0, stream>>>(n, len, start, labels, keep,
                                                                     spread, coef, wtok, y);
    return cudaGetLastError();
}

cudaError_t weft__vk_scale_dx(size_t n, size_t h, const int64_t *labels, const float *wtok,
                              const float *d, float *dx, cudaStream_t stream)
{
    scale_dx_kernel<<<elem_blocks(n * h), ELEM_THREADS, 0, stream>>>(n, h, labels, wtok, d, dx);
    return cudaGetLastError();
}

cudaError_t weft__vk_embed_lookup(size_t n, size_t h, size_t start, size_t len, const int64_t *ids,
                                  const float *table, float *out, cudaStream_t stream)
{
    embed_lookup_kernel<<<elem_blocks(n * h), ELEM_THREADS, 0, stream>>>(n, h, start, len, ids,
                                                                         table, out);
    return cudaGetLastError();
}

cudaError_t weft__vk_embed_scatter(size_t n, size_t h, size_t start, size_t len, const int64_t *ids,
                                   const float *grad_out, float *grad_table, cudaStream_t stream)
{
    embed_scatter_kernel<<<elem_blocks(n * h), ELEM_THREADS, 0, stream>>>(n, h, start, len, ids,
                                                                          grad_out, grad_table);
    return cudaGetLastError();
}

} // extern "C"
