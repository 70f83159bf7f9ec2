/*
 * Step timing for the example trainer: the median time of a step before the first
 * membership edit and after the last one, so a run shows whether a repaired or regrown
 * job trains as fast as it did before. The first steps after the start and after each
 * edit are left out (the new epoch maps its shared-memory segment, caches are cold).
 */
#ifndef WEFT_EXAMPLE_STEP_TIMER_H
#define WEFT_EXAMPLE_STEP_TIMER_H

#include <stdlib.h>
#include <time.h>

#define STEP_TIMER_SKIP 5 /* steps left out at the start of a segment */

typedef struct step_timer {
    double *first, *last; /* step durations (s) of the first and of the current segment */
    int n_first, n_last, cap;
    int size_first, size_last; /* ranks during each */
    int edits;                 /* membership edits so far */
    int seen;                  /* steps timed in the current segment */
    double t0;
} step_timer_t;

static double step_timer_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int step_timer_init(step_timer_t *st, int steps)
{
    st->cap = steps > 0 ? steps : 1;
    st->first = calloc((size_t)st->cap, sizeof(double));
    st->last = calloc((size_t)st->cap, sizeof(double));
    st->t0 = step_timer_now();
    return st->first != NULL && st->last != NULL;
}

/* A step starts (after any admission or recovery it needed). */
static void step_timer_start(step_timer_t *st)
{
    st->t0 = step_timer_now();
}

/* A step completed on @p size ranks. */
static void step_timer_done(step_timer_t *st, int size)
{
    double d = step_timer_now() - st->t0;
    if (st->seen++ < STEP_TIMER_SKIP) {
        return;
    }
    if (st->edits == 0 && st->n_first < st->cap) {
        st->first[st->n_first++] = d;
        st->size_first = size;
    }
    if (st->n_last < st->cap) {
        st->last[st->n_last++] = d;
        st->size_last = size;
    }
}

/* The membership changed: a new segment begins. */
static void step_timer_edit(step_timer_t *st)
{
    st->edits++;
    st->n_last = 0;
    st->seen = 0;
}

static int step_timer_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of @p n durations in @p d (sorted in place); 0 when there are none. */
static double step_timer_median(double *d, int n)
{
    if (n == 0) {
        return 0;
    }
    qsort(d, (size_t)n, sizeof(*d), step_timer_cmp);
    return n % 2 ? d[n / 2] : 0.5 * (d[n / 2 - 1] + d[n / 2]);
}

static void step_timer_free(step_timer_t *st)
{
    free(st->first);
    free(st->last);
}

#endif
