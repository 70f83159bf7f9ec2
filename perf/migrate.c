/*
 * weft-perf migrate: parameter migration against two baselines, in one run.
 *
 * Scenarios (P = ranks of the job):
 *   zero-shrink  a flat ZeRO partition of the model over P members re-cut over P-1
 *   zero-grow    over P-1 members re-cut over P (the last member starts empty)
 *   tp           an 8192 x 8192 f32 matrix sharded by columns over P/2 members (at most
 *                2), re-sharded over min(P, 4)
 *   pipeline     4P equal layers, 4 per stage, rebalanced so every stage boundary moves
 *                by one layer
 *   handover     (only when named) the whole model moves from the first member to the
 *                second: a stream between two ranks without local copies
 * For each: bytes moved against the lower bound, the migration's time (maximum over
 * ranks, median over -n runs), and the same new buffers produced by
 *   allgather-slice  weft_allgather of every member's old shard, then each member cuts
 *                    its new regions out of the gathered copy;
 *   file-reload      each member writes its shard to a file in --tmpdir and fsyncs it,
 *                    drops it from the page cache, then reads back the parts its new
 *                    regions need (what a restart from a checkpoint does).
 * The migration's result is compared byte for byte with the allgather-slice result.
 * --overlap measures allreduces of 8 B to 64 KiB while a zero-shrink migration runs, with
 * --gap-us of emulated compute (a sleep, as a CPU thread driving a GPU step) and a barrier
 * (so that the ranks' different wake-up times do not count) before each, against the same
 * without a migration; migrations restart until enough allreduces are timed, and the
 * table says how many completed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "migrate.h"

#define MAX_SCEN 5

static const perf_extra_opt_t extras[] = {
    {"--scenario", true, "NAME",
     "zero-shrink, zero-grow, tp, pipeline, handover or all (default all but handover)"},
    {"--model-bytes", true, "BYTES", "size of the ZeRO and pipeline models (default 256M)"},
    {"--dry-run", false, NULL, "print the plans (bytes per member, lower bound), move nothing"},
    {"--overlap", false, NULL, "allreduce latency while a migration runs, against idle"},
    {"--gap-us", true, "US",
     "--overlap: emulated compute (the caller sleeps) between allreduces (default 100)"},
    {"--no-baselines", false, NULL, "skip allgather-slice and file-reload"},
    {"--step-ms", true, "MS",
     "start a zero-shrink migration, sleep MS (an emulated GPU step), then test whether it "
     "completed in the background"},
    {"--tmpdir", true, "DIR", "where file-reload writes (default $TMPDIR or /tmp)"},
};

static int on_extra(void *arg, const char *name, const char *val)
{
    mig_bench_t *b = arg;
    if (strcmp(name, "--scenario") == 0) {
        b->only = val;
        return strcmp(val, "all") && strcmp(val, "zero-shrink") && strcmp(val, "zero-grow") &&
               strcmp(val, "tp") && strcmp(val, "pipeline") && strcmp(val, "handover");
    }
    if (strcmp(name, "--model-bytes") == 0) {
        return perf_parse_size(val, &b->model_bytes) != 0 || b->model_bytes < 4096;
    }
    if (strcmp(name, "--step-ms") == 0) {
        return perf_parse_size(val, &b->step_ms) != 0;
    }
    if (strcmp(name, "--gap-us") == 0) {
        return perf_parse_size(val, &b->gap_us) != 0;
    }
    if (strcmp(name, "--tmpdir") == 0) {
        snprintf(b->tmpdir, sizeof(b->tmpdir), "%s", val);
        return 0;
    }
    b->dry_run |= strcmp(name, "--dry-run") == 0;
    b->overlap |= strcmp(name, "--overlap") == 0;
    if (strcmp(name, "--no-baselines") == 0) {
        b->baselines = false;
    }
    return 0;
}

/* A model of 16 f32 tensors of roughly equal size adding up to about @p bytes. */
static void add_model(weft_layout_t *l, size_t bytes, int *tensors)
{
    uint64_t rows = bytes / 16 / 4 / 1024;
    for (int t = 0; t < 16; t++) {
        char name[16];
        snprintf(name, sizeof(name), "layer%d", t);
        uint64_t shape[2] = {rows > 0 ? rows : 1, 1024};
        weft_layout_add_tensor(l, name, WEFT_F32, 2, shape, &tensors[t]);
    }
}

