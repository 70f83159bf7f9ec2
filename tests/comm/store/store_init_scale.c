/*
 * weft-store-init-scale: what weft_init asks of the rendezvous store for a job of N ranks,
 * the old way (a GET of each peer's address) against the new (one SCAN of addr/ and its
 * further pages). perf/store_scale.sh --init runs it at 1,000 and 10,000 ranks; the test
 * store_init_scale_small at 100.
 *
 *   weft-store-init-scale [-n RANKS] [-a BYTES] [-t THREADS] [-r READERS] [-m old|new|both]
 *                         [-s STORE [-P PID]] [--json]
 *
 * Each way gets a fresh store in a child process (127.0.0.1, a free port, a random token),
 * or with -s the store at STORE (etcd://HOST:PORT,...: the etcd backend) under a fresh
 * token, which there is a fresh root of keys; -P names its process for its CPU time.
 * N emulated ranks, each with a store connection of its own as member <id> (the sessions,
 * frame tags and write rules of real ranks: weft__store_connect_member), are driven by
 * THREADS threads (default 4), each taking its share of the ranks one after another.
 * Phases, timed from the first rank's start to the last rank's end:
 *   connect  every rank connects and authenticates (the same both ways);
 *   publish  every rank claims its id (ADD <ns>/claim/<id>) and publishes its address
 *            (SET <ns>/addr/<id>, BYTES bytes, default 300: the 215-byte UCX address of
 *            this host's TCP and shared-memory transports and weft's 85-byte header);
 *   read     READERS ranks (default all; spread evenly over the ids) read every address:
 *            old, GET <ns>/addr/<j> for every other j, as weft_init did; new, SCAN
 *            <ns>/addr/ waiting for N keys, then its further pages, as weft_init does.
 *            A reader closes its connection once it has read (its buffers go).
 * Requests per rank are counted on the connections (weft__store_requests), publish and
 * read: every rank of a real start-up sends these, and a WATCH and a LEASE besides (two
 * more, either way). With READERS < N the reading of all N ranks is also given, scaled
 * by N / READERS (the store, one thread, serves the reads one after another either way)
 * and marked "scaled". The store's CPU time in each phase is read from /proc.
 *
 * Every reader's requests are checked: N + 1 the old way, 2 + its pages the new, the same
 * for all; a wrong count, value or number of addresses fails the run (exit 1).
 *
 * It speaks the store's internal client (comm/store/store.h), which perf/ may not
 * include, so it is built with the tests, as weft-store-scale is.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/store/store.h"
#include "util/clock.h"

#define NS "weft"
#define GET_SLICE_MS 50 /* weft_init's GETs waited in slices of this */
#define TIMEOUT_MS 120000

enum { PH_CONNECT, PH_PUBLISH, PH_READ, PH_N };
static const char *const phase_names[PH_N] = {"connect", "publish", "read"};

typedef struct opts {
    int ranks, addr_bytes, threads, readers;
    bool json;
    const char *store; /* -s: a store that runs already (etcd://...); NULL: one of ours */
    pid_t store_pid;   /* -P: its process, for its CPU time (0: not measured) */
} opts_t;

typedef struct run {
    const opts_t *o;
    bool scan; /* the new way */
    char hostport[64];
    char token[65];
    pid_t store;
    weft_store_client_t **conn;
    pthread_barrier_t start, end;
    _Atomic uint64_t read_requests, pages;
    _Atomic uint64_t min_req, max_req; /* of a reader: publish and read */
    _Atomic uint64_t pub_min, pub_max; /* of a rank: publish (2 on weft's store, more on etcd) */
    double ms[PH_N], store_cpu_ms[PH_N];
} run_t;

typedef struct worker {
    run_t *r;
    int index;
} worker_t;

static const weft_logger_t logger = {.level = WEFT_LOG_WARN, .rank = -1, .prefix = "store"};

static void die(const char *what, weft_status_t st, int id)
{
    fprintf(stderr, "weft-store-init-scale: rank %d: %s: %s\n", id, what, weft_status_str(st));
    exit(1);
}

/* The id of reader @p k of o->readers, spread evenly over the ranks. */
static int reader_id(const opts_t *o, int k)
{
    return (int)((uint64_t)k * (uint64_t)o->ranks / (uint64_t)o->readers);
}

