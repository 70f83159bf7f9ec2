/*
 * Migrations of CUDA buffers: random layouts over the job's members run with the old
 * buffer on the device and the new one on the host, the other way round, and both on
 * the device, plus a ZeRO re-cut with local copies device to device; every rank's new
 * buffer is copied back and compared byte for byte with the fill values
 * (tests/migrate/layout_gen.c). Chunks with host memory on either side are staged
 * through host memory. Device to device on two or more ranks whose selection chooses
 * NCCL (one GPU per rank), the first round goes GPU to GPU through NCCL point-to-point:
 * test_nccl_path asserts that (the nccl_chunks counter of comm/fault.h), that one
 * member's host buffer keeps every member on the staged path, and that a chunk corrupted
 * once (the context's receive hook flips a byte of the receiver's host copy) is detected
 * and resent by the staged path, twice fails every rank alike, and the group still
 * migrates afterwards. With the argument "ucx" (test_gpu_migrate_ucx) WEFT_TRANSPORT=ucx
 * forces the staged path, and the test asserts that nothing went through NCCL. Runs on
 * any number of ranks (weftrun -n 1 and -n 2 in run_gpu_checks.sh); without a GPU it
 * skips, and where the selection stages (one GPU shared by the ranks) the NCCL checks
 * say why and skip.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#include "comm/device/memtype.h"
#include "comm/fault.h"
#include "gpu_common.h"
#include "migrate/engine/engine.h"
#include "migrate/layout_gen.h"
#include "weft/weft.h"

static weft_ctx_t *ctx;
static weft_group_t *world;
static int me, n, my_id, ids[64];
static bool forced_ucx; /* WEFT_TRANSPORT=ucx: the staged path only */

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

/* Migrate old -> new with the buffers where @p old_dev / @p new_dev say, and check the
 * result when it is @p expect (WEFT_OK: the bytes too). */
static void run_expect(const weft_layout_t *old, const weft_layout_t *new, bool old_dev,
                       bool new_dev, weft_status_t expect)
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
    if (st != expect) {
        fail_msg("migration (old %s, new %s): %s: %s", old_dev ? "device" : "host",
                 new_dev ? "device" : "host", weft_status_str(st), weft_last_error(ctx));
    }
    unsigned char *got = host + ob + 1;
    if (expect != WEFT_OK) {
        memset(got, 0, nb);
    } else if (new_dev) {
        CUDA_OK(cudaMemcpy(got, nbuf, nb, cudaMemcpyDeviceToHost));
    } else {
        memcpy(got, nbuf, nb);
    }
    size_t wrong = expect == WEFT_OK ? gen_check(new, my_id, got) : 0;
    if (wrong != 0) {
        fail_msg("%zu of %zu bytes wrong (old %s, new %s)", wrong, nb, old_dev ? "device" : "host",
                 new_dev ? "device" : "host");
    }
    release(old_dev, obuf);
    release(new_dev, nbuf);
    free(host);
    weft_plan_free(plan);
}

