/*
 * weft-perf vocab: the vocabulary-parallel output layer, naive vs Algorithm 1 vs
 * Algorithm 2, side by side on the ranks of the job (P = job size).
 *
 * Every iteration aligns the ranks with a barrier, then runs one microbatch forward
 * (S, C1) and backward (T, C2) with the blocking wrappers; the algorithms take turns
 * iteration by iteration. Per algorithm it reports:
 *   colls     collectives per microbatch, from weft_group_coll_count()
 *   fwd, bwd  wall time of the forward and backward wrappers (total: both)
 *   cpu       CPU time the rank's process used meanwhile: the work, without the time
 *             other processes of a shared machine took (spinning in waits included)
 *   compute   time in the passes' compute (weft_vocab_mb_stats)
 *   comm      Σ start-to-completion time of its collectives, waiting for other ranks
 *             included (mean over ranks): the communication a schedule has to hide or
 *             wait for in place
 *   xfer      the same collectives (sizes, dtypes; the merge as an f32 sum) replayed
 *             alone with the ranks aligned by a barrier before each: transfer and
 *             latency without the waiting
 *   bytes     bytes its collectives reduce per microbatch
 *   peak      activation bytes one microbatch holds between S and T (weft_vocab_mb_memory)
 * and, in the header, the memory the run added to the process: VmHWM over the run minus
 * VmRSS before it (inputs and outputs already touched; max over ranks), every
 * algorithm's working buffers together. With --block ROWS (alg1, alg2; naive is left
 * out) the layer computes its logits ROWS rows at a time and never holds them whole.
 * Times are medians over the timed iterations (this machine may be shared), of the
 * slowest rank except comm; xfer is a mean. Ratios are against naive.
 * With -c the three algorithms' losses and gradients must agree (else #wrong > 0).
 * OpenBLAS threads: set OPENBLAS_NUM_THREADS so ranks x threads fits the cores.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf.h"

enum { ALGOS = WEFT_VOCAB_ALGO_COUNT };
/* Metrics; those before T_COMM are reported as the maximum over ranks. */
enum { T_FWD, T_BWD, T_TOTAL, T_CPU, T_COMPUTE, T_COMM, T_XFER, T_COUNT };

typedef struct vocab_bench {
    perf_opts_t o;
    size_t n, h, V;
    size_t block;    /* --block: block_rows of the microbatches, 0 for none */
    size_t rss_grow; /* bytes the run added to the process (VmHWM - VmRSS before) */
    bool run[ALGOS];
    perf_world_t w;
    weft_vocab_t *vocab;
    weft_vocab_range_t r;
    float *x, *wt, *dx, *dw, *loss_tok; /* inputs and outputs of this rank */
    int64_t *labels;
    float *ref_dx, *ref_dw, *ref_loss; /* the first algorithm's results, for -c */
    bool have_ref;
} vocab_bench_t;

typedef struct algo_result {
    double t[T_COUNT]; /* ms per microbatch, mean over iterations */
    uint64_t colls_fwd, colls_bwd;
    size_t bytes, peak;
    float loss;
    long wrong;
} algo_result_t;

static const perf_extra_opt_t extras[] = {
    {"--tokens", true, "N", "tokens per microbatch n (default 2048)"},
    {"--hidden", true, "H", "hidden size h (default 1024)"},
    {"--vocab", true, "V", "vocabulary size V (default 65536)"},
    {"--algos", true, "LIST", "comma-separated subset of naive,alg1,alg2 (default all)"},
    {"--block", true, "ROWS", "alg1/alg2: logits ROWS rows at a time (default 0: all)"},
};

static int parse_count(const char *val, size_t *out)
{
    return perf_parse_size(val, out) == 0 && *out > 0 ? 0 : -1;
}

