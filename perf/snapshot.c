/*
 * weft-perf snapshot: what in-memory snapshots cost a training loop, and what they save
 * when a rank dies, against restarting from a file checkpoint, in one run.
 *
 * Run under `weftrun -n N --elastic -- weft-perf snapshot`. The state is a flat (ZeRO)
 * partition of --state-bytes per rank: 4 i64 tensors, word g of the whole state holding
 * word g of a fixed pattern, and one word in every 64 KiB also the step that last wrote
 * it (so a restore of the wrong step, or of the live state, is caught).
 *   copy     a snapshot started and waited for at once: the slowest rank, median of up to 5
 *   step     a training step: the caller sleeps --step-ms (an emulated GPU step: the GPU
 *            computes, the CPU waits for it), an 8 B allreduce, then the step writes the
 *            state. Without snapshots, and with one started after each step; the next
 *            step waits for it before it writes the state, so that the copies run in the
 *            background during its compute. Blocks of steps without and with alternate,
 *            so that drift of the machine falls on both; each rank's median step, the
 *            slowest rank's.
 *   recover  after step S is committed (and written to files, below) the state moves on,
 *            then the last rank notes the time and kills itself (SIGKILL) while the others
 *            loop on the allreduce. The survivors measure detect (the failing allreduce)
 *            + weft_group_repair + weft_snapshot_restore of a flat re-cut over themselves,
 *            from the kill to the last survivor's restore, and check every restored word,
 *            the step and the dead rank's blob against step S.
 *   file     the baseline: at step S every rank also wrote its shard to a file in --tmpdir
 *            and fsynced it. After the recovery the survivors drop the files from the
 *            page cache (POSIX_FADV_DONTNEED), then each re-reads the byte ranges its part
 *            of the re-cut needs, checked like the restore (file_restart_us: the
 *            re-reading only).
 *   keep     after the same kill (snapshot_live.c), from the copies again, into the
 *            re-cut that keeps each survivor's shard and gives each a part of the dead
 *            rank's (weft_layout_absorb): own shards are local copies, only the dead
 *            rank's moves between ranks (recover_keep_us).
 *   live     then the failure that came before the state moved on: the survivors restore
 *            from their live buffers into the same re-cut, in place, and only the dead
 *            rank's shard moves (recover_live_us).
 *   job      what else a restart from files needs: the survivors start as many fresh
 *            processes of a new job (exec, weft_init, the rendezvous, a first allreduce;
 *            snapshot_restart.c). file_restart_full_us = detect_us + job_start_us +
 *            file_restart_us: the failure must be detected and the job restarted too.
 * Both write into a buffer allocated and touched before the kill (a trainer keeps one
 * ready: its size after losing one rank is known), so neither pays its page faults.
 * The state and that buffer come from weft_mem_alloc (huge pages: the killed rank's
 * memory is freed, and its death seen, sooner); --small-pages keeps them on 4 KiB pages.
 * The files are always read into 4 KiB pages, the faster target for buffered reads.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "snapshot.h"

static const perf_extra_opt_t extras[] = {
    {"--state-bytes", true, "BYTES",
     "state per rank (default 256M; 64M-1G to measure, from 64K for tests; a multiple of 64K)"},
    {"--step-ms", true, "MS|auto",
     "the emulated GPU step (default 50; auto: ten times the snapshot copy time)"},
    {"--no-kill", false, NULL, "only the overhead: no rank dies (runs without weftrun --elastic)"},
    {"--tmpdir", true, "DIR",
     "where the file checkpoint and the SSD tier go (default $TMPDIR or /tmp)"},
    {"--small-pages", false, NULL,
     "keep the state and the restore buffer on 4 KiB pages (posix_memalign) instead of "
     "weft_mem_alloc's huge pages: a killed rank's memory then takes longer to free"},
    {"--ssd", false, NULL,
     "also write snapshots to an SSD directory in --tmpdir, against sequential O_DIRECT "
     "writes there, and report the bytes a second, unchanged snapshot writes"},
};

static int on_extra(void *arg, const char *name, const char *val)
{
    snap_bench_t *b = arg;
    if (strcmp(name, "--state-bytes") == 0) {
        return perf_parse_size(val, &b->state_bytes) != 0 || b->state_bytes < (64u << 10) ||
               b->state_bytes > (1u << 30) || b->state_bytes % (64u << 10) != 0;
    }
    if (strcmp(name, "--step-ms") == 0) {
        if (strcmp(val, "auto") == 0) {
            b->step_ms = -1;
            return 0;
        }
        return perf_parse_int(val, 0, 3600000, &b->step_ms) != 0;
    }
    if (strcmp(name, "--tmpdir") == 0) {
        snprintf(b->tmpdir, sizeof(b->tmpdir), "%s", val);
        return 0;
    }
    if (strcmp(name, "--no-kill") == 0) {
        b->kill = false;
    }
    b->ssd |= strcmp(name, "--ssd") == 0;
    b->small_pages |= strcmp(name, "--small-pages") == 0;
    return 0;
}

static void print_notes(FILE *out)
{
    fprintf(out,
            "\nRun under 'weftrun -n N --elastic' (N >= 2). A step is --step-ms of sleep (an\n"
            "emulated GPU step) and an 8 B allreduce; with snapshots, one starts after each\n"
            "step and the next step waits for it before it writes the state. Then the last\n"
            "rank kills itself after a committed snapshot: the survivors detect, repair and\n"
            "restore a flat re-cut of the state over themselves (recover_us), side by side\n"
            "with re-reading a file checkpoint of the same step after dropping it from the\n"
            "page cache (file_restart_us: the re-reading only), and the full restart from\n"
            "files (file_restart_full_us: the same detection, a fresh job of as many ranks\n"
            "started, initialised and rendezvoused, job_start_us, and the re-reading).\n"
            "After the same kill, the restore when the failure came before the state moved on:\n"
            "the survivors' live buffers hold the committed step, and with\n"
            "weft_snapshot_restore_live each keeps its shard in place and receives a part of\n"
            "the dead rank's (recover_live_us = detect_us + repair_us + restore_live_us);\n"
            "and from the copies into that same re-cut (weft_layout_absorb), own shards\n"
            "copied locally (recover_keep_us).\n"
            "Every restored word is checked. -n: timed steps of each kind (default 20); -w:\n"
            "untimed steps first (default 2).\n"
            "--json: ranks, state_bytes_per_rank, step_ms, step_us, step_with_snapshot_us,\n"
            "overhead, snapshot_copy_us, recover_us (detect_us + repair_us + restore_us),\n"
            "file_restart_us, file_restart_over_recover, job_start_us,\n"
            "file_restart_full_us, file_restart_full_over_recover, restore_live_us,\n"
            "recover_live_us, restore_live_bytes_moved/_local/_in_place, restore_live_wrong,\n"
            "file_restart_over_recover_live, file_restart_full_over_recover_live, the same\n"
            "_keep keys, verified;\n"
            "with --ssd also\n"
            "ssd_write_gbs (all ranks writing a snapshot to their SSD directories at once),\n"
            "dir_seq_write_gbs (the same bytes as sequential O_DIRECT 1 MiB writes to the same\n"
            "directory, fdatasync; medians of two rounds, each order once),\n"
            "first_snapshot_bytes_written and second_snapshot_bytes_written (the same state\n"
            "again: only the blobs change); null without --ssd.\n");
}

/* ---- the state ---- */

