/*
 * weft-perf snapshot, shared by snapshot.c (overhead, recovery, the file checkpoint) and
 * snapshot_ssd.c (the SSD tier against sequential writes to the same directory).
 */
#ifndef WEFT_PERF_SNAPSHOT_H
#define WEFT_PERF_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "perf.h"

#define MAX_RANKS 256
#define NTENSORS 4
#define ROW_WORDS 1024  /* i64 per row of each tensor */
#define MARK_EVERY 8192 /* words: one word in every 64 KiB carries the step */
#define STATE_SEED UINT64_C(0x5eed5a75)

typedef struct snap_bench {
    perf_opts_t o;
    perf_world_t w;
    size_t state_bytes;
    long step_ms; /* < 0: ten times the measured copy time */
    bool kill;
    bool small_pages; /* state and restore buffers on 4 KiB pages, not weft_mem_alloc */
    bool ssd; /* --ssd */
    char tmpdir[256];
    int n0;             /* ranks at the start */
    int ids[MAX_RANKS]; /* member ids, in rank order at the start */
    size_t words;       /* per rank */
    uint64_t first;     /* this rank's first word of the whole state */
    uint64_t *state;    /* this rank's live shard (state_bytes), then room for a restore */
    size_t state_cap;   /* bytes of state: what a restore from live buffers needs */
    weft_layout_t *layout;
    weft_snapshot_t *snap;
    uint64_t step; /* the last step taken */
} snap_bench_t;

/* What a snapshot keeps besides the shard (a trainer's RNG state and data position). */
typedef struct snap_blob {
    uint64_t step;
    int64_t member;
} snap_blob_t;

/* One restore into b->state (snapshot_live.c). */
typedef struct snap_restore {
    double us; /* the slowest rank's restore call */
    bool verified;
    long wrong;
    size_t moved, local, in_place;
} snap_restore_t;

typedef struct snap_result {
    double copy_us, step_us, step_snap_us;
    int steps;
    bool recovered, verified;
    int survivors;
    uint64_t committed, restored_step;
    double detect_us, repair_us, buffer_us, restore_us, recover_us, file_write_us, file_restart_us;
    double job_start_us; /* fresh ranks: start, weft_init, rendezvous, first allreduce */
    /* The restores into the re-cut that keeps each survivor's shard (snapshot_live.c):
     * from live buffers, and from the copies */
    snap_restore_t live, keep;
    double recover_live_us, recover_keep_us;
    size_t moved, local, missing, file_read_bytes;
    long restore_wrong, file_wrong;
    /* --ssd: the SSD tier against sequential O_DIRECT writes to the same directory */
    bool have_ssd;
    double ssd_gbs, seq_gbs;
    uint64_t first_written, second_written; /* all ranks: a snapshot, then unchanged */
} snap_result_t;

/* snapshot_restart.c: a fresh job of the survivors' size (job_start_us, -1 if it
 * failed); and the fresh rank's side, run when this program is started as one. */
weft_status_t snap_measure_job_start(snap_bench_t *b, snap_result_t *r);
bool snap_is_fresh_rank(void);
int snap_fresh_rank_main(void);

/* snapshot_live.c: the re-cut over the survivors @p left (@p k) that keeps each one's
 * shard (weft_layout_absorb), and the restores into b->state over it, collective over the
 * repaired world (*@p t_done: when it returned): from live buffers, and from the copies. */
weft_layout_t *snap_live_target(const snap_bench_t *b, const int *left, int k);
weft_status_t snap_restore_live(snap_bench_t *b, snap_result_t *r, double *t_done);
weft_status_t snap_restore_keep(snap_bench_t *b, snap_result_t *r, double *t_done);
/* Word @p g of the whole state as step @p step left it. */
uint64_t snap_word_at(uint64_t g, uint64_t step);

/* --ssd: measure the SSD tier (two rounds, each order once) into @p r. */
weft_status_t snap_measure_ssd(snap_bench_t *b, snap_result_t *r);

#endif