/* ---- the store's process ---- */

/* Starts the store in a child; it serves until @p life's write end closes. */
static void store_start(run_t *r, int *life)
{
    int portp[2], lifep[2];
    if (weft__store_make_token(r->token) != WEFT_OK || pipe(portp) != 0 || pipe(lifep) != 0) {
        perror("weft-store-init-scale: token or pipe");
        exit(1);
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("weft-store-init-scale: fork");
        exit(1);
    }
    if (pid == 0) {
        close(portp[0]);
        close(lifep[1]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        weft_store_server_params_t p = {.size = sizeof(p), .token = r->token, .logger = &logger};
        weft_store_server_t *s;
        int port = weft__store_server_start(&p, &s) == WEFT_OK ? weft__store_server_port(s) : -1;
        if (write(portp[1], &port, sizeof(port)) != (ssize_t)sizeof(port) || port < 0) {
            _exit(1);
        }
        char b;
        ssize_t k;
        while ((k = read(lifep[0], &b, 1)) > 0 || (k < 0 && errno == EINTR)) {
        }
        weft__store_server_stop(s);
        _exit(0);
    }
    close(portp[1]);
    close(lifep[0]);
    int port = -1;
    if (read(portp[0], &port, sizeof(port)) != (ssize_t)sizeof(port) || port < 0) {
        fprintf(stderr, "weft-store-init-scale: the store did not start\n");
        exit(1);
    }
    close(portp[0]);
    r->store = pid;
    *life = lifep[1];
    snprintf(r->hostport, sizeof(r->hostport), "127.0.0.1:%d", port);
}

/* CPU time (user and system) of process @p pid so far, in ms. */
static double cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f != NULL) {
        fclose(f);
    }
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* fields after the command: state is field 3 */
    unsigned long long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) {
        return 0;
    }
    return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

/* ---- the ranks ---- */

static void rank_connect(run_t *r, int id)
{
    weft_status_t st =
        weft__store_connect_member(r->hostport, r->token, id, TIMEOUT_MS, &logger, &r->conn[id]);
    if (st != WEFT_OK) {
        die("connect", st, id);
    }
}

static void rank_publish(run_t *r, int id)
{
    char key[64];
    int64_t claims;
    uint8_t *val = malloc((size_t)r->o->addr_bytes);
    if (val == NULL) {
        die("publish", WEFT_ERR_NO_MEMORY, id);
    }
    memset(val, 'a' + id % 26, (size_t)r->o->addr_bytes);
    snprintf(key, sizeof(key), NS "/claim/%d", id);
    weft_status_t st = weft__store_add(r->conn[id], key, 1, &claims);
    if (st == WEFT_OK && claims != 1) {
        st = WEFT_ERR_INVALID_ARG;
    }
    snprintf(key, sizeof(key), NS "/addr/%d", id);
    if (st == WEFT_OK) {
        st = weft__store_set(r->conn[id], key, val, (size_t)r->o->addr_bytes);
    }
    free(val);
    if (st != WEFT_OK) {
        die("publish", st, id);
    }
    uint64_t k = weft__store_requests(r->conn[id]);
    uint64_t lo = atomic_load(&r->pub_min), hi = atomic_load(&r->pub_max);
    while (k < lo && !atomic_compare_exchange_weak(&r->pub_min, &lo, k)) {
    }
    while (k > hi && !atomic_compare_exchange_weak(&r->pub_max, &hi, k)) {
    }
}

/* The old way: a GET of each peer's address. */
static void read_get(run_t *r, int id)
{
    char key[64];
    for (int j = 0; j < r->o->ranks; j++) {
        void *v = NULL;
        size_t len = 0;
        if (j == id) {
            continue;
        }
        snprintf(key, sizeof(key), NS "/addr/%d", j);
        weft_status_t st = weft__store_get(r->conn[id], key, GET_SLICE_MS, &v, &len);
        if (st == WEFT_OK && len != (size_t)r->o->addr_bytes) {
            st = WEFT_ERR_PROTOCOL;
        }
        free(v);
        if (st != WEFT_OK) {
            die("get", st, id);
        }
    }
}