/* The trainer's state and restore buffers: weft_mem_alloc (huge pages), or 4 KiB pages
 * with --small-pages. */
static void *state_alloc(const snap_bench_t *b, size_t bytes)
{
    void *p = NULL;
    if (b->small_pages) {
        return perf_alloc(bytes);
    }
    return weft_mem_alloc(bytes, &p) == WEFT_OK ? p : NULL;
}

static void state_free(const snap_bench_t *b, void *p, size_t bytes)
{
    if (b->small_pages) {
        perf_free(p);
    } else {
        weft_mem_free(p, bytes);
    }
}

/* Word @p g of the whole state as step @p step left it. */
static uint64_t word_at(uint64_t g, uint64_t step)
{
    uint64_t v = perf_pattern_word(STATE_SEED, g);
    return g % MARK_EVERY == 0 ? v ^ (step * UINT64_C(0x9e3779b97f4a7c15) + 1) : v;
}

uint64_t snap_word_at(uint64_t g, uint64_t step)
{
    return word_at(g, step);
}

/* What a training step changes: the step's mark in this rank's shard. */
static void mark(snap_bench_t *b, uint64_t step)
{
    for (size_t i = (MARK_EVERY - b->first % MARK_EVERY) % MARK_EVERY; i < b->words;
         i += MARK_EVERY) {
        b->state[i] = word_at(b->first + i, step);
    }
}

/* Words of @p buf (words @p g0 .. g0+n-1 of the whole state) that differ from @p step's. */
static long count_wrong(const uint64_t *buf, uint64_t g0, size_t n, uint64_t step)
{
    long wrong = 0;
    for (size_t i = 0; i < n; i++) {
        wrong += buf[i] != word_at(g0 + i, step);
    }
    return wrong;
}

/* The whole state cut flat over @p members (@p k of them). */
static weft_layout_t *model(const snap_bench_t *b, const int *members, int k)
{
    uint64_t rows = (uint64_t)b->n0 * b->words / ROW_WORDS;
    weft_layout_t *l;
    int t[NTENSORS];
    if (weft_layout_create(&l) != WEFT_OK) {
        return NULL;
    }
    for (int i = 0; i < NTENSORS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "state%d", i);
        uint64_t shape[2] = {rows / NTENSORS + ((uint64_t)i < rows % NTENSORS), ROW_WORDS};
        weft_layout_add_tensor(l, name, WEFT_I64, 2, shape, &t[i]);
    }
    if (weft_layout_flat(l, t, NTENSORS, members, k) != WEFT_OK) {
        weft_layout_free(l);
        return NULL;
    }
    return l;
}

/* ---- steps and snapshots ---- */

static void sleep_us(long us)
{
    struct timespec ts = {(time_t)(us / 1000000), (us % 1000000) * 1000};
    while (us > 0 && nanosleep(&ts, &ts) != 0) {
    }
}

static weft_status_t snapshot_start(snap_bench_t *b, uint64_t step, weft_req_t **req)
{
    int me;
    weft_group_member_id(b->w.world, b->w.rank, &me);
    snap_blob_t blob = {step, me};
    *req = NULL;
    weft_status_t st = weft_snapshot_start(b->snap, step, b->state, &blob, sizeof(blob), req);
    return st == WEFT_INPROGRESS ? WEFT_OK : st;
}

