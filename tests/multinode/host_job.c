/*
 * A rank of a job over several hosts: the scripts of tests/multinode start it on each.
 *
 *   host_job paths HOSTS
 *       The world group, which spans HOSTS hosts, must not use shared memory when
 *       HOSTS > 1 (and must when HOSTS is 1 and it has several members); the group of
 *       each host's ranks (split by WEFT_RANK / WEFT_LOCAL_SIZE) must, when it has
 *       several members. Checked allreduces on both. Prints "PATHS-OK rank R".
 *   host_job loss SURVIVORS [KILL_RANK]
 *       Allreduces, small, mid-size and large in turn (the mid-size ones hierarchical
 *       over hosts with several ranks, the large ones sliced over hosts with as many
 *       ranks each), until a peer dies (rank KILL_RANK kills itself after a
 *       few; without it, the test kills ranks or a whole host from outside once rank 0
 *       has printed "JOB-READY"); then repair until the group has SURVIVORS members, agree on the
 *       membership and check a large allreduce at the new epoch. Prints "SURVIVOR-OK".
 *   host_job hier
 *       Allreduces of several sizes, dtypes and operators, in place and not, on the world
 *       group, checked element by element against a sequential reference. The host
 *       table the library uses must match the host names (the bed gives each host its
 *       own), and the hierarchical algorithm must be chosen for a mid-size vector exactly
 *       when the group spans several hosts with several ranks on some host (never
 *       past WEFT_COLL_HIER_MAX), the sliced one past it exactly when every host has
 *       as many ranks (at least 2). A sum of doubles that rounds differently in every order
 *       must come out bitwise the same on every rank. Prints "HIER-OK rank R".
 *   host_job grow
 *       The members admit one newcomer (weft_group_grow) once rank 0 has printed
 *       "JOB-READY"; the newcomer is this program started with WEFT_JOIN=1 on another
 *       host (by hand: WEFT_STORE, WEFT_JOB_TOKEN). Everyone checks the membership and a
 *       large allreduce that includes it, then the checks of "hier" on the grown group
 *       (hosts of different sizes). Prints "SURVIVOR-OK".
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/coll/coll.h"
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

/* An in-place allreduce of @p n doubles (rank r gives r + i for element i), checked
 * element-wise: 8192 of them (64 KiB) fall in the hierarchical algorithm's range over
 * several hosts with several ranks on one, 262144 (2 MiB, 16 segments of the default
 * 128K) in the sliced one's over hosts of equal size. */
static weft_status_t checked_allreduce(weft_group_t *g, int count)
{
    enum { MAX = 262144 };
    static double x[MAX];
    int r, n;
    weft_group_rank(g, &r);
    weft_group_size(g, &n);
    for (int i = 0; i < count; i++) {
        x[i] = r + i;
    }
    weft_status_t st = weft_allreduce(g, x, x, (size_t)count, WEFT_F64, WEFT_SUM);
    for (int i = 0; i < count && st == WEFT_OK; i++) {
        if (x[i] != (double)n * (n - 1) / 2 + (double)n * i) {
            st = WEFT_ERR_MISMATCH;
        }
    }
    return st;
}

/* The wall clock in ms: the bed's hosts share it, so scripts compare it with a kill's. */
static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
    static const char *const kinds[] = {"small", "mid-size", "large"};
    int kind = 0; /* of the allreduce that failed */
    double t0 = fault_now_ms();
    for (int i = 0; st == WEFT_OK && fault_now_ms() - t0 < WORK_LIMIT_MS; i++) {
        if (rank == kill_rank && i == 50) {
            raise(SIGKILL);
        }
        kind = i % 3;
        st = kind == 0 ? fault_checked_allreduce(g)
                       : checked_allreduce(g, kind == 1 ? 8192 : 262144);
    }
    long long wall_err = wall_ms();
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
    printf("SURVIVOR-OK rank %d (was %d): epoch %u -> %u, %d -> %d, repaired in %.1f ms; "
           "error at wall %lld ms in a %s allreduce\n",
           nr, rank, info.old_epoch, info.new_epoch, size, expected, t_done - t_err, wall_err,
           kinds[kind]);
    return 0;
}

