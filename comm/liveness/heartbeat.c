/*
 * Liveness through the store. Each process holds a lease on its own failure-notice key
 * (<ns>/failed/<id>) on the context's store connection (which its requests and its watch
 * of the notices share), renewed by a small thread every WEFT_HEARTBEAT_MS. If the
 * process dies, the kernel closes that connection and the store publishes the notice at
 * once; if it hangs without dying (stopped, stuck in the kernel), the renewals stop and
 * the store publishes it after WEFT_FAILURE_TIMEOUT_MS. Every member watches that prefix,
 * so either way the survivors learn of it. weft_finalize disarms the lease when the
 * members left together: leaving on purpose is not a failure (one that leaves while
 * others still work keeps it armed, so they repair around its exit). If the store is
 * lost, the thread reports it (once per process) and stops. A process that exits without
 * weft_finalize stops the thread in an exit handler (comm/ctx/ctx_exit.c) and leaves the
 * lease armed: its end is a failure the others must see.
 *
 * On etcd under weftrun (WEFT_NODE_LEASE, set by weftrun: docs/store-protocol.md, "etcd
 * backend"), the process holds no lease: its weftrun's node lease stands for it, and the
 * variable names the failure notice it stands for and this process's entry under it
 * ("<ns>/failed/<id> weftrun/ranks/<node>.<start>/<id>"); a context whose notice differs
 * (another WEFT_NAMESPACE in the same process, a process it started) takes its own lease.
 * Disarming is deleting that entry; a process that ends with it still there is reported
 * failed by its weftrun when reaped, or by the other weftruns when the node's lease
 * lapses. The thread then only runs the chores. Elsewhere the variable is ignored: weft's
 * own store fires a lease the moment its connection closes, which no node lease beats.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/core_impl.h"
#include "util/clock.h"

/* Store work left to the thread (weft__store_chore): its argument follows it. */
typedef struct chore {
    struct chore *next;
    void (*fn)(weft_ctx_t *ctx, const void *arg);
    max_align_t arg[];
} chore_t;

struct weft_heartbeat {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    atomic_bool stop; /* set under lock, except at exit (weft__heartbeat_stop_at_exit) */
    chore_t *chores, *chores_tail;
    weft_store_client_t *conn;
    weft_ctx_t *ctx; /* for its logger, settings and store health: read-only after init */
    const weft_logger_t *lg;
    char key[96];
    char val[64];
    char entry[WEFT_STORE_MAX_KEY + 1]; /* under the node's lease: this entry, not a lease */
    uint32_t ttl_ms;
    uint64_t period_ms;
};

/* Runs the chores queued so far, without the lock; the thread leaves the rest to
 * weft__heartbeat_stop once it is told to stop. */
static void run_chores(struct weft_heartbeat *hb, bool until_stop)
{
    while (hb->chores != NULL && !(until_stop && atomic_load(&hb->stop))) {
        chore_t *c = hb->chores;
        hb->chores = c->next;
        if (hb->chores == NULL) {
            hb->chores_tail = NULL;
        }
        pthread_mutex_unlock(&hb->lock);
        c->fn(hb->ctx, c->arg);
        free(c);
        pthread_mutex_lock(&hb->lock);
    }
}

static void *heartbeat_main(void *arg)
{
    struct weft_heartbeat *hb = arg;
    uint64_t due = weft__now_ns() + hb->period_ms * 1000000ull;
    pthread_mutex_lock(&hb->lock);
    while (!hb->stop) {
        struct timespec ts = {.tv_sec = (time_t)(due / 1000000000ull),
                              .tv_nsec = (long)(due % 1000000000ull)};
        pthread_cond_timedwait(&hb->cond, &hb->lock, &ts);
        if (hb->stop) {
            break;
        }
        if (weft__now_ns() < due) {
            continue;
        }
        run_chores(hb, true);
        due = weft__now_ns() + hb->period_ms * 1000000ull;
        weft_status_t st = hb->entry[0] != '\0' ? WEFT_OK
                                                : weft__store_lease(hb->conn, hb->key, hb->val,
                                                                    strlen(hb->val), hb->ttl_ms);
        if (st != WEFT_OK && atomic_load(&hb->stop)) {
            break; /* the process is exiting: its store connection is fenced */
        }
        if (st != WEFT_OK && weft__store_lost_ns(&hb->ctx->store_health) != 0) {
            weft__store_loss_report(hb->ctx); /* no store, no lease to keep */
            break;
        }
        if (st != WEFT_OK) {
            WEFT_WARN(hb->lg, "heartbeat: cannot renew the lease (%s); the store will soon "
                              "declare this process failed", weft_status_str(st));
            break;
        }
    }
    pthread_mutex_unlock(&hb->lock);
    return NULL;
}

/* The lease, or the entry under the node's lease, no longer says this process failed. */
static void disarm(struct weft_heartbeat *hb)
{
    if (hb->entry[0] != '\0') {
        (void)weft__store_delete(hb->conn, hb->entry);
    } else {
        (void)weft__store_lease(hb->conn, hb->key, NULL, 0, 0);
    }
}

