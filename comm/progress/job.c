/* The context's queue of jobs (see job.h), under a lock of its own. */
#include <sched.h>

#include "comm/core_impl.h"
#include "comm/progress/job.h"

void weft__job_submit(weft_ctx_t *ctx, weft_job_t *job, bool inline_now)
{
    job->next = NULL;
    if (inline_now || !ctx->pt_running) {
        atomic_store_explicit(&job->state, WEFT_JOB_RUNNING, memory_order_relaxed);
        job->run(job);
        atomic_store_explicit(&job->state, WEFT_JOB_DONE, memory_order_release);
        return;
    }
    pthread_mutex_lock(&ctx->job_lock);
    atomic_store_explicit(&job->state, WEFT_JOB_QUEUED, memory_order_relaxed);
    if (ctx->jobs_tail != NULL) {
        ctx->jobs_tail->next = job;
    } else {
        ctx->jobs_head = job;
    }
    ctx->jobs_tail = job;
    if (ctx->pt_sleeping) { /* the thread sleeps while the caller holds the context */
        ctx->pt_sleeping = false;
        pthread_cond_signal(&ctx->pt_cv);
    }
    pthread_mutex_unlock(&ctx->job_lock);
}

/* The first queued job, taken out and marked running; NULL if none. */
static weft_job_t *claim(weft_ctx_t *ctx)
{
    pthread_mutex_lock(&ctx->job_lock);
    weft_job_t *j = ctx->jobs_head;
    if (j != NULL) {
        ctx->jobs_head = j->next;
        if (ctx->jobs_head == NULL) {
            ctx->jobs_tail = NULL;
        }
        j->next = NULL;
        atomic_store_explicit(&j->state, WEFT_JOB_RUNNING, memory_order_relaxed);
    }
    pthread_mutex_unlock(&ctx->job_lock);
    return j;
}

int weft__jobs_run(weft_ctx_t *ctx, int max)
{
    int n = 0;
    weft_job_t *j;
    while (n < max && (j = claim(ctx)) != NULL) {
        j->run(j);
        atomic_store_explicit(&j->state, WEFT_JOB_DONE, memory_order_release);
        n++;
    }
    return n;
}

bool weft__jobs_pending(weft_ctx_t *ctx)
{
    return ctx->jobs_head != NULL; /* a racy peek: callers only decide whether to look */
}

void weft__job_cancel(weft_ctx_t *ctx, weft_job_t *job)
{
    pthread_mutex_lock(&ctx->job_lock);
    if (atomic_load_explicit(&job->state, memory_order_relaxed) == WEFT_JOB_QUEUED) {
        weft_job_t **p = &ctx->jobs_head, *prev = NULL;
        while (*p != NULL && *p != job) {
            prev = *p;
            p = &(*p)->next;
        }
        if (*p == job) {
            *p = job->next;
            if (ctx->jobs_tail == job) {
                ctx->jobs_tail = prev;
            }
        }
        job->next = NULL;
        atomic_store_explicit(&job->state, WEFT_JOB_IDLE, memory_order_relaxed);
    }
    pthread_mutex_unlock(&ctx->job_lock);
    while (atomic_load_explicit(&job->state, memory_order_acquire) == WEFT_JOB_RUNNING) {
        sched_yield(); /* another thread is in it: a copy or a checksum, microseconds */
    }
}
