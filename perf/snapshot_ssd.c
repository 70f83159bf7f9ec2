/*
 * weft-perf snapshot --ssd: the SSD tier against the directory's own sequential write
 * speed, in the same run. In each of two rounds (one in each order) every rank, at once:
 *   snapshot  a snapshot object with ssd_dir in a fresh directory takes the state (step
 *             1), then the same state again (step 2): the first write's bytes over the
 *             slowest rank's time from commit to durable give ssd_write_gbs, the second's
 *             bytes show the deduplication;
 *   sequential the same number of bytes as 1 MiB O_DIRECT writes to one file per rank in
 *             the same filesystem, then fdatasync: dir_seq_write_gbs (`dd oflag=direct`).
 * Medians of the two rounds.
 */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot.h"

#define SEQ_BLOCK (1u << 20)

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static uint64_t sum(const snap_bench_t *b, uint64_t v)
{
    int64_t in = (int64_t)v, out = 0;
    weft_allreduce(b->w.world, &in, &out, 1, WEFT_I64, WEFT_SUM);
    return (uint64_t)out;
}

/* One snapshot object on an SSD directory: two steps of the same state. */
static weft_status_t ssd_round(snap_bench_t *b, const char *dir, double *gbs, uint64_t *first,
                               uint64_t *second)
{
    weft_snapshot_params_t sp = {.size = sizeof(sp), .ssd_dir = dir};
    weft_snapshot_t *s = NULL;
    weft_status_t st = weft_snapshot_create(b->w.world, b->layout, 16, &sp, &s);
    weft_snapshot_stats_t one = {.size = sizeof(one)}, two = {.size = sizeof(two)};
    for (uint64_t step = 1; step <= 2 && st == WEFT_OK; step++) {
        weft_req_t *req = NULL;
        st = weft_snapshot_start(s, step, b->state, &step, sizeof(step), &req);
        if (st == WEFT_INPROGRESS) {
            st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
        }
        weft_req_free(req);
        weft_snapshot_stats(s, step == 1 ? &one : &two);
    }
    if (st == WEFT_OK && (one.ssd_status != WEFT_OK || two.ssd_status != WEFT_OK)) {
        fprintf(stderr, "weft-perf snapshot: the SSD write failed: %s\n",
                one.ssd_status != WEFT_OK ? one.ssd_error : two.ssd_error);
        st = one.ssd_status != WEFT_OK ? one.ssd_status : two.ssd_status;
    }
    weft_snapshot_free(s);
    if (st != WEFT_OK) {
        return st;
    }
    *first = sum(b, one.ssd_bytes_written);
    *second = sum(b, two.ssd_bytes_written);
    *gbs = perf_gbs(*first, perf_slowest(&b->w, one.ssd_write_us));
    return WEFT_OK;
}

/* Every rank writes @p bytes sequentially with O_DIRECT (buffered where refused). */
static weft_status_t seq_round(snap_bench_t *b, const char *dir, uint64_t bytes, double *gbs)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/seq-%d", dir, b->w.rank);
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, SEQ_BLOCK) != 0) {
        return WEFT_ERR_NO_MEMORY;
    }
    memset(buf, 0x5a, SEQ_BLOCK);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    }
    weft_barrier(b->w.world);
    double t0 = perf_now_us();
    bool ok = fd >= 0;
    for (uint64_t done = 0; ok && done < bytes; done += SEQ_BLOCK) {
        ok = write(fd, buf, SEQ_BLOCK) == (ssize_t)SEQ_BLOCK;
    }
    ok = ok && fdatasync(fd) == 0;
    double us = perf_now_us() - t0;
    if (fd >= 0) {
        close(fd);
    }
    unlink(path);
    free(buf);
    int bad = !ok, any = 0;
    weft_allreduce(b->w.world, &bad, &any, 1, WEFT_I32, WEFT_MAX);
    if (any) {
        fprintf(stderr, "weft-perf snapshot: sequential writes to %s failed\n", dir);
        return WEFT_ERR_IO;
    }
    uint64_t total = sum(b, (bytes + SEQ_BLOCK - 1) / SEQ_BLOCK * SEQ_BLOCK);
    *gbs = perf_gbs(total, perf_slowest(&b->w, us));
    return WEFT_OK;
}

weft_status_t snap_measure_ssd(snap_bench_t *b, snap_result_t *r)
{
    char root[400] = {0};
    if (b->w.rank == 0) {
        snprintf(root, sizeof(root), "%s/weft-perf-ssd-XXXXXX", b->tmpdir);
        if (mkdtemp(root) == NULL) {
            root[0] = '\0';
        }
    }
    weft_status_t st = weft_broadcast(b->w.world, root, sizeof(root), WEFT_U8, 0);
    if (st != WEFT_OK || root[0] == '\0') {
        fprintf(stderr, "weft-perf snapshot: cannot make a directory in %s\n", b->tmpdir);
        return st != WEFT_OK ? st : WEFT_ERR_IO;
    }
    double ssd[2] = {0, 0}, seq[2] = {0, 0};
    for (int round = 0; round < 2 && st == WEFT_OK; round++) {
        char dir[480];
        snprintf(dir, sizeof(dir), "%s/round-%d", root, round);
        for (int k = 0; k < 2 && st == WEFT_OK; k++) {
            if ((k == 0) == (round == 0)) {
                st = ssd_round(b, dir, &ssd[round], &r->first_written, &r->second_written);
            } else {
                /* Each member writes its shard and its buddy's: twice the state. */
                st = seq_round(b, root, 2 * (uint64_t)b->state_bytes, &seq[round]);
            }
        }
    }
    weft_barrier(b->w.world);
    if (b->w.rank == 0) {
        nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
    if (st == WEFT_OK) {
        r->have_ssd = true;
        r->ssd_gbs = (ssd[0] + ssd[1]) / 2;
        r->seq_gbs = (seq[0] + seq[1]) / 2;
    }
    return st;
}