/* Rank r's element i of the checked allreduces: small integers, exact in every type. */
static double hier_value(int r, size_t i)
{
    return (double)((r * 7 + (int)(i % 1009) * 3) % 61) - 20;
}

/* One checked allreduce of @p count elements of @p dt with @p op (SUM or MAX). */
static int hier_check(weft_group_t *g, size_t count, weft_dtype_t dt, weft_op_t op, bool inplace)
{
    int rank, size;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    size_t es = weft_dtype_size(dt);
    char *in = malloc(count * es + 1), *out = malloc(count * es + 1);
    int bad = in == NULL || out == NULL;
    for (size_t i = 0; !bad && i < count; i++) {
        double v = hier_value(rank, i);
        if (dt == WEFT_F64) {
            memcpy(in + i * es, &v, es);
        } else if (dt == WEFT_F32) {
            float f = (float)v;
            memcpy(in + i * es, &f, es);
        } else {
            int32_t k = (int32_t)v;
            memcpy(in + i * es, &k, es);
        }
    }
    if (!bad && inplace) {
        memcpy(out, in, count * es);
    }
    weft_status_t st =
        bad ? WEFT_ERR_NO_MEMORY : weft_allreduce(g, inplace ? out : in, out, count, dt, op);
    for (size_t i = 0; st == WEFT_OK && i < count && !bad; i++) {
        double want = op == WEFT_SUM ? 0 : hier_value(0, i);
        for (int r = 0; r < size; r++) {
            double v = hier_value(r, i);
            want = op == WEFT_SUM ? want + v : (v > want ? v : want);
        }
        double got;
        if (dt == WEFT_F64) {
            memcpy(&got, out + i * es, es);
        } else if (dt == WEFT_F32) {
            float f;
            memcpy(&f, out + i * es, es);
            got = f;
        } else {
            int32_t k;
            memcpy(&k, out + i * es, es);
            got = k;
        }
        if (got != want) {
            printf("HIER-FAIL rank %d: %zu elements of dtype %d, op %d%s: [%zu] = %g, not %g\n",
                   rank, count, (int)dt, (int)op, inplace ? " in place" : "", i, got, want);
            bad = 1;
        }
    }
    if (st != WEFT_OK) {
        printf("HIER-FAIL rank %d: allreduce of %zu: %s\n", rank, count, weft_status_str(st));
        bad = 1;
    }
    free(in);
    free(out);
    return bad;
}

/* A sum of doubles whose rounding depends on the order: the same bits on every rank. */
static int hier_same_bits(weft_group_t *g)
{
    enum { N = 20000 };
    static double x[N];
    int rank, size;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    for (int i = 0; i < N; i++) {
        x[i] = 1.0 / (double)(rank * 31 + i + 1) * (i % 2 ? 1e10 : 1e-10);
    }
    uint64_t h = 1469598103934665603ull, all[64];
    if (size > 64 || weft_allreduce(g, x, x, N, WEFT_F64, WEFT_SUM) != WEFT_OK) {
        return 1;
    }
    for (size_t i = 0; i < sizeof(x); i++) {
        h = (h ^ ((unsigned char *)x)[i]) * 1099511628211ull;
    }
    if (weft_allgather(g, &h, all, 1, WEFT_I64) != WEFT_OK) {
        return 1;
    }
    for (int r = 0; r < size; r++) {
        if (all[r] != h) {
            printf("HIER-FAIL rank %d: its sum differs from rank %d's\n", rank, r);
            return 1;
        }
    }
    return 0;
}

/* Whether the library picks the hierarchical allreduce for @p bytes on @p g (the leader
 * one; with @p sliced the sliced one, over hosts of equal size). */
static bool hier_chosen(weft_group_t *g, weft_ctx_t *ctx, size_t bytes, bool sliced)
{
    weft_coll_t c;
    memset(&c, 0, sizeof(c));
    c.ctx = ctx;
    c.g = g;
    weft_group_rank(g, &c.rank);
    weft_group_size(g, &c.size);
    c.a.kind = WEFT_COLL_ALLREDUCE;
    return sliced ? weft__coll_sliced_fits(&c, bytes) : weft__coll_hier_fits(&c, bytes);
}