int mig_build(const mig_bench_t *b, const char *kind, scenario_t *s)
{
    int p = b->w.size, t[64];
    const int *ids = b->ids;
    snprintf(s->name, sizeof(s->name), "%s", kind);
    weft_layout_create(&s->old);
    weft_layout_create(&s->new);
    if (strcmp(kind, "zero-shrink") == 0 || strcmp(kind, "zero-grow") == 0) {
        if (p < 2) {
            return -1;
        }
        add_model(s->old, b->model_bytes, t);
        add_model(s->new, b->model_bytes, t);
        bool shrink = kind[5] == 's';
        weft_layout_flat(s->old, t, 16, ids, shrink ? p : p - 1);
        weft_layout_flat(s->new, t, 16, ids, shrink ? p - 1 : p);
    } else if (strcmp(kind, "handover") == 0) {
        /* The whole model moves from one member to another: a pure stream between two
         * ranks, no local copies (the bandwidth of the engine itself). */
        if (p < 2) {
            return -1;
        }
        add_model(s->old, b->model_bytes, t);
        add_model(s->new, b->model_bytes, t);
        for (int k = 0; k < 16; k++) {
            weft_layout_whole(s->old, t[k], ids[0]);
            weft_layout_whole(s->new, t[k], ids[1]);
        }
    } else if (strcmp(kind, "tp") == 0) {
        if (p < 2) {
            return -1;
        }
        uint64_t shape[2] = {8192, 8192};
        weft_layout_add_tensor(s->old, "w", WEFT_F32, 2, shape, NULL);
        weft_layout_add_tensor(s->new, "w", WEFT_F32, 2, shape, NULL);
        int from = p / 2 < 2 ? p / 2 : 2, to = p < 4 ? p : 4;
        weft_layout_shard(s->old, 0, 1, ids, from);
        weft_layout_shard(s->new, 0, 1, ids, to);
        snprintf(s->name, sizeof(s->name), "tp-%d-to-%d", from, to);
    } else {
        if (p < 2) {
            return -1;
        }
        int layers = 4 * p;
        size_t per = b->model_bytes / (size_t)layers;
        for (int l = 0; l < layers && l < 64; l++) {
            char name[16];
            snprintf(name, sizeof(name), "layer%d", l);
            uint64_t shape[2] = {per / 4 / 1024 > 0 ? per / 4 / 1024 : 1, 1024};
            weft_layout_add_tensor(s->old, name, WEFT_F32, 2, shape, NULL);
            weft_layout_add_tensor(s->new, name, WEFT_F32, 2, shape, NULL);
            int now = l / 4, then = (l + 1) / 4 < p ? (l + 1) / 4 : p - 1;
            weft_layout_whole(s->old, l, ids[now]);
            weft_layout_whole(s->new, l, ids[then]);
        }
    }
    return 0;
}

/* Whether boxes @p a and @p b overlap, and their intersection in @p in. */
static bool box_overlap(const weft_box_t *a, const weft_box_t *b, int nd, weft_box_t *in)
{
    for (int d = 0; d < nd; d++) {
        uint64_t lo = a->offset[d] > b->offset[d] ? a->offset[d] : b->offset[d];
        uint64_t ea = a->offset[d] + a->extent[d], eb = b->offset[d] + b->extent[d];
        uint64_t hi = ea < eb ? ea : eb;
        if (hi <= lo) {
            return false;
        }
        in->offset[d] = lo;
        in->extent[d] = hi - lo;
    }
    return true;
}

/* Cut this member's new regions out of whole old shards: @p shard(m) gives member m's
 * old packed buffer. Independent of the plan: only box intersections. */
static void slice(const scenario_t *s, int me, unsigned char *newbuf,
                  const unsigned char *(*shard)(void *, int), void *arg, const int *ids, int p)
{
    for (int k = 0; k < weft_layout_num_regions(s->new, me); k++) {
        int t;
        weft_box_t nb;
        size_t noff;
        weft_layout_region(s->new, me, k, &t, &nb, NULL, &noff);
        weft_tensor_info_t ti;
        weft_layout_tensor(s->new, t, &ti);
        for (int r = 0; r < p; r++) {
            for (int j = 0; j < weft_layout_num_regions(s->old, ids[r]); j++) {
                int ot;
                weft_box_t ob, in;
                size_t ooff;
                weft_layout_region(s->old, ids[r], j, &ot, &ob, NULL, &ooff);
                bool overlap = ot == t && box_overlap(&nb, &ob, ti.ndims, &in);
                const unsigned char *src = overlap ? shard(arg, ids[r]) : NULL;
                if (src != NULL) {
                    weft_box_copy(newbuf + noff, &nb, src + ooff, &ob, &in, ti.ndims,
                                  perf_dtype_size(ti.dtype));
                }
            }
        }
    }
}

