/*
 * mpi-allreduce-perf: MPI_Allreduce measured exactly as `weft-perf allreduce` measures
 * weft_allreduce, for side-by-side comparisons (perf/peers/compare_ompi.sh); with
 * `-C reduce_scatter|allgather|broadcast|alltoall` the other collectives the same way
 * (MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast from rank 0, MPI_Alltoall; sizes
 * and busbw factors as nccl-tests and weft-perf):
 *  - the same options (-b -e -f -n -w -c -d -o --inplace --json) and the same columns;
 *  - sets of (send, receive) buffers rotated so that together they exceed twice the
 *    last-level cache (at most 64 sets, 1 GiB);
 *  - time = mean over -n calls after a barrier, the slowest rank's; busbw = algbw *
 *    2(n-1)/n;
 *  - inputs are small integers so the expected sums are exact; every output used by a
 *    timed call is checked (one extra call on fresh inputs in place).
 *
 * `mpi-allreduce-perf --memcpy SIZE [PROCS]` (no MPI) prints the memcpy bandwidth on
 * buffers of SIZE bytes, rotated the same way, of one core, or per process while PROCS
 * processes copy at once. The latter bounds an intra-node allreduce: every rank must at
 * least read its input and write its output, which is one memcpy's memory traffic, while
 * the other ranks do the same, so algbw cannot exceed it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#define MAX_SETS 64
#define MAX_ROTATION_BYTES (1ull << 30)

typedef enum coll_kind {
    K_ALLREDUCE,
    K_REDUCE_SCATTER,
    K_ALLGATHER,
    K_BROADCAST,
    K_ALLTOALL
} coll_kind_t;
static const char *const kind_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                         "alltoall"};

typedef struct opts {
    coll_kind_t kind;
    size_t min_bytes, max_bytes, factor;
    int iters, warmup, check;
    int dtype; /* 0 float, 1 double, 2 int32, 3 int64, 4 uint8 */
    int op;    /* 0 sum, 1 prod, 2 max, 3 min */
    bool inplace, json;
    long settle_ms; /* --settle: small allreduces before measuring, as weft-perf */
} opts_t;

static const char *const dtype_names[] = {"float", "double", "int32", "int64", "uint8"};
static const size_t dtype_sizes[] = {4, 8, 4, 8, 1};
static const char *const op_names[] = {"sum", "prod", "max", "min"};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s) {
        return -1;
    }
    int shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'i') {
        end++;
    }
    if (*end == 'B' || *end == 'b') {
        end++;
    }
    if (*end != '\0' || (shift > 0 && v > (SIZE_MAX >> shift))) {
        return -1;
    }
    *out = (size_t)(v << shift);
    return 0;
}

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (strcasecmp(s, names[i]) == 0) {
            return i;
        }
    }
    if (strcasecmp(s, "f32") == 0) {
        return 0;
    }
    if (strcasecmp(s, "f64") == 0) {
        return 1;
    }
    return -1;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: mpirun -n N mpi-allreduce-perf [-C allreduce|reduce_scatter|allgather|"
                 "broadcast|alltoall]\n"
                 "           [-b MIN] [-e MAX] [-f F] [-n ITERS] [-w WARMUP] [--settle MS]\n"
                 "           [-c 0|1] [-d float|double|int32|int64|uint8] [-o sum|prod|max|min]"
                 " [--inplace] [--json]\n"
                 "       mpi-allreduce-perf --memcpy SIZE [PROCS]\n");
}

