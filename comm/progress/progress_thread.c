/*
 * The progress thread: nonblocking operations advance while the caller computes.
 *
 * One thread per context (WEFT_PROGRESS_THREAD=on, the default). Public calls hold the
 * context's lock while they run (WEFT_API_LOCK), so the thread and the caller never run
 * weft at the same time: the thread works only while the caller is outside weft. It
 * drives the transports and advances every request a public call returned (published
 * requests: weft_i*, weft_imigrate, the vocabulary passes) until each completes,
 * releasing the lock between passes and ending a pass early when a public call is
 * waiting for the lock. With nothing published in flight and no job queued it sleeps on a
 * condition variable, woken when a public call returns leaving one or when a job is
 * queued (a caller blocked in weft_wait holds the lock but shares its jobs).
 *
 * Cost: a recursive mutex lock and unlock per public call (tens of nanoseconds), and,
 * while operations are in flight and the caller is away, the polling of one thread,
 * which backs off from spinning to sleeping (WEFT_PROGRESS_SLEEP_US at most between
 * passes once nothing moves) so it does not take a core from ranks that have work.
 * It runs under SCHED_IDLE (WEFT_PROGRESS_IDLE): any runnable thread of normal priority
 * preempts it, so on an oversubscribed host the caller's small operations are not
 * delayed by a migration's copies and checksums. A public call that finds the lock held
 * spins for a few microseconds (the thread ends its pass at the next check of
 * api_waiting) before it sleeps on the mutex.
 *
 * A process that exits without weft_finalize stops the thread from an exit handler
 * (comm/ctx/ctx_exit.c), which takes no context lock: the caller's thread may hold it there.
 * The thread checks its stop flag at every turn, with or without the lock.
 */
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "comm/core_impl.h"
#include "comm/progress/job.h"
#include "util/clock.h"
#include "util/assert.h"

/* Polls of the lock before a public call sleeps on it (about 2 us). */
#define API_LOCK_SPINS 200

/* A thread that ended a pass this recently is keeping up with its requests. */
#define PT_KEEPING_UP_NS 1000000u

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

weft_ctx_t *weft__api_lock(weft_ctx_t *ctx)
{
    if (ctx == NULL || !ctx->pt_running) {
        return NULL;
    }
    if (pthread_mutex_trylock(&ctx->lock) != 0) {
        /* The thread is in a pass: tell it to end the pass early, then wait, spinning
         * first (a pass ends within microseconds when the thread is on a core). */
        atomic_fetch_add(&ctx->api_waiting, 1);
        bool got = false;
        for (int i = 0; i < API_LOCK_SPINS && !got; i++) {
            cpu_relax();
            got = pthread_mutex_trylock(&ctx->lock) == 0;
        }
        if (!got) {
            pthread_mutex_lock(&ctx->lock);
        }
        atomic_fetch_sub(&ctx->api_waiting, 1);
    }
    ctx->lock_depth++;
    WEFT_ASSERT(ctx->lock_depth > 0);
    return ctx;
}

void weft__api_unlock(weft_ctx_t **held)
{
    weft_ctx_t *ctx = *held;
    if (ctx == NULL) {
        return;
    }
    WEFT_ASSERT(ctx->lock_depth > 0); /* every unlock has its lock */
    if (--ctx->lock_depth == 0 && ctx->bg != NULL) {
        weft__pt_wake(ctx);
    }
    pthread_mutex_unlock(&ctx->lock);
}

void weft__pt_wake(weft_ctx_t *ctx)
{
    if (ctx->pt_sleeping) {
        pthread_mutex_lock(&ctx->job_lock);
        ctx->pt_sleeping = false;
        pthread_cond_signal(&ctx->pt_cv);
        pthread_mutex_unlock(&ctx->job_lock);
    }
}

void weft__req_publish(weft_req_t *req)
{
    if (req == NULL || req->in_bg || !req->ctx->pt_running || req->status != WEFT_INPROGRESS) {
        return;
    }
    req->in_bg = true;
    req->bg_next = req->ctx->bg;
    req->ctx->bg = req;
}

void weft__req_unpublish(weft_req_t *req)
{
    if (!req->in_bg) {
        return;
    }
    for (weft_req_t **p = &req->ctx->bg; *p != NULL; p = &(*p)->bg_next) {
        if (*p == req) {
            *p = req->bg_next;
            break;
        }
    }
    req->in_bg = false;
    req->bg_next = NULL;
}

/* One pass over the published requests; those that completed leave the list. Returns
 * how many completed. A caller waiting for the lock ends the pass early. */
static int advance_published(weft_ctx_t *ctx)
{
    int done = 0;
    for (weft_req_t **p = &ctx->bg; *p != NULL && atomic_load(&ctx->api_waiting) == 0;) {
        weft_req_t *r = *p;
        if (weft__req_advance(r) != WEFT_INPROGRESS) {
            *p = r->bg_next;
            r->in_bg = false;
            r->bg_next = NULL;
            if (r->detached) {
                weft_req_free(r); /* nobody holds it */
            }
            done++;
        } else {
            p = &r->bg_next;
        }
    }
    return done;
}

