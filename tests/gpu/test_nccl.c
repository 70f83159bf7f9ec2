/*
 * The NCCL transport on one GPU: a one-rank communicator, every collective and
 * point-to-point (p2p, on the communicator's own stream) to itself, each
 * checked against a CPU reference; argument and type errors; and a communicator whose
 * second rank never comes, which must time out instead of hanging.
 * Everything goes through the device table (weft__tl_nccl.dev), as the comm layer does.
 * Without a GPU only the paths that need none run; the rest skips.
 */
#include <nccl.h>
#include <stdio.h>
#include <time.h>

#include "gpu_common.h"
#include "transports/nccl.h"

#define T (weft__tl_nccl.dev)

#define N 4099 /* odd and not a multiple of anything NCCL chunks by */

static weft_tl_comm_params_t params(int nranks, uint64_t init_timeout_ms)
{
    weft_tl_comm_params_t p = {
        .size = sizeof(p),
        .nranks = nranks,
        .rank = 0,
        .device = -1,
        .init_timeout_ns = init_timeout_ms * 1000000u,
        .op_timeout_ns = 60ull * 1000000000u,
    };
    return p;
}

/* Poll an operation to its end (bounded: the transport's own timeout is 60 s). */
static weft_status_t finish(weft_tl_op_t *op)
{
    weft_status_t st;
    struct timespec ts = {0, 100000};
    while ((st = T->op_test(op)) == WEFT_INPROGRESS) {
        nanosleep(&ts, NULL);
    }
    T->op_release(op);
    return st;
}

/* Each collective through coll(), with the descriptor the comm layer builds. */
static weft_status_t coll(weft_tl_comm_t *c, weft_tl_coll_kind_t kind, const void *sendbuf,
                          void *recvbuf, size_t count, weft_dtype_t dtype, weft_op_t op, int root,
                          void *stream, weft_tl_op_t **top)
{
    weft_tl_dev_coll_t d = {
        .size = sizeof(d),
        .kind = kind,
        .sendbuf = sendbuf,
        .recvbuf = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = op,
        .root = root,
    };
    return T->coll(c, &d, stream, top);
}

static weft_status_t allreduce(weft_tl_comm_t *c, const void *sendbuf, void *recvbuf, size_t count,
                               weft_dtype_t dtype, weft_op_t op, void *stream, weft_tl_op_t **top)
{
    return coll(c, WEFT_TL_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0, stream, top);
}

static weft_status_t broadcast(weft_tl_comm_t *c, const void *sendbuf, void *recvbuf, size_t count,
                               weft_dtype_t dtype, int root, void *stream, weft_tl_op_t **top)
{
    return coll(c, WEFT_TL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, WEFT_SUM, root, stream,
                top);
}

static weft_status_t allgather(weft_tl_comm_t *c, const void *sendbuf, void *recvbuf, size_t count,
                               weft_dtype_t dtype, void *stream, weft_tl_op_t **top)
{
    return coll(c, WEFT_TL_COLL_ALLGATHER, sendbuf, recvbuf, count, dtype, WEFT_SUM, 0, stream,
                top);
}

static weft_status_t reduce_scatter(weft_tl_comm_t *c, const void *sendbuf, void *recvbuf,
                                    size_t count, weft_dtype_t dtype, weft_op_t op, void *stream,
                                    weft_tl_op_t **top)
{
    return coll(c, WEFT_TL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, count, dtype, op, 0, stream, top);
}

/* ---- without a GPU too ---- */

