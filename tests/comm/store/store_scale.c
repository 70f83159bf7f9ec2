/*
 * weft-store-scale: the rendezvous store under many lightweight clients in few processes.
 *
 *   weft-store-scale [-n CLIENTS] [-p PROCS] [-t TIMEOUT_S] [-w WINDOW] [--json]
 *
 * The store runs in a process of its own (random token, 127.0.0.1, a free port). PROCS
 * worker processes (store_scale_client.c) run CLIENTS/PROCS clients each, which speak
 * for members 0..CLIENTS-1 from source addresses 127.0.X.Y, SCALE_PER_HOST per address
 * as ranks per host. Each phase is timed from the "go" this process sends every worker
 * until every worker has reported done (store_scale.h):
 *   connect     every client connects and authenticates (the store drops handshakes
 *               beyond its pool for them, and beyond one address's share of it, which
 *               all of 127.0.0.0/8 shares, as busy: those try again after a pause);
 *   rendezvous  every client SETs bench/addr/<id>, ADDs 1 to bench/arrived and parks a
 *               GET on bench/go, which the client whose ADD returned CLIENTS sets;
 *   fanout      every client WATCHes bench/failed/ (untimed), then a launcher connection
 *               of this process sets bench/failed/7: done when every client has its event.
 * The store's VmRSS and VmHWM are read before the clients connect and after each phase.
 * Counts and values are checked (every client got its event exactly once), and every
 * wait is bounded by TIMEOUT_S: any mismatch or timeout says which phase and how many
 * clients were not done, and exits 1.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/store/proto.h"
#include "store_scale.h"
#include "util/clock.h"

#define STORE_LOG_LINES 5    /* of the store's warnings shown; the rest are counted */
#define FDS_SPARE 64         /* descriptors a process needs besides its clients' */
#define REPORT_GRACE_MS 5000 /* past a phase's timeout, before a silent worker counts as hung */

static const char *const phase_names[SCALE_NPHASES] = {"quit",  "connect", "rendezvous",
                                                       "watch", "fanout",  "check"};

typedef struct run {
    scale_opts_t o;
    char token[65];
    bool json;
    pid_t server;
    int server_life; /* closing it stops the store */
    pid_t *worker;
    int *cmd, *report;
    weft_store_client_t *launcher;
    /* Each phase's wall time, the CPU time of the store and of all the workers in it. */
    double ms[SCALE_NPHASES], cpu_ms[SCALE_NPHASES], wcpu_ms[SCALE_NPHASES];
    bool ran[SCALE_NPHASES];                     /* the phase ran to its end (it may have failed) */
    long rss[SCALE_NPHASES], hwm[SCALE_NPHASES]; /* [SCALE_QUIT]: before the clients */
    scale_report_t total;                        /* the latest counters of all workers */
    scale_phase_t failed_phase;                  /* SCALE_QUIT while none failed */
    char error[512];
} run_t;

__attribute__((format(printf, 3, 4))) static bool run_fail(run_t *r, scale_phase_t p,
                                                           const char *fmt, ...)
{
    if (r->error[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->error, sizeof(r->error), fmt, ap);
        va_end(ap);
        r->failed_phase = p;
    }
    return false;
}

/* ---- the store's process ---- */

typedef struct store_log {
    int lines;
} store_log_t;

static void store_log_line(weft_log_level_t level, int rank, const char *msg, void *arg)
{
    (void)level;
    (void)rank;
    store_log_t *l = arg;
    if (l->lines++ < STORE_LOG_LINES) {
        fprintf(stderr, "weft-store-scale: (the store's log) %s\n", msg);
    }
}