static int on_extra(void *arg, const char *name, const char *val)
{
    vocab_bench_t *b = arg;
    if (strcmp(name, "--tokens") == 0) {
        return parse_count(val, &b->n);
    }
    if (strcmp(name, "--hidden") == 0) {
        return parse_count(val, &b->h);
    }
    if (strcmp(name, "--vocab") == 0) {
        return parse_count(val, &b->V);
    }
    if (strcmp(name, "--block") == 0) {
        return perf_parse_size(val, &b->block) == 0 ? 0 : -1;
    }
    memset(b->run, 0, sizeof(b->run));
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", val);
    for (char *tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
        int a = 0;
        while (a < ALGOS && strcmp(tok, weft_vocab_algo_name((weft_vocab_algo_t)a)) != 0) {
            a++;
        }
        if (a == ALGOS) {
            return -1;
        }
        b->run[a] = true;
    }
    return 0;
}

/* Deterministic inputs: X and labels equal on every rank, W the rank's rows of one
 * global matrix, scaled so logits are a few units. */
static int make_inputs(vocab_bench_t *b)
{
    size_t n = b->n, h = b->h, pl = b->r.padded_length;
    b->x = perf_alloc(n * h * sizeof(float));
    b->wt = perf_alloc(pl * h * sizeof(float));
    b->dx = perf_alloc(n * h * sizeof(float));
    b->dw = perf_alloc(pl * h * sizeof(float));
    b->loss_tok = perf_alloc(n * sizeof(float));
    b->labels = perf_alloc(n * sizeof(int64_t));
    if (!b->x || !b->wt || !b->dx || !b->dw || !b->loss_tok || !b->labels) {
        fprintf(stderr, "weft-perf vocab: out of memory\n");
        return -1;
    }
    /* Touched now, so the memory the run adds is the layer's alone. */
    memset(b->dx, 0, n * h * sizeof(float));
    memset(b->dw, 0, pl * h * sizeof(float));
    memset(b->loss_tok, 0, n * sizeof(float));
    float scale = 2.0f / sqrtf((float)h);
    uint64_t s = perf_seed(1, n, h, b->V);
    for (size_t i = 0; i < n * h; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        b->x[i] = scale * ((float)(s >> 40) / (float)(1u << 24) - 0.5f);
    }
    for (size_t i = 0; i < pl * h; i++) {
        uint64_t t = perf_seed(2, b->r.start * h + i, 0, 0);
        b->wt[i] = i < b->r.length * h ? ((float)(t >> 40) / (float)(1u << 24) - 0.5f) : 0.0f;
    }
    for (size_t j = 0; j < n; j++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        b->labels[j] = j % 16 == 15 ? -100 : (int64_t)((s >> 33) % b->V);
    }
    return 0;
}

/* Relative max difference of two float arrays, scaled by b's largest magnitude. */
static double rel_diff(const float *a, const float *ref, size_t count)
{
    double scale = 1e-30, err = 0.0;
    for (size_t i = 0; i < count; i++) {
        scale = fmax(scale, fabs(ref[i]));
        err = isnan(a[i]) ? INFINITY : fmax(err, fabs((double)a[i] - ref[i]));
    }
    return err / scale;
}

/* Compare with (or keep) the first algorithm's results: 1 if they disagree. */
static long check_results(vocab_bench_t *b)
{
    size_t nh = b->n * b->h, wh = b->r.padded_length * b->h;
    if (!b->have_ref) {
        b->ref_dx = perf_alloc(nh * sizeof(float));
        b->ref_dw = perf_alloc(wh * sizeof(float));
        b->ref_loss = perf_alloc(b->n * sizeof(float));
        if (!b->ref_dx || !b->ref_dw || !b->ref_loss) {
            return 1;
        }
        memcpy(b->ref_dx, b->dx, nh * sizeof(float));
        memcpy(b->ref_dw, b->dw, wh * sizeof(float));
        memcpy(b->ref_loss, b->loss_tok, b->n * sizeof(float));
        b->have_ref = true;
        return 0;
    }
    double e = fmax(rel_diff(b->dx, b->ref_dx, nh), rel_diff(b->dw, b->ref_dw, wh));
    e = fmax(e, rel_diff(b->loss_tok, b->ref_loss, b->n));
    return e > 1e-4 ? 1 : 0;
}

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One microbatch (forward + backward) after aligning the ranks; its times (ms) go to
 * @p sample when it is not NULL. */