static void test_paths_without_gpu(void **state)
{
    (void)state;
    uint8_t id[WEFT_TL_COMM_ID_MAX], zero[WEFT_TL_COMM_ID_MAX];
    weft_tl_comm_t *c = (weft_tl_comm_t *)0x1;
    memset(id, 0, sizeof(id));
    memset(zero, 0, sizeof(zero));
    assert_int_equal(weft__nccl_version() / 10000, NCCL_MAJOR); /* the library loaded */
    assert_int_equal(T->comm_id(id), WEFT_OK);
    assert_memory_not_equal(id, zero, sizeof(id));
    assert_int_equal(T->comm_id(NULL), WEFT_ERR_INVALID_ARG);

    weft_tl_comm_params_t p = params(1, 5000);
    p.nranks = 0;
    assert_int_equal(T->comm_create(&p, id, &c), WEFT_ERR_INVALID_ARG);
    p = params(1, 5000);
    p.rank = 1;
    assert_int_equal(T->comm_create(&p, id, &c), WEFT_ERR_INVALID_ARG);
    p = params(1, 5000);
    p.size = 8;
    assert_int_equal(T->comm_create(&p, id, &c), WEFT_ERR_INVALID_ARG);
    assert_int_equal(T->comm_create(NULL, id, &c), WEFT_ERR_INVALID_ARG);
    assert_ptr_equal(c, (weft_tl_comm_t *)0x1); /* untouched by failures */
    T->comm_destroy(NULL);
    T->op_release(NULL);
    weft_tl_op_t *op = (weft_tl_op_t *)0x1;
    assert_int_equal(T->p2p(NULL, NULL, 0, &op), WEFT_ERR_INVALID_ARG);
    assert_ptr_equal(op, (weft_tl_op_t *)0x1);
    assert_int_equal(T->op_test(NULL), WEFT_OK);

    if (!gpu_present()) {
        assert_int_equal(weft__tl_nccl.available(), 0);
        p = params(1, 5000);
        assert_int_equal(T->comm_create(&p, id, &c), WEFT_ERR_UNSUPPORTED);
        print_message("no GPU: the GPU checks of this file skip\n");
    } else {
        assert_int_equal(weft__tl_nccl.available(), 1);
    }
}

/* ---- one GPU ---- */

static int setup_comm(void **state)
{
    uint8_t id[WEFT_TL_COMM_ID_MAX];
    weft_tl_comm_t *c = NULL;
    *state = NULL;
    if (!gpu_present()) {
        return 0;
    }
    weft_tl_comm_params_t p = params(1, 60000);
    if (T->comm_id(id) != WEFT_OK || T->comm_create(&p, id, &c) != WEFT_OK) {
        return -1;
    }
    *state = c;
    return 0;
}

static int teardown_comm(void **state)
{
    T->comm_destroy(*state);
    return 0;
}

typedef struct bufs {
    float *h_in, *h_out, *h_ref;
    float *d_in, *d_out;
} bufs_t;

