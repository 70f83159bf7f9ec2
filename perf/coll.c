/*
 * weft-perf allreduce | reduce_scatter | allgather | broadcast | alltoall.
 *
 * nccl-tests conventions: `size` is the whole vector (allreduce, broadcast), the whole
 * gathered/scattered buffer (reduce_scatter, allgather) or the whole send buffer
 * (alltoall); algbw = size / time; busbw = algbw * 2(n-1)/n (allreduce), (n-1)/n
 * (reduce_scatter, allgather, alltoall) or 1 (broadcast). `time` is the mean over -n
 * blocking calls, the slowest rank's.
 *
 * Buffers: sets of (send, receive) buffers are rotated between iterations so that
 * together they exceed twice the last-level cache (at most 64 sets, 1 GiB): every call
 * then reads cold memory, as a training step does. With --reuse one set serves every
 * iteration, as nccl-tests and the OSU benchmarks measure: buffers that fit in the cache
 * stay warm there, so small and medium sizes look faster than a training step sees them.
 * The output says which (header, "buffers" in JSON), and the column `sets` gives the
 * number of sets the calls of each size went through.
 *
 * Checking (-c 1): inputs are small integers, so every reduction is exact in every dtype
 * and the expected value of each element is computed from all ranks' inputs. Out of
 * place, the output of every buffer set used by the timed calls is checked; in place
 * (where inputs are overwritten) one extra call on fresh inputs is checked. Non-reducing
 * collectives move byte patterns that depend on (source block, size). #wrong is the sum
 * over ranks; any wrong element makes the exit status 1.
 *
 * Settling (--settle MS, default 200): before the first size, the ranks run 4-byte
 * allreduces for MS milliseconds. For about 100 ms after a process starts, the kernel's
 * per-task load tracking has not converged and its load balancer places oversubscribed
 * ranks badly: a 4-rank 8-byte allreduce on 2 cores measured 4.7 us then and 2.5 us once
 * settled, whether the ranks slept or spun meanwhile. MPI_Init takes longer than that,
 * so Open MPI's benchmark never sees it; mpi-allreduce-perf settles the same way.
 *
 * Binding (--bind core, the default): like mpirun's default, each rank pins itself to one
 * CPU (local rank modulo the CPUs it may use) when the host has at least as many CPUs as
 * local ranks; otherwise, or with --bind none, the scheduler places the ranks. Two
 * ranks that the scheduler lets share a core pay a context switch per message.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define MAX_SETS 64
#define MAX_ROTATION_BYTES (1ull << 30)

typedef enum coll_kind {
    K_ALLREDUCE,
    K_REDUCE_SCATTER,
    K_ALLGATHER,
    K_BROADCAST,
    K_ALLTOALL,
} coll_kind_t;

typedef struct bench {
    perf_world_t w;
    const perf_opts_t *o;
    coll_kind_t kind;
    const char *name;
    size_t es;             /* element size */
    size_t count;          /* the count argument of the call */
    size_t total;          /* elements of `size` */
    size_t sbytes, rbytes; /* per buffer */
    size_t nsets;
    unsigned char *sets[MAX_SETS]; /* each: send buffer then receive buffer */
    bool used[MAX_SETS];
} bench_t;

static bool reduces(const bench_t *b)
{
    return b->kind == K_ALLREDUCE || b->kind == K_REDUCE_SCATTER;
}

static bool inplace(const bench_t *b)
{
    return b->o->inplace && b->kind != K_ALLTOALL && b->kind != K_BROADCAST;
}

/* ---- element values ---- */

static uint32_t hash32(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 29;
    return (uint32_t)x;
}

/* Rank r's input element i: small integers, so sums, products, max and min are exact. */
static int64_t gen(weft_op_t op, int r, size_t i, uint64_t seed)
{
    uint32_t h = hash32(seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)r << 48));
    switch (op) {
    case WEFT_PROD:
        return 1 + (h & 1);
    case WEFT_MAX:
    case WEFT_MIN:
        return (int64_t)(h % 64) - 32;
    default:
        return (int64_t)(h % 16) - 8;
    }
}

static uint16_t half_of_int(int64_t v)
{
    if (v == 0) {
        return 0;
    }
    uint16_t sign = v < 0 ? 0x8000 : 0;
    uint64_t a = (uint64_t)(v < 0 ? -v : v);
    int e = 63 - __builtin_clzll(a); /* |v| < 2048 here, so e <= 10: exact */
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((a << (10 - e)) & 0x3ff));
}

