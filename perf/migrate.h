/*
 * weft-perf migrate, shared by migrate.c (the scenarios and their baselines) and
 * migrate_background.c (what runs while the caller computes: --overlap, --step-ms, and
 * the handover's plain-message baseline).
 */
#ifndef WEFT_PERF_MIGRATE_H
#define WEFT_PERF_MIGRATE_H

#include <stdbool.h>
#include <stdio.h>

#include "perf.h"

#define MAX_RANKS 256

typedef struct mig_bench {
    perf_opts_t o;
    perf_world_t w;
    size_t model_bytes;
    size_t gap_us;  /* --overlap: emulated compute between allreduces */
    size_t step_ms; /* --step-ms: a migration started before an emulated GPU step */
    bool dry_run, overlap, baselines;
    const char *only;
    char tmpdir[256];
    int ids[MAX_RANKS]; /* member id of each rank of the world, in rank order */
} mig_bench_t;

typedef struct scenario {
    char name[32];
    weft_layout_t *old, *new;
} scenario_t;

/* Build scenario @p kind (its layouts); -1 if it needs more ranks. */
int mig_build(const mig_bench_t *b, const char *kind, scenario_t *s);

/* migrate_background.c */
int mig_overlap(const mig_bench_t *b, FILE *out, bool json);
int mig_background_step(const mig_bench_t *b, FILE *out, bool json);
double mig_stream_baseline(const mig_bench_t *b, size_t bytes, int iters);
size_t mig_chunk_setting(const mig_bench_t *b);

#endif