static void bufs_alloc(bufs_t *b, size_t n)
{
    b->h_in = malloc(n * sizeof(float));
    b->h_out = malloc(n * sizeof(float));
    b->h_ref = malloc(n * sizeof(float));
    assert_true(b->h_in && b->h_out && b->h_ref);
    for (size_t i = 0; i < n; i++) {
        b->h_in[i] = (float)((i * 2654435761u) % 1000) * 0.25f - 100.0f;
    }
    CUDA_OK(cudaMalloc((void **)&b->d_in, n * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&b->d_out, n * sizeof(float)));
    CUDA_OK(cudaMemcpy(b->d_in, b->h_in, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(b->d_out, 0xff, n * sizeof(float)));
}

static void bufs_check(bufs_t *b, const float *dev, size_t n)
{
    CUDA_OK(cudaMemcpy(b->h_out, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    assert_memory_equal(b->h_out, b->h_ref, n * sizeof(float));
}

static void bufs_free(bufs_t *b)
{
    cudaFree(b->d_in);
    cudaFree(b->d_out);
    free(b->h_in);
    free(b->h_out);
    free(b->h_ref);
}

/* One rank: the reduction over ranks of x is x itself, for every operator. */
static void test_allreduce(void **state)
{
    REQUIRE_GPU();
    weft_tl_comm_t *c = *state;
    weft_tl_op_t *op = NULL;
    bufs_t b;
    bufs_alloc(&b, N);
    memcpy(b.h_ref, b.h_in, N * sizeof(float));
    for (weft_op_t o = WEFT_SUM; o <= WEFT_MIN; o++) {
        CUDA_OK(cudaMemset(b.d_out, 0, N * sizeof(float)));
        assert_int_equal(allreduce(c, b.d_in, b.d_out, N, WEFT_F32, o, NULL, &op), WEFT_INPROGRESS);
        assert_int_equal(finish(op), WEFT_OK);
        bufs_check(&b, b.d_out, N);
    }
    /* In place, on a stream of our own. */
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    CUDA_OK(cudaMemcpy(b.d_out, b.h_in, N * sizeof(float), cudaMemcpyHostToDevice));
    assert_int_equal(allreduce(c, b.d_out, b.d_out, N, WEFT_F32, WEFT_SUM, s, &op),
                     WEFT_INPROGRESS);
    assert_int_equal(finish(op), WEFT_OK);
    bufs_check(&b, b.d_out, N);
    CUDA_OK(cudaStreamDestroy(s));
    /* Count 0: nothing to do, completes inline. */
    op = (weft_tl_op_t *)0x1;
    assert_int_equal(allreduce(c, NULL, NULL, 0, WEFT_F32, WEFT_SUM, NULL, &op), WEFT_OK);
    assert_null(op);
    bufs_free(&b);
}

static void test_broadcast_allgather_reduce_scatter(void **state)
{
    REQUIRE_GPU();
    weft_tl_comm_t *c = *state;
    weft_tl_op_t *op = NULL;
    bufs_t b;
    bufs_alloc(&b, N);
    memcpy(b.h_ref, b.h_in, N * sizeof(float));

    assert_int_equal(broadcast(c, b.d_in, b.d_out, N, WEFT_F32, 0, NULL, &op), WEFT_INPROGRESS);
    assert_int_equal(finish(op), WEFT_OK);
    bufs_check(&b, b.d_out, N);

    CUDA_OK(cudaMemset(b.d_out, 0, N * sizeof(float)));
    assert_int_equal(allgather(c, b.d_in, b.d_out, N, WEFT_F32, NULL, &op), WEFT_INPROGRESS);
    assert_int_equal(finish(op), WEFT_OK);
    bufs_check(&b, b.d_out, N);

    CUDA_OK(cudaMemset(b.d_out, 0, N * sizeof(float)));
    assert_int_equal(reduce_scatter(c, b.d_in, b.d_out, N, WEFT_F32, WEFT_MAX, NULL, &op),
                     WEFT_INPROGRESS);
    assert_int_equal(finish(op), WEFT_OK);
    bufs_check(&b, b.d_out, N);

    /* In place (weft's convention: input in recvbuf, result at its start). */
    CUDA_OK(cudaMemcpy(b.d_out, b.h_in, N * sizeof(float), cudaMemcpyHostToDevice));
    assert_int_equal(reduce_scatter(c, b.d_out, b.d_out, N, WEFT_F32, WEFT_SUM, NULL, &op),
                     WEFT_INPROGRESS);
    assert_int_equal(finish(op), WEFT_OK);
    bufs_check(&b, b.d_out, N);
    bufs_free(&b);
}

static void test_other_dtypes(void **state)
{
    REQUIRE_GPU();
    weft_tl_comm_t *c = *state;
    weft_tl_op_t *op = NULL;
    int64_t h[7] = {INT64_MIN, -1, 0, 1, 42, INT64_MAX, 7}, back[7];
    int64_t *d;
    CUDA_OK(cudaMalloc((void **)&d, sizeof(h)));
    CUDA_OK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
    assert_int_equal(allreduce(c, d, d, 7, WEFT_I64, WEFT_PROD, NULL, &op), WEFT_INPROGRESS);
    assert_int_equal(finish(op), WEFT_OK);
    CUDA_OK(cudaMemcpy(back, d, sizeof(h), cudaMemcpyDeviceToHost));
    assert_memory_equal(back, h, sizeof(h));
    CUDA_OK(cudaFree(d));
}

static void test_errors(void **state)
{
    REQUIRE_GPU();
    weft_tl_comm_t *c = *state;
    weft_tl_op_t *op = (weft_tl_op_t *)0x1;
    float *d;
    CUDA_OK(cudaMalloc((void **)&d, 64));
    assert_int_equal(allreduce(c, d, d, 4, WEFT_DTYPE_USER, WEFT_SUM, NULL, &op),
                     WEFT_ERR_UNSUPPORTED);
    assert_int_equal(allreduce(c, d, d, 4, WEFT_F32, WEFT_OP_USER_FIRST, NULL, &op),
                     WEFT_ERR_UNSUPPORTED);
    assert_int_equal(broadcast(c, d, d, 4, WEFT_F32, 1, NULL, &op), WEFT_ERR_INVALID_ARG);
    assert_int_equal(allgather(c, NULL, d, 4, WEFT_F32, NULL, &op), WEFT_ERR_INVALID_ARG);
    /* An unknown kind, and a descriptor older than this build's. */
    assert_int_equal(coll(c, (weft_tl_coll_kind_t)99, d, d, 4, WEFT_F32, WEFT_SUM, 0, NULL, &op),
                     WEFT_ERR_INVALID_ARG);
    weft_tl_dev_coll_t small = {.size = sizeof(size_t), .kind = WEFT_TL_COLL_ALLREDUCE};
    assert_int_equal(T->coll(c, &small, NULL, &op), WEFT_ERR_INVALID_ARG);
    assert_ptr_equal(op, (weft_tl_op_t *)0x1);
    /* The communicator is still fine after refused calls. */
    assert_int_equal(T->comm_poll(c), WEFT_OK);
    assert_string_equal(T->comm_error(c), "");
    CUDA_OK(cudaFree(d));
}

/* Point-to-point on the communicator's own stream: a send to itself cut in two halves
 * (sends to one peer match its receives in order), in one group; empty and refused
 * calls; a handle released before its work finished. */
static void test_p2p_self(void **state)
{
    REQUIRE_GPU();
    weft_tl_comm_t *c = *state;
    weft_tl_op_t *op = (weft_tl_op_t *)0x1;
    bufs_t b;
    bufs_alloc(&b, N);
    memcpy(b.h_ref, b.h_in, N * sizeof(float));
    size_t half = (N / 2) * sizeof(float), rest = N * sizeof(float) - half;
    weft_tl_p2p_t ops[4] = {
        {.peer = 0, .send = 1, .buf = b.d_in, .bytes = half},
        {.peer = 0, .send = 1, .buf = (char *)b.d_in + half, .bytes = rest},
        {.peer = 0, .send = 0, .buf = b.d_out, .bytes = half},
        {.peer = 0, .send = 0, .buf = (char *)b.d_out + half, .bytes = rest},
    };
    weft_tl_p2p_t bad = {.peer = 1, .send = 1, .buf = b.d_in, .bytes = 4};
    assert_int_equal(T->p2p(c, &bad, 1, &op), WEFT_ERR_INVALID_ARG);
    assert_int_equal(T->p2p(c, ops, -1, &op), WEFT_ERR_INVALID_ARG);
    assert_ptr_equal(op, (weft_tl_op_t *)0x1);
    weft_tl_p2p_t empty = {.peer = 0, .send = 1, .buf = NULL, .bytes = 0};
    assert_int_equal(T->p2p(c, &empty, 1, &op), WEFT_OK);
    assert_null(op);
    assert_int_equal(T->p2p(c, ops, 4, &op), WEFT_INPROGRESS);
    assert_int_equal(finish(op), WEFT_OK); /* its event says the data is there */
    bufs_check(&b, b.d_out, N);
    /* Releasing before completion is allowed: the work stays ordered on its stream. */
    assert_int_equal(T->p2p(c, ops, 4, &op), WEFT_INPROGRESS);
    T->op_release(op);
    CUDA_OK(cudaDeviceSynchronize());
    assert_int_equal(T->comm_poll(c), WEFT_OK);
    bufs_free(&b);
}

/* Rank 1 of 2 never arrives: creation must end in WEFT_ERR_TIMEOUT, not hang. */
static void test_missing_peer_times_out(void **state)
{
    (void)state;
    REQUIRE_GPU();
    uint8_t id[WEFT_TL_COMM_ID_MAX];
    weft_tl_comm_t *c = NULL;
    weft_tl_comm_params_t p = params(2, 2000);
    assert_int_equal(T->comm_id(id), WEFT_OK);
    assert_int_equal(T->comm_create(&p, id, &c), WEFT_ERR_TIMEOUT);
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_without_gpu),
        cmocka_unit_test(test_allreduce),
        cmocka_unit_test(test_broadcast_allgather_reduce_scatter),
        cmocka_unit_test(test_other_dtypes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_p2p_self),
        cmocka_unit_test(test_missing_peer_times_out),
    };
    return cmocka_run_group_tests(tests, setup_comm, teardown_comm);
}