static void store(void *buf, size_t k, weft_dtype_t dt, int64_t v)
{
    float f = (float)v;
    uint32_t fb;
    switch (dt) {
    case WEFT_F32:
        ((float *)buf)[k] = f;
        break;
    case WEFT_F64:
        ((double *)buf)[k] = (double)v;
        break;
    case WEFT_F16:
        ((uint16_t *)buf)[k] = half_of_int(v);
        break;
    case WEFT_BF16:
        memcpy(&fb, &f, sizeof(fb));
        ((uint16_t *)buf)[k] = (uint16_t)(fb >> 16);
        break;
    case WEFT_I32:
        ((int32_t *)buf)[k] = (int32_t)(uint32_t)v;
        break;
    case WEFT_I64:
        ((int64_t *)buf)[k] = v;
        break;
    default:
        ((uint8_t *)buf)[k] = (uint8_t)v;
        break;
    }
}

/* A value as the dtype orders it (u8 compares unsigned). */
static int64_t as_dtype(weft_dtype_t dt, int64_t v)
{
    return dt == WEFT_U8 ? (int64_t)(uint8_t)v : v;
}

static int64_t expected(const bench_t *b, size_t i, uint64_t seed)
{
    weft_op_t op = b->o->op;
    weft_dtype_t dt = b->o->dtype;
    int64_t acc = as_dtype(dt, gen(op, 0, i, seed));
    for (int r = 1; r < b->w.size; r++) {
        int64_t x = as_dtype(dt, gen(op, r, i, seed));
        switch (op) {
        case WEFT_SUM:
            acc = (int64_t)((uint64_t)acc + (uint64_t)x);
            break;
        case WEFT_PROD:
            acc = (int64_t)((uint64_t)acc * (uint64_t)x);
            break;
        case WEFT_MAX:
            acc = x > acc ? x : acc;
            break;
        default:
            acc = x < acc ? x : acc;
            break;
        }
    }
    return acc;
}

static uint64_t block_seed(const bench_t *b, int src, int dst, uint64_t salt)
{
    return perf_seed((uint64_t)b->kind, (uint64_t)src * 65536 + (uint64_t)(dst + 1),
                     b->total * b->es, salt);
}

/* ---- buffers ---- */

static unsigned char *sbuf(const bench_t *b, size_t set)
{
    return b->sets[set];
}

static unsigned char *rbuf(const bench_t *b, size_t set)
{
    return inplace(b) ? b->sets[set] : b->sets[set] + b->sbytes;
}

/* The send pointer of a call: in place allgather sends from its block of the output. */
static const void *send_ptr(const bench_t *b, size_t set)
{
    if (inplace(b) && b->kind == K_ALLGATHER) {
        return rbuf(b, set) + (size_t)b->w.rank * b->count * b->es;
    }
    return sbuf(b, set);
}

/* Fill the inputs of a set from @p salt. */
static void fill_inputs(bench_t *b, size_t set, uint64_t salt)
{
    int me = b->w.rank;
    unsigned char *s = sbuf(b, set);
    switch (b->kind) {
    case K_ALLREDUCE:
    case K_REDUCE_SCATTER:
        for (size_t i = 0; i < b->total; i++) {
            store(s, i, b->o->dtype, gen(b->o->op, me, i, salt));
        }
        break;
    case K_ALLGATHER:
        perf_fill_pattern((void *)send_ptr(b, set), b->count * b->es, block_seed(b, me, -1, salt));
        break;
    case K_BROADCAST:
        if (me == b->o->root) {
            perf_fill_pattern(s, b->total * b->es, block_seed(b, me, -1, salt));
        }
        break;
    case K_ALLTOALL:
        for (int j = 0; j < b->w.size; j++) {
            perf_fill_pattern(s + (size_t)j * b->count * b->es, b->count * b->es,
                              block_seed(b, me, j, salt));
        }
        break;
    }
}