typedef struct gathered {
    const unsigned char *all;
    size_t stride;
    const int *ids;
    int p;
} gathered_t;

static const unsigned char *from_gathered(void *arg, int member)
{
    gathered_t *g = arg;
    for (int r = 0; r < g->p; r++) {
        if (g->ids[r] == member) {
            return g->all + (size_t)r * g->stride;
        }
    }
    return NULL;
}

static double allgather_slice(const mig_bench_t *b, const scenario_t *s, const int *ids,
                              const unsigned char *oldbuf, unsigned char *out)
{
    int p = b->w.size, me = ids[b->w.rank];
    size_t most = 0;
    for (int r = 0; r < p; r++) {
        size_t x = weft_layout_packed_bytes(s->old, ids[r]);
        most = x > most ? x : most;
    }
    most = (most + 7) & ~(size_t)7;
    unsigned char *all = perf_alloc(most * (size_t)p), *mine = perf_alloc(most);
    memcpy(mine, oldbuf, weft_layout_packed_bytes(s->old, me));
    weft_barrier(b->w.world);
    double t0 = perf_now_us();
    weft_status_t st = weft_allgather(b->w.world, mine, all, most, WEFT_U8);
    gathered_t g = {all, most, ids, p};
    slice(s, me, out, from_gathered, &g, ids, p);
    double us = perf_now_us() - t0;
    perf_free(all);
    perf_free(mine);
    return st == WEFT_OK ? perf_slowest(&b->w, us) : -1;
}

typedef struct files {
    const mig_bench_t *b;
    char paths[256][320];
    unsigned char *bufs[256];
    const int *ids;
    int p;
    size_t bytes_read;
} files_t;

/* The shard of member @p member as read back from its file; NULL if not needed. */
static const unsigned char *from_file(void *arg, int member)
{
    files_t *f = arg;
    for (int r = 0; r < f->p; r++) {
        if (f->ids[r] == member) {
            return f->bufs[r];
        }
    }
    return NULL;
}

static double file_reload(const mig_bench_t *b, const scenario_t *s, const int *ids,
                          const unsigned char *oldbuf, unsigned char *out)
{
    int p = b->w.size, me = ids[b->w.rank];
    files_t *f = calloc(1, sizeof(*f));
    f->b = b;
    f->ids = ids;
    f->p = p;
    const char *job = getenv("WEFT_STORE"); /* one per job; the token is secret */
    for (int r = 0; r < p; r++) {
        snprintf(f->paths[r], sizeof(f->paths[r]), "%s/weft-perf-migrate.%.40s.%d", b->tmpdir,
                 job != NULL ? job : "x", ids[r]);
    }
    weft_barrier(b->w.world);
    double t0 = perf_now_us();
    size_t mine = weft_layout_packed_bytes(s->old, me);
    int fd = open(f->paths[b->w.rank], O_CREAT | O_TRUNC | O_WRONLY, 0600);
    bool ok = fd >= 0 && write(fd, oldbuf, mine) == (ssize_t)mine && fsync(fd) == 0;
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* the reload reads the disk */
        close(fd);
    }
    weft_barrier(b->w.world);
    /* Read every shard that holds part of a new region of this member, whole. */
    for (int r = 0; r < p && ok; r++) {
        bool needed = false;
        for (int k = 0; k < weft_layout_num_regions(s->new, me) && !needed; k++) {
            int t;
            weft_box_t nb;
            weft_layout_region(s->new, me, k, &t, &nb, NULL, NULL);
            for (int j = 0; j < weft_layout_num_regions(s->old, ids[r]) && !needed; j++) {
                int ot;
                weft_box_t ob;
                weft_layout_region(s->old, ids[r], j, &ot, &ob, NULL, NULL);
                weft_tensor_info_t ti;
                weft_box_t in;
                weft_layout_tensor(s->old, ot, &ti);
                needed = ot == t && box_overlap(&nb, &ob, ti.ndims, &in);
            }
        }
        if (!needed) {
            continue;
        }
        size_t len = weft_layout_packed_bytes(s->old, ids[r]);
        f->bufs[r] = perf_alloc(len);
        int in = open(f->paths[r], O_RDONLY);
        size_t got = 0;
        while (in >= 0 && got < len) {
            ssize_t n = pread(in, f->bufs[r] + got, len - got, (off_t)got);
            if (n <= 0) {
                break;
            }
            got += (size_t)n;
        }
        ok = in >= 0 && got == len;
        if (in >= 0) {
            close(in);
        }
        f->bytes_read += got;
    }
    if (ok) {
        slice(s, me, out, from_file, f, ids, p);
    }
    double us = perf_now_us() - t0;
    weft_barrier(b->w.world);
    unlink(f->paths[b->w.rank]);
    for (int r = 0; r < p; r++) {
        perf_free(f->bufs[r]);
    }
    free(f);
    return ok ? perf_slowest(&b->w, us) : -1;
}

