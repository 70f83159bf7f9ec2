/*
 * A process that exits without weft_finalize (an error path, an uncaught Python
 * exception) runs its exit handlers while weft's threads still run: the heartbeat seals
 * a frame for every renewal of its lease, and the progress thread checks the tags of the
 * failure notices it reads, both with OpenSSL. Where the process started OpenSSL before
 * weft_init (Python's hashlib and torch do), OpenSSL's own exit handler is armed and frees
 * what those calls use, and a thread still making one crashes the process (a rank killed
 * by signal 11 instead of ending with its exit status). weft_init's
 * OPENSSL_INIT_NO_ATEXIT only helps where weft is OpenSSL's first user.
 *
 * So the first weft_init registers an exit handler after OpenSSL's, which OpenSSL
 * registers when the process first initialises it (at the latest in weft_init's own
 * call, which comes first): exit handlers run in reverse order, so ours runs before it.
 * For every live context it stops the progress thread and the heartbeat, joining them
 * within EXIT_JOIN_MS in all, then fences the context's store connection: no frame is
 * sealed or checked on it after that, neither by a thread not joined in time (stuck in
 * a store call) nor by a caller's thread still inside a public call. It takes no context
 * lock, since the thread that called exit, or another one, may hold it. It does not
 * disarm the liveness lease: a process that ends without weft_finalize has failed as far
 * as the others know, and its lease fires when the kernel closes its connection.
 *
 * The list of live contexts is the library's only process-wide mutable state: an exit
 * handler takes no argument and must find every context of the process. A forked child
 * inherits the list but not the threads: it skips the contexts its parent made.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "comm/core_impl.h"

/* How long the exit handler waits, for all contexts together, for their threads to
 * end. Each ends within one store call, well under a millisecond from a store that
 * answers; a store that does not costs this much at exit, not a hang. */
#define EXIT_JOIN_MS 1000

enum { EXIT_NONE = 0, EXIT_LIVE, EXIT_STOPPED };

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static weft_ctx_t *live; /* linked by exit_next */
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;

static void stop_context(weft_ctx_t *ctx, const struct timespec *deadline)
{
    bool pt = weft__progress_thread_stop_at_exit(ctx, deadline);
    bool hb = weft__heartbeat_stop_at_exit(ctx, deadline);
    weft__store_fence(ctx->store, deadline);
    if (!pt || !hb) {
        WEFT_DEBUG(&ctx->logger,
                   "exit without weft_finalize: %s not end within %d ms; the "
                   "store connection is fenced",
                   pt   ? "the heartbeat thread did"
                   : hb ? "the progress thread did"
                        : "neither thread did",
                   EXIT_JOIN_MS);
    }
}

static void stop_at_exit(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    long long ns = (long long)deadline.tv_nsec + (long long)EXIT_JOIN_MS * 1000000;
    deadline.tv_sec += (time_t)(ns / 1000000000);
    deadline.tv_nsec = (long)(ns % 1000000000);
    pid_t self = getpid();
    pthread_mutex_lock(&live_lock);
    for (weft_ctx_t *ctx = live; ctx != NULL; ctx = ctx->exit_next) {
        if (ctx->exit_pid == self) {
            ctx->exit_state = EXIT_STOPPED;
            stop_context(ctx, &deadline);
        }
    }
    live = NULL;
    pthread_mutex_unlock(&live_lock);
}

static void register_handler(void)
{
    (void)atexit(stop_at_exit); /* fails only without memory: then as before */
}

void weft__exit_watch(weft_ctx_t *ctx)
{
    pthread_once(&handler_once, register_handler);
    pthread_mutex_lock(&live_lock);
    ctx->exit_pid = getpid();
    ctx->exit_state = EXIT_LIVE;
    ctx->exit_next = live;
    live = ctx;
    pthread_mutex_unlock(&live_lock);
}

bool weft__exit_forget(weft_ctx_t *ctx)
{
    pthread_mutex_lock(&live_lock);
    bool stopped = ctx->exit_state == EXIT_STOPPED;
    if (ctx->exit_state == EXIT_LIVE) {
        weft_ctx_t **p = &live;
        while (*p != NULL && *p != ctx) {
            p = &(*p)->exit_next;
        }
        if (*p != NULL) {
            *p = ctx->exit_next;
        }
    }
    if (!stopped) {
        ctx->exit_state = EXIT_NONE;
        ctx->exit_next = NULL;
    }
    pthread_mutex_unlock(&live_lock);
    return !stopped;
}
