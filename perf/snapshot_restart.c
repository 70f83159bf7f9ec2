/*
 * weft-perf snapshot: what a restart from a file checkpoint costs besides re-reading the
 * files. The job's processes are gone; a new job starts as many as survive here: each
 * survivor forks and executes this program again as a fresh rank of a job of its own (a
 * namespace of its own on the same store), which runs weft_init, the world group's
 * rendezvous and a first 8 B allreduce, then reports the time on a pipe. The slowest
 * fresh rank, from the common start to its allreduce, is job_start_us. Exiting (and
 * weft_finalize) is not counted.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "snapshot.h"

#define FRESH_ENV "WEFTPERF_FRESH_RANK_FD" /* not WEFT_*: weft would warn of it */
#define FRESH_TIMEOUT_MS 60000

bool snap_is_fresh_rank(void)
{
    return getenv(FRESH_ENV) != NULL;
}

int snap_fresh_rank_main(void)
{
    int fd = atoi(getenv(FRESH_ENV));
    weft_ctx_t *ctx = NULL;
    weft_group_t *world = NULL;
    int64_t one = 1, sum = 0;
    int size = 0;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st == WEFT_OK && (st = weft_ctx_world(ctx, &world)) == WEFT_OK &&
        (st = weft_group_size(world, &size)) == WEFT_OK) {
        st = weft_allreduce(world, &one, &sum, 1, WEFT_I64, WEFT_SUM);
    }
    double t = st == WEFT_OK && sum == size ? perf_now_us() : -1;
    if (t < 0) {
        fprintf(stderr, "weft-perf snapshot: fresh rank: %s: %s\n", weft_status_str(st),
                weft_last_error(ctx));
    }
    if (write(fd, &t, sizeof(t)) != (ssize_t)sizeof(t)) {
        t = -1;
    }
    close(fd);
    weft_finalize(ctx);
    return t < 0;
}

/* Reap @p pid, killing it when it has not ended within the timeout. */
static void reap(pid_t pid)
{
    double deadline = perf_now_us() + FRESH_TIMEOUT_MS * 1e3;
    while (waitpid(pid, NULL, WNOHANG) == 0) {
        if (perf_now_us() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* This survivor's fresh rank: from @p t0 to its first allreduce, or -1. */
static double start_fresh_rank(int rank, int size, double *t0)
{
    int p[2];
    if (pipe(p) != 0) {
        perror("weft-perf snapshot: pipe");
        return -1;
    }
    char fd[16], rs[16], ss[16];
    snprintf(fd, sizeof(fd), "%d", p[1]);
    snprintf(rs, sizeof(rs), "%d", rank);
    snprintf(ss, sizeof(ss), "%d", size);
    *t0 = perf_now_us();
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        setenv(FRESH_ENV, fd, 1);
        setenv("WEFT_NAMESPACE", "weft-perf-restart", 1);
        setenv("WEFT_RANK", rs, 1);
        setenv("WEFT_WORLD_SIZE", ss, 1);
        setenv("WEFT_LOCAL_RANK", rs, 1);
        setenv("WEFT_LOCAL_SIZE", ss, 1);
        unsetenv("WEFT_JOIN");
        perf_pass_token();
        char *args[] = {"weft-perf", "snapshot", NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(p[1]);
    if (pid < 0) {
        perror("weft-perf snapshot: fork");
        close(p[0]);
        return -1;
    }
    double t = -1;
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    int rc;
    while ((rc = poll(&pf, 1, FRESH_TIMEOUT_MS)) < 0 && errno == EINTR) {
    }
    if (rc != 1 || read(p[0], &t, sizeof(t)) != (ssize_t)sizeof(t)) {
        fprintf(stderr, "weft-perf snapshot: the fresh rank %d did not report\n", rank);
        t = -1;
    }
    close(p[0]);
    reap(pid);
    return t;
}

weft_status_t snap_measure_job_start(snap_bench_t *b, snap_result_t *r)
{
    int rank, size;
    weft_group_rank(b->w.world, &rank);
    weft_group_size(b->w.world, &size);
    weft_status_t st = weft_barrier(b->w.world);
    if (st != WEFT_OK) {
        return st;
    }
    double t0 = 0, t = start_fresh_rank(rank, size, &t0);
    double us = t >= 0 ? t - t0 : -1;
    double mine[2] = {us, -us}, all[2];
    st = weft_allreduce(b->w.world, mine, all, 2, WEFT_F64, WEFT_MAX);
    if (st != WEFT_OK) {
        return st;
    }
    /* Every fresh rank must have reported (the MAX of -us is then below 0). */
    r->job_start_us = all[1] < 0 ? all[0] : -1;
    return WEFT_OK;
}