/* Wrong elements (reductions) or bytes (data movement) in the output of a set. */
static long check_outputs(const bench_t *b, size_t set, uint64_t salt)
{
    int me = b->w.rank;
    long wrong = 0;
    size_t bb = b->count * b->es;
    unsigned char want[8];
    if (reduces(b)) {
        const unsigned char *out = rbuf(b, set);
        size_t first = b->kind == K_REDUCE_SCATTER ? (size_t)me * b->count : 0;
        size_t n = b->kind == K_REDUCE_SCATTER ? b->count : b->total;
        for (size_t k = 0; k < n; k++) {
            store(want, 0, b->o->dtype, expected(b, first + k, salt));
            wrong += memcmp(out + k * b->es, want, b->es) != 0;
        }
        return wrong;
    }
    const unsigned char *out = b->kind == K_BROADCAST ? sbuf(b, set) : rbuf(b, set);
    switch (b->kind) {
    case K_ALLGATHER:
        for (int q = 0; q < b->w.size; q++) {
            wrong += (long)perf_check_pattern(out + (size_t)q * bb, bb, block_seed(b, q, -1, salt));
        }
        break;
    case K_BROADCAST:
        wrong +=
            (long)perf_check_pattern(out, b->total * b->es, block_seed(b, b->o->root, -1, salt));
        break;
    default:
        for (int q = 0; q < b->w.size; q++) {
            wrong += (long)perf_check_pattern(out + (size_t)q * bb, bb, block_seed(b, q, me, salt));
        }
        break;
    }
    return wrong;
}

static weft_status_t run_once(bench_t *b, size_t set)
{
    weft_group_t *g = b->w.world;
    const perf_opts_t *o = b->o;
    b->used[set] = true;
    switch (b->kind) {
    case K_ALLREDUCE:
        return weft_allreduce(g, sbuf(b, set), rbuf(b, set), b->count, o->dtype, o->op);
    case K_REDUCE_SCATTER:
        return weft_reduce_scatter(g, sbuf(b, set), rbuf(b, set), b->count, o->dtype, o->op);
    case K_ALLGATHER:
        return weft_allgather(g, send_ptr(b, set), rbuf(b, set), b->count, o->dtype);
    case K_BROADCAST:
        return weft_broadcast(g, sbuf(b, set), b->count, o->dtype, o->root);
    default:
        return weft_alltoall(g, sbuf(b, set), rbuf(b, set), b->count, o->dtype);
    }
}

static void free_sets(bench_t *b)
{
    for (size_t i = 0; i < MAX_SETS; i++) {
        perf_free(b->sets[i]);
        b->sets[i] = NULL;
        b->used[i] = false;
    }
}

/* Shape the call for @p size bytes and allocate (and touch) the buffer sets. */
static int setup_size(bench_t *b, size_t size)
{
    size_t n = (size_t)b->w.size;
    b->total = size / b->es;
    switch (b->kind) {
    case K_ALLREDUCE:
    case K_BROADCAST:
        b->count = b->total;
        b->sbytes = b->rbytes = b->total * b->es;
        break;
    case K_REDUCE_SCATTER:
        b->count = b->total / n;
        b->total = b->count * n;
        b->sbytes = b->total * b->es;
        b->rbytes = b->count * b->es;
        break;
    case K_ALLGATHER:
        b->count = b->total / n;
        b->total = b->count * n;
        b->sbytes = b->count * b->es;
        b->rbytes = b->total * b->es;
        break;
    case K_ALLTOALL:
        b->count = b->total / n;
        b->total = b->count * n;
        b->sbytes = b->rbytes = b->total * b->es;
        break;
    }
    if (inplace(b)) {
        b->sbytes = b->sbytes > b->rbytes ? b->sbytes : b->rbytes;
        b->rbytes = 0;
    }
    size_t set_bytes = b->sbytes + b->rbytes;
    b->nsets = b->o->reuse ? 1 : perf_rotation_count(set_bytes, MAX_ROTATION_BYTES);
    if (b->nsets > MAX_SETS) {
        b->nsets = MAX_SETS;
    }
    for (size_t i = 0; i < b->nsets; i++) {
        b->sets[i] = perf_alloc(set_bytes + 64);
        if (b->sets[i] == NULL) {
            fprintf(stderr, "weft-perf %s: no memory for %zu buffer sets of %zu bytes\n", b->name,
                    b->nsets, set_bytes);
            free_sets(b);
            return -1;
        }
        memset(b->sets[i], 0, set_bytes + 64); /* page faults stay out of the timing */
    }
    return 0;
}