static weft_status_t run_once(vocab_bench_t *b, weft_vocab_mb_t *mb, double *sample,
                              algo_result_t *res)
{
    weft_group_t *g = b->w.world;
    float grad = 1.0f;
    uint64_t c0 = 0, c1 = 0, c2 = 0;
    weft_status_t st = weft_barrier(g);
    weft_group_coll_count(g, &c0);
    uint64_t t0 = perf_now_ns(), cpu0 = cpu_ns();
    if (st == WEFT_OK) {
        st = weft_vocab_xent_forward(mb, b->x, b->wt, b->labels, b->n, b->loss_tok, &res->loss);
    }
    uint64_t t1 = perf_now_ns();
    weft_group_coll_count(g, &c1);
    if (st == WEFT_OK) {
        st = weft_vocab_xent_backward(mb, &grad, b->dx, b->dw);
    }
    uint64_t t2 = perf_now_ns(), cpu2 = cpu_ns();
    weft_group_coll_count(g, &c2);
    weft_vocab_mb_stats_t ms = {.size = sizeof(ms)};
    if (st == WEFT_OK) {
        st = weft_vocab_mb_stats(mb, &ms);
    }
    if (st != WEFT_OK || sample == NULL) {
        return st;
    }
    sample[T_FWD] = (double)(t1 - t0) / 1e6;
    sample[T_BWD] = (double)(t2 - t1) / 1e6;
    sample[T_TOTAL] = (double)(t2 - t0) / 1e6;
    sample[T_CPU] = (double)(cpu2 - cpu0) / 1e6;
    sample[T_COMPUTE] = (double)ms.compute_ns / 1e6;
    sample[T_COMM] = (double)ms.comm_ns / 1e6;
    res->colls_fwd = c1 - c0;
    res->colls_bwd = c2 - c1;
    res->bytes = ms.comm_bytes;
    return WEFT_OK;
}

/* Sizes of the collectives of one microbatch of @p algo: {count, dtype, op}. */
static int coll_pattern(const vocab_bench_t *b, weft_vocab_algo_t algo, size_t count[3],
                        weft_op_t op[3])
{
    size_t n = b->n, h = b->h;
    switch (algo) {
    case WEFT_VOCAB_NAIVE:
        count[0] = n, op[0] = WEFT_MAX;     /* row max */
        count[1] = 2 * n, op[1] = WEFT_SUM; /* sum-exp and target logit */
        count[2] = n * h, op[2] = WEFT_SUM; /* ∇X */
        return 3;
    case WEFT_VOCAB_ALG1:
        count[0] = 3 * n, op[0] = WEFT_SUM; /* (m, s, t) records */
        count[1] = n * h, op[1] = WEFT_SUM; /* ∇X */
        return 2;
    default:
        count[0] = (3 + 2 * h) * n, op[0] = WEFT_SUM; /* (m, s, t, A, B) records */
        return 1;
    }
}