/* The new way: one SCAN that waits for every address, and its further pages. */
static void read_scan(run_t *r, int id)
{
    char after[WEFT_STORE_MAX_KEY + 1] = "";
    size_t seen = 0;
    weft_store_scan_args_t a = {
        .prefix = NS "/addr/", .min_count = (uint32_t)r->o->ranks, .timeout_ms = TIMEOUT_MS};
    for (;;) {
        weft_store_page_t page;
        a.after = after;
        weft_status_t st = weft__store_scan(r->conn[id], &a, &page);
        if (st != WEFT_OK) {
            die("scan", st, id);
        }
        atomic_fetch_add(&r->pages, 1);
        for (size_t i = 0; i < page.n; i++) {
            if (page.kv[i].len != (size_t)r->o->addr_bytes) {
                die("scan", WEFT_ERR_PROTOCOL, id);
            }
        }
        seen += page.n;
        bool more = page.more;
        if (page.n > 0) {
            snprintf(after, sizeof(after), "%s", page.kv[page.n - 1].key);
        }
        weft__store_page_free(&page);
        if (!more) {
            break;
        }
        a.min_count = 0;
        a.timeout_ms = 0;
    }
    if (seen != (size_t)r->o->ranks) {
        die("scan: not every address", WEFT_ERR_PROTOCOL, id);
    }
}

static void rank_read(run_t *r, int id)
{
    if (r->scan) {
        read_scan(r, id);
    } else {
        read_get(r, id);
    }
    uint64_t k = weft__store_requests(r->conn[id]);
    uint64_t lo = atomic_load(&r->min_req), hi = atomic_load(&r->max_req);
    while (k < lo && !atomic_compare_exchange_weak(&r->min_req, &lo, k)) {
    }
    while (k > hi && !atomic_compare_exchange_weak(&r->max_req, &hi, k)) {
    }
    atomic_fetch_add(&r->read_requests, k);
    weft__store_close(r->conn[id]);
    r->conn[id] = NULL;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    run_t *r = w->r;
    for (int ph = 0; ph < PH_N; ph++) {
        pthread_barrier_wait(&r->start);
        /* Ranks, and readers, dealt out to the threads in turn. */
        int n = ph == PH_READ ? r->o->readers : r->o->ranks;
        for (int k = w->index; k < n; k += r->o->threads) {
            if (ph == PH_CONNECT) {
                rank_connect(r, k);
            } else if (ph == PH_PUBLISH) {
                rank_publish(r, k);
            } else {
                rank_read(r, reader_id(r->o, k));
            }
        }
        pthread_barrier_wait(&r->end);
    }
    return NULL;
}

/* An external store (-s): a fresh token for each way, which on etcd is a fresh root of
 * keys, so the two ways and the runs before do not see each other's addresses. */
static void store_attach(run_t *r, int *life)
{
    if (weft__store_make_token(r->token) != WEFT_OK ||
        strlen(r->o->store) >= sizeof(r->hostport)) {
        fprintf(stderr, "weft-store-init-scale: no token, or a store address too long\n");
        exit(1);
    }
    snprintf(r->hostport, sizeof(r->hostport), "%s", r->o->store);
    r->store = r->o->store_pid;
    *life = -1;
}