static weft_status_t snapshot_wait(weft_req_t **req)
{
    weft_status_t st = *req != NULL ? weft_wait(*req, WEFT_TIMEOUT_DEFAULT) : WEFT_OK;
    weft_req_free(*req);
    *req = NULL;
    return st;
}

/* The allreduce that ends a step; its sum is checked, so a lost rank cannot go unseen. */
static weft_status_t step_allreduce(weft_group_t *g)
{
    int size;
    weft_group_size(g, &size);
    int64_t one = 1, sum = 0;
    weft_status_t st = weft_allreduce(g, &one, &sum, 1, WEFT_I64, WEFT_SUM);
    return st == WEFT_OK && sum != size ? WEFT_ERR_MISMATCH : st;
}

/* A training step: the GPU computes (the caller sleeps), the gradients are reduced, then
 * the optimizer writes the state, which a snapshot still reading it must not see: the
 * previous step's snapshot (@p req, if any) is waited for first. */
static weft_status_t train_step(snap_bench_t *b, uint64_t step, weft_req_t **req)
{
    sleep_us(b->step_ms * 1000);
    weft_status_t st = step_allreduce(b->w.world);
    weft_status_t wst = req != NULL ? snapshot_wait(req) : WEFT_OK;
    if (st == WEFT_OK && wst == WEFT_OK) {
        mark(b, step);
    }
    return st != WEFT_OK ? st : wst;
}

/* @p n timed steps with a snapshot started after each, or without; their times go to
 * @p t. With snapshots a first, untimed step starts one, so that every timed step waits
 * for its predecessor's; the last one is waited for after the block. */
static weft_status_t run_block(snap_bench_t *b, bool with, int n, double *t)
{
    weft_req_t *req = NULL;
    weft_status_t st = WEFT_OK;
    for (int i = with ? -1 : 0; i < n && st == WEFT_OK; i++) {
        double t0 = perf_now_us();
        st = train_step(b, ++b->step, &req);
        if (st == WEFT_OK && with) {
            st = snapshot_start(b, b->step, &req);
        }
        if (i >= 0) {
            t[i] = perf_now_us() - t0;
        }
    }
    weft_status_t wst = snapshot_wait(&req);
    return st != WEFT_OK ? st : wst;
}

/* A snapshot started and waited for at once; two untimed ones first touch both copy
 * buffers. */
static weft_status_t copy_time(snap_bench_t *b, snap_result_t *r)
{
    int runs = b->o.iters < 5 ? b->o.iters : 5;
    double v[5];
    weft_status_t st = WEFT_OK;
    for (int i = -2; i < runs && st == WEFT_OK; i++) {
        weft_req_t *req = NULL;
        weft_barrier(b->w.world);
        double t0 = perf_now_us();
        st = snapshot_start(b, ++b->step, &req);
        weft_status_t wst = snapshot_wait(&req);
        st = st != WEFT_OK ? st : wst;
        double us = perf_slowest(&b->w, perf_now_us() - t0);
        if (i >= 0) {
            v[i] = us;
        }
    }
    r->copy_us = st == WEFT_OK ? perf_median(v, runs) : -1;
    return st;
}

/* Steps without and with snapshots, in alternating blocks (two of each from -n 4 up). */
static weft_status_t overhead(snap_bench_t *b, snap_result_t *r)
{
    int n = b->o.iters, blocks = n >= 4 ? 2 : 1, done = 0;
    double *without = calloc((size_t)n, sizeof(double));
    double *with = calloc((size_t)n, sizeof(double));
    double *scratch = calloc((size_t)b->o.warmup + 1, sizeof(double));
    if (without == NULL || with == NULL || scratch == NULL) {
        free(without);
        free(with);
        free(scratch);
        return WEFT_ERR_NO_MEMORY;
    }
    weft_status_t st = run_block(b, false, b->o.warmup, scratch);
    for (int k = 0; k < blocks && st == WEFT_OK; k++) {
        int m = k == blocks - 1 ? n - done : n / blocks;
        st = run_block(b, false, m, without + done);
        if (st == WEFT_OK) {
            st = run_block(b, true, m, with + done);
        }
        done += m;
    }
    double med[2] = {perf_median(without, n), perf_median(with, n)}, out[2];
    weft_allreduce(b->w.world, med, out, 2, WEFT_F64, WEFT_MAX);
    r->step_us = out[0];
    r->step_snap_us = out[1];
    r->steps = n;
    free(without);
    free(with);
    free(scratch);
    return st;
}

/* ---- the file checkpoint ---- */

static void file_path(const snap_bench_t *b, const char *what, char *buf, size_t len)
{
    /* One name per job: the store's port (the job token is secret). */
    const char *store = getenv("WEFT_STORE");
    const char *job = store != NULL && strrchr(store, ':') != NULL ? strrchr(store, ':') + 1 : "x";
    snprintf(buf, len, "%s/weft-perf-snapshot.%.12s.%s", b->tmpdir, job, what);
}

static void shard_path(const snap_bench_t *b, int index, char *buf, size_t len)
{
    char what[16];
    snprintf(what, sizeof(what), "%d", index);
    file_path(b, what, buf, len);
}

