/*
 * weft-perf migrate, what runs while the caller computes: allreduce latency during a
 * migration (--overlap), a migration started before an emulated GPU step (--step-ms), and
 * the handover's bytes as plain messages.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "migrate.h"

/* p50/p99 of allreduces of @p bytes, idle and while zero-shrink migrations keep running. */
/* A step of GPU compute as the CPU sees it: the caller sleeps. */
static void compute(size_t us);

/* The chunk size in effect (WEFT_MIGRATE_CHUNK). */
size_t mig_chunk_setting(const mig_bench_t *b)
{
    const char *val = NULL;
    for (size_t i = 0; weft_config_entry(b->w.ctx, i, &val) != NULL; i++) {
        size_t v;
        if (strcmp(weft_config_entry(b->w.ctx, i, NULL)->name, "WEFT_MIGRATE_CHUNK") == 0 &&
            val != NULL && perf_parse_size(val, &v) == 0 && v > 0) {
            return v;
        }
    }
    return 256u << 10;
}

/* The handover's bytes as plain messages: the first rank's whole model to the second in
 * chunk-size weft_isend/weft_irecv, 4 in flight (the migration's window), no checksums;
 * median over @p iters of the slower rank's time. Others idle. */
double mig_stream_baseline(const mig_bench_t *b, size_t bytes, int iters)
{
    size_t chunk = mig_chunk_setting(b);
    int r = b->w.rank;
    unsigned char *buf = perf_alloc(bytes);
    memset(buf, r, bytes);
    double *t = calloc((size_t)iters, sizeof(double));
    for (int it = 0; it < iters; it++) {
        weft_barrier(b->w.world);
        double t0 = perf_now_us();
        weft_req_t *q[4] = {NULL};
        size_t nchunks = (bytes + chunk - 1) / chunk;
        for (size_t c = 0; c < nchunks && r < 2; c++) {
            size_t off = c * chunk, len = bytes - off < chunk ? bytes - off : chunk;
            weft_req_t **slot = &q[c % 4];
            weft_wait(*slot, WEFT_TIMEOUT_DEFAULT);
            weft_req_free(*slot);
            *slot = NULL;
            if (r == 0) {
                weft_isend(b->w.world, buf + off, len, 1, (uint32_t)(c & 0xffff), slot);
            } else {
                weft_irecv(b->w.world, buf + off, len, 0, (uint32_t)(c & 0xffff), slot);
            }
        }
        for (int k = 0; k < 4; k++) {
            weft_wait(q[k], WEFT_TIMEOUT_DEFAULT);
            weft_req_free(q[k]);
        }
        t[it] = perf_slowest(&b->w, perf_now_us() - t0);
    }
    double med = perf_median(t, iters);
    free(t);
    perf_free(buf);
    return med;
}

/* The zero-shrink scenario both --step-ms and --overlap run: its layouts, its plan, and
 * this rank's old and new packed buffers. */
typedef struct shrink_fixture {
    scenario_t s;
    weft_plan_t *plan;
    unsigned char *oldbuf, *newbuf;
} shrink_fixture_t;

/* -1 when the world is too small for the scenario. */
static int shrink_open(const mig_bench_t *b, shrink_fixture_t *f)
{
    if (mig_build(b, "zero-shrink", &f->s) != 0) {
        return -1;
    }
    int me = b->ids[b->w.rank];
    weft_plan_create(f->s.old, f->s.new, NULL, &f->plan);
    f->oldbuf = perf_alloc(weft_layout_packed_bytes(f->s.old, me));
    f->newbuf = perf_alloc(weft_layout_packed_bytes(f->s.new, me));
    return 0;
}

static void shrink_close(shrink_fixture_t *f)
{
    perf_free(f->oldbuf);
    perf_free(f->newbuf);
    weft_plan_free(f->plan);
    weft_layout_free(f->s.old);
    weft_layout_free(f->s.new);
}

/* A zero-shrink migration started right before an emulated GPU step of --step-ms: whether
 * it has completed when the step ends (weft_test, no wait), and how long the same
 * migration takes when waited for. */
int mig_background_step(const mig_bench_t *b, FILE *out, bool json)
{
    shrink_fixture_t f;
    if (shrink_open(b, &f) != 0) {
        return PERF_EXIT_OK;
    }
    weft_plan_t *plan = f.plan;
    unsigned char *oldbuf = f.oldbuf, *newbuf = f.newbuf;
    weft_plan_stats_t st = {.size = sizeof(st)};
    weft_plan_stats(plan, -1, &st);
    double t0 = perf_now_us();
    weft_migrate(b->w.world, plan, oldbuf, newbuf, NULL); /* also touches the pages */
    double waited = perf_slowest(&b->w, perf_now_us() - t0);
    int done_all = 0, runs = 5, done;
    for (int r = 0; r < runs; r++) {
        weft_barrier(b->w.world);
        weft_req_t *req = NULL;
        weft_status_t rc = weft_imigrate(b->w.world, plan, oldbuf, newbuf, NULL, &req);
        compute(b->step_ms * 1000);
        rc = rc == WEFT_OK ? WEFT_OK : weft_test(req);
        int mine = rc == WEFT_OK;
        weft_allreduce(b->w.world, &mine, &done, 1, WEFT_I32, WEFT_MIN);
        done_all += done;
        weft_wait(req, WEFT_TIMEOUT_DEFAULT);
        weft_req_free(req);
    }
    if (json) {
        fprintf(out,
                ",\n  \"background\": {\"step_ms\": %zu, \"bytes_moved\": %zu, "
                "\"waited_us\": %.1f, \"runs\": %d, \"done_at_step_end\": %d}",
                b->step_ms, st.bytes_in, waited, runs, done_all);
    } else if (b->w.rank == 0) {
        fprintf(out,
                "#\n# zero-shrink migration (%zu B) started before a %zu ms emulated GPU step "
                "(sleep), %d ranks\n#   waited for: %.1f us; completed in the background by the "
                "step's end: %d of %d runs\n",
                st.bytes_in, b->step_ms, b->w.size, waited, done_all, runs);
    }
    shrink_close(&f);
    return PERF_EXIT_OK;
}

