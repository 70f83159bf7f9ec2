/*
 * Collectives on CUDA buffers staged through host memory: WEFT_TRANSPORT=ucx takes NCCL
 * out, so every member stages. Allreduce (apart and in place), broadcast, allgather
 * (apart and in place), reduce-scatter, and a nonblocking allreduce on the group's stream,
 * each checked on the host; a collective that is not staged and a message on a CUDA
 * buffer are refused with WEFT_ERR_UNSUPPORTED. Runs on any number of ranks (weftrun -n
 * 1 and -n 2 on one GPU in run_gpu_checks.sh); without a GPU it skips.
 */
#include <stdio.h>

#include "comm/device/memtype.h"
#include "gpu_common.h"
#include "weft/cuda.h"
#include "weft/weft.h"

#define N 1027 /* elements per rank: odd, not a multiple of a chunk */

typedef struct world {
    weft_ctx_t *ctx;
    weft_group_t *g;
    int rank, size;
} world_t;

static void open_world(world_t *w)
{
    int ndev = 0;
    CUDA_OK(cudaGetDeviceCount(&ndev));
    const char *lr = getenv("WEFT_LOCAL_RANK");
    CUDA_OK(cudaSetDevice(lr != NULL ? atoi(lr) % ndev : 0));
    setenv("WEFT_TRANSPORT", "ucx", 1); /* no NCCL path: staging */
    assert_int_equal(weft_init(NULL, &w->ctx), WEFT_OK);
    assert_int_equal(weft_ctx_world(w->ctx, &w->g), WEFT_OK);
    assert_int_equal(weft_group_rank(w->g, &w->rank), WEFT_OK);
    assert_int_equal(weft_group_size(w->g, &w->size), WEFT_OK);
}

static float *dev_floats(size_t n)
{
    float *d = NULL;
    CUDA_OK(cudaMalloc((void **)&d, n * sizeof(float)));
    return d;
}

static void put(float *d, const float *h, size_t n)
{
    CUDA_OK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
}

static void get(float *h, const float *d, size_t n)
{
    CUDA_OK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
}

static void test_staged(void **state)
{
    (void)state;
    REQUIRE_GPU();
    world_t w;
    weft_tsel_t sel;
    weft_req_t *req = NULL;
    open_world(&w);
    size_t all = (size_t)w.size * N;
    float *h = malloc(all * sizeof(float)), *d_in = dev_floats(all), *d_out = dev_floats(all);
    assert_non_null(h);
    assert_int_equal(weft__select_group(w.g, WEFT_MEM_CUDA, &sel), WEFT_OK);
    assert_int_equal(sel.status, WEFT_OK);
    assert_int_equal(sel.staged, 1);

    /* Allreduce, apart: element i of rank r is r + 1 + i % 7. */
    for (int i = 0; i < N; i++) {
        h[i] = (float)(w.rank + 1 + i % 7);
    }
    put(d_in, h, N);
    assert_int_equal(weft_allreduce(w.g, d_in, d_out, N, WEFT_F32, WEFT_SUM), WEFT_OK);
    get(h, d_out, N);
    for (int i = 0; i < N; i++) {
        assert_true(h[i] == (float)(w.size * (w.size + 1) / 2 + w.size * (i % 7)));
    }
    /* In place, then nonblocking on a stream of its own. */
    assert_int_equal(weft_allreduce(w.g, d_out, d_out, N, WEFT_F32, WEFT_MAX), WEFT_OK);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    assert_int_equal(weft_group_set_cuda_stream(w.g, s), WEFT_OK);
    assert_int_equal(weft_iallreduce(w.g, d_in, d_out, N, WEFT_F32, WEFT_SUM, &req),
                     WEFT_INPROGRESS);
    assert_int_equal(weft_wait(req, WEFT_TIMEOUT_DEFAULT), WEFT_OK);
    assert_int_equal(weft_req_free(req), WEFT_OK);
    get(h, d_out, N);
    assert_true(h[5] == (float)(w.size * (w.size + 1) / 2 + w.size * 5));
    assert_int_equal(weft_group_set_cuda_stream(w.g, NULL), WEFT_OK);
    CUDA_OK(cudaStreamDestroy(s));

    /* Broadcast from the last rank. */
    for (int i = 0; i < N; i++) {
        h[i] = w.rank == w.size - 1 ? (float)(42 + i % 11) : -1.0f;
    }
    put(d_out, h, N);
    assert_int_equal(weft_broadcast(w.g, d_out, N, WEFT_F32, w.size - 1), WEFT_OK);
    get(h, d_out, N);
    for (int i = 0; i < N; i++) {
        assert_true(h[i] == (float)(42 + i % 11));
    }

    /* Allgather: rank r contributes r * 1000 + i % 13; apart, then in place. */
    for (int i = 0; i < N; i++) {
        h[i] = (float)(w.rank * 1000 + i % 13);
    }
    put(d_in, h, N);
    assert_int_equal(weft_allgather(w.g, d_in, d_out, N, WEFT_F32), WEFT_OK);
    get(h, d_out, all);
    for (size_t j = 0; j < all; j++) {
        assert_true(h[j] == (float)((int)(j / N) * 1000 + (int)(j % N) % 13));
    }
    CUDA_OK(cudaMemset(d_out, 0, all * sizeof(float)));
    CUDA_OK(
        cudaMemcpy(d_out + (size_t)w.rank * N, d_in, N * sizeof(float), cudaMemcpyDeviceToDevice));
    assert_int_equal(weft_allgather(w.g, d_out + (size_t)w.rank * N, d_out, N, WEFT_F32), WEFT_OK);
    get(h, d_out, all);
    assert_true(h[all - 1] == (float)((w.size - 1) * 1000 + (N - 1) % 13));

    /* Reduce-scatter: block b of rank r holds b + r; rank r gets size*r + size(size-1)/2. */
    for (size_t j = 0; j < all; j++) {
        h[j] = (float)((int)(j / N) + w.rank);
    }
    put(d_in, h, all);
    assert_int_equal(weft_reduce_scatter(w.g, d_in, d_out, N, WEFT_F32, WEFT_SUM), WEFT_OK);
    get(h, d_out, N);
    for (int i = 0; i < N; i++) {
        assert_true(h[i] == (float)(w.size * w.rank + w.size * (w.size - 1) / 2));
    }

    /* Not staged: refused, with a message that says what is. */
    assert_int_equal(weft_alltoall(w.g, d_in, d_out, N, WEFT_F32), WEFT_ERR_UNSUPPORTED);
    assert_non_null(strstr(weft_last_error(w.ctx), "staged"));
    /* Messages carry host memory only. */
    req = NULL;
    assert_int_equal(weft_isend(w.g, d_in, 16, 0, 1, &req), WEFT_ERR_UNSUPPORTED);
    assert_null(req);
    assert_non_null(strstr(weft_last_error(w.ctx), "CUDA buffer"));

    free(h);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    assert_int_equal(weft_finalize(w.ctx), WEFT_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
