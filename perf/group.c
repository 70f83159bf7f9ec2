/*
 * weft-perf group: what losing and regaining a member costs.
 *
 * Run under `weftrun -n N --elastic -- weft-perf group`. Each run the last rank
 * records the time and kills itself with SIGKILL while the others loop on a small
 * allreduce. The survivors measure, side by side:
 *   detect   kill -> the last survivor's first failed operation (one host, so the
 *            monotonic clock is shared)
 *   repair   from the moment the last survivor knew of the death to the moment the last
 *            survivor completed weft_group_repair + the first allreduce at the new epoch
 *   rebuild  the same recovery done the way libraries without in-place repair do it: a
 *            new context (new transport worker, address exchange), its world group, the
 *            first allreduce, and finalizing it
 *   grow     weft_group_grow admitting a replacement (waiting in weft_group_join),
 *            connection set-up and the first allreduce with it included
 * Rank 0 starts the replacement itself once the repair and the rebuild have been
 * measured, so that its start-up (exec, loading, transport init) does not compete for
 * the cores with what is being measured; on a cluster it would start on another node.
 * With --no-spawn, `weftrun --elastic --replace` starts it instead, at once. The
 * replacement becomes the next run's victim, so the group size stays N.
 * With --victims K the last K ranks die together (a lost host, when the job's last host
 * runs K ranks: weftrun --nnodes puts them there), and K replacements are admitted at
 * once; with --kill-launcher the first of them kills its weftrun first, so that the rest
 * die with it, as when the host itself is lost. --no-grow admits nobody: one run per job.
 * Times are the maximum over the survivors of each run; medians over runs are reported.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf.h"

enum { M_DETECT, M_REPAIR, M_REBUILD, M_GROW, M_COUNT };
static const char *const metric_names[M_COUNT] = {"detect", "repair", "rebuild", "grow"};

typedef struct group_bench {
    perf_opts_t o;
    bool rebuild;
    bool spawn; /* rank 0 starts each replacement itself */
    bool grow;  /* admit replacements after each run */
    bool kill_launcher; /* the first victim kills its weftrun (its parent) too */
    int victims;        /* members that die together in each run */
    char **argv; /* this subcommand's arguments, for the replacements */
    int size0; /* members at the start; the replacement keeps the group at this size */
    weft_ctx_t *ctx;
    weft_group_t *g;
    double *samples[M_COUNT]; /* [runs], rank 0 */
} group_bench_t;

static const perf_extra_opt_t extras[] = {
    {"--no-rebuild", false, NULL, "skip the full-rebuild comparison"},
    {"--no-spawn", false, NULL,
     "do not start replacements (weftrun --elastic --replace starts them)"},
    {"--victims", true, "K", "the last K ranks die together in each run (default 1)"},
    {"--kill-launcher", false, NULL,
     "the first victim kills its weftrun first (the whole host is lost)"},
    {"--no-grow", false, NULL, "admit no replacement (one run per job)"},
};

static int on_extra(void *arg, const char *name, const char *val)
{
    (void)val;
    group_bench_t *b = arg;
    if (strcmp(name, "--no-rebuild") == 0) {
        b->rebuild = false;
    } else if (strcmp(name, "--no-spawn") == 0) {
        b->spawn = false;
    } else if (strcmp(name, "--no-grow") == 0) {
        b->grow = false;
    } else if (strcmp(name, "--kill-launcher") == 0) {
        b->kill_launcher = true;
    } else if (strcmp(name, "--victims") == 0) {
        char *end;
        long k = strtol(val, &end, 10);
        if (*end != '\0' || k < 1 || k > 1024) {
            fprintf(stderr, "weft-perf group: --victims needs a number from 1 to 1024\n");
            return 1;
        }
        b->victims = (int)k;
    }
    return 0;
}

/* One name per job and run: the store's address is the same in every rank and
 * replacement (the job token is no name: it is secret, and weft_init takes it out of the
 * environment). */
static void stamp_path(char *buf, size_t len, int iter)
{
    const char *store = getenv("WEFT_STORE");
    snprintf(buf, len, "/tmp/weft-perf-group.%.40s.%d", store != NULL ? store : "none", iter);
    for (char *c = buf + strlen("/tmp/"); *c != '\0'; c++) {
        *c = *c == '/' ? '_' : *c; /* an etcd address: "etcd://h1:2379,..." */
    }
}

/* The victim leaves its clock in a file: a message could be lost with the revoke. The
 * first of several (@p first) writes it; with @p launcher, it kills its weftrun first. */