typedef struct result {
    char name[32];
    size_t moved, lower, local;
    double plan_us, time_us, gather_us, file_us;
    long wrong;
} result_t;

static int run_scenario(const mig_bench_t *b, scenario_t *s, result_t *res)
{
    const int *ids = b->ids;
    int me = ids[b->w.rank];
    memset(res, 0, sizeof(*res));
    snprintf(res->name, sizeof(res->name), "%s", s->name);
    weft_plan_t *plan;
    double t0 = perf_now_us();
    weft_status_t st = weft_plan_create(s->old, s->new, NULL, &plan);
    res->plan_us = perf_now_us() - t0;
    if (st != WEFT_OK) {
        fprintf(stderr, "weft-perf migrate: %s: %s\n", s->name, weft_last_error(NULL));
        return PERF_EXIT_ERROR;
    }
    weft_plan_stats_t all = {.size = sizeof(all)};
    weft_plan_stats(plan, -1, &all);
    res->moved = all.bytes_in;
    res->lower = all.bytes_lower_bound;
    res->local = all.bytes_local;
    if (b->dry_run) {
        if (b->w.rank == 0) {
            printf("# %s on %d ranks\n", s->name, b->w.size);
            weft_plan_print(plan, stdout);
        }
        weft_plan_free(plan);
        return PERF_EXIT_OK;
    }
    size_t ob = weft_layout_packed_bytes(s->old, me), nb = weft_layout_packed_bytes(s->new, me);
    unsigned char *oldbuf = perf_alloc(ob), *newbuf = perf_alloc(nb), *ref = perf_alloc(nb);
    perf_fill_pattern(oldbuf, ob, perf_seed(7, (uint64_t)me, ob, 0));
    double *v = calloc((size_t)b->o.iters + 1, sizeof(double));
    for (int i = -b->o.warmup; i < b->o.iters && st == WEFT_OK; i++) {
        weft_barrier(b->w.world);
        t0 = perf_now_us();
        st = weft_migrate(b->w.world, plan, oldbuf, newbuf, NULL);
        double us = perf_slowest(&b->w, perf_now_us() - t0);
        if (i >= 0) {
            v[i] = us;
        }
    }
    if (st != WEFT_OK) {
        perf_report_error(&b->w, "weft_migrate", st);
        return PERF_EXIT_ERROR;
    }
    res->time_us = perf_median(v, b->o.iters);
    res->wrong = -1;
    if (b->baselines) {
        for (int i = 0; i < b->o.iters; i++) {
            memset(ref, 0, nb);
            v[i] = allgather_slice(b, s, ids, oldbuf, ref);
        }
        res->gather_us = perf_median(v, b->o.iters);
        long wrong = 0;
        for (size_t k = 0; k < nb; k++) {
            wrong += newbuf[k] != ref[k];
        }
        weft_allreduce(b->w.world, &wrong, &res->wrong, 1, WEFT_I64, WEFT_SUM);
        int runs = b->o.iters < 3 ? b->o.iters : 3; /* files are slow: a few runs */
        for (int i = 0; i < runs; i++) {
            memset(ref, 0, nb);
            v[i] = file_reload(b, s, ids, oldbuf, ref);
            for (size_t k = 0; k < nb; k++) {
                v[i] = newbuf[k] != ref[k] ? -1 : v[i];
            }
        }
        res->file_us = perf_median(v, runs);
    }
    free(v);
    perf_free(oldbuf);
    perf_free(newbuf);
    perf_free(ref);
    weft_plan_free(plan);
    return res->wrong > 0 ? PERF_EXIT_WRONG : PERF_EXIT_OK;
}