static double bus_factor(const bench_t *b)
{
    double n = (double)b->w.size;
    switch (b->kind) {
    case K_ALLREDUCE:
        return 2.0 * (n - 1.0) / n;
    case K_BROADCAST:
        return 1.0;
    default:
        return (n - 1.0) / n;
    }
}

/* Time and check one size; every rank fills @p row. */
static weft_status_t run_size(bench_t *b, size_t size, perf_row_t *row)
{
    const perf_opts_t *o = b->o;
    uint64_t salt = perf_seed(size, (uint64_t)b->kind, 1, 2);
    weft_status_t st;
    if (setup_size(b, size) != 0) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < b->nsets; i++) {
        fill_inputs(b, i, salt);
    }
    for (int i = 0; i < o->warmup; i++) {
        if ((st = run_once(b, (size_t)i % b->nsets)) != WEFT_OK) {
            goto out;
        }
    }
    if ((st = weft_barrier(b->w.world)) != WEFT_OK) {
        goto out;
    }
    uint64_t t0 = perf_now_ns();
    for (int i = 0; i < o->iters; i++) {
        if ((st = run_once(b, (size_t)i % b->nsets)) != WEFT_OK) {
            goto out;
        }
    }
    double t_us = (double)(perf_now_ns() - t0) / 1e3 / (o->iters > 0 ? o->iters : 1);
    if ((st = weft_allreduce(b->w.world, &t_us, &t_us, 1, WEFT_F64, WEFT_MAX)) != WEFT_OK) {
        goto out;
    }
    int64_t wrong = -1;
    if (o->check) {
        wrong = 0;
        if (inplace(b)) {
            fill_inputs(b, 0, salt ^ 1);
            if ((st = run_once(b, 0)) != WEFT_OK) {
                goto out;
            }
            wrong = check_outputs(b, 0, salt ^ 1);
        } else {
            for (size_t i = 0; i < b->nsets; i++) {
                wrong += b->used[i] ? check_outputs(b, i, salt) : 0;
            }
        }
        st = weft_allreduce(b->w.world, &wrong, &wrong, 1, WEFT_I64, WEFT_SUM);
        if (st != WEFT_OK) {
            goto out;
        }
    }
    memset(row, 0, sizeof(*row));
    row->bytes = b->total * b->es;
    row->count = b->total;
    row->op = reduces(b) ? NULL : "none";
    row->root = b->kind == K_BROADCAST ? o->root : -1;
    row->time_us = t_us;
    row->algbw_gbs = perf_gbs(row->bytes, t_us);
    row->busbw_gbs = row->algbw_gbs * bus_factor(b);
    row->wrong = (long)wrong;
    row->extra[0] = 0;
    for (size_t i = 0; i < b->nsets; i++) {
        row->extra[0] += b->used[i] ? 1 : 0; /* the sets the calls went through */
    }
out:
    free_sets(b);
    return st;
}

static int sweep(bench_t *b)
{
    static const perf_col_t cols[] = {{"sets", "buffer_sets", 0}};
    perf_table_t t;
    perf_table_begin(&t, b->o, b->name, b->w.size, cols, 1, b->w.rank == 0);
    size_t size = b->o->min_bytes;
    do {
        perf_row_t row;
        weft_status_t st = run_size(b, size, &row);
        if (st != WEFT_OK) {
            char what[80];
            snprintf(what, sizeof(what), "%s of %zu bytes", b->name, size);
            perf_report_error(&b->w, what, st);
            return PERF_EXIT_ERROR;
        }
        perf_table_row(&t, &row);
    } while (perf_next_size(b->o, &size));
    return perf_table_end(&t);
}

typedef struct coll_extras {
    bool bind;
    long settle_ms;
} coll_extras_t;

static int extras_handler(void *arg, const char *name, const char *val)
{
    coll_extras_t *x = arg;
    if (strcmp(name, "--settle") == 0) {
        return perf_parse_int(val, 0, LONG_MAX, &x->settle_ms);
    }
    if (strcmp(val, "core") == 0 || strcmp(val, "none") == 0) {
        x->bind = strcmp(val, "core") == 0;
        return 0;
    }
    return -1;
}

