/*
 * Shared by the GPU checks: whether a GPU is there, and waiting for operations.
 *
 * Without a visible CUDA device the GPU parts skip (cmocka skip, exit 0) with a "no GPU"
 * message, so CTest passes on CPU-only machines. run_gpu_checks.sh sets
 * WEFT_GPU_REQUIRED=1, which turns a missing GPU into a failure instead.
 */
#ifndef WEFT_TESTS_GPU_COMMON_H
#define WEFT_TESTS_GPU_COMMON_H

#include <cuda_runtime_api.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static inline int gpu_present(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    return n > 0;
}

static inline int gpu_required(void)
{
    const char *v = getenv("WEFT_GPU_REQUIRED");
    return v != NULL && strcmp(v, "1") == 0;
}

#define REQUIRE_GPU()                                                                              \
    do {                                                                                           \
        if (!gpu_present()) {                                                                      \
            if (gpu_required()) {                                                                  \
                fail_msg("WEFT_GPU_REQUIRED=1 but no CUDA device is visible");                     \
            }                                                                                      \
            print_message("no GPU: skipped\n");                                                    \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fail_msg("%s: %s", #call, cudaGetErrorString(e_));                                     \
        }                                                                                          \
    } while (0)

#endif
