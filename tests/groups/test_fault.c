/*
 * Members die (SIGKILL from a timer, so at arbitrary points) while the others work on
 * the world group. Every survivor must see an error within the detection bound (never a
 * hang), repair to the same membership as every other survivor, and compute correctly at
 * the new epoch. Scenarios (argv[1]):
 *   allreduce  the last rank dies during a loop of allreduces
 *   send       the last rank dies while streaming 1 MiB messages to rank 0
 *   two        the last two ranks die at about the same time
 *   repair     the last rank dies; rank 1 dies while the others are repairing
 *   stop       the last rank hangs without dying (SIGSTOP): only its missed heartbeats
 *              tell; weftrun must kill it (rank 0 checks that it is gone) and the job
 *              still succeed
 * Seed: argv[2] (default 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_common.h"

#define DETECTION_BOUND_MS 10000.0

static int is_victim(const char *scenario, int rank, int size)
{
    if (rank == size - 1) {
        return 1;
    }
    return strcmp(scenario, "two") == 0 && rank == size - 2;
}

/* Work until an error: allreduces, or for "send" a stream from the victim to rank 0. */
static weft_status_t work_until_error(const char *scenario, weft_group_t *g, int rank, int size)
{
    static char buf[1 << 20];
    for (int i = 0; i < 1000000; i++) {
        weft_status_t st;
        if (strcmp(scenario, "send") == 0 && rank == size - 1) {
            st = weft_send(g, buf, sizeof(buf), 0, 5);
        } else if (strcmp(scenario, "send") == 0 && rank == 0) {
            st = weft_recv(g, buf, sizeof(buf), size - 1, 5, NULL);
        } else {
            st = fault_checked_allreduce(g);
        }
        if (st != WEFT_OK) {
            return st;
        }
    }
    return WEFT_OK;
}

int main(int argc, char **argv)
{
    const char *scenario = argc > 1 ? argv[1] : "allreduce";
    unsigned seed = argc > 2 ? (unsigned)atoi(argv[2]) : 1;
    weft_ctx_t *ctx;
    weft_group_t *g;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        printf("SURVIVOR-FAIL init\n");
        return 1;
    }
    weft_ctx_world(ctx, &g);
    int rank, size;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    if (size < 3) {
        printf("SURVIVOR-FAIL needs 3 ranks\n");
        return 1;
    }
    if (fault_checked_allreduce(g) != WEFT_OK) {
        SURVIVOR_FAIL(rank, "first allreduce");
        return 1;
    }
    if (is_victim(scenario, rank, size)) {
        /* Both victims of "two" draw the same delay: they die at about the same time. */
        if (strcmp(scenario, "stop") == 0) {
            fault_arm_stop(rank, seed, 2000, 40000);
        } else {
            fault_arm_death(strcmp(scenario, "two") == 0 ? size - 1 : rank, seed, 2000, 40000);
        }
    }
    weft_status_t st = work_until_error(scenario, g, rank, size);
    double t_err = fault_now_ms();
    if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
        printf("SURVIVOR-FAIL rank %d: work ended with %s\n", rank, weft_status_str(st));
        return 1;
    }
    double t_death = fault_death_time_ms(size - 1);
    if (strcmp(scenario, "repair") == 0 && rank == 1) {
        fault_arm_death(rank, seed, 0, 3000); /* die somewhere inside the repair */
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    st = fault_recover(g, &info);
    if (st != WEFT_OK) {
        printf("SURVIVOR-FAIL rank %d: recovery: %s: %s\n", rank, weft_status_str(st),
               weft_last_error(ctx));
        return 1;
    }
    int expected = size - 1 - (strcmp(scenario, "two") == 0 || strcmp(scenario, "repair") == 0);
    int new_size;
    weft_group_size(g, &new_size);
    /* A victim whose timer had not fired when the repair finished dies later: keep
     * working (and repairing) until every expected death has happened. */
    double until = fault_now_ms() + 10000;
    while (st == WEFT_OK && new_size > expected && fault_now_ms() < until) {
        if (fault_checked_allreduce(g) != WEFT_OK) {
            st = fault_recover(g, &info);
            weft_group_size(g, &new_size);
        }
    }
    if (st != WEFT_OK || new_size != expected || fault_has_member(g, size - 1) ||
        fault_membership_agrees(g) != WEFT_OK) {
        printf("SURVIVOR-FAIL rank %d: size %d (expected %d), agreement failed or victim kept\n",
               rank, new_size, expected);
        return 1;
    }
    if (t_death > 0 && t_err - t_death > DETECTION_BOUND_MS) {
        printf("SURVIVOR-FAIL rank %d: error came %.0f ms after the death\n", rank,
               t_err - t_death);
        return 1;
    }
    /* The group works at the new epoch: a larger reduction checked element-wise. */
    int nr;
    weft_group_rank(g, &nr);
    enum { N = 100003 };
    static double x[N];
    for (int i = 0; i < N; i++) {
        x[i] = nr + i * 0.5;
    }
    st = weft_allreduce(g, x, x, N, WEFT_F64, WEFT_SUM);
    for (int i = 0; i < N && st == WEFT_OK; i++) {
        double want = (double)new_size * (new_size - 1) / 2 + (double)new_size * i * 0.5;
        if (x[i] != want) {
            st = WEFT_ERR_MISMATCH;
        }
    }
    if (st != WEFT_OK) {
        printf("SURVIVOR-FAIL rank %d: allreduce at the new epoch: %s\n", rank,
               weft_status_str(st));
        return 1;
    }
    if (strcmp(scenario, "stop") == 0 && nr == 0 && fault_stopped_gone(size - 1, 10000) != 0) {
        printf("SURVIVOR-FAIL rank %d: the stopped process was not killed by weftrun\n", nr);
        return 1;
    }
    /* OK only once finalize is behind us too: it must not hang or fail after a repair. */
    weft_finalize(ctx);
    printf("SURVIVOR-OK rank %d (was %d): detected after %.1f ms, epoch %u -> %u, %d -> %d\n",
           nr, rank, t_death > 0 ? t_err - t_death : -1.0, info.old_epoch, info.new_epoch,
           size, new_size);
    return 0;
}