/* Mean time (ms, max over ranks) of @p algo's collectives replayed @p reps times. */
static weft_status_t replay_xfer(vocab_bench_t *b, weft_vocab_algo_t algo, int reps, double *ms)
{
    size_t count[3];
    weft_op_t op[3];
    int k = coll_pattern(b, algo, count, op);
    size_t most = 0;
    for (int i = 0; i < k; i++) {
        most = count[i] > most ? count[i] : most;
    }
    float *buf = perf_alloc(most * sizeof(float));
    if (buf == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    memset(buf, 0, most * sizeof(float));
    weft_status_t st = WEFT_OK;
    double total = 0.0;
    for (int r = 0; r < reps && st == WEFT_OK; r++) {
        for (int i = 0; i < k && st == WEFT_OK; i++) {
            st = weft_barrier(b->w.world);
            uint64_t t0 = perf_now_ns();
            if (st == WEFT_OK) {
                st = weft_allreduce(b->w.world, buf, buf, count[i], WEFT_F32, op[i]);
            }
            total += (double)(perf_now_ns() - t0) / 1e6;
        }
    }
    perf_free(buf);
    total /= reps;
    if (st == WEFT_OK) {
        st = weft_allreduce(b->w.world, &total, ms, 1, WEFT_F64, WEFT_MAX);
    }
    return st;
}

/* Median over the iterations of metric @p k of samples [iters][T_COUNT]. */
static double median(const double *samples, int iters, int k, double *scratch)
{
    for (int i = 0; i < iters; i++) {
        scratch[i] = samples[i * T_COUNT + k];
    }
    return perf_median(scratch, iters);
}

/* Medians over iterations, maxima (waiting: means) over ranks, the replay, memory and the
 * cross-check of one algorithm. */
static int finish_algo(vocab_bench_t *b, weft_vocab_algo_t algo, const weft_vocab_mb_t *mb,
                       const double *samples, algo_result_t *res)
{
    double sum[T_COUNT] = {0}, scratch[b->o.iters];
    for (int k = 0; k < T_XFER; k++) {
        sum[k] = median(samples, b->o.iters, k, scratch);
    }
    /* The slowest rank sets the pace of a step; waiting is averaged over the ranks. */
    weft_status_t st = weft_allreduce(b->w.world, sum, res->t, T_COMM, WEFT_F64, WEFT_MAX);
    long any = 0;
    if (st == WEFT_OK) {
        st = weft_allreduce(b->w.world, &sum[T_COMM], &res->t[T_COMM], 1, WEFT_F64, WEFT_SUM);
        res->t[T_COMM] /= b->w.size;
    }
    if (st == WEFT_OK) {
        st = weft_allreduce(b->w.world, &res->wrong, &any, 1, WEFT_I64, WEFT_MAX);
    }
    if (st == WEFT_OK) {
        st = replay_xfer(b, algo, b->o.iters * 4, &res->t[T_XFER]);
    }
    if (st != WEFT_OK) {
        perf_report_error(&b->w, "allreduce", st);
        return -1;
    }
    res->wrong = b->o.check ? any : -1;
    weft_vocab_mem_t mem = {.size = sizeof(mem)};
    weft_vocab_mb_memory(mb, b->n, &mem);
    res->peak = mem.peak;
    return 0;
}

/* A field of /proc/self/status ("VmRSS:", "VmHWM:") in bytes; 0 if it cannot be read. */
static size_t proc_status_bytes(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0, len = strlen(field);
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, len) == 0) {
            kb = strtoull(line + len, NULL, 10);
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kb * 1024;
}

/* Reset the process's VmHWM to its VmRSS (Linux, since 4.0); then its resident base. */
static size_t mark_memory(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f != NULL) {
        fputs("5", f);
        fclose(f);
    }
    return proc_status_bytes("VmRSS:");
}

/*
 * Iterations interleave the algorithms, starting each round with the next one, so a
 * change of load on the machine weighs on all of them alike.
 */
static int run_algos(vocab_bench_t *b, algo_result_t *res)
{
    weft_vocab_mb_t *mb[ALGOS] = {NULL};
    double *samples = calloc((size_t)ALGOS * (size_t)b->o.iters * T_COUNT, sizeof(double));
    if (samples == NULL) {
        return -1;
    }
    weft_status_t st = WEFT_OK;
    int rc = 0;
    memset(res, 0, sizeof(*res) * ALGOS);
    for (int a = 0; a < ALGOS && st == WEFT_OK; a++) {
        weft_vocab_mb_params_t mp = {.size = sizeof(mp),
                                     .algo = (weft_vocab_algo_t)a,
                                     .reduction = WEFT_VOCAB_MEAN,
                                     .max_tokens = b->n,
                                     .block_rows = b->block};
        if (b->run[a]) {
            st = weft_vocab_mb_create(b->vocab, &mp, &mb[a]);
        }
    }
    size_t base = mark_memory();
    int rounds = b->o.warmup + b->o.iters;
    for (int it = 0; it < rounds && st == WEFT_OK; it++) {
        for (int k = 0; k < ALGOS && st == WEFT_OK; k++) {
            int a = (it + k) % ALGOS;
            if (!b->run[a]) {
                continue;
            }
            double *sample =
                it < b->o.warmup
                    ? NULL
                    : samples +
                          ((size_t)a * (size_t)b->o.iters + (size_t)(it - b->o.warmup)) * T_COUNT;
            st = run_once(b, mb[a], sample, &res[a]);
            if (st != WEFT_OK) {
                perf_report_error(&b->w, weft_vocab_algo_name((weft_vocab_algo_t)a), st);
            } else if (it == rounds - 1 && b->o.check) {
                res[a].wrong = check_results(b); /* outputs are overwritten by the next */
            }
        }
    }
    int64_t grow = (int64_t)proc_status_bytes("VmHWM:"), most = 0;
    grow = grow > (int64_t)base ? grow - (int64_t)base : 0;
    if (st == WEFT_OK) {
        st = weft_allreduce(b->w.world, &grow, &most, 1, WEFT_I64, WEFT_MAX);
        b->rss_grow = (size_t)most;
    }
    for (int a = 0; a < ALGOS; a++) {
        if (st == WEFT_OK && rc == 0 && b->run[a]) {
            rc = finish_algo(b, (weft_vocab_algo_t)a, mb[a],
                             samples + (size_t)a * (size_t)b->o.iters * T_COUNT, &res[a]);
        }
        weft_vocab_mb_free(mb[a]);
    }
    free(samples);
    return st != WEFT_OK ? -1 : rc;
}

