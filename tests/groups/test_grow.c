/*
 * A process started after the job joins the world group: rank 0 starts it (fork + exec
 * of this program with WEFT_JOIN=1), the members admit it with weft_group_grow, and
 * everyone checks the new membership and a reduction that includes the newcomer.
 * "lagging": the last member does not call grow but waits in a barrier of the old epoch,
 * which the admission must end; its repair then applies the admission.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_common.h"

static int verify(weft_ctx_t *ctx, weft_group_t *g, int expect_size, const char *who)
{
    int rank, size;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    weft_status_t st = fault_checked_allreduce(g);
    if (st != WEFT_OK || size != expect_size || fault_membership_agrees(g) != WEFT_OK) {
        printf("SURVIVOR-FAIL %s rank %d: size %d (expected %d): %s %s\n", who, rank, size,
               expect_size, weft_status_str(st), weft_last_error(ctx));
        return 1;
    }
    /* Every member must know that the newcomer shares its host: the grown group collects
     * through shared memory again, not over messages for good. */
    const char *shm = getenv("WEFT_COLL_SHM");
    if (size > 1 && (shm == NULL || strcmp(shm, "off") != 0) && !fault_uses_shm(g)) {
        printf("SURVIVOR-FAIL %s rank %d: the grown group does not use shared memory\n", who,
               rank);
        return 1;
    }
    printf("verified %s rank %d of %d\n", who, rank, size);
    return 0;
}

static int joiner_main(void)
{
    weft_ctx_t *ctx;
    weft_group_t *g;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st == WEFT_OK) {
        st = weft_group_join(ctx, "world", 30000, &g);
    }
    if (st != WEFT_OK) {
        printf("SURVIVOR-FAIL joiner: %s\n", weft_status_str(st));
        return 1;
    }
    int size, rank;
    weft_group_size(g, &size);
    weft_group_rank(g, &rank);
    /* Appended after the existing members. */
    int rc = rank != size - 1 ? (printf("SURVIVOR-FAIL joiner is rank %d\n", rank), 1)
                              : verify(ctx, g, size, "joiner");
    weft_finalize(ctx);
    if (rc == 0) {
        printf("SURVIVOR-OK joiner\n");
    }
    return rc;
}

/* The job token, kept before weft_init takes it out of the environment: a program that
 * starts weft processes of its own hands it to them (docs/store-protocol.md, "The token in
 * the environment"). */
static char job_token[128];

static pid_t spawn_joiner(const char *self)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("WEFT_JOB_TOKEN", job_token, 1);
        setenv("WEFT_JOIN", "1", 1);
        unsetenv("WEFT_RANK");
        execl(self, self, "joiner", (char *)NULL);
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "joiner") == 0) {
        return joiner_main();
    }
    int lagging = argc > 1 && strcmp(argv[1], "lagging") == 0;
    const char *token = getenv("WEFT_JOB_TOKEN");
    snprintf(job_token, sizeof(job_token), "%s", token != NULL ? token : "");
    weft_ctx_t *ctx;
    weft_group_t *g;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        printf("SURVIVOR-FAIL init\n");
        return 1;
    }
    weft_ctx_world(ctx, &g);
    int rank, size, pending = 0;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    pid_t child = rank == 0 ? spawn_joiner("/proc/self/exe") : -1;
    /* Nobody is admitted before everyone sees the joiner waiting (grow is collective). */
    double until = fault_now_ms() + 30000;
    while (pending < 1 && fault_now_ms() < until) {
        weft_group_pending_joiners(g, &pending);
        usleep(1000);
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    weft_status_t st;
    if (lagging && rank == size - 1) {
        /* This member does not call grow: it is in a collective of the old epoch when
         * the others admit the joiner. The decider's revocation must end that collective
         * at once (WEFT_TIMEOUT_MS is far longer), and repair must apply the admission. */
        double t0 = fault_now_ms();
        st = weft_barrier(g);
        double waited = fault_now_ms() - t0;
        if (st != WEFT_ERR_REVOKED && st != WEFT_ERR_PEER_FAILED) {
            printf("SURVIVOR-FAIL rank %d: barrier at the old epoch returned %s after %.0f ms\n",
                   rank, weft_status_str(st), waited);
            weft_finalize(ctx);
            return 1;
        }
        printf("rank %d: old epoch's barrier ended by the admission after %.0f ms\n", rank,
               waited);
        st = weft_group_repair(g, &info);
    } else {
        st = weft_group_grow(g, 1, 30000, &info);
    }
    int rc = 1;
    if (st != WEFT_OK) {
        printf("SURVIVOR-FAIL rank %d: grow: %s %s\n", rank, weft_status_str(st),
               weft_last_error(ctx));
    } else if (info.n_added != 1 || info.new_size != size + 1 || info.rank_map[rank] != rank ||
               info.new_epoch != info.old_epoch + 1) {
        printf("SURVIVOR-FAIL rank %d: grow info: added %d, size %d, epoch %u -> %u\n", rank,
               info.n_added, info.new_size, info.old_epoch, info.new_epoch);
    } else {
        rc = verify(ctx, g, size + 1, "member");
    }
    weft_finalize(ctx);
    if (rc == 0) {
        printf("SURVIVOR-OK member rank %d\n", rank);
    }
    if (child > 0) {
        int status;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("SURVIVOR-FAIL the joiner exited with status %d\n", status);
            rc = 1;
        }
    }
    return rc;
}
