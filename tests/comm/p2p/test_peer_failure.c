/*
 * A rank dies (SIGKILL on itself) while every other rank is blocked receiving from it.
 * Each survivor must get WEFT_ERR_PEER_FAILED from that receive, well before its timeout;
 * then it prints "SURVIVOR-OK rank R" (or "SURVIVOR-FAIL ..."). Run through
 * run_peer_failure.sh, which checks weftrun's exit status (137, the victim's signal) and
 * counts the survivors' verdicts.
 *
 * The victim is the last rank. Ranks 1.. exchange a message with it first, so their
 * transport knows the connection; rank 0 never talks to it before, so only the
 * launcher's failure notice can wake it.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft/weft.h"

#define RECV_TIMEOUT_NS (30ull * 1000000000ull) /* a hang shows as WEFT_ERR_TIMEOUT */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail(int me, const char *what, weft_status_t st, weft_ctx_t *ctx)
{
    printf("SURVIVOR-FAIL rank %d: %s: %s (%s)\n", me, what, weft_status_str(st),
           ctx ? weft_last_error(ctx) : "");
    fflush(stdout);
    return 1;
}

static int victim(weft_group_t *world, int me, int n)
{
    /* Greet ranks 1..n-2, then wait for everyone's "I am about to wait" and die. */
    uint32_t hello = 0xfeed;
    for (int r = 1; r < n - 1; r++) {
        if (weft_send(world, &hello, sizeof(hello), r, 1) != WEFT_OK) {
            return 2;
        }
    }
    for (int r = 0; r < n - 1; r++) {
        if (weft_recv(world, NULL, 0, r, 2, NULL) != WEFT_OK) {
            return 3;
        }
    }
    fprintf(stderr, "rank %d: killing myself\n", me);
    raise(SIGKILL);
    return 4;
}

static int survivor(weft_ctx_t *ctx, weft_group_t *world, int me, int n)
{
    int v = n - 1;
    weft_status_t st;
    if (me != 0) {
        uint32_t hello = 0;
        if ((st = weft_recv(world, &hello, sizeof(hello), v, 1, NULL)) != WEFT_OK) {
            return fail(me, "greeting from the victim", st, ctx);
        }
    }
    /* Post the receive that can never be satisfied, then tell the victim to go. */
    uint64_t never = 0;
    weft_req_t *req = NULL;
    st = weft_irecv(world, &never, sizeof(never), v, 3, &req);
    if (st != WEFT_INPROGRESS) {
        return fail(me, "posting the receive", st, ctx);
    }
    if ((st = weft_send(world, NULL, 0, v, 2)) != WEFT_OK) {
        return fail(me, "telling the victim to go", st, ctx);
    }
    uint64_t t0 = now_ns();
    st = weft_wait(req, RECV_TIMEOUT_NS);
    double secs = (double)(now_ns() - t0) / 1e9;
    weft_req_free(req);
    if (st != WEFT_ERR_PEER_FAILED) {
        return fail(me, "receive from the dead rank", st, ctx);
    }
    fprintf(stderr, "rank %d: receive from dead rank %d failed after %.3f s: %s\n", me, v, secs,
            weft_last_error(ctx));
    /* Later operations with the dead rank fail at once instead of waiting. */
    st = weft_send(world, &never, sizeof(never), v, 4);
    if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
        return fail(me, "send to the dead rank", st, ctx);
    }
    printf("SURVIVOR-OK rank %d (%.3f s)\n", me, secs);
    fflush(stdout);
    return 0;
}

int main(void)
{
    weft_ctx_t *ctx = NULL;
    weft_group_t *world;
    int me = -1, n = 0;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st != WEFT_OK) {
        return fail(me, "weft_init", st, NULL);
    }
    if ((st = weft_ctx_world(ctx, &world)) != WEFT_OK ||
        (st = weft_group_rank(world, &me)) != WEFT_OK ||
        (st = weft_group_size(world, &n)) != WEFT_OK) {
        return fail(me, "world group", st, ctx);
    }
    if (n < 2) {
        fprintf(stderr, "test_peer_failure needs at least 2 ranks\n");
        return 2;
    }
    int rc = me == n - 1 ? victim(world, me, n) : survivor(ctx, world, me, n);
    weft_finalize(ctx);
    return rc;
}
