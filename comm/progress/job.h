/*
 * Jobs: pure data work (copies, checksums, reads of a peer's memory) that a request
 * hands over so that it runs without the context's lock. The progress thread runs queued
 * jobs between its passes, outside the lock, so a public call never waits behind them;
 * a caller waiting in weft_wait() runs them too (it has nothing better to do). Without
 * a progress thread a job runs at once, inside weft__job_submit().
 *
 * A job touches only memory its request owns or was lent (never the context), so it may
 * run on any thread. Its owner checks weft__job_done() under the lock and must
 * weft__job_cancel() it before freeing what it touches.
 */
#ifndef WEFT_COMM_JOB_H
#define WEFT_COMM_JOB_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct weft_ctx weft_ctx_t;

enum { WEFT_JOB_IDLE, WEFT_JOB_QUEUED, WEFT_JOB_RUNNING, WEFT_JOB_DONE };

typedef struct weft_job {
    void (*run)(struct weft_job *job);
    _Atomic int state;
    struct weft_job *next; /* in the context's queue while queued */
} weft_job_t;

/* Queue @p job (state IDLE or DONE) to run; runs it at once without a progress thread or
 * when @p inline_now. Called with the context's lock held. */
void weft__job_submit(weft_ctx_t *ctx, weft_job_t *job, bool inline_now);

/* Whether @p job has run since it was submitted. */
static inline bool weft__job_done(weft_job_t *job)
{
    return atomic_load_explicit(&job->state, memory_order_acquire) == WEFT_JOB_DONE;
}

/* Whether @p job is queued or running (its memory is in use). */
static inline bool weft__job_busy(weft_job_t *job)
{
    int s = atomic_load_explicit(&job->state, memory_order_acquire);
    return s == WEFT_JOB_QUEUED || s == WEFT_JOB_RUNNING;
}

/* Take @p job out of the queue, or wait until it has run: afterwards it touches nothing.
 * Its state is then IDLE or DONE. */
void weft__job_cancel(weft_ctx_t *ctx, weft_job_t *job);

/* Run up to @p max queued jobs on this thread; returns how many ran. */
int weft__jobs_run(weft_ctx_t *ctx, int max);

/* Whether any job is queued. */
bool weft__jobs_pending(weft_ctx_t *ctx);

#endif
