/*
 * The comm-side NCCL glue on a one-rank (singleton) context: the group's stream, the
 * transport decision, WEFT_TRANSPORT checked at init, WEFT_TOPO_XML, and collectives and
 * a send to itself as weft requests, against CPU references. On a machine without a GPU
 * the refusals are checked (they must be quick and clear) and the GPU parts skip.
 *
 * argv[1]: the folder of the XML topologies (tests/transports/topologies).
 */
#include <stdio.h>

#include "comm/device/memtype.h"
#include "comm/device/nccl_comm.h"
#include "gpu_common.h"
#include "weft/cuda.h"
#include "weft/weft.h"

#define N 1031

/* A collective through weft__nccl_coll, as comm/coll/device.c starts it. */
static weft_status_t nccl_coll(weft_group_t *g, weft_tl_coll_kind_t kind, const void *sendbuf,
                               void *recvbuf, size_t count, weft_dtype_t dtype, weft_op_t op,
                               weft_req_t **req)
{
    weft_tl_dev_coll_t d = {
        .size = sizeof(d),
        .kind = kind,
        .sendbuf = sendbuf,
        .recvbuf = recvbuf,
        .count = count,
        .dtype = dtype,
        .op = op,
        .root = 0,
    };
    return weft__nccl_coll(g, &d, NULL, req);
}

static const char *xml_dir = ".";