/* Serves until @p life_fd reads end of file (the parent closed it, or died). */
static int store_main(const char *token, int ready_fd, int life_fd)
{
    store_log_t log = {0};
    weft_logger_t lg = {.level = WEFT_LOG_WARN, .rank = -1, .fn = store_log_line, .arg = &log};
    weft_store_server_params_t p = {
        .size = sizeof(p), .bind_addr = "127.0.0.1", .port = 0, .token = token, .logger = &lg};
    weft_store_server_t *s = NULL;
    int port = weft__store_server_start(&p, &s) == WEFT_OK ? weft__store_server_port(s) : -1;
    if (write(ready_fd, &port, sizeof(port)) != (ssize_t)sizeof(port) || port < 0) {
        return 1;
    }
    char b;
    while (read(life_fd, &b, 1) < 0 && errno == EINTR) {
    }
    weft__store_server_stop(s);
    if (log.lines > STORE_LOG_LINES) {
        fprintf(stderr, "weft-store-scale: (the store's log) %d more warnings\n",
                log.lines - STORE_LOG_LINES);
    }
    return 0;
}

static bool start_store(run_t *r)
{
    int ready[2], life[2];
    if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(life, O_CLOEXEC) != 0) {
        return run_fail(r, SCALE_QUIT, "pipe: %s", strerror(errno));
    }
    pid_t parent = getpid();
    r->server = fork();
    if (r->server < 0) {
        return run_fail(r, SCALE_QUIT, "fork: %s", strerror(errno));
    }
    if (r->server == 0) {
        close(ready[0]);
        close(life[1]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(getppid() == parent ? store_main(r->token, ready[1], life[0]) : 1);
    }
    close(ready[1]);
    close(life[0]);
    r->server_life = life[1];
    int port = -1;
    struct pollfd pfd = {.fd = ready[0], .events = POLLIN};
    if (poll(&pfd, 1, 10000) == 1 && read(ready[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
        port = -1;
    }
    close(ready[0]);
    if (port <= 0) {
        return run_fail(r, SCALE_QUIT, "the store did not start");
    }
    r->o.port = port;
    return true;
}

/* A field of /proc/<pid>/status in KiB ("VmRSS:"), -1 if it cannot be read. */
static long proc_status_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, strlen(field)) == 0) {
            kib = strtol(line + strlen(field), NULL, 10);
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kib;
}

/* CPU time (ns) the threads of @p pid have run, from their schedstat; 0 if unknown. */
static uint64_t proc_cpu_ns(pid_t pid)
{
    char path[64], line[128];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    uint64_t ns = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/%d/task/%.20s/schedstat", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            ns += strtoull(line, NULL, 10);
        }
        if (f != NULL) {
            fclose(f);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return ns;
}

static uint64_t workers_cpu_ns(const run_t *r)
{
    uint64_t ns = 0;
    for (int w = 0; w < r->o.procs; w++) {
        ns += proc_cpu_ns(r->worker[w]);
    }
    return ns;
}

static void note_memory(run_t *r, scale_phase_t p)
{
    r->rss[p] = proc_status_kib(r->server, "VmRSS:");
    r->hwm[p] = proc_status_kib(r->server, "VmHWM:");
}

/* ---- workers ---- */

