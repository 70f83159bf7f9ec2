/*
 * A rank of a job over several hosts: the scripts of tests/multinode start it on each.
 *
 *   host_job paths HOSTS
 *       The world group, which spans HOSTS hosts, must not use shared memory when
 *       HOSTS > 1 (and must when HOSTS is 1 and it has several members); the group of
 *       each host's ranks (split by WEFT_RANK / WEFT_LOCAL_SIZE) must, when it has
 *       several members. Checked allreduces on both. Prints "PATHS-OK rank R".
 *   host_job loss SURVIVORS [KILL_RANK]
 *       Allreduces until a peer dies (rank KILL_RANK kills itself after a few; without
 *       it, the test kills ranks or a whole host from outside once rank 0 has printed
 *       "JOB-READY"); then repair until the group has SURVIVORS members, agree on the
 *       membership and check a large allreduce at the new epoch. Prints "SURVIVOR-OK".
 *   host_job grow
 *       The members admit one newcomer (weft_group_grow) once rank 0 has printed
 *       "JOB-READY"; the newcomer is this program started with WEFT_JOIN=1 on another
 *       host (by hand: WEFT_STORE, WEFT_JOB_TOKEN). Everyone checks the membership and a
 *       large allreduce that includes it. Prints "SURVIVOR-OK".
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_common.h"

#define WORK_LIMIT_MS 60000.0 /* for the death to be noticed */

/* Whether this process maps a shared-memory control segment of a group other than the
 * world (group id 0): names are /weft-<job>-<ns>-<gid>-<epoch>-ctl. */
static int maps_subgroup_shm(void)
{
    char line[512];
    FILE *f = fopen("/proc/self/maps", "r");
    int found = 0;
    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
        char *p = strstr(line, "/weft-");
        unsigned gid, epoch;
        found = p != NULL && strstr(p, "-ctl") != NULL &&
                sscanf(p, "/weft-%*16[0-9a-f]-%*16[0-9a-f]-%u-%u-ctl", &gid, &epoch) == 2 &&
                gid != 0;
    }
    if (f != NULL) {
        fclose(f);
    }
    return found;
}

static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v != NULL ? atoi(v) : -1;
}

static int run_paths(weft_group_t *world, int hosts)
{
    int rank, size;
    weft_group_rank(world, &rank);
    weft_group_size(world, &size);
    int per_host = env_int("WEFT_LOCAL_SIZE");
    if (fault_checked_allreduce(world) != WEFT_OK) {
        SURVIVOR_FAIL(rank, "allreduce on the world");
        return 1;
    }
    int world_shm = fault_uses_shm(world);
    if (world_shm != (hosts == 1 && size > 1)) {
        printf("PATHS-FAIL rank %d: the world over %d host(s) %s shared memory\n", rank, hosts,
               world_shm ? "uses" : "does not use");
        return 1;
    }
    weft_group_t *host;
    if (weft_group_split(world, rank / per_host, rank, &host) != WEFT_OK ||
        fault_checked_allreduce(host) != WEFT_OK) {
        SURVIVOR_FAIL(rank, "allreduce on the host's group");
        return 1;
    }
    int hsize;
    weft_group_size(host, &hsize);
    if (maps_subgroup_shm() != (hsize > 1)) {
        printf("PATHS-FAIL rank %d: the group of its host (%d members) %s shared memory\n", rank,
               hsize, hsize > 1 ? "does not use" : "uses");
        return 1;
    }
    weft_group_free(host);
    printf("PATHS-OK rank %d: world of %d over %d host(s) on %s, its host's group of %d on %s\n",
           rank, size, hosts, world_shm ? "shared memory" : "messages", hsize,
           hsize > 1 ? "shared memory" : "itself");
    return 0;
}

/* Repair until @p expected members are left (deaths may be noticed one at a time). */
static weft_status_t repair_to(weft_group_t *g, int expected, weft_edit_info_t *info)
{
    weft_status_t st = fault_recover(g, info);
    int n;
    weft_group_size(g, &n);
    double until = fault_now_ms() + 20000;
    while (st == WEFT_OK && n > expected && fault_now_ms() < until) {
        if (fault_checked_allreduce(g) != WEFT_OK) {
            st = fault_recover(g, info);
            weft_group_size(g, &n);
        }
    }
    return st != WEFT_OK ? st : n == expected ? WEFT_OK : WEFT_ERR_MISMATCH;
}