static void run(const weft_layout_t *old, const weft_layout_t *new, bool old_dev, bool new_dev)
{
    run_expect(old, new, old_dev, new_dev, WEFT_OK);
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

/* Whether device buffers of the world go through NCCL here (else: why not). */
static bool nccl_chosen(void)
{
    weft_tsel_t sel;
    assert_int_equal(weft__select_group(world, WEFT_MEM_CUDA, &sel), WEFT_OK);
    if (sel.status == WEFT_OK && sel.transport == WEFT_TSEL_NCCL) {
        return true;
    }
    print_message("CUDA buffers are not sent through NCCL here (%s: %s)\n", sel.rule, sel.why);
    return false;
}

/* Every member's old shard goes to the next member: every chunk crosses members. */
static void rotation(weft_layout_t **old, weft_layout_t **new)
{
    int rot[64];
    uint64_t shape[2] = {96, 1000}; /* rows of 4000 bytes: chunks of whole rows */
    weft_layout_create(old);
    weft_layout_create(new);
    weft_layout_add_tensor(*old, "w", WEFT_F32, 2, shape, NULL);
    weft_layout_add_tensor(*new, "w", WEFT_F32, 2, shape, NULL);
    for (int i = 0; i < n; i++) {
        rot[i] = ids[(i + 1) % n];
    }
    assert_int_equal(weft_layout_shard(*old, 0, 0, ids, n), WEFT_OK);
    assert_int_equal(weft_layout_shard(*new, 0, 0, rot, n), WEFT_OK);
}

static int corrupt_rounds; /* flip a byte of the first chunk in rounds below this */
static _Atomic int resent;  /* the flipped chunk was seen again in the resend round */

static void flip(void *arg, int src_member, uint32_t seq, int round, void *data, size_t len)
{
    (void)arg;
    (void)src_member;
    if (seq != 0 || len == 0) {
        return;
    }
    if (round == 1) {
        atomic_store(&resent, 1);
    }
    if (round < corrupt_rounds) {
        ((unsigned char *)data)[len / 2] ^= 0x5a;
    }
}

/* Device to device on two ranks or more: through NCCL where the selection chooses it
 * (asserted by the counter), with every byte checked; a chunk corrupted once is resent,
 * twice fails everyone alike; with WEFT_TRANSPORT=ucx nothing goes through NCCL. */
static void test_nccl_path(void **state)
{
    (void)state;
    REQUIRE_GPU();
    if (n < 2) {
        print_message("one rank: no chunk crosses members\n");
        skip();
    }
    bool chosen = nccl_chosen();
    if (forced_ucx) {
        assert_false(chosen);
    }
    weft_layout_t *old, *new;
    rotation(&old, &new);
    uint64_t before = atomic_load(&weft__ctx_faults(ctx)->counts.nccl_chunks);
    run(old, new, true, true);
    for (int trial = 0; trial < 4; trial++) {
        gen_seed((uint64_t)trial + 991);
        gen_shape_t s;
        gen_shape(&s, 40);
        weft_layout_t *a = gen_layout(&s, ids, n), *b = gen_layout(&s, ids, n);
        run(a, b, true, true);
        weft_layout_free(a);
        weft_layout_free(b);
    }
    uint64_t through = atomic_load(&weft__ctx_faults(ctx)->counts.nccl_chunks) - before;
    if (!chosen) {
        assert_int_equal(through, 0); /* staged: nothing through NCCL */
        weft_layout_free(old);
        weft_layout_free(new);
        if (!forced_ucx) {
            skip();
        }
        return;
    }
    assert_true(through > 0);

    /* One member's old buffer in host memory: the agreement keeps everyone staged. */
    before = atomic_load(&weft__ctx_faults(ctx)->counts.nccl_chunks);
    run(old, new, me != 0, true);
    assert_int_equal(atomic_load(&weft__ctx_faults(ctx)->counts.nccl_chunks), before);

    /* Corrupted once: detected (host copy of the receiver), resent, delivered intact. */
    weft__ctx_faults(ctx)->recv_hook = flip;
    corrupt_rounds = 1;
    atomic_store(&resent, 0);
    run(old, new, true, true);
    assert_int_equal(atomic_load(&resent), 1);
    /* Corrupted in the resend too: every rank fails with the same status. */
    corrupt_rounds = 2;
    run_expect(old, new, true, true, WEFT_ERR_TRANSPORT);
    assert_non_null(strstr(weft_last_error(ctx), "corrupted twice"));
    weft__ctx_faults(ctx)->recv_hook = NULL;
    /* The group still migrates through NCCL. */
    before = atomic_load(&weft__ctx_faults(ctx)->counts.nccl_chunks);
    run(old, new, true, true);
    assert_true(atomic_load(&weft__ctx_faults(ctx)->counts.nccl_chunks) > before);
    weft_layout_free(old);
    weft_layout_free(new);
}

int main(int argc, char **argv)
{
    forced_ucx = argc > 1 && strcmp(argv[1], "ucx") == 0;
    if (forced_ucx) {
        setenv("WEFT_TRANSPORT", "ucx", 1);
    }
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
        cmocka_unit_test(test_nccl_path),
    };
    int failed = cmocka_run_group_tests_name("migrate cuda", tests, NULL, NULL);
    weft_finalize(ctx);
    return failed;
}