static bool start_workers(run_t *r)
{
    int n = r->o.procs;
    r->worker = calloc((size_t)n, sizeof(*r->worker));
    r->cmd = calloc((size_t)n, sizeof(*r->cmd));
    r->report = calloc((size_t)n, sizeof(*r->report));
    if (r->worker == NULL || r->cmd == NULL || r->report == NULL) {
        return run_fail(r, SCALE_QUIT, "out of memory");
    }
    pid_t parent = getpid();
    for (int w = 0; w < n; w++) {
        int cmd[2], rep[2];
        if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(rep, O_CLOEXEC) != 0) {
            return run_fail(r, SCALE_QUIT, "pipe: %s", strerror(errno));
        }
        int first = (int)((long)r->o.clients * w / n);
        int count = (int)((long)r->o.clients * (w + 1) / n) - first;
        r->worker[w] = fork();
        if (r->worker[w] < 0) {
            return run_fail(r, SCALE_QUIT, "fork: %s", strerror(errno));
        }
        if (r->worker[w] == 0) {
            /* Only its own pipes: the ends of the others' would hide their end of file. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(r->server_life);
            for (int j = 0; j < w; j++) {
                close(r->cmd[j]);
                close(r->report[j]);
            }
            close(cmd[1]);
            close(rep[0]);
            _exit(getppid() == parent ? scale_worker(&r->o, first, count, cmd[0], rep[1]) : 1);
        }
        close(cmd[0]);
        close(rep[1]);
        r->cmd[w] = cmd[1];
        r->report[w] = rep[0];
    }
    return true;
}

/* Waits up to @p ms for @p pid; kills it (SIGKILL) if it has not exited by then. */
static void reap_within(pid_t pid, int ms)
{
    for (int waited = 0; pid > 0; waited += 10) {
        if (waitpid(pid, NULL, WNOHANG) != 0) {
            return;
        }
        if (waited >= ms) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return;
        }
        usleep(10000);
    }
}

static void stop_all(run_t *r)
{
    if (r->launcher != NULL) {
        weft__store_close(r->launcher);
    }
    for (int w = 0; r->worker != NULL && w < r->o.procs; w++) {
        if (r->worker[w] > 0) {
            uint8_t quit = SCALE_QUIT;
            if (r->failed_phase != SCALE_QUIT || write(r->cmd[w], &quit, 1) != 1) {
                kill(r->worker[w], SIGKILL);
            }
            close(r->cmd[w]);
            close(r->report[w]);
        }
    }
    for (int w = 0; r->worker != NULL && w < r->o.procs; w++) {
        reap_within(r->worker[w], 5000);
    }
    if (r->server > 0) {
        close(r->server_life); /* a store that failed a phase gets less time to stop */
        reap_within(r->server, r->failed_phase != SCALE_QUIT ? 1000 : 10000);
    }
    free(r->worker);
    free(r->cmd);
    free(r->report);
}

/* ---- phases ---- */

/* Every worker's report of phase @p p, within its timeout; false (r->error) otherwise. */
static bool collect_reports(run_t *r, scale_phase_t p, uint64_t t0_ms, scale_report_t *rep,
                            struct pollfd *pfd)
{
    int n = r->o.procs, got = 0;
    uint64_t deadline = t0_ms + (uint64_t)r->o.timeout_ms + REPORT_GRACE_MS;
    for (int w = 0; w < n; w++) {
        pfd[w] = (struct pollfd){.fd = r->report[w], .events = POLLIN};
    }
    while (got < n) {
        uint64_t now = weft__now_ms();
        if (now >= deadline) {
            return run_fail(r, p, "%s: %d of %d worker processes did not report within %d ms",
                            phase_names[p], n - got, n, r->o.timeout_ms + REPORT_GRACE_MS);
        }
        if (poll(pfd, (nfds_t)n, (int)(deadline - now)) < 0 && errno != EINTR) {
            return run_fail(r, p, "poll: %s", strerror(errno));
        }
        for (int w = 0; w < n; w++) {
            if (pfd[w].fd < 0 || pfd[w].revents == 0) {
                continue;
            }
            if (read(r->report[w], &rep[w], sizeof(rep[w])) != (ssize_t)sizeof(rep[w]) ||
                rep[w].phase != (int32_t)p) {
                return run_fail(r, p, "%s: worker process %d exited or sent garbage",
                                phase_names[p], w);
            }
            pfd[w].fd = -1; /* poll() skips it */
            got++;
        }
    }
    return true;
}

/* What failed in phase @p p according to the reports, in r->error. */
static bool judge_phase(run_t *r, scale_phase_t p, const scale_report_t *rep)
{
    int done = 0, failed = 0;
    const char *why = "";
    memset(&r->total, 0, sizeof(r->total));
    for (int w = 0; w < r->o.procs; w++) {
        done += rep[w].done;
        failed += rep[w].failed;
        why = why[0] != '\0' ? why : rep[w].why;
        r->total.busy += rep[w].busy;
        r->total.dropped += rep[w].dropped;
        r->total.refused += rep[w].refused;
        r->total.winners += rep[w].winners;
        r->total.add_sum += rep[w].add_sum;
    }
    if (failed > 0) {
        return run_fail(r, p, "%s: %d of %d clients failed; the first: %s", phase_names[p], failed,
                        r->o.clients, why);
    }
    if (done < r->o.clients) {
        char hint[200] = "";
        if (p == SCALE_CONNECT && r->o.clients + 1 > WEFT__STORE_MAX_CONNS) {
            snprintf(hint, sizeof(hint),
                     "; this build's store admits %d authenticated connections "
                     "(WEFT__STORE_MAX_CONNS), fewer than the %d clients and the launcher",
                     WEFT__STORE_MAX_CONNS, r->o.clients);
        }
        return run_fail(r, p,
                        "%s: %d of %d clients not done after %d ms (handshakes retried: %llu "
                        "answered busy, %llu closed unanswered, %llu connect() failures)%s",
                        phase_names[p], r->o.clients - done, r->o.clients, r->o.timeout_ms,
                        (unsigned long long)r->total.busy, (unsigned long long)r->total.dropped,
                        (unsigned long long)r->total.refused, hint);
    }
    return true;
}

/* The rendezvous's results, read back through the launcher connection (untimed). */
static bool check_rendezvous(run_t *r)
{
    int64_t n = r->o.clients, arrived = 0;
    if (r->total.winners != 1 || r->total.add_sum != n * (n + 1) / 2) {
        return run_fail(r, SCALE_RENDEZVOUS,
                        "rendezvous: %d clients saw ADD return %lld, and the values ADD returned "
                        "sum to %lld, not %lld",
                        r->total.winners, (long long)n, (long long)r->total.add_sum,
                        (long long)(n * (n + 1) / 2));
    }
    weft_status_t st = weft__store_get_i64(r->launcher, "bench/arrived", 1000, &arrived);
    if (st != WEFT_OK || arrived != n) {
        return run_fail(r, SCALE_RENDEZVOUS, "rendezvous: bench/arrived is %lld (%s), not %lld",
                        (long long)arrived, weft_status_str(st), (long long)n);
    }
    for (uint32_t id = 0; id < (uint32_t)n; id++) {
        char key[32], want[SCALE_ADDR_LEN];
        void *val = NULL;
        size_t len = 0;
        snprintf(key, sizeof(key), "bench/addr/%u", id);
        scale_addr_value(id, want);
        st = weft__store_get(r->launcher, key, 1000, &val, &len);
        bool right = st == WEFT_OK && len == sizeof(want) && memcmp(val, want, len) == 0;
        free(val);
        if (!right) {
            return run_fail(r, SCALE_RENDEZVOUS, "rendezvous: %s is wrong or missing (%s)", key,
                            weft_status_str(st));
        }
    }
    return true;
}

static bool run_phase(run_t *r, scale_phase_t p)
{
    int n = r->o.procs;
    uint8_t cmd = (uint8_t)p;
    scale_report_t *rep = calloc((size_t)n, sizeof(*rep));
    struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
    if (rep == NULL || pfd == NULL) {
        free(rep);
        free(pfd);
        return run_fail(r, p, "out of memory");
    }
    uint64_t cpu0 = proc_cpu_ns(r->server), wcpu0 = workers_cpu_ns(r), t0 = weft__now_ns();
    bool ok = true;
    for (int w = 0; ok && w < n; w++) {
        ok = write(r->cmd[w], &cmd, 1) == 1 ||
             run_fail(r, p, "%s: worker process %d is gone", phase_names[p], w);
    }
    if (ok && (p == SCALE_FANOUT || p == SCALE_CHECK)) {
        const char *key = p == SCALE_FANOUT ? SCALE_FAILED_KEY : SCALE_END_KEY;
        weft_status_t st =
            weft__store_set(r->launcher, key, SCALE_FAILED_VALUE, strlen(SCALE_FAILED_VALUE));
        ok = st == WEFT_OK || run_fail(r, p, "%s: the launcher's SET %s failed: %s", phase_names[p],
                                       key, weft_status_str(st));
    }
    ok = ok && collect_reports(r, p, t0 / 1000000, rep, pfd);
    r->ms[p] = (double)(weft__now_ns() - t0) / 1e6;
    r->cpu_ms[p] = (double)(proc_cpu_ns(r->server) - cpu0) / 1e6;
    r->wcpu_ms[p] = (double)(workers_cpu_ns(r) - wcpu0) / 1e6;
    note_memory(r, p);
    ok = ok && judge_phase(r, p, rep);
    r->ran[p] = true;
    free(rep);
    free(pfd);
    return ok && (p != SCALE_RENDEZVOUS || check_rendezvous(r));
}

/* ---- set-up and output ---- */

/* Soft RLIMIT_NOFILE up to the hard one (every process forked later inherits it). */
static bool raise_nofile(run_t *r)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)r->o.clients + FDS_SPARE; /* the store's process holds them all */
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return run_fail(r, SCALE_QUIT, "getrlimit: %s", strerror(errno));
    }
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        return run_fail(r, SCALE_QUIT,
                        "%d clients need about %llu open files in the store's process, but the "
                        "hard limit (ulimit -Hn) is %llu: raise it, or run fewer clients",
                        r->o.clients, (unsigned long long)need, (unsigned long long)rl.rlim_max);
    }
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return run_fail(r, SCALE_QUIT, "setrlimit: %s", strerror(errno));
    }
    return true;
}