static void die_now(int iter, bool first, bool launcher)
{
    char path[96];
    stamp_path(path, sizeof(path), iter);
    FILE *f = first ? fopen(path, "w") : NULL;
    if (f != NULL) {
        fprintf(f, "%.3f\n", perf_now_us());
        fclose(f);
    }
    fflush(NULL);
    if (first && launcher) {
        kill(getppid(), SIGKILL);
    }
    raise(SIGKILL);
}

static double read_stamp(int iter)
{
    char path[96];
    double t = -1;
    stamp_path(path, sizeof(path), iter);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &t) != 1) {
            t = -1;
        }
        fclose(f);
        unlink(path);
    }
    return t;
}

static int check(weft_ctx_t *ctx, const char *what, weft_status_t st)
{
    if (st != WEFT_OK) {
        fprintf(stderr, "weft-perf group: %s: %s: %s\n", what, weft_status_str(st),
                weft_last_error(ctx));
        return 1;
    }
    return 0;
}

/* An allreduce whose result every member can verify: the sum of 1..size. */
static weft_status_t checked_allreduce(weft_group_t *g)
{
    int rank, size;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    int64_t v = rank + 1;
    weft_status_t st = weft_allreduce(g, &v, &v, 1, WEFT_I64, WEFT_SUM);
    if (st == WEFT_OK && v != (int64_t)size * (size + 1) / 2) {
        return WEFT_ERR_MISMATCH;
    }
    return st;
}

/* A new context for the survivors, as a full rebuild would make, then gone again. */
static double full_rebuild(group_bench_t *b, int iter)
{
    int rank, size;
    char ns[32], rs[16], ss[16];
    weft_group_rank(b->g, &rank);
    weft_group_size(b->g, &size);
    snprintf(ns, sizeof(ns), "rebuild%d", iter);
    snprintf(rs, sizeof(rs), "%d", rank);
    snprintf(ss, sizeof(ss), "%d", size);
    char *saved_rank = strdup(getenv("WEFT_RANK") ? getenv("WEFT_RANK") : "");
    char *saved_size = strdup(getenv("WEFT_WORLD_SIZE") ? getenv("WEFT_WORLD_SIZE") : "");
    char *saved_join = getenv("WEFT_JOIN") ? strdup(getenv("WEFT_JOIN")) : NULL;
    setenv("WEFT_NAMESPACE", ns, 1);
    setenv("WEFT_RANK", rs, 1);
    setenv("WEFT_WORLD_SIZE", ss, 1);
    unsetenv("WEFT_JOIN");

    double t0 = perf_now_us(), dt = -1;
    weft_ctx_t *ctx2 = NULL;
    weft_group_t *w2;
    weft_status_t st = weft_init(NULL, &ctx2);
    if (st == WEFT_OK && (st = weft_ctx_world(ctx2, &w2)) == WEFT_OK) {
        st = checked_allreduce(w2);
    }
    weft_finalize(ctx2);
    if (st == WEFT_OK) {
        dt = perf_now_us() - t0;
    } else {
        fprintf(stderr, "weft-perf group: rebuild failed: %s\n", weft_status_str(st));
    }
    unsetenv("WEFT_NAMESPACE");
    setenv("WEFT_RANK", saved_rank, 1);
    setenv("WEFT_WORLD_SIZE", saved_size, 1);
    if (saved_join != NULL) {
        setenv("WEFT_JOIN", saved_join, 1);
    }
    free(saved_rank);
    free(saved_size);
    free(saved_join);
    return dt;
}

/* A replacement: this program again, joining (the store assigns its member id). */
static int spawn_replacement(group_bench_t *b)
{
    for (pid_t pid; (pid = waitpid(-1, NULL, WNOHANG)) > 0;) {
        /* reap earlier replacements that were killed */
    }
    char *args[64];
    int n = 0;
    args[n++] = "weft-perf";
    for (int i = 0; b->argv[i] != NULL && n < 62; i++) {
        args[n++] = b->argv[i];
    }
    args[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        setenv("WEFT_JOIN", "1", 1);
        unsetenv("WEFT_RANK");
        perf_pass_token();
        execv("/proc/self/exe", args);
        _exit(127);
    }
    if (pid < 0) {
        perror("weft-perf group: fork");
        return 1;
    }
    return 0;
}