/* Every rank writes its shard to its file and fsyncs it, then drops it from the cache. */
static weft_status_t write_checkpoint(snap_bench_t *b, snap_result_t *r)
{
    char path[320];
    shard_path(b, b->w.rank, path, sizeof(path));
    weft_barrier(b->w.world);
    double t0 = perf_now_us();
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    size_t len = b->words * 8, put = 0;
    while (fd >= 0 && put < len) {
        ssize_t n = write(fd, (const char *)b->state + put, len - put);
        if (n <= 0) {
            break;
        }
        put += (size_t)n;
    }
    bool ok = fd >= 0 && put == len && fsync(fd) == 0;
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    if (!ok) {
        perror("weft-perf snapshot: writing the file checkpoint");
    }
    int mine = ok, all = 0;
    weft_allreduce(b->w.world, &mine, &all, 1, WEFT_I32, WEFT_MIN);
    r->file_write_us = perf_slowest(&b->w, perf_now_us() - t0);
    return all ? WEFT_OK : WEFT_ERR_IO;
}

static bool pread_all(int fd, void *buf, size_t len, off_t off)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (n <= 0) {
            return false;
        }
        got += (size_t)n;
    }
    return true;
}

/* Words @p g0 .. g0+n-1 of the whole state, read into @p buf from the shards' files after
 * dropping them from the page cache; the reading is timed, then checked. */
