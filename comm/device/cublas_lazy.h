/*
 * cuBLAS, loaded on first use. Linking libcublas makes every process that loads weft pay
 * for cuBLAS's start-up (about 95 MB of memory allocated by its constructors, and the
 * time to free it at exit, which delays failure detection), GPU or not. Including this
 * header after <cublas_v2.h> routes the few cuBLAS calls weft makes through
 * dlopen/dlsym: the library is loaded the first time a GPU code path needs it.
 */
#ifndef WEFT_CUBLAS_LAZY_H
#define WEFT_CUBLAS_LAZY_H

#include <cublas_v2.h>

/* Loads cuBLAS if not done yet: the file name it was loaded from, or NULL if none of
 * the known names loads or lacks a function weft calls. */
const char *weft__cublas_library(void);
cublasStatus_t weft__cublas_create(cublasHandle_t *handle);
cublasStatus_t weft__cublas_destroy(cublasHandle_t handle);
cublasStatus_t weft__cublas_set_stream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t weft__cublas_sgemm(cublasHandle_t handle, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const float *alpha, const float *a, int lda, const float *b,
                                  int ldb, const float *beta, float *c, int ldc);

#undef cublasCreate
#undef cublasDestroy
#undef cublasSetStream
#undef cublasSgemm
#define cublasCreate weft__cublas_create
#define cublasDestroy weft__cublas_destroy
#define cublasSetStream weft__cublas_set_stream
#define cublasSgemm weft__cublas_sgemm

#endif