weft_status_t weft__heartbeat_start(weft_ctx_t *ctx)
{
    struct weft_heartbeat *hb = calloc(1, sizeof(*hb));
    if (hb == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for the heartbeat");
    }
    hb->ctx = ctx;
    hb->lg = &ctx->logger;
    hb->period_ms = ctx->cfg.heartbeat_ms > 0 ? ctx->cfg.heartbeat_ms : 100;
    uint64_t ttl = ctx->cfg.failure_timeout_ms;
    hb->ttl_ms = ttl == 0 ? 1 : (ttl > UINT32_MAX ? UINT32_MAX : (uint32_t)ttl);
    weft__key(ctx, hb->key, sizeof(hb->key), "failed/%d", ctx->rank);
    snprintf(hb->val, sizeof(hb->val), "member %d: lost (process gone or silent)", ctx->rank);
    /* "<failure key> <entry>": only for the context whose notice it names (not one of
     * another namespace in the same process, nor a process it started). */
    const char *var = getenv("WEFT_NODE_LEASE");
    size_t klen = strlen(hb->key);
    if (var != NULL && strncmp(var, hb->key, klen) == 0 && var[klen] == ' ' &&
        strlen(var + klen + 1) < sizeof(hb->entry) && weft__store_addr_is_etcd(ctx->store_addr)) {
        snprintf(hb->entry, sizeof(hb->entry), "%s", var + klen + 1);
    }
    /* The lease rides on the context's one store connection, which the client shares
     * between threads: it fires when this process's connection drops. */
    hb->conn = ctx->store;
    weft_status_t st = hb->conn == NULL       ? WEFT_ERR_IO
                       : hb->entry[0] != '\0' ? WEFT_OK
                                              : weft__store_lease(hb->conn, hb->key, hb->val,
                                                                  strlen(hb->val), hb->ttl_ms);
    if (st != WEFT_OK) {
        free(hb);
        return weft__error(ctx, st, "cannot arm the liveness lease");
    }
    if (hb->entry[0] == '\0' && hb->period_ms > hb->ttl_ms / 4) {
        /* The store believes a peer's report about this member once its renewals are a
         * quarter of the lease late (decision 0030): renewing less often than that lets
         * one peer's word evict it between renewals. */
        WEFT_WARN(hb->lg,
                  "WEFT_HEARTBEAT_MS %llu is more than a quarter of WEFT_FAILURE_TIMEOUT_MS %u: "
                  "between renewals the store takes a peer's report that this member failed; "
                  "renew every %u ms at most",
                  (unsigned long long)hb->period_ms, hb->ttl_ms, hb->ttl_ms / 4);
    }
    pthread_mutex_init(&hb->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines from weft__now_ns */
    pthread_cond_init(&hb->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&hb->thread, NULL, heartbeat_main, hb);
    if (rc != 0) {
        errno = rc;
        disarm(hb);
        free(hb);
        return weft__error(ctx, WEFT_ERR_IO, "cannot start the heartbeat thread: %m");
    }
    ctx->heartbeat = hb;
    return WEFT_OK;
}

void weft__heartbeat_stop(weft_ctx_t *ctx, bool leave)
{
    struct weft_heartbeat *hb = ctx->heartbeat;
    if (hb == NULL) {
        return;
    }
    pthread_mutex_lock(&hb->lock);
    atomic_store(&hb->stop, true);
    pthread_cond_signal(&hb->cond);
    pthread_mutex_unlock(&hb->lock);
    pthread_join(hb->thread, NULL);
    pthread_mutex_lock(&hb->lock);
    run_chores(hb, false); /* what a context asked of the store is done before it leaves */
    pthread_mutex_unlock(&hb->lock);
    if (leave) {
        disarm(hb); /* leaving is not failing */
    }
    pthread_mutex_destroy(&hb->lock);
    pthread_cond_destroy(&hb->cond);
    free(hb);
    ctx->heartbeat = NULL;
}

bool weft__heartbeat_stop_at_exit(weft_ctx_t *ctx, const struct timespec *deadline)
{
    struct weft_heartbeat *hb = ctx->heartbeat;
    if (hb == NULL) {
        return true;
    }
    /* The thread holds its lock while it renews the lease: set the flag first, so that
     * it stops after that renewal even if the lock is not had in time. Holding the lock,
     * the signal cannot fall between its check of the flag and its wait. */
    atomic_store(&hb->stop, true);
    bool locked = pthread_mutex_timedlock(&hb->lock, deadline) == 0;
    pthread_cond_signal(&hb->cond);
    if (locked) {
        pthread_mutex_unlock(&hb->lock);
    }
    /* Nothing is freed: the process is ending, and a thread not joined may still run.
     * The chores left (deleting keys of finished epochs) are not needed by anyone. */
    return pthread_timedjoin_np(hb->thread, NULL, deadline) == 0;
}

void weft__store_chore(weft_ctx_t *ctx, void (*fn)(weft_ctx_t *ctx, const void *arg),
                       const void *arg, size_t len)
{
    struct weft_heartbeat *hb = ctx->heartbeat;
    chore_t *c = hb != NULL ? malloc(sizeof(*c) + len) : NULL;
    if (c == NULL) {
        fn(ctx, arg); /* no thread (or no memory): now, on the caller's time */
        return;
    }
    c->next = NULL;
    c->fn = fn;
    memcpy(c->arg, arg, len);
    pthread_mutex_lock(&hb->lock);
    if (hb->chores_tail != NULL) {
        hb->chores_tail->next = c;
    } else {
        hb->chores = c;
    }
    hb->chores_tail = c;
    /* Not woken: it comes to them with its next renewal, within WEFT_HEARTBEAT_MS, once
     * the burst of work that queued them (an edit and the collective after it) is over
     * rather than competing with it for the cores and the store. */
    pthread_mutex_unlock(&hb->lock);
}

/* weft__store_chore_delete's chore: the key follows. */
static void delete_key(weft_ctx_t *ctx, const void *arg)
{
    (void)weft__store_delete(ctx->store, arg);
}

void weft__store_chore_delete(weft_ctx_t *ctx, const char *key)
{
    weft__store_chore(ctx, delete_key, key, strlen(key) + 1);
}
