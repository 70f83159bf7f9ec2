/*
 * Migrations of CUDA buffers (staged through host memory chunk by chunk): random layouts
 * over the job's members run with the old buffer on the device and the new one on the
 * host, the other way round, and both on the device, plus a ZeRO re-cut with local
 * copies device to device; every rank's new buffer is copied back and compared byte for
 * byte with the fill values (tests/migrate/layout_gen.c). Runs on any number of ranks
 * (weftrun -n 1 and -n 2 in run_gpu_checks.sh); without a GPU it skips.
 */
#include <stdbool.h>
#include <stdio.h>

#include "gpu_common.h"
#include "migrate/layout_gen.h"
#include "weft/weft.h"

static weft_ctx_t *ctx;
static weft_group_t *world;
static int me, n, my_id, ids[64];

static void *on(bool dev, size_t bytes)
{
    void *p = NULL;
    if (dev) {
        CUDA_OK(cudaMalloc(&p, bytes + 1));
    } else {
        p = malloc(bytes + 1);
        assert_non_null(p);
    }
    return p;
}

static void release(bool dev, void *p)
{
    if (dev) {
        cudaFree(p);
    } else {
        free(p);
    }
}

/* Migrate old -> new with the buffers where @p old_dev / @p new_dev say, and check. */
static void run(const weft_layout_t *old, const weft_layout_t *new, bool old_dev, bool new_dev)
{
    weft_plan_t *plan;
    assert_int_equal(weft_plan_create(old, new, NULL, &plan), WEFT_OK);
    size_t ob = weft_layout_packed_bytes(old, my_id), nb = weft_layout_packed_bytes(new, my_id);
    unsigned char *host = malloc(ob + nb + 2);
    gen_fill(old, my_id, host);
    void *obuf = on(old_dev, ob), *nbuf = on(new_dev, nb);
    if (old_dev) {
        CUDA_OK(cudaMemcpy(obuf, host, ob, cudaMemcpyHostToDevice));
    } else {
        memcpy(obuf, host, ob);
    }
    weft_status_t st = weft_migrate(world, plan, obuf, nbuf, NULL);
    if (st != WEFT_OK) {
        fail_msg("migration (old %s, new %s): %s: %s", old_dev ? "device" : "host",
                 new_dev ? "device" : "host", weft_status_str(st), weft_last_error(ctx));
    }
    unsigned char *got = host + ob + 1;
    if (new_dev) {
        CUDA_OK(cudaMemcpy(got, nbuf, nb, cudaMemcpyDeviceToHost));
    } else {
        memcpy(got, nbuf, nb);
    }
    size_t wrong = gen_check(new, my_id, got);
    if (wrong != 0) {
        fail_msg("%zu of %zu bytes wrong (old %s, new %s)", wrong, nb, old_dev ? "device" : "host",
                 new_dev ? "device" : "host");
    }
    release(old_dev, obuf);
    release(new_dev, nbuf);
    free(host);
    weft_plan_free(plan);
}

static void test_random(void **state)
{
    (void)state;
    REQUIRE_GPU();
    for (int trial = 0; trial < 12; trial++) {
        gen_seed((uint64_t)trial + 77);
        gen_shape_t s;
        gen_shape(&s, 40);
        weft_layout_t *old = gen_layout(&s, ids, n), *new = gen_layout(&s, ids, n);
        run(old, new, trial % 3 != 1, trial % 3 != 0);
        weft_layout_free(old);
        weft_layout_free(new);
    }
}

static void test_zero_recut(void **state)
{
    (void)state;
    REQUIRE_GPU();
    uint64_t a[2] = {1000, 333}, b[1] = {40961};
    weft_layout_t *old, *new;
    weft_layout_create(&old);
    weft_layout_create(&new);
    weft_layout_t *both[2] = {old, new};
    for (int i = 0; i < 2; i++) {
        weft_layout_add_tensor(both[i], "a", WEFT_F32, 2, a, NULL);
        weft_layout_add_tensor(both[i], "b", WEFT_F64, 1, b, NULL);
    }
    int t[2] = {0, 1};
    assert_int_equal(weft_layout_flat(old, t, 2, ids, n), WEFT_OK);
    assert_int_equal(weft_layout_flat(new, t, 2, ids, n > 1 ? n - 1 : 1), WEFT_OK);
    run(old, new, true, true);
    weft_layout_free(old);
    weft_layout_free(new);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) {
        const char *lr = getenv("WEFT_LOCAL_RANK");
        cudaSetDevice(lr != NULL ? atoi(lr) % ndev : 0);
    }
    (void)cudaGetLastError();
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK) {
        fprintf(stderr, "test_migrate_cuda: init: %s\n", weft_last_error(ctx));
        return 1;
    }
    weft_group_rank(world, &me);
    weft_group_size(world, &n);
    weft_group_member_id(world, me, &my_id);
    for (int r = 0; r < n && r < 64; r++) {
        weft_group_member_id(world, r, &ids[r]);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_zero_recut),
    };
    int failed = cmocka_run_group_tests_name("migrate cuda", tests, NULL, NULL);
    weft_finalize(ctx);
    return failed;
}
