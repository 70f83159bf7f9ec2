/*
 * Jobs (comm/progress/job.h) and the progress thread. A caller blocked in weft_wait holds the
 * context's lock throughout; a job it queues must still be taken by the progress thread,
 * even one that was asleep for want of work when the wait began (else a blocking
 * migration's copies and checksums run on the caller's thread alone). Without the
 * thread, a job runs at once, inside the submit. A wait on a request that queues no jobs
 * leaves them to the thread.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "comm/core_impl.h"
#include "comm/progress/job.h"
#include "weft/weft.h"

static pthread_t ran_on;

static void record_thread(weft_job_t *job)
{
    (void)job;
    ran_on = pthread_self();
}

static void nap_ms(long ms)
{
    struct timespec ts = {0, ms * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static void test_queued_job_wakes_thread(void **state)
{
    (void)state;
    weft_ctx_t *ctx;
    assert_int_equal(weft_init(NULL, &ctx), WEFT_OK);
    if (!ctx->pt_running) {
        weft_finalize(ctx);
        skip();
    }
    /* Nothing in flight: the thread goes to sleep. */
    bool asleep = false;
    for (int i = 0; i < 5000 && !asleep; i++) {
        weft_ctx_t *held = weft__api_lock(ctx);
        asleep = ctx->pt_sleeping;
        weft__api_unlock(&held);
        if (!asleep) {
            nap_ms(1);
        }
    }
    assert_true(asleep);
    /* Hold the context as a blocking wait does, queue a job, and never run it here. */
    weft_job_t job = {.run = record_thread};
    weft_ctx_t *held = weft__api_lock(ctx);
    weft__job_submit(ctx, &job, false);
    for (int i = 0; i < 10000 && !weft__job_done(&job); i++) {
        nap_ms(1);
    }
    bool done = weft__job_done(&job);
    weft__api_unlock(&held);
    weft__job_cancel(ctx, &job);
    assert_true(done);
    assert_true(pthread_equal(ran_on, ctx->pt));
    weft_finalize(ctx);
}

static atomic_int release_blocker;

static void blocker(weft_job_t *job)
{
    (void)job;
    while (!atomic_load(&release_blocker)) {
        nap_ms(1);
    }
}

/* A wait on a request that queues no jobs (a receive here, a small collective in a
 * trainer) leaves queued jobs to the progress thread: it never runs a chunk's copy. The
 * thread is kept busy by a blocking job, so only the waiter could have run the second. */
static void test_other_waits_leave_jobs(void **state)
{
    (void)state;
    weft_ctx_t *ctx;
    weft_group_t *world;
    setenv("WEFT_NAMESPACE", "weft-leave", 1); /* a second context on the job's store */
    assert_int_equal(weft_init(NULL, &ctx), WEFT_OK);
    assert_int_equal(weft_ctx_world(ctx, &world), WEFT_OK);
    if (!ctx->pt_running) {
        weft_finalize(ctx);
        skip();
    }
    atomic_store(&release_blocker, 0);
    weft_job_t busy = {.run = blocker}, job = {.run = record_thread};
    weft_ctx_t *held = weft__api_lock(ctx);
    weft__job_submit(ctx, &busy, false);
    weft__api_unlock(&held);
    for (int i = 0; i < 10000 && atomic_load(&busy.state) != WEFT_JOB_RUNNING; i++) {
        nap_ms(1);
    }
    assert_int_equal(atomic_load(&busy.state), WEFT_JOB_RUNNING);
    held = weft__api_lock(ctx);
    weft__job_submit(ctx, &job, false);
    weft__api_unlock(&held);
    char byte;
    weft_req_t *req = NULL;
    assert_int_equal(weft_irecv(world, &byte, 1, 0, 77, &req), WEFT_INPROGRESS);
    assert_int_equal(weft_wait(req, 50ull * 1000 * 1000), WEFT_ERR_TIMEOUT);
    assert_false(weft__job_done(&job)); /* the waiter left it alone */
    atomic_store(&release_blocker, 1);
    for (int i = 0; i < 10000 && !weft__job_done(&job); i++) {
        nap_ms(1);
    }
    assert_true(weft__job_done(&job));
    assert_true(pthread_equal(ran_on, ctx->pt));
    weft__job_cancel(ctx, &busy);
    weft__job_cancel(ctx, &job);
    weft_req_free(req);
    weft_finalize(ctx);
}

static void test_without_thread_runs_at_once(void **state)
{
    (void)state;
    setenv("WEFT_PROGRESS_THREAD", "off", 1);
    setenv("WEFT_NAMESPACE", "weft-nothread", 1); /* a second context on the job's store */
    weft_ctx_t *ctx;
    assert_int_equal(weft_init(NULL, &ctx), WEFT_OK);
    unsetenv("WEFT_PROGRESS_THREAD");
    weft_job_t job = {.run = record_thread};
    weft__job_submit(ctx, &job, false);
    assert_true(weft__job_done(&job));
    assert_true(pthread_equal(ran_on, pthread_self()));
    weft_finalize(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queued_job_wakes_thread),
        cmocka_unit_test(test_other_waits_leave_jobs),
        cmocka_unit_test(test_without_thread_runs_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