/* 4-byte allreduces until @p ms have passed on some rank (all stop together). */
static weft_status_t settle(bench_t *b, long ms)
{
    double t0 = perf_now_us();
    int32_t done = ms <= 0;
    while (!done) {
        int32_t mine = perf_now_us() - t0 >= (double)ms * 1000.0;
        weft_status_t st = weft_allreduce(b->w.world, &mine, &done, 1, WEFT_I32, WEFT_MAX);
        if (st != WEFT_OK) {
            return st;
        }
    }
    return WEFT_OK;
}

/* Pin this rank to one CPU of those it may use, if every local rank can have its own. */
static void bind_to_core(void)
{
    const char *lr = getenv("WEFT_LOCAL_RANK"), *ls = getenv("WEFT_LOCAL_SIZE");
    cpu_set_t allowed, one;
    long rank, size;
    if (perf_parse_int(lr, 0, INT_MAX, &rank) != 0 || perf_parse_int(ls, 1, INT_MAX, &size) != 0 ||
        sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || size > CPU_COUNT(&allowed)) {
        return;
    }
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &allowed) && seen++ == rank) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            if (sched_setaffinity(0, sizeof(one), &one) != 0) {
                perror("weft-perf: sched_setaffinity");
            }
            return;
        }
    }
}

static int coll_main(int argc, char **argv, coll_kind_t kind, const char *name)
{
    static const perf_extra_opt_t extras[] = {
        {"--bind", true, "core|none", "pin each rank to a core (default core, as mpirun)"},
        {"--settle", true, "MS", "run small allreduces for MS ms before measuring (default 200)"},
    };
    perf_opts_t o;
    perf_opts_default(&o);
    o.uses = PERF_USE_SIZES | PERF_USE_ITERS | PERF_USE_WARMUP | PERF_USE_CHECK | PERF_USE_DTYPE |
             PERF_USE_REUSE | PERF_USE_JSON;
    if (kind == K_ALLREDUCE || kind == K_REDUCE_SCATTER) {
        o.uses |= PERF_USE_OP;
    }
    if (kind != K_ALLTOALL && kind != K_BROADCAST) {
        o.uses |= PERF_USE_INPLACE;
    }
    if (kind == K_BROADCAST) {
        o.uses |= PERF_USE_ROOT;
    }
    coll_extras_t x = {.bind = true, .settle_ms = 200};
    int rc = perf_parse_opts(argc, argv, &o, name, extras, 2, extras_handler, &x);
    if (rc == PERF_HELP) {
        printf("\n%s: size is the whole buffer (nccl-tests). Sets of buffers, together larger\n"
               "than the cache, are rotated (cold, as in training) unless --reuse; the column\n"
               "sets says how many each size used.\n",
               name);
        return PERF_EXIT_OK;
    }
    if (rc != PERF_CONTINUE) {
        return rc == PERF_BAD ? PERF_EXIT_USAGE : PERF_EXIT_OK;
    }
    if (x.bind) {
        bind_to_core(); /* before weft_init, so the transports' threads inherit it */
    }
    bench_t b = {.o = &o, .kind = kind, .name = name, .es = perf_dtype_size(o.dtype)};
    if (perf_world_open(&b.w) != 0) {
        return PERF_EXIT_ERROR;
    }
    if (kind == K_BROADCAST && (o.root < 0 || o.root >= b.w.size)) {
        fprintf(stderr, "weft-perf %s: root %d is not a rank of %d\n", name, o.root, b.w.size);
        rc = PERF_EXIT_USAGE;
    } else {
        weft_status_t st = settle(&b, x.settle_ms);
        if (st != WEFT_OK) {
            perf_report_error(&b.w, "settling", st);
            rc = PERF_EXIT_ERROR;
        } else {
            rc = sweep(&b);
        }
    }
    perf_world_close(&b.w);
    return rc;
}

int perf_allreduce_main(int argc, char **argv)
{
    return coll_main(argc, argv, K_ALLREDUCE, "allreduce");
}

int perf_reduce_scatter_main(int argc, char **argv)
{
    return coll_main(argc, argv, K_REDUCE_SCATTER, "reduce_scatter");
}

int perf_allgather_main(int argc, char **argv)
{
    return coll_main(argc, argv, K_ALLGATHER, "allgather");
}

int perf_broadcast_main(int argc, char **argv)
{
    return coll_main(argc, argv, K_BROADCAST, "broadcast");
}

int perf_alltoall_main(int argc, char **argv)
{
    return coll_main(argc, argv, K_ALLTOALL, "alltoall");
}