static void print_json(const run_t *r)
{
    printf("{\"clients\": %d, \"procs\": %d, \"window\": %d, \"ok\": %s", r->o.clients, r->o.procs,
           r->o.window, r->error[0] == '\0' ? "true" : "false");
    for (int p = SCALE_CONNECT; p < SCALE_CHECK; p++) {
        if (r->ran[p] && (p != (int)r->failed_phase || r->error[0] == '\0')) {
            printf(", \"%s_ms\": %.3f, \"%s_store_cpu_ms\": %.3f, \"%s_workers_cpu_ms\": %.3f",
                   phase_names[p], r->ms[p], phase_names[p], r->cpu_ms[p], phase_names[p],
                   r->wcpu_ms[p]);
        } else {
            printf(", \"%s_ms\": null, \"%s_store_cpu_ms\": null, \"%s_workers_cpu_ms\": null",
                   phase_names[p], phase_names[p], phase_names[p]);
        }
    }
    scale_phase_t last = r->failed_phase != SCALE_QUIT ? r->failed_phase : SCALE_FANOUT;
    printf(", \"server_rss_start_kib\": %ld, \"server_rss_kib\": %ld, \"server_hwm_kib\": %ld",
           r->rss[SCALE_QUIT], r->rss[last], r->hwm[last]);
    printf(", \"retries_busy\": %llu, \"retries_closed\": %llu, \"connect_errors\": %llu",
           (unsigned long long)r->total.busy, (unsigned long long)r->total.dropped,
           (unsigned long long)r->total.refused);
    if (r->error[0] != '\0') {
        printf(", \"failed_phase\": \"%s\", \"error\": \"", phase_names[r->failed_phase]);
        for (const char *c = r->error; *c != '\0'; c++) {
            printf(*c == '"' || *c == '\\' ? "\\%c" : (unsigned char)*c < 0x20 ? " " : "%c", *c);
        }
        printf("\"");
    }
    printf("}\n");
}

