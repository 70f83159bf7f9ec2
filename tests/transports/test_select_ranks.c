/*
 * Transport decisions across ranks launched by weftrun, with the topology summaries
 * exchanged through the store. WEFT_TOPO_XML makes every rank see the DGX-like host of
 * dgx8-a.xml, driving GPU <local rank>: every pair of GPUs 0..3 has an NVLink there, so
 * with NCCL built every CUDA pair is NCCL by the "nvlink" rule; host pairs use UCX over
 * shared memory. All ranks must agree on the group's transport.
 *
 * argv[1]: the folder of the XML topologies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/device/memtype.h"
#include "weft/weft.h"

static const char *xml_dir = ".";

/* What CUDA buffers get depends on what this weft was built with. */
#if defined(WEFT_HAVE_NCCL)
#define CUDA_GROUP(size) ((size) == 1 ? "cuda-self" : "nvlink")
#define CUDA_PEER(self) ((self) ? "cuda-self" : "nvlink")
#define CUDA_TRANSPORT WEFT_TSEL_NCCL
#elif defined(WEFT_HAVE_CUDA)
#define CUDA_GROUP(size) "no-nccl"
#define CUDA_PEER(self) "no-nccl"
#define CUDA_TRANSPORT ((size) == 1 ? WEFT_TSEL_SELF : WEFT_TSEL_UCX)
#else
#define CUDA_GROUP(size) "cuda-not-built"
#define CUDA_PEER(self) "cuda-not-built"
#define CUDA_TRANSPORT WEFT_TSEL_NONE
#endif

static void test_decisions_across_ranks(void **state)
{
    (void)state;
    char path[1024];
    weft_ctx_t *ctx = NULL;
    weft_group_t *world;
    const weft_topo_summary_t *me;
    weft_tsel_t d;
    int rank, size;

    snprintf(path, sizeof(path), "%s/dgx8-a.xml", xml_dir);
    setenv("WEFT_TOPO_XML", path, 1);
    unsetenv("WEFT_TRANSPORT");
    assert_int_equal(weft_init(NULL, &ctx), WEFT_OK);
    assert_int_equal(weft_ctx_world(ctx, &world), WEFT_OK);
    assert_int_equal(weft_group_rank(world, &rank), WEFT_OK);
    assert_int_equal(weft_group_size(world, &size), WEFT_OK);
    assert_true(size <= 4); /* GPUs 0..3 are fully linked */

    assert_int_equal(weft__topo_local(ctx, &me), WEFT_OK);
    assert_string_equal(me->hostname, "dgx-a");
    assert_int_equal(me->my_gpu, ctx->local_rank % 8);

    assert_int_equal(weft__select_group(world, WEFT_MEM_CUDA, &d), WEFT_OK);
    assert_int_equal(d.transport, CUDA_TRANSPORT);
    assert_string_equal(d.rule, CUDA_GROUP(size));

    for (int p = 0; p < size; p++) {
        assert_int_equal(weft__select_peer(world, p, WEFT_MEM_CUDA, &d), WEFT_OK);
        assert_string_equal(d.rule, CUDA_PEER(p == rank));
        assert_int_equal(weft__select_peer(world, p, WEFT_MEM_HOST, &d), WEFT_OK);
        assert_int_equal(d.transport, p == rank ? WEFT_TSEL_SELF : WEFT_TSEL_UCX);
        assert_string_equal(d.rule, p == rank ? "host-self" : "host-same-host");
    }
    /* The summaries came through the store: each peer drives the GPU of its local rank. */
    for (int id = 0; id < size; id++) {
        if (id != ctx->rank) {
            assert_true(id < ctx->cuda->nmembers && ctx->cuda->members[id] != NULL);
            assert_int_equal(ctx->cuda->members[id]->my_gpu, id % 8);
        }
    }
    /* Every rank reached the same group decision. */
    assert_int_equal(weft__select_group(world, WEFT_MEM_CUDA, &d), WEFT_OK);
    int mine = (int)d.transport * 2 + d.staged;
    int *all = calloc((size_t)size, sizeof(int));
    assert_non_null(all);
    assert_int_equal(weft_allgather(world, &mine, all, 1, WEFT_I32), WEFT_OK);
    for (int i = 0; i < size; i++) {
        assert_int_equal(all[i], mine);
    }
    free(all);
    weft__cuda_group_fini(world);
    weft__cuda_ctx_fini(ctx);
    assert_int_equal(weft_finalize(ctx), WEFT_OK);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        xml_dir = argv[1];
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decisions_across_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
