/*
 * Ranks started by hand against `weftrun --store-only`, whose store run_store_loss.sh
 * kills while they run (WEFT_RANK and WEFT_WORLD_SIZE set per process). Modes:
 *
 *   poll   Every rank prints "READY r", polls the store until it is lost, then keeps
 *          calling the store (weft_group_pending_joiners) and the group (allreduce)
 *          ITERS times: store calls must fail with WEFT_ERR_IO and a weft_last_error
 *          text naming the unreachable store, collectives must keep working. The script
 *          counts the log lines: one per rank.
 *   stop   As poll until the loss; then the last rank stops itself (SIGSTOP) and the
 *          others' next allreduce (blocking on even ranks, weft_wait on odd ones) must
 *          fail with WEFT_ERR_TIMEOUT (or WEFT_ERR_REVOKED, when the other survivor gave
 *          up first and so abandoned it), an error and not a hang, after at least
 *          WEFT_FAILURE_TIMEOUT_MS and within 4 times that.
 *   addr   Not a rank: waits until member 0 has published its address, then exits, so
 *          the script kills the store while member 0 waits in weft_init for member 1.
 *
 * Verdicts: "RANK-OK r ..." or "RANK-FAIL r ...".
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/store/store.h"
#include "util/secret_file.h"
#include "weft/weft.h"

#define ITERS 500
#define LOSS_WAIT_MS 30000 /* the script kills the store within this */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int fail(int me, const char *what, weft_status_t st, weft_ctx_t *ctx)
{
    printf("RANK-FAIL %d: %s: %s (%s)\n", me, what, weft_status_str(st),
           ctx != NULL ? weft_last_error(ctx) : "");
    fflush(stdout);
    return 1;
}

/* Poll the store until a call fails, as a trainer counting joiners does. */
static weft_status_t await_loss(weft_group_t *world)
{
    int pending;
    uint64_t start = now_ms();
    weft_status_t st;
    while ((st = weft_group_pending_joiners(world, &pending)) == WEFT_OK &&
           now_ms() - start < LOSS_WAIT_MS) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return st;
}

static int poll_after_loss(weft_ctx_t *ctx, weft_group_t *world, int me)
{
    for (int i = 0; i < ITERS; i++) {
        int pending, one = 1, sum = 0;
        weft_status_t st = weft_group_pending_joiners(world, &pending);
        if (st != WEFT_ERR_IO || strstr(weft_last_error(ctx), "unreachable") == NULL) {
            return fail(me, "counting joiners without a store", st, ctx);
        }
        st = weft_allreduce(world, &one, &sum, 1, WEFT_I32, WEFT_SUM);
        if (st != WEFT_OK) {
            return fail(me, "allreduce without a store", st, ctx);
        }
    }
    return 0;
}

static int blocked_allreduce(weft_ctx_t *ctx, weft_group_t *world, int me, int n)
{
    int one = 1, sum = 0;
    if (me == n - 1) {
        printf("STOPPING %d\n", me);
        fflush(stdout);
        raise(SIGSTOP); /* the script kills it once the others have their verdicts */
        return 0;
    }
    const char *env = getenv("WEFT_FAILURE_TIMEOUT_MS");
    uint64_t ft = env != NULL ? strtoull(env, NULL, 10) : 2000;
    /* Both ways to block: the blocking call, and a wait on the nonblocking one. */
    uint64_t t0 = now_ms();
    weft_status_t st;
    if (me % 2 == 0) {
        st = weft_allreduce(world, &one, &sum, 1, WEFT_I32, WEFT_SUM);
    } else {
        weft_req_t *req = NULL;
        st = weft_iallreduce(world, &one, &sum, 1, WEFT_I32, WEFT_SUM, &req);
        if (st == WEFT_INPROGRESS) {
            st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
            weft_req_free(req);
        }
    }
    uint64_t ms = now_ms() - t0;
    /* The first survivor to give up abandons the allreduce, which revokes it for the
     * other (through the shared segment or its own wait): WEFT_ERR_REVOKED there. */
    bool gave_up = st == WEFT_ERR_TIMEOUT && strstr(weft_last_error(ctx), "unreachable") != NULL;
    bool told = st == WEFT_ERR_REVOKED && strstr(weft_last_error(ctx), "abandoned") != NULL;
    if (!(gave_up || told) || ms < ft * 9 / 10 || ms > 4 * ft) {
        printf("RANK-FAIL %d: allreduce with a stopped peer returned after %llu ms "
               "(failure timeout %llu ms): %s (%s)\n",
               me, (unsigned long long)ms, (unsigned long long)ft, weft_status_str(st),
               weft_last_error(ctx));
        return 1;
    }
    printf("RANK-OK %d: allreduce with a stopped peer gave up after %llu ms: %s\n", me,
           (unsigned long long)ms, weft_last_error(ctx));
    /* Stay until the others have their verdicts too: a member that exits now is a
     * failure they would rightly report (WEFT_ERR_PEER_FAILED) if they see it before
     * their own timeout, which they check only every few milliseconds. */
    fflush(stdout);
    struct timespec linger = {(time_t)(ft / 1000), (long)(ft % 1000) * 1000000L};
    nanosleep(&linger, NULL);
    return 0;
}

/* Wait for member 0's address in the store (the key weft_init publishes). */
static int await_address(void)
{
    weft_store_client_t *c;
    void *val;
    size_t len;
    char token[80]; /* weftrun --store-only hands it out in a file */
    const char *file = getenv("WEFT_JOB_TOKEN_FILE");
    if (file == NULL || !weft__read_secret_file(file, token, sizeof(token), NULL, 0) ||
        weft__store_connect(getenv("WEFT_STORE"), token, 10000, NULL, &c) != WEFT_OK) {
        return 1;
    }
    weft_status_t st = weft__store_get(c, "weft/addr/0", LOSS_WAIT_MS, &val, &len);
    if (st == WEFT_OK) {
        free(val);
    }
    weft__store_close(c);
    return st == WEFT_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "poll";
    if (strcmp(mode, "addr") == 0) {
        return await_address();
    }
    weft_ctx_t *ctx;
    weft_group_t *world;
    int me, n;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st != WEFT_OK) {
        return fail(-1, "weft_init", st, NULL);
    }
    weft_ctx_world(ctx, &world);
    weft_group_rank(world, &me);
    weft_group_size(world, &n);
    printf("READY %d\n", me);
    fflush(stdout);
    st = await_loss(world);
    if (st != WEFT_ERR_IO) {
        return fail(me, "waiting for the store to be lost", st, ctx);
    }
    int rc = strcmp(mode, "stop") == 0 ? blocked_allreduce(ctx, world, me, n)
                                       : poll_after_loss(ctx, world, me);
    if (rc == 0 && strcmp(mode, "poll") == 0) {
        printf("RANK-OK %d: %d store calls failed at once, collectives went on\n", me, ITERS);
    }
    fflush(stdout);
    weft_finalize(ctx);
    return rc;
}