static double ratio(double x, double base)
{
    return base > 0 ? x / base : 0.0;
}

static void print_table(const vocab_bench_t *b, const algo_result_t *res)
{
    const algo_result_t *base = b->run[WEFT_VOCAB_NAIVE] ? &res[WEFT_VOCAB_NAIVE] : NULL;
    printf("# weft-perf vocab: n=%zu h=%zu V=%zu P=%d (shard %zu rows), %d iters, %d warmup, "
           "block %zu rows\n",
           b->n, b->h, b->V, b->w.size, b->r.padded_length, b->o.iters, b->o.warmup, b->block);
    printf("# memory the run added (VmHWM - VmRSS before, max over ranks): %.1f MiB\n",
           (double)b->rss_grow / 1048576.0);
    printf("# %-5s %5s %9s %9s %9s %9s %11s %8s %8s %9s %10s %7s %7s %7s %7s %6s\n", "algo",
           "colls", "fwd(ms)", "bwd(ms)", "total(ms)", "cpu(ms)", "compute(ms)", "comm(ms)",
           "xfer(ms)", "bytes", "peak(B)", "time/nv", "cpu/nv", "comm/nv", "xfer/nv", "#wrong");
    for (int a = 0; a < ALGOS; a++) {
        if (!b->run[a]) {
            continue;
        }
        const double *t = res[a].t;
        printf("  %-5s %5llu %9.1f %9.1f %9.1f %9.1f %11.1f %8.2f %8.2f %9zu %10zu",
               weft_vocab_algo_name((weft_vocab_algo_t)a),
               (unsigned long long)(res[a].colls_fwd + res[a].colls_bwd), t[T_FWD], t[T_BWD],
               t[T_TOTAL], t[T_CPU], t[T_COMPUTE], t[T_COMM], t[T_XFER], res[a].bytes, res[a].peak);
        if (base != NULL) {
            printf(" %7.3f %7.3f %7.3f %7.3f", ratio(t[T_TOTAL], base->t[T_TOTAL]),
                   ratio(t[T_CPU], base->t[T_CPU]), ratio(t[T_COMM], base->t[T_COMM]),
                   ratio(t[T_XFER], base->t[T_XFER]));
        } else {
            printf(" %7s %7s %7s %7s", "-", "-", "-", "-");
        }
        if (res[a].wrong < 0) {
            printf(" %6s\n", "N/A");
        } else {
            printf(" %6ld\n", res[a].wrong);
        }
    }
}