static void *run(void *arg)
{
    weft_ctx_t *ctx = arg;
    uint64_t idle = 0;
    if (ctx->cfg.progress_idle) {
        struct sched_param sp = {0};
        int rc = pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
        if (rc != 0) {
            WEFT_WARN(&ctx->logger, "progress thread: SCHED_IDLE: %s; it runs at normal priority",
                      strerror(rc));
        }
    }
    long max_sleep_us = ctx->cfg.progress_sleep_us > 0 ? (long)ctx->cfg.progress_sleep_us : 1;
    while (!atomic_load(&ctx->pt_stop)) {
        int events = 0;
        bool drove = false; /* this pass advanced the requests (the caller was away) */
        /* A pass when the caller is outside weft; while it is inside (a blocking call
         * holds the lock), only the jobs, which need no lock: the caller's wait and this
         * thread then share the data work. */
        if (pthread_mutex_trylock(&ctx->lock) == 0) {
            if (atomic_load(&ctx->pt_stop)) {
                pthread_mutex_unlock(&ctx->lock);
                break;
            }
            if (ctx->bg == NULL && !weft__jobs_pending(ctx)) {
                /* Sleep until a request is published or a job queued. The wait is on the
                 * jobs' lock, not the context's: a caller blocked in weft_wait holds that
                 * one throughout, and the jobs it queues are this thread's to share. */
                pthread_mutex_lock(&ctx->job_lock);
                /* The flag again, under job_lock: an exit handler sets it without the
                 * context's lock, then wakes the thread under job_lock. */
                ctx->pt_sleeping = ctx->jobs_head == NULL && !atomic_load(&ctx->pt_stop);
                pthread_mutex_unlock(&ctx->lock);
                while (ctx->pt_sleeping) {
                    pthread_cond_wait(&ctx->pt_cv, &ctx->job_lock);
                }
                pthread_mutex_unlock(&ctx->job_lock);
                idle = 0;
                continue;
            }
            drove = true;
            events = weft__progress(ctx);
            if (atomic_load(&ctx->api_waiting) == 0) {
                events += advance_published(ctx);
            }
            ctx->pt_pass_ns = weft__now_ns();
            pthread_mutex_unlock(&ctx->lock);
        }
        /* The data work the passes handed over, outside the lock: a public call never
         * waits behind a copy or a checksum. */
        events += weft__jobs_run(ctx, INT32_MAX);
        /* Give the caller the lock between passes; back off while nothing moves. */
        idle = events > 0 ? 0 : idle + 1;
        /* While a ring moves, the thread that drives it yields rather than sleeps; when
         * the caller drives it (blocked in weft), this thread only competes with the
         * threads that run the jobs, so it naps as usual. */
        if (idle < 16 || (drove && weft__now_ns() < atomic_load(&ctx->spin_until_ns))) {
            sched_yield();
        } else {
            long us = idle < 32 ? 10 : max_sleep_us;
            struct timespec ts = {0, us * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

bool weft__progress_thread_owns(const weft_req_t *req)
{
    return req->in_bg && req->ctx->pt_running &&
           weft__now_ns() - req->ctx->pt_pass_ns < PT_KEEPING_UP_NS;
}

weft_status_t weft__progress_thread_start(weft_ctx_t *ctx)
{
    if (!ctx->cfg.progress_thread) {
        return WEFT_OK;
    }
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    int rc = pthread_mutex_init(&ctx->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc == 0 && (rc = pthread_cond_init(&ctx->pt_cv, NULL)) != 0) {
        pthread_mutex_destroy(&ctx->lock);
    }
    if (rc != 0) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "progress thread: %s", strerror(rc));
    }
    atomic_store(&ctx->pt_stop, false);
    ctx->pt_running = true; /* before the thread exists: it reads it under the lock */
    if ((rc = pthread_create(&ctx->pt, NULL, run, ctx)) != 0) {
        ctx->pt_running = false;
        pthread_cond_destroy(&ctx->pt_cv);
        pthread_mutex_destroy(&ctx->lock);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "progress thread: %s", strerror(rc));
    }
    return WEFT_OK;
}

void weft__progress_thread_stop(weft_ctx_t *ctx)
{
    if (!ctx->pt_running) {
        return;
    }
    pthread_mutex_lock(&ctx->lock);
    atomic_store(&ctx->pt_stop, true);
    weft__pt_wake(ctx);
    pthread_mutex_unlock(&ctx->lock);
    pthread_join(ctx->pt, NULL);
    ctx->pt_running = false;
    for (weft_req_t *r = ctx->bg, *next; r != NULL; r = next) {
        next = r->bg_next;
        r->in_bg = false;
        r->bg_next = NULL;
    }
    ctx->bg = NULL;
    pthread_cond_destroy(&ctx->pt_cv);
    pthread_mutex_destroy(&ctx->lock);
}

bool weft__progress_thread_stop_at_exit(weft_ctx_t *ctx, const struct timespec *deadline)
{
    if (!ctx->pt_running) {
        return true;
    }
    /* Not the context's lock: the thread that called exit, or another one still in a
     * public call, may hold it. The thread sees the flag at its next turn, or here if it
     * sleeps for want of work. */
    atomic_store(&ctx->pt_stop, true);
    if (pthread_mutex_timedlock(&ctx->job_lock, deadline) == 0) {
        ctx->pt_sleeping = false;
        pthread_cond_signal(&ctx->pt_cv);
        pthread_mutex_unlock(&ctx->job_lock);
    }
    /* Nothing is torn down: the process is ending, and a caller may still be in weft. */
    return pthread_timedjoin_np(ctx->pt, NULL, deadline) == 0;
}