static int parse_opts(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){
        .min_bytes = 8, .max_bytes = 32u << 20, .factor = 2, .iters = 20, .warmup = 5, .check = 1,
        .settle_ms = 200};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool need = true;
        int bad = 0;
        if (strcmp(a, "--inplace") == 0) {
            o->inplace = true;
            need = false;
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
            need = false;
        } else if (v == NULL) {
            bad = 1;
        } else if (strcmp(a, "-b") == 0) {
            bad = parse_size(v, &o->min_bytes);
        } else if (strcmp(a, "-e") == 0) {
            bad = parse_size(v, &o->max_bytes);
        } else if (strcmp(a, "-f") == 0) {
            bad = parse_size(v, &o->factor) || o->factor < 2;
        } else if (strcmp(a, "-n") == 0) {
            o->iters = atoi(v);
        } else if (strcmp(a, "-w") == 0) {
            o->warmup = atoi(v);
        } else if (strcmp(a, "-c") == 0) {
            o->check = atoi(v);
        } else if (strcmp(a, "-d") == 0) {
            bad = (o->dtype = lookup(v, dtype_names, 5)) < 0;
        } else if (strcmp(a, "-o") == 0) {
            bad = (o->op = lookup(v, op_names, 4)) < 0;
        } else if (strcmp(a, "--settle") == 0) {
            o->settle_ms = atol(v);
            bad = o->settle_ms < 0;
        } else if (strcmp(a, "-C") == 0) {
            int k = lookup(v, kind_names, 5);
            bad = k < 0;
            o->kind = k < 0 ? K_ALLREDUCE : (coll_kind_t)k;
        } else {
            bad = 1;
        }
        if (bad || o->iters < 0 || o->warmup < 0) {
            fprintf(stderr, "mpi-allreduce-perf: bad option '%s'\n", a);
            usage(stderr);
            return -1;
        }
        i += need ? 1 : 0;
    }
    if (o->inplace && o->kind != K_ALLREDUCE) {
        fprintf(stderr, "mpi-allreduce-perf: --inplace is measured for allreduce only\n");
        return -1;
    }
    return 0;
}

static size_t llc_bytes(void)
{
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return v > 0 ? (size_t)v : (size_t)32 << 20;
}

static size_t rotation_sets(size_t set_bytes)
{
    if (set_bytes == 0) {
        return 1;
    }
    size_t n = 2 * llc_bytes() / set_bytes + 1, cap = MAX_ROTATION_BYTES / set_bytes;
    n = n < cap ? n : cap;
    n = n < MAX_SETS ? n : MAX_SETS;
    return n < 1 ? 1 : n;
}

/* ---- the single-core memcpy ceiling ---- */

/* Copy rotated buffers of @p bytes; GB/s, or a negative value on failure. When @p go is
 * not -1, say "ready" on @p ready after setting up and wait for a byte on @p go. */
static double memcpy_run(size_t bytes, int ready, int go)
{
    size_t n = rotation_sets(2 * bytes);
    unsigned char *bufs[MAX_SETS][2];
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            if (posix_memalign((void **)&bufs[i][k], 4096, bytes) != 0) {
                return -1.0;
            }
            memset(bufs[i][k], (int)(i + (size_t)k), bytes);
        }
    }
    int reps = (int)(n * 4 > 16 ? n * 4 : 16);
    for (size_t i = 0; i < n; i++) {
        memcpy(bufs[i][1], bufs[i][0], bytes);
    }
    if (go >= 0) {
        char c = 1;
        if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1) {
            return -1.0;
        }
    }
    uint64_t t0 = now_ns();
    for (int r = 0; r < reps; r++) {
        memcpy(bufs[(size_t)r % n][1], bufs[(size_t)r % n][0], bytes);
    }
    double s = (double)(now_ns() - t0) / 1e9;
    for (size_t i = 0; i < n; i++) {
        free(bufs[i][0]);
        free(bufs[i][1]);
    }
    return (double)bytes * reps / s / 1e9;
}

static int memcpy_main(const char *arg, const char *procs_arg)
{
    size_t bytes;
    long procs = procs_arg != NULL ? strtol(procs_arg, NULL, 10) : 0;
    if (parse_size(arg, &bytes) != 0 || bytes == 0 || procs < 0 || procs > 256) {
        usage(stderr);
        return 2;
    }
    if (procs == 0) {
        double gbs = memcpy_run(bytes, -1, -1);
        if (gbs < 0) {
            return 3;
        }
        printf("memcpy %zu bytes: %.2f GB/s (single core)\n", bytes, gbs);
        return 0;
    }
    /* PROCS children set up, then start copying together; each reports its GB/s. */
    int ready[2], go[2], result[2];
    if (pipe(ready) != 0 || pipe(go) != 0 || pipe(result) != 0) {
        return 3;
    }
    for (long p = 0; p < procs; p++) {
        pid_t pid = fork();
        if (pid < 0) {
            return 3;
        }
        if (pid == 0) {
            double gbs = memcpy_run(bytes, ready[1], go[0]);
            _exit(write(result[1], &gbs, sizeof(gbs)) == sizeof(gbs) ? 0 : 3);
        }
    }
    char c;
    for (long p = 0; p < procs; p++) {
        if (read(ready[0], &c, 1) != 1) {
            return 3;
        }
    }
    for (long p = 0; p < procs; p++) {
        if (write(go[1], &c, 1) != 1) {
            return 3;
        }
    }
    double sum = 0, min = 1e30;
    for (long p = 0; p < procs; p++) {
        double gbs;
        if (read(result[0], &gbs, sizeof(gbs)) != sizeof(gbs) || gbs < 0) {
            return 3;
        }
        sum += gbs;
        min = gbs < min ? gbs : min;
    }
    while (wait(NULL) > 0) {
    }
    printf("memcpy %zu bytes: %.2f GB/s per process with %ld copying at once "
           "(slowest %.2f, total %.2f)\n", bytes, sum / (double)procs, procs, min, sum);
    return 0;
}