static int run_hier(weft_ctx_t *ctx, weft_group_t *g)
{
    enum { MAXR = 64, NAME = 64 };
    int rank, size;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    static char names[MAXR][NAME];
    char mine[NAME] = {0};
    gethostname(mine, sizeof(mine) - 1);
    if (size > MAXR || weft_allgather(g, mine, names, NAME, WEFT_U8) != WEFT_OK) {
        printf("HIER-FAIL rank %d: allgather of the host names\n", rank);
        return 1;
    }
    /* The reference host table: the lowest rank with the same host name. */
    int nhosts = 0, lib_hosts, want[MAXR];
    bool shared = false;
    for (int r = 0; r < size; r++) {
        want[r] = r;
        for (int q = r - 1; q >= 0; q--) {
            want[r] = strcmp(names[q], names[r]) == 0 ? q : want[r];
        }
        nhosts += want[r] == r;
        shared |= want[r] != r;
    }
    const int *lib = weft__group_host_table(g, &lib_hosts);
    int bad = lib == NULL || lib_hosts != nhosts;
    for (int r = 0; r < size && !bad; r++) {
        bad = lib[r] != want[r];
    }
    if (bad) {
        printf("HIER-FAIL rank %d: the library counts %d host(s), the host names %d\n", rank,
               lib_hosts, nhosts);
        return 1;
    }
    bool expect = nhosts > 1 && shared;
    size_t max = ctx->cfg.coll_hier_max;
    if (hier_chosen(g, ctx, 64 << 10, false) != expect ||
        (max > 0 && hier_chosen(g, ctx, max + 1, false))) {
        printf("HIER-FAIL rank %d: the hierarchical allreduce is%s chosen on %d host(s)\n", rank,
               expect ? " not" : "", nhosts);
        return 1;
    }
    /* Past it, the sliced one when every host has as many ranks (>= 2). */
    int per_host = 0;
    bool equal = expect;
    for (int r = 0; r < size; r++) {
        int n = 0;
        for (int q = 0; q < size; q++) {
            n += want[q] == want[r];
        }
        equal = equal && (per_host == 0 || n == per_host);
        per_host = n;
    }
    bool sliced = equal && ctx->cfg.coll_hier_segment > 0;
    if (hier_chosen(g, ctx, max + 1, true) != sliced || hier_chosen(g, ctx, max, true)) {
        printf("HIER-FAIL rank %d: the sliced allreduce is%s chosen on %d host(s)\n", rank,
               sliced ? " not" : "", nhosts);
        return 1;
    }
    /* Latency sizes, mid sizes (the hierarchical range), and past WEFT_COLL_HIER_MAX. */
    static const size_t counts[] = {1, 7, 1000, 4099, 65536, 262147, 700001};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]) && !bad; k++) {
        for (int inplace = 0; inplace < 2 && !bad; inplace++) {
            bad = hier_check(g, counts[k], WEFT_F64, WEFT_SUM, inplace) ||
                  hier_check(g, counts[k], WEFT_F32, WEFT_SUM, inplace) ||
                  hier_check(g, counts[k], WEFT_I32, WEFT_MAX, inplace);
        }
    }
    if (bad || hier_same_bits(g)) {
        return 1;
    }
    printf("HIER-OK rank %d: %d ranks on %d host(s), %s\n", rank, size, nhosts,
           sliced   ? "hierarchical and sliced"
           : expect ? "hierarchical"
                    : "flat");
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
    if (st == WEFT_OK && run_hier(ctx, g) != 0) {
        st = WEFT_ERR_MISMATCH;
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
    if (argc < 2 || (argc < 3 && strcmp(argv[1], "grow") != 0 && strcmp(argv[1], "hier") != 0)) {
        fprintf(stderr, "usage: host_job paths HOSTS | loss SURVIVORS [KILL_RANK] | grow | hier\n");
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
    if (strcmp(argv[1], "hier") == 0) {
        int rc = run_hier(ctx, world);
        weft_finalize(ctx);
        return rc;
    }
    if (strcmp(argv[1], "paths") == 0) {
        int rc = run_paths(world, atoi(argv[2]));
        weft_finalize(ctx);
        return rc;
    }
    return run_loss(ctx, world, atoi(argv[2]), argc > 3 ? atoi(argv[3]) : -1);
}
