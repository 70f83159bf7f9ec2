/*
 * Memory-type detection: host memory of every kind is host; cudaMalloc'ed and managed
 * memory is CUDA; pinned host memory (cudaMallocHost, cudaHostRegister) is host; and a
 * process that only ever passes host memory never loads the CUDA driver.
 */
#include <dlfcn.h>
#include <stdio.h>

#include "comm/device/memtype.h"
#include "gpu_common.h"
#include "weft/cuda.h"

static char static_buf[64];

/* Must run first: no CUDA call of this process may come before it. */
static void test_host_only_does_not_load_the_driver(void **state)
{
    (void)state;
    char stack_buf[64];
    void *heap = malloc(4096);
    assert_non_null(heap);
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != NULL) {
        print_message("the CUDA driver was loaded before the test: nothing to check\n");
        skip();
    }
    assert_int_equal(weft__memtype(heap), WEFT_MEM_HOST);
    assert_int_equal(weft__memtype(stack_buf), WEFT_MEM_HOST);
    assert_int_equal(weft__memtype(static_buf), WEFT_MEM_HOST);
    assert_int_equal(weft__memtype(NULL), WEFT_MEM_HOST);
    assert_null(dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD));
    free(heap);
}

static void test_host_pointers(void **state)
{
    (void)state;
    int is_cuda = -1;
    void *heap = malloc(1 << 20);
    assert_non_null(heap);
    assert_int_equal(weft__memtype(heap), WEFT_MEM_HOST);
    assert_int_equal(weft__memtype((char *)heap + 12345), WEFT_MEM_HOST);
    assert_int_equal(weft__memtype((void *)(uintptr_t)0x10), WEFT_MEM_HOST); /* not mapped */
    assert_int_equal(weft_memory_is_cuda(heap, &is_cuda), WEFT_OK);
    assert_int_equal(is_cuda, 0);
    assert_int_equal(weft_memory_is_cuda(heap, NULL), WEFT_ERR_INVALID_ARG);
    free(heap);
    /* Detection leaves no CUDA error behind for the application to trip on. */
    if (gpu_present()) {
        assert_int_equal(cudaGetLastError(), cudaSuccess);
    }
}

static void test_cuda_pointers(void **state)
{
    (void)state;
    REQUIRE_GPU();
    void *dev = NULL, *pinned = NULL, *managed = NULL;
    int is_cuda = -1;
    CUDA_OK(cudaMalloc(&dev, 1 << 20));
    CUDA_OK(cudaMallocHost(&pinned, 1 << 20));
    CUDA_OK(cudaMallocManaged(&managed, 1 << 20, cudaMemAttachGlobal));
    assert_int_equal(weft__memtype(dev), WEFT_MEM_CUDA);
    assert_int_equal(weft__memtype((char *)dev + 4097), WEFT_MEM_CUDA); /* interior */
    assert_int_equal(weft__memtype(pinned), WEFT_MEM_HOST);
    assert_int_equal(weft__memtype(managed), WEFT_MEM_CUDA);
    assert_int_equal(weft_memory_is_cuda(dev, &is_cuda), WEFT_OK);
    assert_int_equal(is_cuda, 1);
    assert_int_equal(cudaGetLastError(), cudaSuccess);

    void *registered = malloc(1 << 16);
    assert_non_null(registered);
    CUDA_OK(cudaHostRegister(registered, 1 << 16, cudaHostRegisterDefault));
    assert_int_equal(weft__memtype(registered), WEFT_MEM_HOST);
    CUDA_OK(cudaHostUnregister(registered));
    free(registered);

    CUDA_OK(cudaFree(dev));
    CUDA_OK(cudaFreeHost(pinned));
    CUDA_OK(cudaFree(managed));
    /* Freed device memory is no longer device memory, and asking leaves no error. */
    assert_int_equal(weft__memtype(dev), WEFT_MEM_HOST);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_true(weft__cuda_device_count() > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_only_does_not_load_the_driver),
        cmocka_unit_test(test_host_pointers),
        cmocka_unit_test(test_cuda_pointers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
