/* Copies of migration chunks to and from CUDA buffers (see device.h). */
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "migrate/layout/box.h"
#include "migrate/engine/device.h"

typedef struct dev_copy {
    cudaError_t err;
    cudaStream_t stream; /* enqueue on it (async); NULL: cudaMemcpy */
    int async;
} dev_copy_t;

static bool run_copy(void *dst, const void *src, size_t n, void *arg)
{
    dev_copy_t *c = arg;
    c->err = c->async ? cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, c->stream)
                      : cudaMemcpy(dst, src, n, cudaMemcpyDefault);
    return c->err == cudaSuccess;
}

bool weft__mig_dev_copy(void *dst, const weft_box_t *dst_box, const void *src,
                        const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem,
                        char *why, size_t why_len)
{
    dev_copy_t c = {cudaSuccess, NULL, 0};
    if (weft__box_copy_with(dst, dst_box, src, src_box, b, nd, elem, run_copy, &c)) {
        return true;
    }
    (void)cudaGetLastError();
    snprintf(why, why_len, "cudaMemcpy: %s", cudaGetErrorString(c.err));
    return false;
}

bool weft__mig_dev_copy_on(void *stream, void *dst, const weft_box_t *dst_box, const void *src,
                           const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem,
                           char *why, size_t why_len)
{
    dev_copy_t c = {cudaSuccess, (cudaStream_t)stream, 1};
    if (weft__box_copy_with(dst, dst_box, src, src_box, b, nd, elem, run_copy, &c)) {
        return true;
    }
    (void)cudaGetLastError();
    snprintf(why, why_len, "cudaMemcpyAsync: %s", cudaGetErrorString(c.err));
    return false;
}

int weft__mig_dev_of(const void *ptr)
{
    struct cudaPointerAttributes a;
    int dev = 0;
    if (ptr != NULL && cudaPointerGetAttributes(&a, ptr) == cudaSuccess && a.device >= 0) {
        return a.device;
    }
    if (cudaGetDevice(&dev) != cudaSuccess) {
        dev = 0;
    }
    (void)cudaGetLastError();
    return dev;
}