static int wait_for_joiners(group_bench_t *b, int want)
{
    double start = perf_now_us(), deadline = start + 60e6;
    for (int n = 0;;) {
        if (check(b->ctx, "counting joiners", weft_group_pending_joiners(b->g, &n))) {
            return 1;
        }
        if (n >= want) {
            return 0;
        }
        if (perf_now_us() > deadline) {
            fprintf(stderr, "weft-perf group: no replacement arrived after %.3g s%s\n",
                    (perf_now_us() - start) / 1e6,
                    b->spawn ? "" : ": run under 'weftrun --elastic --replace'");
            return 1;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/*
 * One run on a survivor. m[] gets absolute times for the detection and the end of the
 * repair (the maxima over survivors give the run's figures) and durations for rebuild
 * and grow. @p failed: the allreduce before the kill already saw the death.
 */
static int survive_one(group_bench_t *b, int iter, bool failed, double m[M_COUNT])
{
    weft_status_t st = failed ? WEFT_ERR_PEER_FAILED : WEFT_OK;
    while (st == WEFT_OK) {
        st = checked_allreduce(b->g);
    }
    m[M_DETECT] = perf_now_us();
    weft_edit_info_t info = {.size = sizeof(info)};
    /* Victims that die together may be noticed one repair apart: work on until the
     * group has lost them all (or 10 s have passed). */
    int size = 0;
    double until = perf_now_us() + 10e6;
    for (;;) {
        st = weft_group_repair(b->g, &info);
        while (st == WEFT_OK && (st = checked_allreduce(b->g)) == WEFT_OK) {
            weft_group_size(b->g, &size);
            if (size <= b->size0 - b->victims || perf_now_us() > until) {
                break;
            }
        }
        if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
            break;
        }
    }
    if (check(b->ctx, "repair", st)) {
        return 1;
    }
    m[M_REPAIR] = perf_now_us();
    /* Nobody starts the rebuild (heavy: a new transport context) while another survivor
     * is still finishing the repair being measured. */
    if (check(b->ctx, "barrier", weft_barrier(b->g))) {
        return 1;
    }
    m[M_REBUILD] = b->rebuild ? full_rebuild(b, iter) : -1;

    weft_group_size(b->g, &size);
    m[M_GROW] = -1;
    if (size == b->size0 || !b->grow) {
        return 0; /* the replacements were waiting already: the repair admitted them */
    }
    int rank, missing = b->size0 - size;
    weft_group_rank(b->g, &rank);
    for (int i = 0; i < missing && b->spawn && rank == 0; i++) {
        if (spawn_replacement(b)) {
            return 1;
        }
    }
    if (wait_for_joiners(b, missing)) {
        return 1;
    }
    double t6 = perf_now_us();
    if (check(b->ctx, "grow", weft_group_grow(b->g, missing, 60000, &info)) ||
        check(b->ctx, "allreduce after grow", checked_allreduce(b->g))) {
        return 1;
    }
    m[M_GROW] = perf_now_us() - t6;
    return 0;
}

static void report(group_bench_t *b, int runs, int size)
{
    double med[M_COUNT], lo[M_COUNT], hi[M_COUNT];
    for (int k = 0; k < M_COUNT; k++) {
        int n = 0;
        for (int i = 0; i < runs; i++) {
            if (b->samples[k][i] >= 0) {
                b->samples[k][n++] = b->samples[k][i];
            }
        }
        med[k] = perf_median(b->samples[k], n);
        lo[k] = n > 0 ? b->samples[k][0] : 0;
        hi[k] = n > 0 ? b->samples[k][n - 1] : 0;
    }
    double ratio = med[M_REPAIR] > 0 && med[M_REBUILD] > 0 ? med[M_REBUILD] / med[M_REPAIR] : 0;
    if (b->o.json) {
        printf("{\"subcommand\": \"group\", \"ranks\": %d, \"runs\": %d", size, runs);
        for (int k = 0; k < M_COUNT; k++) {
            printf(", \"%s_us\": {\"median\": %.1f, \"min\": %.1f, \"max\": %.1f}",
                   metric_names[k], med[k], lo[k], hi[k]);
        }
        printf(", \"rebuild_over_repair\": %.1f}\n", ratio);
        return;
    }
    printf("# weft-perf group: %d ranks, %d runs (%d SIGKILL%s per run%s)\n", size, runs,
           b->victims, b->victims > 1 ? "s" : "", b->kill_launcher ? ", their weftrun too" : "");
    printf("# %-10s %12s %12s %12s\n", "metric", "median(us)", "min(us)", "max(us)");
    for (int k = 0; k < M_COUNT; k++) {
        printf("  %-10s %12.1f %12.1f %12.1f\n", metric_names[k], med[k], lo[k], hi[k]);
    }
    if (ratio > 0) {
        printf("# repair vs full rebuild: %.1fx faster (median %.1f us vs %.1f us)\n", ratio,
               med[M_REPAIR], med[M_REBUILD]);
    }
}

static int run(group_bench_t *b, int iter, int runs, int size0)
{
    for (; iter < runs; iter++) {
        int rank, size;
        weft_group_rank(b->g, &rank);
        weft_group_size(b->g, &size);
        if (size < 3 || size - b->victims < 2) {
            fprintf(stderr, "weft-perf group: needs at least 3 ranks, and 2 survivors\n");
            return PERF_EXIT_USAGE;
        }
        /* The victim may die right after its part of this allreduce: a survivor can see
         * the death here already. */
        weft_status_t st = checked_allreduce(b->g);
        if (st != WEFT_OK && st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
            check(b->ctx, "allreduce", st);
            return PERF_EXIT_ERROR;
        }
        if (rank >= size - b->victims) {
            die_now(iter, rank == size - b->victims, b->kill_launcher);
        }
        double m[M_COUNT] = {0};
        if (survive_one(b, iter, st != WEFT_OK, m)) {
            return PERF_EXIT_ERROR;
        }
        /* Admitted replacement: tell it where we are, then gather the run's maxima. */
        int32_t next = iter + 1;
        if (check(b->ctx, "broadcast", weft_broadcast(b->g, &next, 1, WEFT_I32, 0)) ||
            check(b->ctx, "gather times", weft_allreduce(b->g, m, m, M_COUNT, WEFT_F64,
                                                         WEFT_MAX))) {
            return PERF_EXIT_ERROR;
        }
        weft_group_rank(b->g, &rank);
        if (rank == 0) {
            double t0 = read_stamp(iter);
            b->samples[M_DETECT][iter] = t0 > 0 ? m[M_DETECT] - t0 : -1;
            b->samples[M_REPAIR][iter] = m[M_REPAIR] - m[M_DETECT];
            b->samples[M_REBUILD][iter] = m[M_REBUILD];
            b->samples[M_GROW][iter] = m[M_GROW];
        }
    }
    int rank;
    weft_group_rank(b->g, &rank);
    if (rank == 0) {
        report(b, runs, size0);
    }
    return PERF_EXIT_OK;
}

/* A replacement: join, take part in the grow's first allreduce, learn the run number. */
static int join_and_run(group_bench_t *b, int runs)
{
    if (check(b->ctx, "join", weft_group_join(b->ctx, "world", 120000, &b->g)) ||
        check(b->ctx, "first allreduce", checked_allreduce(b->g))) {
        return PERF_EXIT_ERROR;
    }
    int32_t next = 0;
    double m[M_COUNT] = {-1, -1, -1, -1};
    if (check(b->ctx, "broadcast", weft_broadcast(b->g, &next, 1, WEFT_I32, 0)) ||
        check(b->ctx, "gather times", weft_allreduce(b->g, m, m, M_COUNT, WEFT_F64, WEFT_MAX))) {
        return PERF_EXIT_ERROR;
    }
    weft_group_size(b->g, &b->size0);
    return run(b, next, runs, b->size0);
}

int perf_group_main(int argc, char **argv)
{
    group_bench_t b = {.rebuild = true, .spawn = true, .grow = true, .victims = 1, .argv = argv};
    perf_opts_default(&b.o);
    b.o.uses = PERF_USE_ITERS | PERF_USE_JSON;
    int rc = perf_parse_opts(argc, argv, &b.o, "group", extras, sizeof(extras) / sizeof(extras[0]),
                             on_extra, &b);
    if (rc != PERF_CONTINUE) {
        return rc == PERF_BAD ? PERF_EXIT_USAGE : PERF_EXIT_OK;
    }
    const char *join = getenv("WEFT_JOIN");
    bool joining = join != NULL && strcmp(join, "1") == 0;
    if (b.spawn && b.grow && !joining && !perf_need_token("group", "a replacement", "--no-spawn")) {
        return PERF_EXIT_USAGE;
    }
    int runs = b.o.iters;
    for (int k = 0; k < M_COUNT; k++) {
        b.samples[k] = calloc((size_t)runs + 1, sizeof(double));
        if (b.samples[k] == NULL) {
            return PERF_EXIT_ERROR;
        }
    }
    weft_status_t st = weft_init(NULL, &b.ctx);
    if (st != WEFT_OK) {
        fprintf(stderr, "weft-perf group: weft_init: %s\n", weft_status_str(st));
        return PERF_EXIT_ERROR;
    }
    if (joining) {
        rc = join_and_run(&b, runs);
    } else {
        weft_ctx_world(b.ctx, &b.g);
        weft_group_size(b.g, &b.size0);
        rc = run(&b, 0, runs, b.size0);
    }
    weft_finalize(b.ctx);
    for (int k = 0; k < M_COUNT; k++) {
        free(b.samples[k]);
    }
    return rc;
}