/* ---- values ---- */

static uint32_t hash32(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 29;
    return (uint32_t)x;
}

static int64_t gen(int op, int r, size_t i, uint64_t seed)
{
    uint32_t h = hash32(seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)r << 48));
    if (op == 1) {
        return 1 + (h & 1);
    }
    return op >= 2 ? (int64_t)(h % 64) - 32 : (int64_t)(h % 16) - 8;
}

static void store(void *buf, size_t k, int dt, int64_t v)
{
    switch (dt) {
    case 0:
        ((float *)buf)[k] = (float)v;
        break;
    case 1:
        ((double *)buf)[k] = (double)v;
        break;
    case 2:
        ((int32_t *)buf)[k] = (int32_t)(uint32_t)v;
        break;
    case 3:
        ((int64_t *)buf)[k] = v;
        break;
    default:
        ((uint8_t *)buf)[k] = (uint8_t)v;
        break;
    }
}

static int64_t expected(const opts_t *o, int nranks, size_t i, uint64_t seed)
{
    int64_t acc = 0;
    for (int r = 0; r < nranks; r++) {
        int64_t x = gen(o->op, r, i, seed);
        x = o->dtype == 4 ? (int64_t)(uint8_t)x : x;
        if (r == 0) {
            acc = x;
        } else if (o->op == 0) {
            acc = (int64_t)((uint64_t)acc + (uint64_t)x);
        } else if (o->op == 1) {
            acc = (int64_t)((uint64_t)acc * (uint64_t)x);
        } else if (o->op == 2) {
            acc = x > acc ? x : acc;
        } else {
            acc = x < acc ? x : acc;
        }
    }
    return acc;
}

/* ---- the sweep ---- */

typedef struct bench {
    opts_t o;
    int rank, size;
    MPI_Datatype type;
    MPI_Op op;
    size_t es;
    size_t total, count;   /* elements of `size`; the count argument of the call */
    size_t sbytes, rbytes; /* per buffer set */
    unsigned char *sets[MAX_SETS];
} bench_t;

/* The value rank @p r contributes at index @p i, in the benchmark's dtype. */
static void put(const bench_t *b, unsigned char *buf, size_t k, int r, size_t i, uint64_t seed)
{
    store(buf, k, b->o.dtype, gen(b->o.op, r, i, seed));
}

typedef void (*want_fn)(const bench_t *b, unsigned char *w, size_t k, uint64_t seed);

/* Expected element k of each kind's output on this rank. */
static void want_allreduce(const bench_t *b, unsigned char *w, size_t k, uint64_t seed)
{
    store(w, 0, b->o.dtype, expected(&b->o, b->size, k, seed));
}
static void want_reduce_scatter(const bench_t *b, unsigned char *w, size_t k, uint64_t seed)
{
    store(w, 0, b->o.dtype, expected(&b->o, b->size, (size_t)b->rank * b->count + k, seed));
}
static void want_allgather(const bench_t *b, unsigned char *w, size_t k, uint64_t seed)
{
    put(b, w, 0, (int)(k / b->count), k % b->count, seed);
}
static void want_broadcast(const bench_t *b, unsigned char *w, size_t k, uint64_t seed)
{
    put(b, w, 0, 0, k, seed);
}
static void want_alltoall(const bench_t *b, unsigned char *w, size_t k, uint64_t seed)
{
    put(b, w, 0, (int)(k / b->count), (size_t)b->rank * b->count + k % b->count, seed);
}

/* Send buffer: what this rank contributes (broadcast: only the root has data). */
static void fill(bench_t *b, unsigned char *buf, uint64_t seed)
{
    size_t n = b->o.kind == K_ALLGATHER ? b->count : b->total;
    for (size_t i = 0; i < n; i++) {
        if (b->o.kind == K_BROADCAST && b->rank != 0) {
            store(buf, i, b->o.dtype, 0);
        } else {
            put(b, buf, i, b->rank, i, seed);
        }
    }
}

