/*
 * bench_ssd DIR [MIB]: write throughput of the SSD tier, one snapshot of MIB (256) MiB of
 * fresh random data per setting (queue depth 1 and 8, O_DIRECT and buffered), each into
 * its own new directory under DIR, removed afterwards. The caller polls, as a trainer
 * would between pieces of compute: the time spent inside weft__ssd_progress() is printed
 * beside the wall time. Not a CTest test: run it by hand.
 */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "migrate/ssd/ssd.h"
#include "util/clock.h"
#include "weft/core.h"

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void fill(uint64_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = x;
    }
}

static int run(const char *parent, void *data, size_t bytes, int qd, weft__ssd_direct_t direct,
               uint64_t seed)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/weft-ssd-bench-%d-%d", parent, qd, (int)direct);
    fill(data, bytes / 8, seed); /* fresh bytes: nothing to dedup */
    weft__ssd_params_t p = {.queue_depth = qd, .direct = direct};
    weft__ssd_t *s;
    if (weft__ssd_open(dir, &p, &s) != WEFT_OK) {
        fprintf(stderr, "bench_ssd: %s\n", weft_last_error(NULL));
        return 1;
    }
    weft__ssd_region_t r = {"w", WEFT_U8, 1, {{0}, {bytes}}, data};
    uint64_t t0 = weft__now_ns(), inside = 0, longest = 0;
    weft_status_t st = weft__ssd_snapshot_start(s, 1, &r, 1, NULL, 0);
    while (st == WEFT_INPROGRESS) {
        uint64_t a = weft__now_ns();
        st = weft__ssd_progress(s);
        a = weft__now_ns() - a;
        inside += a;
        longest = a > longest ? a : longest;
        for (uint64_t until = weft__now_ns() + 100000; weft__now_ns() < until;) {
            /* 100 us of "compute" between polls */
        }
    }
    double secs = (double)(weft__now_ns() - t0) / 1e9;
    weft__ssd_stats_t stats;
    weft__ssd_stats(s, &stats);
    if (st != WEFT_OK) {
        fprintf(stderr, "bench_ssd: %s\n", weft_last_error(NULL));
    } else {
        printf("queue depth %d  %-8s  %7.1f MiB  %6.3f s  %7.1f MiB/s  in progress calls "
               "%5.1f%% (longest %.2f ms)\n",
               qd, weft__ssd_is_direct(s) ? "O_DIRECT" : "buffered",
               (double)stats.bytes_written / 1048576.0, secs,
               (double)stats.bytes_written / 1048576.0 / secs, 100.0 * (double)inside / 1e9 / secs,
               (double)longest / 1e6);
    }
    weft__ssd_close(s);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return st != WEFT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_ssd DIR [MIB]\n");
        return 2;
    }
    size_t bytes = (size_t)(argc > 2 ? atoi(argv[2]) : 256) << 20;
    void *data = malloc(bytes);
    if (data == NULL) {
        return 1;
    }
    int rc = 0;
    const int qds[2] = {1, 8};
    const weft__ssd_direct_t modes[2] = {WEFT__SSD_DIRECT_AUTO, WEFT__SSD_DIRECT_OFF};
    for (int m = 0; m < 2; m++) {
        for (int q = 0; q < 2; q++) {
            rc |= run(argv[1], data, bytes, qds[q], modes[m], (uint64_t)(m * 2 + q + 1));
        }
    }
    free(data);
    return rc;
}
