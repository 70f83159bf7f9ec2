#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "comm/device/cublas_lazy.h"

static struct {
    void *lib;
    const char *name; /* the file name that loaded */
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const float *, const float *, int, const float *, int, const float *,
                            float *, int);
} cublas;
static pthread_once_t cublas_once = PTHREAD_ONCE_INIT;

/* Process-wide by nature (one copy of cuBLAS per process), written once under
 * pthread_once and read-only afterwards. */
static void cublas_load(void)
{
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && cublas.lib == NULL; i++) {
        cublas.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        cublas.name = names[i];
    }
    if (cublas.lib == NULL) {
        return;
    }
    *(void **)&cublas.create = dlsym(cublas.lib, "cublasCreate_v2");
    *(void **)&cublas.destroy = dlsym(cublas.lib, "cublasDestroy_v2");
    *(void **)&cublas.set_stream = dlsym(cublas.lib, "cublasSetStream_v2");
    *(void **)&cublas.sgemm = dlsym(cublas.lib, "cublasSgemm_v2");
}

static int cublas_ready(void)
{
    pthread_once(&cublas_once, cublas_load);
    return cublas.create != NULL && cublas.destroy != NULL && cublas.set_stream != NULL &&
           cublas.sgemm != NULL;
}

const char *weft__cublas_library(void)
{
    return cublas_ready() ? cublas.name : NULL;
}

cublasStatus_t weft__cublas_create(cublasHandle_t *handle)
{
    return cublas_ready() ? cublas.create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t weft__cublas_destroy(cublasHandle_t handle)
{
    return cublas_ready() ? cublas.destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t weft__cublas_set_stream(cublasHandle_t handle, cudaStream_t stream)
{
    return cublas_ready() ? cublas.set_stream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t weft__cublas_sgemm(cublasHandle_t handle, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const float *alpha, const float *a, int lda, const float *b,
                                  int ldb, const float *beta, float *c, int ldc)
{
    if (!cublas_ready()) {
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    return cublas.sgemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