static void compute(size_t us)
{
    if (us > 0) {
        struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
}

int mig_overlap(const mig_bench_t *b, FILE *out, bool json)
{
    shrink_fixture_t f;
    if (shrink_open(b, &f) != 0) {
        return PERF_EXIT_OK;
    }
    int p = b->w.size;
    weft_plan_t *plan = f.plan;
    unsigned char *oldbuf = f.oldbuf, *newbuf = f.newbuf;
    const int k = 200;
    double *idle = calloc(k, sizeof(double)), *during = calloc(k, sizeof(double));
    float *x = perf_alloc(64 << 10), *y = perf_alloc(64 << 10);
    if (json) {
        fprintf(out, ",\n  \"overlap\": [");
    } else if (b->w.rank == 0) {
        fprintf(out,
                "#\n# allreduce while a zero-shrink migration runs (%d ranks), %zu us of "
                "emulated compute (sleep) between allreduces\n"
                "# %10s %12s %14s %14s %8s %10s\n",
                p, b->gap_us, "bytes", "idle_p50_us", "during_p50_us", "during_p99_us", "ratio",
                "migrations");
    }
    /* One migration first, so that neither side measures first-touch page faults. */
    weft_migrate(b->w.world, plan, oldbuf, newbuf, NULL);
    for (size_t bytes = 8; bytes <= (64 << 10); bytes *= 8) {
        size_t count = bytes / 4;
        for (int i = 0; i < k / 4; i++) { /* warm-up */
            weft_allreduce(b->w.world, x, y, count, WEFT_F32, WEFT_SUM);
        }
        /* Idle and during in alternating blocks, so that drift of the machine (other
         * load, frequency) falls on both alike. */
        int ni = 0, n = 0, finished = 0; /* migrations completed among the allreduces */
        for (int round = 0; round < 4; round++) {
            for (int i = 0; i < k / 4; i++) {
                compute(b->gap_us);
                weft_barrier(b->w.world); /* the ranks woke at different times */
                double t0 = perf_now_us();
                weft_allreduce(b->w.world, x, y, count, WEFT_F32, WEFT_SUM);
                idle[ni++] = perf_now_us() - t0;
            }
            weft_req_t *mig = NULL;
            while (n < (round + 1) * (k / 4)) {
                if (mig == NULL &&
                    weft_imigrate(b->w.world, plan, oldbuf, newbuf, NULL, &mig) == WEFT_OK) {
                    continue; /* done inline */
                }
                compute(b->gap_us);
                weft_barrier(b->w.world);
                double t0 = perf_now_us();
                weft_allreduce(b->w.world, x, y, count, WEFT_F32, WEFT_SUM);
                during[n++] = perf_now_us() - t0;
                /* Members agree when a migration is over (its close): all start the next
                 * one at the same point of their allreduce sequence. */
                weft_status_t st = weft_test(mig);
                int done = st != WEFT_INPROGRESS, all = done;
                weft_allreduce(b->w.world, &done, &all, 1, WEFT_I32, WEFT_MIN);
                if (all) {
                    weft_req_free(mig);
                    mig = NULL;
                    finished++;
                } else if (done) {
                    weft_wait(mig, WEFT_TIMEOUT_DEFAULT);
                }
            }
            if (mig != NULL) {
                weft_wait(mig, WEFT_TIMEOUT_DEFAULT);
                weft_req_free(mig);
            }
        }
        double i50 = perf_median(idle, ni), d50 = perf_median(during, n);
        double d99 = perf_quantile(during, n, 0.99);
        if (json) {
            fprintf(out,
                    "%s\n    {\"bytes\": %zu, \"idle_p50_us\": %.2f, \"during_p50_us\": %.2f, "
                    "\"during_p99_us\": %.2f, \"migrations\": %d}",
                    bytes == 8 ? "" : ",", bytes, i50, d50, d99, finished);
        } else if (b->w.rank == 0) {
            fprintf(out, "  %10zu %12.2f %14.2f %14.2f %8.2f %10d\n", bytes, i50, d50, d99,
                    d50 / i50, finished);
        }
    }
    if (json) {
        fprintf(out, "\n  ]");
    }
    free(idle);
    free(during);
    perf_free(x);
    perf_free(y);
    shrink_close(&f);
    return PERF_EXIT_OK;
}