static void print_table(const run_t *r, scale_phase_t last)
{
    printf("weft-store-scale: %d clients on %d source addresses, in %d processes; handshakes "
           "in flight per process: %d%s\n",
           r->o.clients, (r->o.clients + SCALE_PER_HOST - 1) / SCALE_PER_HOST, r->o.procs,
           r->o.window, r->o.window == 0 ? " (no limit)" : "");
    printf("%-11s %9s %13s %15s %16s %16s\n", "phase", "ms", "store CPU ms", "workers CPU ms",
           "store VmRSS KiB", "store VmHWM KiB");
    printf("%-11s %9s %13s %15s %16ld %16ld\n", "(start)", "-", "-", "-", r->rss[SCALE_QUIT],
           r->hwm[SCALE_QUIT]);
    for (int p = SCALE_CONNECT; p <= (int)last; p++) {
        printf("%-11s %9.2f %13.2f %15.2f %16ld %16ld\n", phase_names[p], r->ms[p], r->cpu_ms[p],
               r->wcpu_ms[p], r->rss[p], r->hwm[p]);
    }
    printf("handshakes retried: %llu answered busy, %llu closed unanswered; connect() "
           "failures: %llu\n",
           (unsigned long long)r->total.busy, (unsigned long long)r->total.dropped,
           (unsigned long long)r->total.refused);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weft-store-scale [-n CLIENTS] [-p PROCS] [-t TIMEOUT_S] [-w WINDOW] "
            "[--json]\n"
            "  -n  clients (default 1000)      -p  worker processes (default 2)\n"
            "  -t  timeout of each phase, s (default 60)\n"
            "  -w  handshakes in flight per worker (default: one address's share of the\n"
            "      store's pool for them, %d, shared out; 0: no limit)\n"
            "  --json  one JSON object instead of the table\n",
            WEFT__STORE_MAX_UNAUTH_PER_ADDR);
}