static void call(bench_t *b, void *send, void *recv)
{
    int n = (int)b->count;
    switch (b->o.kind) {
    case K_ALLREDUCE:
        MPI_Allreduce(send, recv, n, b->type, b->op, MPI_COMM_WORLD);
        break;
    case K_REDUCE_SCATTER:
        MPI_Reduce_scatter_block(send, recv, n, b->type, b->op, MPI_COMM_WORLD);
        break;
    case K_ALLGATHER:
        MPI_Allgather(send, n, b->type, recv, n, b->type, MPI_COMM_WORLD);
        break;
    case K_BROADCAST:
        MPI_Bcast(send, n, b->type, 0, MPI_COMM_WORLD);
        break;
    case K_ALLTOALL:
        MPI_Alltoall(send, n, b->type, recv, n, b->type, MPI_COMM_WORLD);
        break;
    }
}

/* Wrong elements of the output of buffer set @p set. In place and for broadcast the
 * output is the set's first buffer, otherwise its receive buffer. */
static long check_set(bench_t *b, unsigned char *set, uint64_t seed)
{
    static const want_fn refs[] = {want_allreduce, want_reduce_scatter, want_allgather,
                                   want_broadcast, want_alltoall};
    bool one_block = b->o.kind == K_ALLREDUCE || b->o.kind == K_BROADCAST ||
                     b->o.kind == K_REDUCE_SCATTER;
    size_t n = one_block ? b->count : b->total;
    const unsigned char *out = b->o.inplace || b->o.kind == K_BROADCAST ? set : set + b->sbytes;
    unsigned char want[8];
    long wrong = 0;
    for (size_t k = 0; k < n; k++) {
        refs[b->o.kind](b, want, k, seed);
        wrong += memcmp(out + k * b->es, want, b->es) != 0;
    }
    return wrong;
}

static double bus_factor(const bench_t *b)
{
    double n = b->size;
    switch (b->o.kind) {
    case K_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case K_BROADCAST:
        return 1.0;
    default:
        return (n - 1) / n;
    }
}

/* Elements and buffer sizes of a `size`-byte run, nccl-tests conventions. */
static void shape(bench_t *b, size_t size)
{
    bool blocks = b->o.kind != K_ALLREDUCE && b->o.kind != K_BROADCAST;
    b->total = size / b->es;
    b->count = blocks ? b->total / (size_t)b->size : b->total;
    b->total = blocks ? b->count * (size_t)b->size : b->total;
    size_t bytes = b->total * b->es, cb = b->count * b->es;
    switch (b->o.kind) {
    case K_ALLREDUCE:
        b->sbytes = bytes;
        b->rbytes = b->o.inplace ? 0 : bytes;
        break;
    case K_REDUCE_SCATTER:
        b->sbytes = bytes;
        b->rbytes = cb;
        break;
    case K_ALLGATHER:
        b->sbytes = cb;
        b->rbytes = bytes;
        break;
    case K_BROADCAST:
        b->sbytes = bytes;
        b->rbytes = 0;
        break;
    case K_ALLTOALL:
        b->sbytes = b->rbytes = bytes;
        break;
    }
}