static weft_status_t file_restart(snap_bench_t *b, uint64_t g0, size_t n, uint64_t *buf,
                                  snap_result_t *r)
{
    int i0 = (int)(g0 / b->words), i1 = n > 0 ? (int)((g0 + n - 1) / b->words) : i0 - 1;
    char path[320];
    for (int i = i0; i <= i1; i++) {
        shard_path(b, i, path, sizeof(path));
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    weft_barrier(b->w.world);
    double t0 = perf_now_us();
    bool ok = true;
    for (int i = i0; i <= i1 && ok; i++) {
        uint64_t lo = g0 > (uint64_t)i * b->words ? g0 : (uint64_t)i * b->words;
        uint64_t hi = g0 + n < (uint64_t)(i + 1) * b->words ? g0 + n : (uint64_t)(i + 1) * b->words;
        shard_path(b, i, path, sizeof(path));
        int fd = open(path, O_RDONLY);
        ok = fd >= 0 && pread_all(fd, buf + (lo - g0), (hi - lo) * 8,
                                  (off_t)((lo - (uint64_t)i * b->words) * 8));
        if (fd >= 0) {
            close(fd);
        }
    }
    double us = perf_now_us() - t0;
    if (!ok) {
        perror("weft-perf snapshot: reading the file checkpoint");
    }
    long wrong = ok ? count_wrong(buf, g0, n, r->committed) : (long)n, all = 0;
    weft_allreduce(b->w.world, &wrong, &all, 1, WEFT_I64, WEFT_SUM);
    r->file_wrong = all;
    r->file_restart_us = perf_slowest(&b->w, us);
    int64_t bytes = (int64_t)n * 8, sum = 0;
    weft_allreduce(b->w.world, &bytes, &sum, 1, WEFT_I64, WEFT_SUM);
    r->file_read_bytes = (size_t)sum;
    return WEFT_OK;
}

static void remove_files(const snap_bench_t *b, bool victim_too)
{
    char path[320];
    shard_path(b, b->w.rank, path, sizeof(path));
    unlink(path);
    if (victim_too) {
        shard_path(b, b->n0 - 1, path, sizeof(path));
        unlink(path);
    }
}

/* ---- losing a rank ---- */

/* The victim leaves its clock in a file (a message could be lost with the revoke). */
static void die_now(const snap_bench_t *b)
{
    char path[320];
    file_path(b, "kill", path, sizeof(path));
    FILE *f = fopen(path, "w");
    if (f != NULL) {
        fprintf(f, "%.3f\n", perf_now_us());
        fclose(f);
    }
    fflush(NULL);
    raise(SIGKILL);
}

static double read_kill_time(const snap_bench_t *b)
{
    char path[320];
    double t = -1;
    file_path(b, "kill", path, sizeof(path));
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

/* This member's words of a flat re-cut over the @p k survivors, of which it is @p rank. */
static void recut_range(const snap_bench_t *b, int k, int rank, uint64_t *g0, size_t *n)
{
    uint64_t total = (uint64_t)b->n0 * b->words, q = (total + (uint64_t)k - 1) / (uint64_t)k;
    *g0 = (uint64_t)rank * q < total ? (uint64_t)rank * q : total;
    *n = (size_t)(total - *g0 < q ? total - *g0 : q);
}

/* Restore a flat re-cut over the survivors into @p buf (@p cap bytes, ready: its
 * words are @p g0 .. g0+n-1 of the whole state); *t_done is when the restore returned
 * (checking comes after). Collective over the repaired world. */
static weft_status_t restore(snap_bench_t *b, snap_result_t *r, uint64_t *buf, size_t cap,
                             uint64_t g0, size_t n, double *t_done)
{
    weft_group_t *g = b->w.world;
    int k, rank, left[MAX_RANKS];
    weft_group_size(g, &k);
    weft_group_rank(g, &rank);
    for (int i = 0; i < k; i++) {
        weft_group_member_id(g, i, &left[i]);
    }
    weft_layout_t *nl = model(b, left, k);
    uint64_t h0;
    size_t hn;
    recut_range(b, k, rank, &h0, &hn);
    bool fits = nl != NULL && buf != NULL && weft_snapshot_restore_bytes(b->snap, nl) <= cap &&
                weft_layout_packed_bytes(nl, left[rank]) == n * 8 && h0 == g0 && hn == n;
    /* Refused arguments must reach the restore's agreement, or the others would wait. */
    uint64_t none;
    weft_snapshot_restored_t info = {.size = sizeof(info)};
    weft_status_t st = weft_snapshot_restore(b->snap, nl != NULL ? nl : b->layout,
                                             fits ? (void *)buf : &none, fits ? cap : 0, &info);
    *t_done = perf_now_us();
    weft_layout_free(nl);
    if (st != WEFT_OK) {
        return st;
    }
    int victim = b->ids[b->n0 - 1];
    snap_blob_t vb = {0, -1};
    size_t len = 0;
    bool blob_ok = weft_snapshot_blob(b->snap, victim, &vb, sizeof(vb), &len) == WEFT_OK &&
                   len == sizeof(vb) && vb.step == r->committed && vb.member == victim;
    long wrong = count_wrong(buf, g0, n, r->committed);
    long mine[2] = {wrong, !(blob_ok && info.step == r->committed)}, all[2];
    weft_allreduce(g, mine, all, 2, WEFT_I64, WEFT_SUM);
    r->restore_wrong = all[0];
    r->restored_step = info.step;
    r->moved = info.bytes_moved;
    r->local = info.bytes_local;
    r->missing = info.bytes_missing;
    r->verified = all[0] == 0 && all[1] == 0 && info.bytes_missing == 0;
    r->survivors = k;
    return WEFT_OK;
}

/* Step S committed and written to files, then the last rank dies; the survivors detect,
 * repair and restore, then re-read the files. */
static weft_status_t recover(snap_bench_t *b, snap_result_t *r)
{
    uint64_t s = ++b->step;
    weft_req_t *req = NULL;
    weft_status_t st = train_step(b, s, NULL);
    if (st == WEFT_OK && (st = snapshot_start(b, s, &req)) == WEFT_OK) {
        st = snapshot_wait(&req);
    }
    if (st != WEFT_OK || (st = write_checkpoint(b, r)) != WEFT_OK) {
        return st;
    }
    r->committed = s;
    /* The buffer of this rank's part of the re-cut over the survivors, allocated and
     * touched ahead as a trainer keeps one ready (its size for one lost rank is known):
     * both recovery paths write into it, and neither is timed with its page faults. */
    uint64_t g0 = 0, *buf = NULL;
    size_t n = 0, cap = 0;
    double t0 = perf_now_us();
    if (b->w.rank < b->n0 - 1) {
        recut_range(b, b->n0 - 1, b->w.rank, &g0, &n);
        cap = n * 8 + (size_t)b->n0 * (8 + sizeof(snap_blob_t));
        if ((buf = state_alloc(b, cap)) != NULL) {
            memset(buf, 0, cap);
        }
    }
    /* The live buffer's room for the restore from live buffers, touched likewise. */
    memset((char *)b->state + b->state_bytes, 0, b->state_cap - b->state_bytes);
    r->buffer_us = perf_slowest(&b->w, perf_now_us() - t0);
    mark(b, s + 1); /* the live state moves on: the restore must not see it */
    st = step_allreduce(b->w.world);
    if (b->w.rank == b->n0 - 1) {
        die_now(b);
    }
    while (st == WEFT_OK) {
        st = step_allreduce(b->w.world);
    }
    double t[3]; /* detected, repaired, restored */
    t[0] = perf_now_us();
    weft_edit_info_t info = {.size = sizeof(info)};
    if (st == WEFT_ERR_PEER_FAILED || st == WEFT_ERR_REVOKED) {
        st = weft_group_repair(b->w.world, &info);
    }
    t[1] = perf_now_us();
    if (st == WEFT_OK) {
        st = restore(b, r, buf, cap, g0, n, &t[2]);
    }
    double t_live = 0, t_keep = 0;
    if (st == WEFT_OK) { /* the same, from the copies, into the re-cut that keeps shards */
        st = snap_restore_keep(b, r, &t_keep);
    }
    if (st == WEFT_OK) { /* the failure before the state moved on: undo step s+1's marks */
        mark(b, s);
        st = snap_restore_live(b, r, &t_live);
    }
    if (st == WEFT_OK) {
        /* The files are read into plain pages, touched and poisoned ahead (the path must
         * write every word again): buffered reads into huge-page memory ran at 0.6-2.4
         * GB/s here against 1.5-2.4 GB/s, and the baseline gets its best. */
        uint64_t *fbuf = perf_alloc(n * 8 + 8), *into = fbuf != NULL ? fbuf : buf;
        memset(into, 0xa5, n * 8);
        st = file_restart(b, g0, n, into, r);
        perf_free(fbuf);
    }
    state_free(b, buf, cap);
    if (st != WEFT_OK) {
        return st;
    }
    double last[3];
    weft_allreduce(b->w.world, t, last, 3, WEFT_F64, WEFT_MAX);
    weft_barrier(b->w.world);
    remove_files(b, b->w.rank == 0);
    if (b->w.rank == 0) {
        double t_kill = read_kill_time(b);
        r->detect_us = t_kill > 0 ? last[0] - t_kill : -1;
        r->repair_us = last[1] - last[0];
        r->restore_us = last[2] - last[1];
        r->recover_us = t_kill > 0 ? last[2] - t_kill : -1;
        r->recover_live_us = t_kill > 0 ? r->detect_us + r->repair_us + r->live.us : -1;
        r->recover_keep_us = t_kill > 0 ? r->detect_us + r->repair_us + r->keep.us : -1;
    }
    r->recovered = true;
    return WEFT_OK;
}

/* ---- output ---- */

static void json_us(const char *key, bool have, double v)
{
    if (have) {
        printf(",\n  \"%s\": %.1f", key, v);
    } else {
        printf(",\n  \"%s\": null", key);
    }
}

static void json_ratio(const char *key, bool have, double num, double den)
{
    if (have && den > 0) {
        printf(",\n  \"%s\": %.2f", key, num / den);
    } else {
        printf(",\n  \"%s\": null", key);
    }
}

/* restore_<what>_us, recover_<what>_us, restore_<what>_bytes_moved/_local/_in_place and
 * restore_<what>_wrong. */
static void json_restore(const char *what, bool rec, const snap_restore_t *o, double recover_us)
{
    char key[64];
    snprintf(key, sizeof(key), "restore_%s_us", what);
    json_us(key, rec, o->us);
    snprintf(key, sizeof(key), "recover_%s_us", what);
    json_us(key, rec && recover_us > 0, recover_us);
    if (rec) {
        printf(",\n  \"restore_%s_bytes_moved\": %zu,\n  \"restore_%s_bytes_local\": %zu,"
               "\n  \"restore_%s_bytes_in_place\": %zu,\n  \"restore_%s_wrong\": %ld",
               what, o->moved, what, o->local, what, o->in_place, what, o->wrong);
    }
}

static void report_json(const snap_bench_t *b, const snap_result_t *r)
{
    bool rec = r->recovered;
    printf(
        "{\n  \"subcommand\": \"snapshot\",\n  \"ranks\": %d,\n  \"state_bytes_per_rank\": %zu,\n"
        "  \"snapshot_bytes_per_rank\": %zu,\n  \"step_ms\": %ld,\n  \"steps\": %d",
        b->n0, b->state_bytes, weft_snapshot_bytes(b->snap), b->step_ms, r->steps);
    json_us("snapshot_copy_us", true, r->copy_us);
    json_us("step_us", true, r->step_us);
    json_us("step_with_snapshot_us", true, r->step_snap_us);
    printf(",\n  \"overhead\": %.4f", r->step_snap_us / r->step_us - 1);
    printf(",\n  \"killed\": %s", rec ? "true" : "false");
    if (rec) {
        printf(",\n  \"survivors\": %d,\n  \"committed_step\": %llu,\n  \"restored_step\": %llu,"
               "\n  \"restore_bytes_moved\": %zu,\n  \"restore_bytes_local\": %zu,"
               "\n  \"restore_bytes_missing\": %zu,\n  \"restore_wrong\": %ld,"
               "\n  \"file_read_bytes\": %zu,\n  \"file_restart_wrong\": %ld,\n  \"verified\": %s",
               r->survivors, (unsigned long long)r->committed, (unsigned long long)r->restored_step,
               r->moved, r->local, r->missing, r->restore_wrong, r->file_read_bytes, r->file_wrong,
               r->verified && r->live.verified && r->keep.verified && r->file_wrong == 0
                   ? "true"
                   : "false");
    }
    json_us("detect_us", rec && r->detect_us >= 0, r->detect_us);
    json_us("repair_us", rec, r->repair_us);
    json_us("buffer_us", rec, r->buffer_us);
    json_us("restore_us", rec, r->restore_us);
    json_us("recover_us", rec && r->recover_us > 0, r->recover_us);
    json_us("file_write_us", rec, r->file_write_us);
    json_us("file_restart_us", rec, r->file_restart_us);
    json_ratio("file_restart_over_recover", rec, r->file_restart_us, r->recover_us);
    bool full = rec && r->detect_us >= 0 && r->job_start_us >= 0;
    double full_us = r->detect_us + r->job_start_us + r->file_restart_us;
    json_restore("live", rec, &r->live, r->recover_live_us);
    json_restore("keep", rec, &r->keep, r->recover_keep_us);
    json_us("job_start_us", rec && r->job_start_us >= 0, r->job_start_us);
    json_us("file_restart_full_us", full, full_us);
    json_ratio("file_restart_full_over_recover", full, full_us, r->recover_us);
    json_ratio("file_restart_over_recover_live", rec, r->file_restart_us, r->recover_live_us);
    json_ratio("file_restart_full_over_recover_live", full, full_us, r->recover_live_us);
    json_ratio("file_restart_over_recover_keep", rec, r->file_restart_us, r->recover_keep_us);
    json_ratio("file_restart_full_over_recover_keep", full, full_us, r->recover_keep_us);
    if (r->have_ssd) {
        printf(",\n  \"ssd_write_gbs\": %.3f,\n  \"dir_seq_write_gbs\": %.3f,"
               "\n  \"first_snapshot_bytes_written\": %llu,"
               "\n  \"second_snapshot_bytes_written\": %llu\n}\n",
               r->ssd_gbs, r->seq_gbs, (unsigned long long)r->first_written,
               (unsigned long long)r->second_written);
    } else { /* without --ssd */
        printf(",\n  \"ssd_write_gbs\": null,\n  \"dir_seq_write_gbs\": null,"
               "\n  \"first_snapshot_bytes_written\": null,"
               "\n  \"second_snapshot_bytes_written\": null\n}\n");
    }
}

static void table_restore(const snap_restore_t *o)
{
    printf("  %.1f MiB moved between ranks, %.1f MiB copied within, %.1f MiB left in place, %ld "
           "wrong words\n",
           (double)o->moved / (1 << 20), (double)(o->local - o->in_place) / (1 << 20),
           (double)o->in_place / (1 << 20), o->wrong);
}

static void table_ratio(const char *what, double recover_us, double file_us, bool full,
                        double full_us)
{
    if (recover_us > 0) {
        printf("# file restart / recover %s: %.1fx (re-reading only)", what,
               file_us / recover_us);
        if (full) {
            printf(", %.1fx (full restart)", full_us / recover_us);
        }
        printf("\n");
    }
}

static void report_table(const snap_bench_t *b, const snap_result_t *r)
{
    char sz[32], all[32];
    perf_format_size(b->state_bytes, sz, sizeof(sz));
    perf_format_size(b->state_bytes * (size_t)b->n0, all, sizeof(all));
    printf("# weft-perf snapshot: %d ranks, %s of state per rank (a flat partition of %s), "
           "one buddy copy; copy buffers %.1f MiB per rank\n",
           b->n0, sz, all, (double)weft_snapshot_bytes(b->snap) / (1 << 20));
    printf("# snapshot started and waited for at once: %.0f us (slowest rank, median)\n",
           r->copy_us);
    printf("# training step = %ld ms emulated GPU step (sleep) + 8 B allreduce; median of %d "
           "steps each, slowest rank\n",
           b->step_ms, r->steps);
    printf("  %-28s %12.0f us\n", "without snapshots", r->step_us);
    printf("  %-28s %12.0f us   overhead %+.2f%%\n", "with a snapshot after each", r->step_snap_us,
           100 * (r->step_snap_us / r->step_us - 1));
    if (r->have_ssd) {
        printf("# SSD tier: snapshots written at %.2f GB/s, sequential O_DIRECT writes to the "
               "same directory %.2f GB/s: %.2fx; a second, unchanged snapshot wrote %llu B "
               "against %llu B\n",
               r->ssd_gbs, r->seq_gbs, r->ssd_gbs / r->seq_gbs,
               (unsigned long long)r->second_written, (unsigned long long)r->first_written);
    }
    if (!r->recovered) {
        return;
    }
    char read[32];
    perf_format_size(r->file_read_bytes, read, sizeof(read));
    printf("# time to recover: rank %d killed (SIGKILL) after step %llu was committed; "
           "%d survivors\n",
           b->n0 - 1, (unsigned long long)r->committed, r->survivors);
    printf("  detect %.0f us + repair %.0f us + restore %.0f us = %.0f us\n", r->detect_us,
           r->repair_us, r->restore_us, r->recover_us);
    printf("  restored step %llu: %.1f MiB moved between ranks, %.1f MiB copied within, %zu B "
           "missing, %ld wrong words\n",
           (unsigned long long)r->restored_step, (double)r->moved / (1 << 20),
           (double)r->local / (1 << 20), r->missing, r->restore_wrong);
    printf("# time to recover when the failure came before the state moved on (live buffers "
           "hold step %llu)\n",
           (unsigned long long)r->committed);
    printf("  detect %.0f us + repair %.0f us + restore from live buffers %.0f us = %.0f us\n",
           r->detect_us, r->repair_us, r->live.us, r->recover_live_us);
    table_restore(&r->live);
    printf("# time to recover from the copies (the state had moved on) into the re-cut that "
           "keeps each survivor's shard (weft_layout_absorb)\n");
    printf("  detect %.0f us + repair %.0f us + restore from copies %.0f us = %.0f us\n",
           r->detect_us, r->repair_us, r->keep.us, r->recover_keep_us);
    table_restore(&r->keep);
    printf("# restart from a file checkpoint of the same step (written with fsync in %.0f us)\n",
           r->file_write_us);
    printf("  re-reading %s after dropping the page cache: %.0f us, %ld wrong words\n", read,
           r->file_restart_us, r->file_wrong);
    bool full = r->detect_us >= 0 && r->job_start_us >= 0;
    double full_us = r->detect_us + r->job_start_us + r->file_restart_us;
    if (full) {
        printf("  full restart: detect %.0f us + a fresh job of %d ranks (start, init, "
               "rendezvous) %.0f us + re-reading %.0f us = %.0f us\n",
               r->detect_us, r->survivors, r->job_start_us, r->file_restart_us, full_us);
    }
    printf(
        "# both wrote into a buffer made ready before the kill (%.0f us to allocate and touch)\n",
        r->buffer_us);
    table_ratio("(flat re-cut, from the copies)", r->recover_us, r->file_restart_us, full, full_us);
    table_ratio("(re-cut keeping shards, from the copies)", r->recover_keep_us, r->file_restart_us,
                full, full_us);
    table_ratio("(re-cut keeping shards, from live buffers)", r->recover_live_us,
                r->file_restart_us, full, full_us);
}

/* ---- main ---- */

static int setup(snap_bench_t *b)
{
    b->n0 = b->w.size;
    b->words = b->state_bytes / 8;
    b->first = (uint64_t)b->w.rank * b->words;
    for (int r = 0; r < b->n0; r++) {
        weft_group_member_id(b->w.world, r, &b->ids[r]);
    }
    b->layout = model(b, b->ids, b->n0);
    b->state_cap = b->state_bytes;
    if (b->layout != NULL && b->n0 > 1) { /* room for the restore from live buffers */
        weft_layout_t *t = snap_live_target(b, b->ids, b->n0 - 1);
        size_t need = t != NULL ? weft_layout_packed_bytes(t, b->ids[b->w.rank]) +
                                      (size_t)b->n0 * (8 + sizeof(snap_blob_t))
                                : 0;
        b->state_cap = need > b->state_cap ? need : b->state_cap;
        weft_layout_free(t);
    }
    b->state = state_alloc(b, b->state_cap);
    if (b->state == NULL || b->layout == NULL) {
        fprintf(stderr, "weft-perf snapshot: out of memory\n");
        return PERF_EXIT_ERROR;
    }
    for (size_t i = 0; i < b->words; i++) {
        b->state[i] = word_at(b->first + i, 0);
    }
    weft_status_t st =
        weft_snapshot_create(b->w.world, b->layout, sizeof(snap_blob_t), NULL, &b->snap);
    if (st != WEFT_OK) {
        perf_report_error(&b->w, "weft_snapshot_create", st);
        return PERF_EXIT_ERROR;
    }
    return PERF_EXIT_OK;
}

static int run(snap_bench_t *b)
{
    snap_result_t r;
    memset(&r, 0, sizeof(r));
    int rc = setup(b);
    if (rc != PERF_EXIT_OK) {
        return rc;
    }
    weft_status_t st = copy_time(b, &r);
    if (st != WEFT_OK) {
        perf_report_error(&b->w, "snapshot", st);
        return PERF_EXIT_ERROR;
    }
    if (b->step_ms < 0) { /* every rank has the same (slowest) copy time */
        b->step_ms = (long)(10 * r.copy_us / 1000) + 1;
    }
    if (b->ssd && (st = snap_measure_ssd(b, &r)) != WEFT_OK) {
        perf_report_error(&b->w, "SSD tier", st);
        return PERF_EXIT_ERROR;
    }
    if ((st = overhead(b, &r)) != WEFT_OK) {
        perf_report_error(&b->w, "training steps", st);
        return PERF_EXIT_ERROR;
    }
    if (b->kill && (st = recover(b, &r)) != WEFT_OK) {
        perf_report_error(&b->w, "recovery", st);
        remove_files(b, false);
        return PERF_EXIT_ERROR;
    }
    if (b->kill && (st = snap_measure_job_start(b, &r)) != WEFT_OK) {
        perf_report_error(&b->w, "a fresh job's start", st);
        return PERF_EXIT_ERROR;
    }
    if (b->w.rank == 0) {
        if (b->o.json) {
            report_json(b, &r);
        } else {
            report_table(b, &r);
        }
        fflush(stdout);
    }
    bool bad = r.recovered &&
               (!r.verified || !r.live.verified || !r.keep.verified || r.file_wrong != 0);
    return bad ? PERF_EXIT_WRONG : PERF_EXIT_OK;
}

int perf_snapshot_main(int argc, char **argv)
{
    if (snap_is_fresh_rank()) {
        return snap_fresh_rank_main();
    }
    snap_bench_t b;
    memset(&b, 0, sizeof(b));
    perf_opts_default(&b.o);
    b.o.uses = PERF_USE_ITERS | PERF_USE_WARMUP | PERF_USE_JSON;
    b.o.warmup = 2;
    b.state_bytes = 256u << 20;
    b.step_ms = 50;
    b.kill = true;
    const char *tmp = getenv("TMPDIR");
    snprintf(b.tmpdir, sizeof(b.tmpdir), "%s", tmp != NULL && *tmp ? tmp : "/tmp");
    int rc = perf_parse_opts(argc, argv, &b.o, "snapshot", extras,
                             sizeof(extras) / sizeof(extras[0]), on_extra, &b);
    if (rc == PERF_HELP) {
        print_notes(stdout);
    }
    if (rc != PERF_CONTINUE) {
        return rc == PERF_BAD ? PERF_EXIT_USAGE : PERF_EXIT_OK;
    }
    if (b.kill && !perf_need_token("snapshot", "the file restart's fresh job", "--no-kill")) {
        return PERF_EXIT_USAGE;
    }
    if (perf_world_open(&b.w) != 0) {
        return PERF_EXIT_ERROR;
    }
    if (b.w.size > MAX_RANKS || (b.kill && b.w.size < 2)) {
        if (b.w.rank == 0) {
            fprintf(stderr, "weft-perf snapshot: 2 to %d ranks (1 with --no-kill)\n", MAX_RANKS);
        }
        perf_world_close(&b.w);
        return PERF_EXIT_USAGE;
    }
    rc = run(&b);
    weft_snapshot_free(b.snap);
    weft_layout_free(b.layout);
    state_free(&b, b.state, b.state_cap);
    perf_world_close(&b.w);
    return rc;
}