static void run_way(run_t *r)
{
    int life;
    if (r->o->store != NULL) {
        store_attach(r, &life);
    } else {
        store_start(r, &life);
    }
    int t = r->o->threads;
    r->conn = calloc((size_t)r->o->ranks, sizeof(*r->conn));
    pthread_t *th = calloc((size_t)t, sizeof(*th));
    worker_t *w = calloc((size_t)t, sizeof(*w));
    if (r->conn == NULL || th == NULL || w == NULL) {
        die("memory", WEFT_ERR_NO_MEMORY, -1);
    }
    r->min_req = UINT64_MAX;
    r->pub_min = UINT64_MAX;
    pthread_barrier_init(&r->start, NULL, (unsigned)t + 1);
    pthread_barrier_init(&r->end, NULL, (unsigned)t + 1);
    for (int i = 0; i < t; i++) {
        w[i] = (worker_t){.r = r, .index = i};
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
            die("pthread_create", WEFT_ERR_NO_MEMORY, -1);
        }
    }
    for (int ph = 0; ph < PH_N; ph++) {
        double c0 = r->store > 0 ? cpu_ms(r->store) : 0;
        uint64_t t0 = weft__now_ns();
        pthread_barrier_wait(&r->start);
        pthread_barrier_wait(&r->end);
        r->ms[ph] = (double)(weft__now_ns() - t0) / 1e6;
        r->store_cpu_ms[ph] = r->store > 0 ? cpu_ms(r->store) - c0 : 0;
        if (!r->o->json) {
            fprintf(stderr, "# %s, %d ranks: %s %.0f ms\n", r->scan ? "new" : "old", r->o->ranks,
                    phase_names[ph], r->ms[ph]);
        }
    }
    for (int i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
    }
    for (int id = 0; id < r->o->ranks; id++) {
        weft__store_close(r->conn[id]);
    }
    if (life >= 0) {
        close(life);
        waitpid(r->store, NULL, 0);
    }
    pthread_barrier_destroy(&r->start);
    pthread_barrier_destroy(&r->end);
    free(r->conn);
    free(th);
    free(w);
}

/* ---- results ---- */

typedef struct result {
    const char *way;
    double req_per_rank; /* publish and read, of a reader */
    bool req_equal;      /* every reader sent as many */
    double pages;        /* per reader, new way */
    double connect_ms, publish_ms, read_ms, read_all_ms, total_ms, store_cpu_ms;
} result_t;

static result_t summarise(const run_t *r)
{
    const opts_t *o = r->o;
    double scale = (double)o->ranks / (double)o->readers;
    result_t s = {
        .way = r->scan ? "new" : "old",
        .req_per_rank = (double)r->read_requests / (double)o->readers,
        .req_equal = r->min_req == r->max_req,
        .pages = (double)r->pages / (double)o->readers,
        .connect_ms = r->ms[PH_CONNECT],
        .publish_ms = r->ms[PH_PUBLISH],
        .read_ms = r->ms[PH_READ],
        .read_all_ms = r->ms[PH_READ] * scale,
        .store_cpu_ms = r->store_cpu_ms[PH_PUBLISH] + r->store_cpu_ms[PH_READ] * scale,
    };
    s.total_ms = s.publish_ms + s.read_all_ms;
    return s;
}

static void print_json(const opts_t *o, const result_t *res, int n)
{
    printf("{\"tool\": \"weft-store-init-scale\", \"store\": \"%s\", \"ranks\": %d, "
           "\"addr_bytes\": %d, \"threads\": %d, \"readers\": %d, \"scaled\": %s, \"ways\": [",
           o->store == NULL ? "weft" : strncmp(o->store, "etcd://", 7) == 0 ? "etcd" : "other",
           o->ranks, o->addr_bytes, o->threads, o->readers,
           o->readers < o->ranks ? "true" : "false");
    for (int i = 0; i < n; i++) {
        const result_t *s = &res[i];
        printf("%s{\"way\": \"%s\", \"requests_per_rank\": %.2f, \"requests_equal\": %s, "
               "\"pages\": %.2f, \"connect_ms\": %.1f, \"publish_ms\": %.1f, \"read_ms\": %.1f, "
               "\"read_all_ms\": %.1f, \"total_ms\": %.1f, \"store_cpu_ms\": %.1f}",
               i > 0 ? ", " : "", s->way, s->req_per_rank, s->req_equal ? "true" : "false",
               s->pages, s->connect_ms, s->publish_ms, s->read_ms, s->read_all_ms, s->total_ms,
               s->store_cpu_ms);
    }
    printf("]}\n");
}

