/*
 * Subgroups and revocation. argv[1]:
 *   split   even/odd subgroups ordered by descending parent rank; reductions on both
 *           subgroups and the world outstanding at once, waited in reverse order
 *   revoke  rank 0 revokes the world while the others wait on a receive from it: they
 *           see WEFT_ERR_REVOKED; repair and grow refuse an edit info without its size;
 *           a repair raises the epoch and keeps every member
 *   kill    the last rank dies: its subgroup is revoked, the other keeps working
 *           without repair; the world and the damaged subgroup repair
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault_common.h"

static int fail(int rank, const char *what, weft_status_t st, weft_ctx_t *ctx)
{
    printf("SURVIVOR-FAIL rank %d: %s: %s %s\n", rank, what, weft_status_str(st),
           weft_last_error(ctx));
    return 1;
}

static int scenario_split(weft_ctx_t *ctx, weft_group_t *w, int rank, int size)
{
    weft_group_t *sub;
    weft_status_t st = weft_group_split(w, rank % 2, -rank, &sub);
    if (st != WEFT_OK) {
        return fail(rank, "split", st, ctx);
    }
    int srank, ssize;
    weft_group_rank(sub, &srank);
    weft_group_size(sub, &ssize);
    int expect_size = (size + 1 - rank % 2) / 2;
    /* Descending parent rank: the highest rank of my parity is sub rank 0. */
    int top = (size - 1) - ((size - 1 - rank % 2) % 2);
    int expect_rank = (top - rank) / 2;
    if (ssize != expect_size || srank != expect_rank) {
        printf("SURVIVOR-FAIL rank %d: sub rank %d of %d, expected %d of %d\n", rank, srank,
               ssize, expect_rank, expect_size);
        return 1;
    }
    int64_t a = rank, b = 1;
    weft_req_t *ra, *rb;
    weft_status_t sa = weft_iallreduce(sub, &a, &a, 1, WEFT_I64, WEFT_SUM, &ra);
    weft_status_t sb = weft_iallreduce(w, &b, &b, 1, WEFT_I64, WEFT_SUM, &rb);
    if ((sa != WEFT_OK && sa != WEFT_INPROGRESS) || (sb != WEFT_OK && sb != WEFT_INPROGRESS)) {
        return fail(rank, "start", sa != WEFT_OK ? sa : sb, ctx);
    }
    sb = weft_wait(rb, WEFT_TIMEOUT_DEFAULT);
    sa = weft_wait(ra, WEFT_TIMEOUT_DEFAULT);
    weft_req_free(ra);
    weft_req_free(rb);
    int64_t want = 0;
    for (int r = rank % 2; r < size; r += 2) {
        want += r;
    }
    if (sa != WEFT_OK || sb != WEFT_OK || a != want || b != size) {
        printf("SURVIVOR-FAIL rank %d: sub sum %lld (want %lld), world %lld\n", rank,
               (long long)a, (long long)want, (long long)b);
        return 1;
    }
    weft_group_free(sub);
    return 0;
}

static int scenario_revoke(weft_ctx_t *ctx, weft_group_t *w, int rank, int size)
{
    char byte;
    weft_status_t st;
    if (rank == 0) {
        usleep(50000);
        st = weft_group_revoke(w);
        if (st != WEFT_OK) {
            return fail(rank, "revoke", st, ctx);
        }
        st = fault_checked_allreduce(w);
    } else {
        st = weft_recv(w, &byte, 1, 0, 9, NULL);
    }
    if (st != WEFT_ERR_REVOKED) {
        return fail(rank, "expected WEFT_ERR_REVOKED, got", st, ctx);
    }
    /* An edit info without its size (or a short one) is refused before anything is done. */
    weft_edit_info_t unsized = {.size = 0};
    weft_edit_info_t short_info = {.size = offsetof(weft_edit_info_t, rank_map)};
    if ((st = weft_group_repair(w, &unsized)) != WEFT_ERR_INVALID_ARG ||
        (st = weft_group_grow(w, 0, 0, &short_info)) != WEFT_ERR_INVALID_ARG) {
        return fail(rank, "an edit info without its size: expected WEFT_ERR_INVALID_ARG, got", st,
                    ctx);
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    st = fault_recover(w, &info);
    if (st != WEFT_OK || info.new_size != size || info.n_removed != 0 ||
        info.new_epoch != info.old_epoch + 1 || fault_membership_agrees(w) != WEFT_OK) {
        return fail(rank, "repair after revoke", st, ctx);
    }
    return 0;
}

static int scenario_kill(weft_ctx_t *ctx, weft_group_t *w, int rank, int size)
{
    weft_group_t *sub;
    int color = rank < size / 2 ? 0 : 1; /* the victim (last rank) is in color 1 */
    weft_status_t st = weft_group_split(w, color, rank, &sub);
    if (st != WEFT_OK) {
        return fail(rank, "split", st, ctx);
    }
    if (rank == size - 1) {
        fault_arm_death(rank, 7, 1000, 20000);
        for (;;) {
            fault_checked_allreduce(w);
        }
    }
    st = fault_checked_allreduce(w);
    while (st == WEFT_OK) {
        st = fault_checked_allreduce(w);
    }
    if (color == 0) {
        st = fault_checked_allreduce(sub); /* untouched: works without repair */
        if (st != WEFT_OK) {
            return fail(rank, "undamaged subgroup", st, ctx);
        }
    } else {
        st = fault_checked_allreduce(sub);
        if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
            return fail(rank, "damaged subgroup should fail, got", st, ctx);
        }
        weft_edit_info_t info = {.size = sizeof(info)};
        st = fault_recover(sub, &info);
        if (st != WEFT_OK || info.n_removed != 1 || info.removed[0] != size - 1) {
            return fail(rank, "subgroup repair", st, ctx);
        }
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    st = fault_recover(w, &info);
    if (st != WEFT_OK || info.new_size != size - 1 || fault_membership_agrees(w) != WEFT_OK) {
        return fail(rank, "world repair", st, ctx);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *scenario = argc > 1 ? argv[1] : "split";
    weft_ctx_t *ctx;
    weft_group_t *w;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        printf("SURVIVOR-FAIL init\n");
        return 1;
    }
    weft_ctx_world(ctx, &w);
    int rank, size, rc;
    weft_group_rank(w, &rank);
    weft_group_size(w, &size);
    if (strcmp(scenario, "split") == 0) {
        rc = scenario_split(ctx, w, rank, size);
    } else if (strcmp(scenario, "revoke") == 0) {
        rc = scenario_revoke(ctx, w, rank, size);
    } else {
        rc = scenario_kill(ctx, w, rank, size);
    }
    weft_finalize(ctx);
    if (rc == 0) {
        SURVIVOR_OK(rank);
    }
    return rc;
}