/* An allreduce of 100003 doubles at the new epoch, checked element-wise. */
static weft_status_t big_allreduce(weft_group_t *g)
{
    enum { N = 100003 };
    static double x[N];
    int r, n;
    weft_group_rank(g, &r);
    weft_group_size(g, &n);
    for (int i = 0; i < N; i++) {
        x[i] = r + i * 0.5;
    }
    weft_status_t st = weft_allreduce(g, x, x, N, WEFT_F64, WEFT_SUM);
    for (int i = 0; i < N && st == WEFT_OK; i++) {
        if (x[i] != (double)n * (n - 1) / 2 + (double)n * i * 0.5) {
            st = WEFT_ERR_MISMATCH;
        }
    }
    return st;
}

static int run_loss(weft_ctx_t *ctx, weft_group_t *g, int expected, int kill_rank)
{
    int rank, size;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    if (fault_checked_allreduce(g) != WEFT_OK) {
        SURVIVOR_FAIL(rank, "first allreduce");
        return 1;
    }
    if (rank == 0) {
        printf("JOB-READY\n");
        fflush(stdout);
    }
    weft_status_t st = WEFT_OK;
    double t0 = fault_now_ms();
    for (int i = 0; st == WEFT_OK && fault_now_ms() - t0 < WORK_LIMIT_MS; i++) {
        if (rank == kill_rank && i == 50) {
            raise(SIGKILL);
        }
        st = fault_checked_allreduce(g);
    }
    if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
        printf("SURVIVOR-FAIL rank %d: work ended with %s\n", rank, weft_status_str(st));
        return 1;
    }
    double t_err = fault_now_ms();
    weft_edit_info_t info = {.size = sizeof(info)};
    st = repair_to(g, expected, &info);
    if (st == WEFT_OK) {
        st = fault_membership_agrees(g);
    }
    if (st == WEFT_OK) {
        st = big_allreduce(g);
    }
    if (st != WEFT_OK) {
        printf("SURVIVOR-FAIL rank %d: recovery to %d members: %s: %s\n", rank, expected,
               weft_status_str(st), weft_last_error(ctx));
        return 1;
    }
    int nr;
    weft_group_rank(g, &nr);
    double t_done = fault_now_ms();
    weft_finalize(ctx);
    printf("SURVIVOR-OK rank %d (was %d): epoch %u -> %u, %d -> %d, repaired in %.1f ms\n", nr,
           rank, info.old_epoch, info.new_epoch, size, expected, t_done - t_err);
    return 0;
}

/* Members admit one newcomer; the newcomer (WEFT_JOIN=1) joins them. */
static int run_grow(weft_ctx_t *ctx)
{
    const char *join = getenv("WEFT_JOIN");
    bool joiner = join != NULL && strcmp(join, "1") == 0;
    weft_group_t *g;
    weft_status_t st;
    int size0 = 0;
    if (joiner) {
        st = weft_group_join(ctx, "world", 60000, &g);
    } else {
        weft_ctx_world(ctx, &g);
        weft_group_size(g, &size0);
        st = fault_checked_allreduce(g);
        int rank;
        weft_group_rank(g, &rank);
        if (st == WEFT_OK && rank == 0) {
            printf("JOB-READY\n");
            fflush(stdout);
        }
        weft_edit_info_t info = {.size = sizeof(info)};
        if (st == WEFT_OK) {
            st = weft_group_grow(g, 1, 60000, &info);
        }
    }
    if (st == WEFT_OK) {
        st = fault_checked_allreduce(g);
    }
    int rank, size;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    if (st == WEFT_OK && !joiner && size != size0 + 1) {
        st = WEFT_ERR_MISMATCH;
    }
    if (st == WEFT_OK) {
        st = fault_membership_agrees(g);
    }
    if (st == WEFT_OK) {
        st = big_allreduce(g);
    }
    if (st != WEFT_OK) {
        printf("SURVIVOR-FAIL rank %d%s: %s: %s\n", rank, joiner ? " (newcomer)" : "",
               weft_status_str(st), weft_last_error(ctx));
        return 1;
    }
    weft_finalize(ctx);
    printf("SURVIVOR-OK rank %d of %d%s\n", rank, size, joiner ? " (newcomer)" : "");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (argc < 3 && strcmp(argv[1], "grow") != 0)) {
        fprintf(stderr, "usage: host_job paths HOSTS | loss SURVIVORS [KILL_RANK] | grow\n");
        return 2;
    }
    weft_ctx_t *ctx;
    weft_group_t *world;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        printf("SURVIVOR-FAIL init\n");
        return 1;
    }
    weft_ctx_world(ctx, &world);
    if (strcmp(argv[1], "grow") == 0) {
        return run_grow(ctx);
    }
    if (strcmp(argv[1], "paths") == 0) {
        int rc = run_paths(world, atoi(argv[2]));
        weft_finalize(ctx);
        return rc;
    }
    return run_loss(ctx, world, atoi(argv[2]), argc > 3 ? atoi(argv[3]) : -1);
}