static int run_size(bench_t *b, size_t size, bool first)
{
    const opts_t *o = &b->o;
    shape(b, size);
    size_t bytes = b->total * b->es;
    size_t set_bytes = b->sbytes + b->rbytes;
    size_t nsets = rotation_sets(set_bytes);
    uint64_t seed = 0x5eed0000ull + size;
    for (size_t i = 0; i < nsets; i++) {
        if (posix_memalign((void **)&b->sets[i], 4096, set_bytes + 64) != 0) {
            fprintf(stderr, "mpi-allreduce-perf: no memory\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        memset(b->sets[i], 0, set_bytes + 64);
        fill(b, b->sets[i], seed);
    }
#define SEND(i) (o->inplace ? MPI_IN_PLACE : (void *)b->sets[(i) % nsets])
#define RECV(i) (b->sets[(i) % nsets] + (o->inplace ? 0 : b->sbytes))
    for (int i = 0; i < o->warmup; i++) {
        call(b, SEND(i), RECV(i));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t t0 = now_ns();
    for (int i = 0; i < o->iters; i++) {
        call(b, SEND(i), RECV(i));
    }
    double t_us = (double)(now_ns() - t0) / 1e3 / (o->iters > 0 ? o->iters : 1);
    MPI_Allreduce(MPI_IN_PLACE, &t_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long wrong = -1;
    if (o->check) {
        wrong = 0;
        if (o->inplace) {
            fill(b, b->sets[0], seed ^ 1);
            call(b, MPI_IN_PLACE, b->sets[0]);
            wrong = check_set(b, b->sets[0], seed ^ 1);
        } else {
            /* Sets 0 .. max(iters, warmup)-1 hold results of the calls above. */
            int used = o->iters > o->warmup ? o->iters : o->warmup;
            for (size_t i = 0; i < nsets && (int)i < used; i++) {
                wrong += check_set(b, b->sets[i], seed);
            }
        }
        MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    }
#undef SEND
#undef RECV
    for (size_t i = 0; i < nsets; i++) {
        free(b->sets[i]);
    }
    double algbw = t_us > 0 ? (double)bytes / t_us / 1e3 : 0;
    double busbw = algbw * bus_factor(b);
    if (b->rank == 0) {
        if (o->json) {
            printf("%s\n  {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"op\": \"%s\", "
                   "\"time_us\": %.3f, \"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, \"wrong\": ",
                   first ? "" : ",", bytes, b->count, dtype_names[o->dtype], op_names[o->op],
                   t_us, algbw, busbw);
            wrong >= 0 ? printf("%ld}", wrong) : printf("null}");
        } else {
            char w[24];
            snprintf(w, sizeof(w), wrong >= 0 ? "%ld" : "N/A", wrong);
            printf(" %12zu %13zu %9s %7s %10.2f %8.2f %8.2f %7s\n", bytes, b->count,
                   dtype_names[o->dtype], op_names[o->op], t_us, algbw, busbw, w);
        }
        fflush(stdout);
    }
    return wrong > 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "--memcpy") == 0) {
        return memcpy_main(argv[2], argc == 4 ? argv[3] : NULL);
    }
    bench_t b;
    memset(&b, 0, sizeof(b));
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (parse_opts(argc, argv, &b.o) != 0) {
        return 2;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.size);
    static const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
    MPI_Datatype types[] = {MPI_FLOAT, MPI_DOUBLE, MPI_INT32_T, MPI_INT64_T, MPI_UINT8_T};
    b.type = types[b.o.dtype];
    b.op = ops[b.o.op];
    b.es = dtype_sizes[b.o.dtype];
    if (b.rank == 0) {
        if (b.o.json) {
            printf("{\"subcommand\": \"mpi_%s\", \"nranks\": %d, \"dtype\": \"%s\", "
                   "\"op\": \"%s\", \"inplace\": %s, \"iters\": %d, \"warmup\": %d, "
                   "\"check\": %d, \"results\": [",
                   kind_names[b.o.kind], b.size, dtype_names[b.o.dtype], op_names[b.o.op],
                   b.o.inplace ? "true" : "false",
                   b.o.iters, b.o.warmup, b.o.check);
        } else {
            printf("# mpi-allreduce-perf -C %s: %d ranks, %d iters, %d warmup, check %d, %s\n",
                   kind_names[b.o.kind], b.size,
                   b.o.iters, b.o.warmup, b.o.check, b.o.inplace ? "in-place" : "out-of-place");
            printf("#%12s %13s %9s %7s %10s %8s %8s %7s\n", "size", "count", "type", "op", "time",
                   "algbw", "busbw", "#wrong");
            printf("#%12s %13s %9s %7s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)",
                   "(GB/s)", "(GB/s)", "");
        }
    }
    /* Settle as weft-perf does (see perf/coll.c): small allreduces for settle_ms. */
    uint64_t t0 = now_ns();
    for (int32_t done = b.o.settle_ms <= 0; !done;) {
        int32_t mine = now_ns() - t0 >= (uint64_t)b.o.settle_ms * 1000000ull;
        MPI_Allreduce(&mine, &done, 1, MPI_INT32_T, MPI_MAX, MPI_COMM_WORLD);
    }
    int bad = 0;
    bool first = true;
    size_t size = b.o.min_bytes;
    while (size <= b.o.max_bytes) {
        bad |= run_size(&b, size, first);
        first = false;
        size_t next = size == 0 ? 1 : size * b.o.factor; /* a sweep from 0 B goes on at 1 B */
        if (next <= size) {
            break;
        }
        size = next;
    }
    if (b.rank == 0) {
        if (b.o.json) {
            printf("\n], \"any_wrong\": %s}\n", bad ? "true" : "false");
        } else {
            printf("# %s\n", bad ? "wrong results: FAILED" : "results OK");
        }
    }
    MPI_Finalize();
    return bad ? 1 : 0;
}