int perf_migrate_main(int argc, char **argv)
{
    mig_bench_t b;
    memset(&b, 0, sizeof(b));
    perf_opts_default(&b.o);
    b.o.uses = PERF_USE_ITERS | PERF_USE_WARMUP | PERF_USE_JSON;
    b.o.iters = 5;
    b.o.warmup = 1;
    b.model_bytes = 256u << 20;
    b.gap_us = 100;
    b.baselines = true;
    b.only = "all";
    const char *tmp = getenv("TMPDIR");
    snprintf(b.tmpdir, sizeof(b.tmpdir), "%s", tmp != NULL && *tmp ? tmp : "/tmp");
    int rc = perf_parse_opts(argc, argv, &b.o, "migrate", extras,
                             sizeof(extras) / sizeof(extras[0]), on_extra, &b);
    if (rc != PERF_CONTINUE) {
        return rc == PERF_BAD ? PERF_EXIT_USAGE : PERF_EXIT_OK;
    }
    if (perf_world_open(&b.w) != 0) {
        return PERF_EXIT_ERROR;
    }
    if (b.w.size > MAX_RANKS) {
        if (b.w.rank == 0) {
            fprintf(stderr, "weft-perf migrate: at most %d ranks\n", MAX_RANKS);
        }
        perf_world_close(&b.w);
        return PERF_EXIT_USAGE;
    }
    for (int r = 0; r < b.w.size; r++) {
        weft_group_member_id(b.w.world, r, &b.ids[r]);
    }
    static const char *const kinds[MAX_SCEN] = {"zero-shrink", "zero-grow", "tp", "pipeline",
                                                "handover"};
    bool print = b.w.rank == 0;
    if (b.o.json && print && !b.dry_run) {
        printf("{\n  \"subcommand\": \"migrate\",\n  \"ranks\": %d,\n  \"scenarios\": [", b.w.size);
    } else if (print && !b.dry_run) {
        printf("# weft-perf migrate: %d ranks, median of %d runs (file-reload: of up to 3)\n"
               "# %-14s %12s %12s %10s %9s %12s %12s %8s %12s %8s %7s\n",
               b.w.size, b.o.iters, "scenario", "bytes_moved", "lower_bound", "time(us)", "GB/s",
               "plan(us)", "allg+slice", "ratio", "file_reload", "ratio", "#wrong");
    }
    int worst = PERF_EXIT_OK, printed = 0;
    for (int i = 0; i < MAX_SCEN; i++) {
        bool all = strcmp(b.only, "all") == 0;
        if ((!all && strcmp(b.only, kinds[i]) != 0) || (all && strcmp(kinds[i], "handover") == 0)) {
            continue;
        }
        scenario_t s;
        result_t r;
        if (mig_build(&b, kinds[i], &s) != 0) {
            weft_layout_free(s.old);
            weft_layout_free(s.new);
            continue;
        }
        rc = run_scenario(&b, &s, &r);
        worst = rc > worst ? rc : worst;
        weft_layout_free(s.old);
        weft_layout_free(s.new);
        double stream_us = 0;
        if (strcmp(kinds[i], "handover") == 0 && !b.dry_run && rc != PERF_EXIT_ERROR) {
            stream_us = mig_stream_baseline(&b, r.moved, b.o.iters);
        }
        if (!print || b.dry_run || rc == PERF_EXIT_ERROR) {
            continue;
        }
        if (b.o.json) {
            printf("%s\n    {\"name\": \"%s\", \"ranks\": %d, \"bytes_moved\": %zu, "
                   "\"bytes_lower_bound\": %zu, \"bytes_local\": %zu, \"time_us\": %.1f, "
                   "\"plan_us\": %.1f, \"allgather_slice_us\": %.1f, \"file_reload_us\": %.1f, "
                   "\"wrong\": %ld}",
                   printed++ ? "," : "", r.name, b.w.size, r.moved, r.lower, r.local, r.time_us,
                   r.plan_us, r.gather_us, r.file_us, r.wrong);
        } else {
            printf("  %-14s %12zu %12zu %10.0f %9.2f %12.0f %12.0f %8.2f %12.0f %8.2f %7ld\n",
                   r.name, r.moved, r.lower, r.time_us, perf_gbs(r.moved, r.time_us), r.plan_us,
                   r.gather_us, r.gather_us / r.time_us, r.file_us, r.file_us / r.time_us, r.wrong);
        }
        if (stream_us > 0 && !b.o.json) {
            printf(
                "#   the same bytes as plain weft_isend/irecv of %zu B messages, 4 in flight, no "
                "checksums: %.0f us, %.2f GB/s; migration / plain %.2f\n",
                mig_chunk_setting(&b), stream_us, perf_gbs(r.moved, stream_us),
                perf_gbs(r.moved, r.time_us) / perf_gbs(r.moved, stream_us));
        }
    }
    if (b.o.json && print && !b.dry_run) {
        printf("\n  ]");
    }
    if (b.overlap && !b.dry_run) {
        mig_overlap(&b, stdout, b.o.json && print);
    }
    if (b.step_ms > 0 && !b.dry_run) {
        mig_background_step(&b, stdout, b.o.json && print);
    }
    if (b.o.json && print && !b.dry_run) {
        printf("\n}\n");
    }
    perf_world_close(&b.w);
    return worst;
}