static void print_json(const vocab_bench_t *b, const algo_result_t *res)
{
    printf("{\"subcommand\": \"vocab\", \"n\": %zu, \"h\": %zu, \"V\": %zu, \"nranks\": %d, "
           "\"iters\": %d, \"warmup\": %d, \"block\": %zu, \"rss_growth_bytes\": %zu, "
           "\"rows\": [",
           b->n, b->h, b->V, b->w.size, b->o.iters, b->o.warmup, b->block, b->rss_grow);
    const char *sep = "";
    for (int a = 0; a < ALGOS; a++) {
        if (!b->run[a]) {
            continue;
        }
        const algo_result_t *r = &res[a];
        printf("%s{\"algo\": ", sep);
        perf_json_string(stdout, weft_vocab_algo_name((weft_vocab_algo_t)a));
        printf(", \"colls_fwd\": %llu, \"colls_bwd\": %llu, \"fwd_ms\": %.3f, \"bwd_ms\": %.3f, "
               "\"total_ms\": %.3f, \"cpu_ms\": %.3f, \"compute_ms\": %.3f, \"comm_ms\": %.3f, "
               "\"xfer_ms\": %.3f, \"comm_bytes\": %zu, "
               "\"peak_act_bytes\": %zu, \"loss\": %.6f, \"wrong\": %ld}",
               (unsigned long long)r->colls_fwd, (unsigned long long)r->colls_bwd, r->t[T_FWD],
               r->t[T_BWD], r->t[T_TOTAL], r->t[T_CPU], r->t[T_COMPUTE], r->t[T_COMM], r->t[T_XFER],
               r->bytes, r->peak, (double)r->loss, r->wrong);
        sep = ", ";
    }
    printf("]}\n");
}

static void bench_free(vocab_bench_t *b)
{
    perf_free(b->x);
    perf_free(b->wt);
    perf_free(b->dx);
    perf_free(b->dw);
    perf_free(b->loss_tok);
    perf_free(b->labels);
    perf_free(b->ref_dx);
    perf_free(b->ref_dw);
    perf_free(b->ref_loss);
}

int perf_vocab_main(int argc, char **argv)
{
    vocab_bench_t b = {.n = 2048, .h = 1024, .V = 65536, .run = {true, true, true}};
    perf_opts_default(&b.o);
    b.o.uses = PERF_USE_ITERS | PERF_USE_WARMUP | PERF_USE_CHECK | PERF_USE_JSON;
    b.o.iters = 3; /* one iteration is seconds of GEMMs on a CPU */
    b.o.warmup = 1;
    int rc = perf_parse_opts(argc, argv, &b.o, "vocab", extras, sizeof(extras) / sizeof(extras[0]),
                             on_extra, &b);
    if (rc != PERF_CONTINUE) {
        return rc == PERF_BAD ? PERF_EXIT_USAGE : PERF_EXIT_OK;
    }
    if (b.o.iters < 1) {
        b.o.iters = 1;
    }
    if (b.block > 0) {
        b.run[WEFT_VOCAB_NAIVE] = false; /* it refuses block_rows */
    }
    if (perf_world_open(&b.w) != 0) {
        return PERF_EXIT_ERROR;
    }
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = b.V, .hidden = b.h};
    weft_status_t st = weft_vocab_create(b.w.world, &vp, &b.vocab);
    if (st == WEFT_OK) {
        st = weft_vocab_local_range(b.vocab, &b.r);
    }
    if (st != WEFT_OK) {
        perf_report_error(&b.w, "weft_vocab_create", st);
        perf_world_close(&b.w);
        return PERF_EXIT_ERROR;
    }
    algo_result_t res[ALGOS];
    rc = make_inputs(&b) == 0 ? PERF_EXIT_OK : PERF_EXIT_ERROR;
    if (rc == PERF_EXIT_OK && run_algos(&b, res) != 0) {
        rc = PERF_EXIT_ERROR;
    }
    long wrong = 0;
    for (int a = 0; rc == PERF_EXIT_OK && a < ALGOS; a++) {
        wrong += b.run[a] && res[a].wrong > 0;
    }
    if (rc == PERF_EXIT_OK && b.w.rank == 0) {
        if (b.o.json) {
            print_json(&b, res);
        } else {
            print_table(&b, res);
        }
    }
    weft_vocab_free(b.vocab);
    bench_free(&b);
    perf_world_close(&b.w);
    return rc != PERF_EXIT_OK ? rc : wrong > 0 ? PERF_EXIT_WRONG : PERF_EXIT_OK;
}