static void quiet_env(void)
{
    static const char *const vars[] = {
        "WEFT_RANK",     "WEFT_WORLD_SIZE",      "WEFT_STORE",   "WEFT_TRANSPORT",
        "WEFT_TOPO_XML", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", NULL};
    for (int i = 0; vars[i] != NULL; i++) {
        unsetenv(vars[i]);
    }
}

static weft_ctx_t *open_ctx(weft_group_t **world)
{
    weft_ctx_t *ctx = NULL;
    assert_int_equal(weft_init(NULL, &ctx), WEFT_OK);
    assert_int_equal(weft_ctx_world(ctx, world), WEFT_OK);
    return ctx;
}

static void close_ctx(weft_ctx_t *ctx, weft_group_t *world)
{
    /* Release the CUDA state explicitly: harmless if finalize does it as well. */
    weft__cuda_group_fini(world);
    weft__cuda_ctx_fini(ctx);
    weft_finalize(ctx);
}

static void test_stream_setting(void **state)
{
    (void)state;
    weft_group_t *world;
    void *stream = (void *)0x1;
    quiet_env();
    weft_ctx_t *ctx = open_ctx(&world);
    assert_int_equal(weft_group_cuda_stream(world, &stream), WEFT_OK);
    assert_null(stream);
    assert_int_equal(weft_group_set_cuda_stream(NULL, NULL), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_group_cuda_stream(world, NULL), WEFT_ERR_INVALID_ARG);
    if (gpu_present()) {
        cudaStream_t s;
        CUDA_OK(cudaStreamCreate(&s));
        assert_int_equal(weft_group_set_cuda_stream(world, s), WEFT_OK);
        assert_int_equal(weft_group_cuda_stream(world, &stream), WEFT_OK);
        assert_ptr_equal(stream, s);
        assert_int_equal(weft_group_set_cuda_stream(world, NULL), WEFT_OK);
        CUDA_OK(cudaStreamDestroy(s));
    }
    close_ctx(ctx, world);
}

/* This machine's own topology without a GPU: staging, and NCCL refused quickly. */
static void test_cpu_only_refuses_nccl(void **state)
{
    (void)state;
    weft_group_t *world;
    weft_tsel_t sel;
    weft_req_t *req = (weft_req_t *)0x1;
    float buf[4] = {1, 2, 3, 4};
    if (gpu_present()) {
        skip(); /* the GPU tests below cover this machine */
    }
    quiet_env();
    weft_ctx_t *ctx = open_ctx(&world);
    assert_int_equal(weft__transport_check(ctx), WEFT_OK);
    assert_int_equal(weft__select_group(world, WEFT_MEM_CUDA, &sel), WEFT_OK);
    assert_int_equal(sel.status, WEFT_OK);
    assert_int_equal(sel.transport, WEFT_TSEL_SELF);
    assert_int_equal(sel.staged, 1);
    assert_int_equal(weft__select_group(world, WEFT_MEM_HOST, &sel), WEFT_OK);
    assert_int_equal(sel.transport, WEFT_TSEL_SELF);
    assert_string_equal(sel.rule, "host-self");
    assert_int_equal(weft__select_peer(world, 0, WEFT_MEM_HOST, &sel), WEFT_OK);
    assert_string_equal(sel.rule, "host-self");
    assert_int_equal(weft__select_peer(world, 1, WEFT_MEM_HOST, &sel), WEFT_ERR_INVALID_ARG);
    assert_int_equal(
        nccl_coll(world, WEFT_TL_COLL_ALLREDUCE, buf, buf, 4, WEFT_F32, WEFT_SUM, &req),
        WEFT_ERR_UNSUPPORTED);
    assert_ptr_equal(req, (weft_req_t *)0x1);
    assert_non_null(strstr(weft_last_error(ctx), "NCCL"));
    close_ctx(ctx, world);

    /* Forcing NCCL on a host without GPU is an error at weft_init, which leaves its
     * output untouched. */
    setenv("WEFT_TRANSPORT", "nccl", 1);
    ctx = (weft_ctx_t *)0x1;
    assert_int_equal(weft_init(NULL, &ctx), WEFT_ERR_UNSUPPORTED);
    assert_ptr_equal(ctx, (weft_ctx_t *)0x1);
    unsetenv("WEFT_TRANSPORT");
}

/* WEFT_TOPO_XML stands for a DGX host: the decision is NCCL, creation then finds no GPU
 * here and says so instead of hanging. */
static void test_topology_from_xml(void **state)
{
    (void)state;
    char path[1024];
    weft_group_t *world;
    weft_tsel_t sel;
    const weft_topo_summary_t *me;
    quiet_env();
    snprintf(path, sizeof(path), "%s/dgx8-a.xml", xml_dir);
    setenv("WEFT_TOPO_XML", path, 1);
    setenv("WEFT_TRANSPORT", "nccl", 1);
    weft_ctx_t *ctx = open_ctx(&world);
    assert_int_equal(weft__topo_local(ctx, &me), WEFT_OK);
    assert_string_equal(me->hostname, "dgx-a");
    assert_int_equal(me->ngpus, 8);
    assert_int_equal(me->my_gpu, 0); /* local rank 0 of a simulated host */
    assert_int_equal(weft__transport_check(ctx), WEFT_OK);
    assert_int_equal(weft__select_group(world, WEFT_MEM_CUDA, &sel), WEFT_OK);
    assert_int_equal(sel.transport, WEFT_TSEL_NCCL);
    assert_string_equal(sel.rule, "cuda-self");
    if (!gpu_present()) {
        weft_req_t *req = NULL;
        float buf[4] = {0};
        assert_int_equal(
            nccl_coll(world, WEFT_TL_COLL_ALLREDUCE, buf, buf, 4, WEFT_F32, WEFT_SUM, &req),
            WEFT_ERR_UNSUPPORTED);
        assert_null(req);
    }
    close_ctx(ctx, world);
    unsetenv("WEFT_TOPO_XML");
    unsetenv("WEFT_TRANSPORT");
}

/* ---- on a GPU ---- */

static weft_status_t run(weft_status_t start, weft_req_t *req)
{
    if (start != WEFT_INPROGRESS) {
        return start;
    }
    weft_status_t st = weft_wait(req, 60ull * 1000000000u);
    weft_req_free(req);
    return st;
}

static void test_collectives_on_gpu(void **state)
{
    (void)state;
    REQUIRE_GPU();
    weft_group_t *world;
    weft_req_t *req = NULL;
    weft_tsel_t sel;
    float h_in[N], h_out[N];
    float *d_in, *d_out;
    cudaStream_t s;
    quiet_env();
    weft_ctx_t *ctx = open_ctx(&world);
    assert_int_equal(weft__select_group(world, WEFT_MEM_CUDA, &sel), WEFT_OK);
    if (sel.transport != WEFT_TSEL_NCCL) {
        fail_msg("NCCL not chosen on a GPU: %s", sel.why);
    }
    for (int i = 0; i < N; i++) {
        h_in[i] = (float)(i % 97) - 48.5f;
    }
    CUDA_OK(cudaStreamCreate(&s));
    CUDA_OK(cudaMalloc((void **)&d_in, sizeof(h_in)));
    CUDA_OK(cudaMalloc((void **)&d_out, sizeof(h_in)));
    CUDA_OK(cudaMemcpy(d_in, h_in, sizeof(h_in), cudaMemcpyHostToDevice));
    assert_int_equal(weft__memtype(d_in), WEFT_MEM_CUDA);
    assert_int_equal(weft_group_set_cuda_stream(world, s), WEFT_OK);

    /* One rank: every collective returns the input; each checked on the host. */
    CUDA_OK(cudaMemset(d_out, 0, sizeof(h_in)));
    assert_int_equal(
        run(nccl_coll(world, WEFT_TL_COLL_ALLREDUCE, d_in, d_out, N, WEFT_F32, WEFT_SUM, &req),
            req),
        WEFT_OK);
    CUDA_OK(cudaMemcpy(h_out, d_out, sizeof(h_out), cudaMemcpyDeviceToHost));
    assert_memory_equal(h_out, h_in, sizeof(h_in));

    CUDA_OK(cudaMemcpy(d_out, h_in, sizeof(h_in), cudaMemcpyHostToDevice));
    assert_int_equal(
        run(nccl_coll(world, WEFT_TL_COLL_BROADCAST, d_out, d_out, N, WEFT_F32, WEFT_SUM, &req),
            req),
        WEFT_OK);
    CUDA_OK(cudaMemset(d_out, 0, sizeof(h_in)));
    assert_int_equal(
        run(nccl_coll(world, WEFT_TL_COLL_ALLGATHER, d_in, d_out, N, WEFT_F32, WEFT_SUM, &req),
            req),
        WEFT_OK);
    CUDA_OK(cudaMemcpy(h_out, d_out, sizeof(h_out), cudaMemcpyDeviceToHost));
    assert_memory_equal(h_out, h_in, sizeof(h_in));

    CUDA_OK(cudaMemset(d_out, 0, sizeof(h_in)));
    assert_int_equal(
        run(nccl_coll(world, WEFT_TL_COLL_REDUCE_SCATTER, d_in, d_out, N, WEFT_F32, WEFT_MIN, &req),
            req),
        WEFT_OK);
    CUDA_OK(cudaMemcpy(h_out, d_out, sizeof(h_out), cudaMemcpyDeviceToHost));
    assert_memory_equal(h_out, h_in, sizeof(h_in));

    CUDA_OK(cudaMemset(d_out, 0, sizeof(h_in)));
    weft_nccl_xfer_t self_xfer[2] = {
        {.rank = 0, .send = true, .buf = d_in, .bytes = sizeof(h_in)},
        {.rank = 0, .send = false, .buf = d_out, .bytes = sizeof(h_in)},
    };
    assert_int_equal(run(weft__nccl_p2p(world, self_xfer, 2, &req), req), WEFT_OK);
    CUDA_OK(cudaMemcpy(h_out, d_out, sizeof(h_out), cudaMemcpyDeviceToHost));
    assert_memory_equal(h_out, h_in, sizeof(h_in));

    req = (weft_req_t *)0x1;
    assert_int_equal(
        nccl_coll(world, WEFT_TL_COLL_ALLREDUCE, d_in, d_out, 0, WEFT_F32, WEFT_SUM, &req),
        WEFT_OK);
    assert_null(req);
    assert_int_equal(
        nccl_coll(world, WEFT_TL_COLL_ALLREDUCE, d_in, d_out, 4, WEFT_DTYPE_USER, WEFT_SUM, &req),
        WEFT_ERR_UNSUPPORTED);

    /* Messages carry host memory only: a CUDA buffer is refused, never read as host
     * memory. */
    req = NULL;
    assert_int_equal(weft_isend(world, d_in, sizeof(h_in), 0, 1, &req), WEFT_ERR_UNSUPPORTED);
    assert_null(req);
    assert_non_null(strstr(weft_last_error(ctx), "CUDA buffer"));
    assert_int_equal(weft_irecv(world, d_out, sizeof(h_in), 0, 1, &req), WEFT_ERR_UNSUPPORTED);
    assert_null(req);

    close_ctx(ctx, world);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaStreamDestroy(s));
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        xml_dir = argv[1];
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_setting),
        cmocka_unit_test(test_cpu_only_refuses_nccl),
        cmocka_unit_test(test_topology_from_xml),
        cmocka_unit_test(test_collectives_on_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