static void print_table(const opts_t *o, const result_t *res, int n)
{
    bool scaled = o->readers < o->ranks;
    printf("# weft_init's store traffic, %d emulated ranks (one connection each, on %d threads), "
           "%d-byte addresses; %d of them read%s\n",
           o->ranks, o->threads, o->addr_bytes, o->readers,
           scaled ? ": the read of all ranks is scaled by ranks/readers" : "");
    printf("%-4s %14s %10s %11s %9s %13s %10s %13s\n", "way", "requests/rank", "publish ms",
           "read ms", "readers", "read all ms", "total ms", "store CPU ms");
    for (int i = 0; i < n; i++) {
        const result_t *s = &res[i];
        printf("%-4s %14.1f %10.0f %11.0f %9d %12.0f%s %10.0f %13.0f\n", s->way, s->req_per_rank,
               s->publish_ms, s->read_ms, o->readers, s->read_all_ms, scaled ? "*" : " ",
               s->total_ms, s->store_cpu_ms);
    }
    if (n == 2) {
        printf("old/new: %.0fx the requests per rank, %.1fx the time\n",
               res[0].req_per_rank / res[1].req_per_rank, res[0].total_ms / res[1].total_ms);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: weft-store-init-scale [-n RANKS] [-a BYTES] [-t THREADS] "
                    "[-r READERS] [-m old|new|both] [-s STORE [-P PID]] [--json]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    opts_t o = {.ranks = 1000, .addr_bytes = 300, .threads = 4, .readers = 0};
    const char *mode = "both";
    static const struct option longopts[] = {{"json", no_argument, NULL, 'j'}, {0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "n:a:t:r:m:s:P:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'n':
            o.ranks = atoi(optarg);
            break;
        case 'a':
            o.addr_bytes = atoi(optarg);
            break;
        case 't':
            o.threads = atoi(optarg);
            break;
        case 'r':
            o.readers = atoi(optarg);
            break;
        case 'm':
            mode = optarg;
            break;
        case 'j':
            o.json = true;
            break;
        case 's':
            o.store = optarg;
            break;
        case 'P':
            o.store_pid = (pid_t)atoi(optarg);
            break;
        default:
            usage();
        }
    }
    o.readers = o.readers <= 0 || o.readers > o.ranks ? o.ranks : o.readers;
    if (o.ranks < 2 || o.addr_bytes < 1 || o.addr_bytes > 65536 || o.threads < 1 ||
        o.threads > 256 || optind != argc ||
        (strcmp(mode, "old") != 0 && strcmp(mode, "new") != 0 && strcmp(mode, "both") != 0)) {
        usage();
    }
    /* A connection each, and the store's end of it in its own process. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)o.ranks + 64) {
        fprintf(stderr,
                "weft-store-init-scale: %d ranks need %d descriptors, the limit is %llu "
                "(raise the hard limit: ulimit -Hn)\n",
                o.ranks, o.ranks + 64, (unsigned long long)rl.rlim_cur);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    result_t res[2];
    int n = 0;
    bool failed = false;
    for (int way = 0; way < 2; way++) {
        if (strcmp(mode, "both") != 0 && strcmp(mode, way == 0 ? "old" : "new") != 0) {
            continue;
        }
        run_t r = {.o = &o, .scan = way == 1};
        run_way(&r);
        res[n++] = summarise(&r);
        /* Old: a claim, an address and a GET per peer; new: a claim, an address, pages. The
         * claim and the address are 2 requests on weft's store, more on etcd (an add is a
         * transaction and its compare-and-swap): those measured, the same for every rank. */
        uint64_t pub = r.pub_min;
        uint64_t want = pub + (r.scan ? (uint64_t)(res[n - 1].pages + 0.5) : (uint64_t)o.ranks - 1);
        if (r.pub_min != r.pub_max || (o.store == NULL && pub != 2)) {
            fprintf(stderr, "weft-store-init-scale: %s: publishing took %" PRIu64 " to %" PRIu64
                            " requests\n", res[n - 1].way, r.pub_min, r.pub_max);
            failed = true;
        }
        /* On etcd a page of a SCAN may take several ranges (its client sizes their limit as
         * it goes): every reader must still send as many, which is what is checked. */
        if (!res[n - 1].req_equal || (o.store == NULL && r.min_req != want)) {
            fprintf(stderr,
                    "weft-store-init-scale: %s: readers sent %" PRIu64 " to %" PRIu64
                    " requests, not %" PRIu64 "\n",
                    res[n - 1].way, r.min_req, r.max_req, want);
            failed = true;
        }
    }
    if (o.json) {
        print_json(&o, res, n);
    } else {
        print_table(&o, res, n);
    }
    return failed ? 1 : 0;
}
