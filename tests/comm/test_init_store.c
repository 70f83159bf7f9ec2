/*
 * weft_init's traffic with the store, run under weftrun by run_init_store.sh:
 *   count  each rank prints how many requests its weft_init sent to the store
 *          ("init store requests: K"); the script runs two job sizes and checks that K
 *          is the same in both (the addresses are read with one scan, not one GET per
 *          peer). The heartbeat must not renew during weft_init (the script sets
 *          WEFT_HEARTBEAT_MS long).
 *   death  the last rank exits before weft_init; the others' weft_init returns WEFT_OK
 *          within seconds, with that member failed and the world group revoked
 *          (decision 0016), and prints "INIT-DEATH-OK".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/core_impl.h"
#include "weft/weft.h"

static int fail(const char *what, weft_status_t st)
{
    fprintf(stderr, "test_init_store: %s: %s (%s)\n", what, weft_status_str(st),
            weft_last_error(NULL));
    return 1;
}

static int count(void)
{
    weft_ctx_t *ctx;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st != WEFT_OK) {
        return fail("weft_init", st);
    }
    unsigned long long k = (unsigned long long)weft__store_requests(ctx->store);
    weft_group_t *world;
    int rank, size;
    weft_ctx_world(ctx, &world);
    weft_group_rank(world, &rank);
    weft_group_size(world, &size);
    printf("rank %d of %d: init store requests: %llu\n", rank, size, k);
    fflush(stdout);
    st = weft_barrier(world); /* nobody leaves while another still starts */
    weft_finalize(ctx);
    return st == WEFT_OK ? 0 : fail("barrier", st);
}

static int death(void)
{
    const char *r = getenv("WEFT_RANK"), *n = getenv("WEFT_WORLD_SIZE");
    int size = n != NULL ? atoi(n) : 0;
    if (r == NULL || size < 2) {
        fprintf(stderr, "test_init_store: death needs WEFT_RANK and WEFT_WORLD_SIZE >= 2\n");
        return 1;
    }
    if (atoi(r) == size - 1) {
        return 3; /* dies before it publishes anything */
    }
    uint64_t t0 = weft__now_ns();
    weft_ctx_t *ctx;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st != WEFT_OK) {
        return fail("weft_init", st);
    }
    unsigned long long ms = (weft__now_ns() - t0) / 1000000;
    weft_group_t *world;
    weft_ctx_world(ctx, &world);
    int rc = 0;
    if (ctx->peers[size - 1].failed == WEFT_OK || ctx->peers[size - 1].addr != NULL) {
        fprintf(stderr, "test_init_store: member %d is not marked failed\n", size - 1);
        rc = 1;
    }
    st = weft_barrier(world);
    if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
        rc = fail("a barrier with a member dead since start-up", st);
    }
    if (ms > 20000) {
        fprintf(stderr, "test_init_store: weft_init took %llu ms\n", ms);
        rc = 1;
    }
    if (rc == 0) {
        printf("INIT-DEATH-OK: weft_init returned after %llu ms, member %d failed\n", ms, size - 1);
    }
    weft_finalize(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "count";
    if (strcmp(mode, "count") == 0) {
        return count();
    }
    if (strcmp(mode, "death") == 0) {
        return death();
    }
    fprintf(stderr, "usage: test_init_store count|death\n");
    return 2;
}