static bool parse_args(run_t *r, int argc, char **argv)
{
    static const struct option longs[] = {
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    long timeout_s = 60, window = -1;
    r->o.clients = 1000;
    r->o.procs = 2;
    for (int opt; (opt = getopt_long(argc, argv, "n:p:t:w:h", longs, NULL)) != -1;) {
        char *end = NULL;
        long v = optarg != NULL ? strtol(optarg, &end, 10) : 0;
        if (optarg != NULL && (*end != '\0' || v < 0 || v > 1000000)) {
            opt = '?';
        }
        switch (opt) {
        case 'n':
            r->o.clients = (int)v;
            break;
        case 'p':
            r->o.procs = (int)v;
            break;
        case 't':
            timeout_s = v;
            break;
        case 'w':
            window = v;
            break;
        case 'j':
            r->json = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return false;
        }
    }
    if (optind != argc || r->o.clients < 1 || r->o.procs < 1 || r->o.procs > r->o.clients ||
        timeout_s < 1 || timeout_s > 3600) {
        usage(stderr);
        return false;
    }
    r->o.timeout_ms = (int)timeout_s * 1000;
    /* The store counts all of 127.0.0.0/8 as one address: the clients share its share. */
    r->o.window = window >= 0 ? (int)window
                              : (WEFT__STORE_MAX_UNAUTH_PER_ADDR / r->o.procs > 0
                                     ? WEFT__STORE_MAX_UNAUTH_PER_ADDR / r->o.procs
                                     : 1);
    r->o.token = r->token;
    return true;
}

int main(int argc, char **argv)
{
    run_t r = {.server = -1, .server_life = -1};
    if (!parse_args(&r, argc, argv)) {
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (r.o.clients + 1 > WEFT__STORE_MAX_CONNS) {
        fprintf(stderr,
                "weft-store-scale: note: this build's store admits %d authenticated connections "
                "(WEFT__STORE_MAX_CONNS); %d clients and the launcher need %d\n",
                WEFT__STORE_MAX_CONNS, r.o.clients, r.o.clients + 1);
    }
    char hostport[32];
    bool ok = raise_nofile(&r) &&
              (weft__store_make_token(r.token) == WEFT_OK ||
               run_fail(&r, SCALE_QUIT, "no token: the OS entropy source failed")) &&
              start_store(&r);
    if (ok) {
        note_memory(&r, SCALE_QUIT);
        ok = start_workers(&r);
    }
    if (ok) {
        snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", r.o.port);
        weft_status_t st = weft__store_connect(hostport, r.token, 10000, NULL, &r.launcher);
        ok = st == WEFT_OK ||
             run_fail(&r, SCALE_QUIT, "the launcher's connection failed: %s", weft_status_str(st));
    }
    scale_phase_t p = SCALE_CONNECT;
    for (; ok && p < SCALE_NPHASES; p++) {
        ok = run_phase(&r, p);
    }
    stop_all(&r);
    if (r.json) {
        print_json(&r);
    } else if (r.failed_phase != SCALE_QUIT || ok) {
        print_table(&r, ok ? SCALE_CHECK : r.failed_phase);
    }
    if (!ok) {
        fprintf(stderr, "weft-store-scale: %s\n", r.error);
        return 1;
    }
    return 0;
}
