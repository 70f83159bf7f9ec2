/*
 * weftrun --elastic --replace with the real library, end to end. Started as
 * `weftrun -n 4 --elastic --replace -- test_elastic_replace`:
 *   - every rank takes part in a first allreduce, then rank 3 kills itself (SIGKILL);
 *   - weftrun publishes the death and starts this program again as member 4, with
 *     WEFT_JOIN=1; it waits in weft_group_join();
 *   - the survivors see an operation fail, repair the world group in place, wait until
 *     the joiner is pending and admit it with weft_group_grow();
 *   - all four check the group: size 4, members {0, 1, 2, 4} in that order, the same
 *     membership and epoch everywhere, and an allreduce that includes the newcomer.
 * Each member of the final group prints ELASTIC-OK or ELASTIC-FAIL; run_elastic.sh counts
 * them, since weftrun's own status cannot tell a tolerated death from a failed check.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fault_common.h"
#include "weft/weft.h"

#define VICTIM 3
#define JOINER 4 /* the first id weftrun hands out in a job of 4 */
#define WAIT_MS 30000

static const int final_members[] = {0, 1, 2, JOINER};
#define FINAL_SIZE ((int)(sizeof(final_members) / sizeof(final_members[0])))

static int fail(weft_ctx_t *ctx, int id, const char *what, weft_status_t st)
{
    printf("ELASTIC-FAIL member %d: %s: %s (%s)\n", id, what, weft_status_str(st),
           ctx != NULL ? weft_last_error(ctx) : "no context");
    fflush(stdout);
    return 1;
}

/* The checks every member of the final group makes, in the same order (collectives). */
static int verify(weft_ctx_t *ctx, weft_group_t *g, int id)
{
    int size, rank;
    weft_group_size(g, &size);
    weft_group_rank(g, &rank);
    if (size != FINAL_SIZE) {
        printf("ELASTIC-FAIL member %d: group of %d, expected %d\n", id, size, FINAL_SIZE);
        return 1;
    }
    for (int r = 0; r < size; r++) {
        int m = -1;
        weft_group_member_id(g, r, &m);
        if (m != final_members[r]) {
            printf("ELASTIC-FAIL member %d: group rank %d is member %d, expected %d\n", id, r, m,
                   final_members[r]);
            return 1;
        }
    }
    weft_status_t st = fault_checked_allreduce(g);
    if (st != WEFT_OK) {
        return fail(ctx, id, "allreduce with the newcomer", st);
    }
    st = fault_membership_agrees(g);
    if (st != WEFT_OK) {
        return fail(ctx, id, "membership agreement", st);
    }
    printf("ELASTIC-OK member %d, group rank %d of %d\n", id, rank, size);
    return 0;
}

/* The replacement weftrun started: it was given the next id and asked to join. */
static int joiner_main(weft_ctx_t *ctx, int id)
{
    if (id != JOINER) {
        printf("ELASTIC-FAIL joiner: WEFT_RANK is %d, expected %d\n", id, JOINER);
        return 1;
    }
    weft_group_t *g;
    weft_status_t st = weft_group_join(ctx, "world", WAIT_MS, &g);
    if (st != WEFT_OK) {
        return fail(ctx, id, "join", st);
    }
    return verify(ctx, g, id);
}

/*
 * Until the joiner is waiting. The repair may already have admitted it (it admits
 * pending joiners too), and another member's grow may have: then there is nothing to
 * wait for, and weft_group_grow() would only catch up with that member's edit.
 */
static weft_status_t admit_joiner(weft_group_t *g)
{
    double deadline = fault_now_ms() + WAIT_MS;
    for (;;) {
        int size, pending = 0;
        weft_group_size(g, &size);
        if (size == FINAL_SIZE) {
            return WEFT_OK;
        }
        weft_status_t st = weft_group_pending_joiners(g, &pending);
        if (st != WEFT_OK) {
            return st;
        }
        if (pending >= 1) {
            return weft_group_grow(g, 1, WAIT_MS, NULL);
        }
        if (fault_now_ms() > deadline) {
            return WEFT_ERR_TIMEOUT;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

static int survivor_main(weft_ctx_t *ctx, int id)
{
    weft_group_t *g;
    weft_ctx_world(ctx, &g);
    weft_status_t st = fault_checked_allreduce(g);
    if (id == VICTIM && st == WEFT_OK) {
        fflush(NULL);
        raise(SIGKILL);
    }
    /* The victim's last messages may be lost with it, so the first allreduce may already
     * fail on a survivor; a later one must, since the victim never takes part. */
    if (st == WEFT_OK) {
        st = fault_checked_allreduce(g);
        if (st == WEFT_OK) {
            printf("ELASTIC-FAIL member %d: an allreduce succeeded without member %d\n", id,
                   VICTIM);
            return 1;
        }
    }
    if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
        return fail(ctx, id, "allreduce with a dead member", st);
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    st = weft_group_repair(g, &info);
    if (st != WEFT_OK) {
        return fail(ctx, id, "repair", st);
    }
    int rank;
    if (weft_group_rank_of(g, VICTIM, &rank) == WEFT_OK) {
        printf("ELASTIC-FAIL member %d: member %d is still in the group\n", id, VICTIM);
        return 1;
    }
    st = admit_joiner(g);
    if (st != WEFT_OK) {
        return fail(ctx, id, "admitting the replacement", st);
    }
    return verify(ctx, g, id);
}

int main(void)
{
    const char *rank_text = getenv("WEFT_RANK");
    const char *join = getenv("WEFT_JOIN");
    int id = rank_text != NULL ? atoi(rank_text) : -1;
    /* Line-buffered even into a pipe: weftrun --tag-output and the counting script see
     * each verdict whole, before a SIGKILL could lose it. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *no_token = getenv("EXPECT_NO_TOKEN");
    if (no_token != NULL && strcmp(no_token, "1") == 0 &&
        (getenv("WEFT_JOB_TOKEN") != NULL || getenv("WEFT_MEMBER_SECRET_FD") == NULL)) {
        printf("ELASTIC-FAIL member %d: given the job token, or no secret of its own\n", id);
        return 1;
    }
    weft_ctx_t *ctx;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st != WEFT_OK) {
        return fail(NULL, id, "init", st);
    }
    int rc = join != NULL && strcmp(join, "1") == 0 ? joiner_main(ctx, id) : survivor_main(ctx, id);
    weft_finalize(ctx);
    return rc;
}
