/*
 * Requests, progress and waiting. Waits spin briefly, then yield, then sleep in short
 * steps, so ranks oversubscribed on few cores do not starve each other.
 */
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/core_impl.h"
#include "comm/progress/job.h"
#include "util/assert.h"

/* How often (in progress calls) the failure-notice watch is polled. */
#define NOTICE_POLL_INTERVAL 64
#define REQ_POOL_MAX 256

int weft__progress(weft_ctx_t *ctx)
{
    int n = 0;
    for (int i = 0; i < ctx->ntls; i++) {
        n += ctx->tls[i].ops->progress(ctx->tls[i].tl);
    }
    n += weft__shm_news(ctx);
    if (++ctx->progress_calls % NOTICE_POLL_INTERVAL == 0) {
        weft__poll_failure_notices(ctx);
    }
    return n;
}

/*
 * One idle step of a wait. Phases, by polls without news: spin (the answer is usually
 * microseconds away), then sched_yield, then sleep. Sleeps grow from 20 us to 250 us so
 * that ranks waiting on a slow or dead peer stop competing for the cores with the ranks
 * that have work (8 ranks on 2 cores in the tests), capped at 250 us because a message
 * from a peer does not wake the sleeper (shared-memory transports offer no event to
 * wait on), and they sleep in ppoll() on the
 * failure-notice connection, so a death wakes them at once. While ctx->spin_until_ns
 * lies ahead they only yield.
 */
void weft__idle(weft_ctx_t *ctx, uint64_t *idle_polls)
{
    uint64_t n = ++*idle_polls;
    uint64_t spins = (uint64_t)ctx->cfg.yield_spins;
    if (n < spins) {
        return;
    }
    if (n < spins + 256 || weft__now_ns() < atomic_load(&ctx->spin_until_ns)) {
        sched_yield();
        return;
    }
    uint64_t k = (n - spins - 256) / 16;
    long us = k >= 4 ? 250 : 20L << k;
    struct timespec ts = {0, us * 1000};
    int fd = ctx->watch != NULL ? weft__store_fd(ctx->watch) : -1;
    if (fd >= 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        (void)ppoll(&pfd, 1, &ts, NULL);
    } else {
        nanosleep(&ts, NULL);
    }
    weft__poll_failure_notices(ctx);
}

static void live_insert(weft_ctx_t *ctx, weft_req_t *req)
{
    WEFT_ASSERT(req->prev == NULL && req->next == NULL && ctx->live != req);
    req->prev = NULL;
    req->next = ctx->live;
    if (ctx->live != NULL) {
        ctx->live->prev = req;
    }
    ctx->live = req;
}

static void live_remove(weft_ctx_t *ctx, weft_req_t *req)
{
    WEFT_ASSERT((req->prev == NULL) == (ctx->live == req));
    WEFT_ASSERT(req->next == NULL || req->next->prev == req);
    if (req->prev != NULL) {
        req->prev->next = req->next;
    } else if (ctx->live == req) {
        ctx->live = req->next;
    }
    if (req->next != NULL) {
        req->next->prev = req->prev;
    }
    req->prev = req->next = NULL;
}

weft_req_t *weft__req_new(weft_ctx_t *ctx, weft_group_t *g)
{
    weft_req_t *req = ctx->req_pool;
    if (req != NULL) {
        WEFT_ASSERT(ctx->req_pool_len > 0);
        ctx->req_pool = req->next;
        ctx->req_pool_len--;
        memset(req, 0, sizeof(*req));
    } else if ((req = calloc(1, sizeof(*req))) == NULL) {
        return NULL;
    }
    req->ctx = ctx;
    req->group = g;
    req->status = WEFT_INPROGRESS;
    req->peer_id = -1;
    req->epoch = g != NULL ? g->epoch : 0;
    live_insert(ctx, req);
    return req;
}

static void req_complete(weft_req_t *req, weft_status_t st)
{
    /* A request completes once, with a final status. */
    WEFT_ASSERT(req->status == WEFT_INPROGRESS);
    WEFT_ASSERT(st != WEFT_INPROGRESS);
    req->status = st;
}

/* Stop the transport part of a request that will not complete normally. */
static void req_cancel_transport(weft_req_t *req)
{
    if (req->tl_req != NULL) {
        req->ops->cancel(req->tl, req->tl_req);
        req->tl_req = NULL;
    }
}

weft_status_t weft__req_advance(weft_req_t *req)
{
    if (req->status != WEFT_INPROGRESS) {
        return req->status;
    }
    WEFT_ASSERT(req->group == NULL || req->epoch <= req->group->epoch); /* epochs only grow */
    weft_status_t gst = req->group != NULL ? weft__group_status(req->group) : WEFT_OK;
    if (gst == WEFT_OK && req->group != NULL && req->group->epoch != req->epoch) {
        gst = WEFT_ERR_REVOKED; /* the group was edited under this request */
    }
    if (gst != WEFT_OK) {
        req_cancel_transport(req);
        req_complete(req, gst);
        return gst;
    }
    if (req->progress != NULL) {
        weft_status_t st = req->progress(req);
        if (st != WEFT_INPROGRESS && req->status == WEFT_INPROGRESS) {
            req_complete(req, st);
        } else if (st != WEFT_INPROGRESS) {
            st = req->status; /* the step revoked its own group, which failed it already */
        }
        return st;
    }
    if (req->peer_id >= 0 && req->ctx->peers[req->peer_id].failed != WEFT_OK) {
        req_cancel_transport(req);
        req_complete(req, req->ctx->peers[req->peer_id].failed);
        return req->status;
    }
    size_t len = 0;
    weft_status_t st = req->ops->test(req->tl, req->tl_req, &len);
    if (st != WEFT_INPROGRESS) {
        req->tl_req = NULL;
        if (st == WEFT_OK) {
            req->bytes = len;
        } else if (st == WEFT_ERR_PEER_FAILED && req->peer_id >= 0) {
            weft__report_failure(req->ctx, req->peer_id, "transport error");
        } else if (st == WEFT_ERR_MISMATCH && req->recv_cap > 0) {
            weft__error(req->ctx, st,
                        "receive from member %d, tag %u: the message is longer than the "
                        "%zu-byte buffer (the sender's send completes)",
                        req->peer_id, req->recv_tag, req->recv_cap);
        }
        req_complete(req, st);
    }
    return st;
}

weft_status_t weft_test(weft_req_t *req)
{
    WEFT_API_LOCK(req != NULL ? req->ctx : NULL);
    if (req == NULL) {
        return WEFT_OK;
    }
    if (req->status != WEFT_INPROGRESS) {
        return req->status;
    }
    if (weft__progress_thread_owns(req)) {
        /* The thread advances it: a test between the caller's small operations must
         * not do a migration's copies and checksums in the caller's time. */
        return WEFT_INPROGRESS;
    }
    weft__progress(req->ctx);
    return weft__req_advance(req);
}

weft_status_t weft_wait(weft_req_t *req, uint64_t timeout_ns)
{
    WEFT_API_LOCK(req != NULL ? req->ctx : NULL);
    if (req == NULL) {
        return WEFT_OK;
    }
    weft_ctx_t *ctx = req->ctx;
    if (timeout_ns == WEFT_TIMEOUT_DEFAULT) {
        timeout_ns = weft__ms_to_ns(ctx->cfg.timeout_ms);
    }
    uint64_t start = weft__now_ns();
    uint64_t idle = 0;
    for (;;) {
        int events = weft__progress(ctx);
        weft_status_t st = weft__req_advance(req);
        if (st == WEFT_INPROGRESS && req->runs_jobs && weft__jobs_pending(ctx)) {
            events += weft__jobs_run(ctx, 1); /* waiting for them anyway: lend a hand */
        }
        if (st != WEFT_INPROGRESS) {
            return st;
        }
        if ((idle & 63) == 0 &&
            weft__now_ns() - start >= weft__wait_limit(ctx, start, timeout_ns)) {
            return weft__wait_timeout(ctx, start, timeout_ns, "wait");
        }
        if (events > 0) {
            idle = 0;
        } else {
            weft__idle(ctx, &idle);
        }
    }
}

weft_status_t weft_req_bytes(const weft_req_t *req, size_t *bytes)
{
    WEFT_API_LOCK(req != NULL ? req->ctx : NULL);
    if (req == NULL || bytes == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (req->status == WEFT_INPROGRESS) {
        return WEFT_INPROGRESS;
    }
    *bytes = req->bytes;
    return WEFT_OK;
}

weft_status_t weft_req_free(weft_req_t *req)
{
    if (req == NULL) {
        return WEFT_OK;
    }
    WEFT_API_LOCK(req->ctx);
    weft__req_unpublish(req);
    WEFT_ASSERT(!req->in_bg);
    req_cancel_transport(req);
    WEFT_ASSERT(req->tl_req == NULL);
    if (req->cleanup != NULL) {
        req->cleanup(req);
    }
    weft_ctx_t *ctx = req->ctx;
    live_remove(ctx, req);
    /* Requests come and go on every message: keep a few instead of calloc/free. */
    WEFT_ASSERT(ctx->req_pool_len <= REQ_POOL_MAX);
    if (ctx->req_pool_len < REQ_POOL_MAX) {
        req->next = ctx->req_pool;
        ctx->req_pool = req;
        ctx->req_pool_len++;
    } else {
        free(req);
    }
    return WEFT_OK;
}

void weft__req_pool_drain(weft_ctx_t *ctx)
{
    while (ctx->req_pool != NULL) {
        weft_req_t *r = ctx->req_pool;
        ctx->req_pool = r->next;
        free(r);
    }
    ctx->req_pool_len = 0;
}

void weft__req_free_all(weft_ctx_t *ctx, const weft_group_t *g)
{
    /* Compound requests first: their cleanup frees the requests they own, which must
     * not be freed a second time from this list. The walk restarts after each, since
     * the cleanup removes other entries. */
    for (weft_req_t *r = ctx->live; r != NULL;) {
        if (r->cleanup != NULL && (g == NULL || r->group == g)) {
            weft_req_free(r);
            r = ctx->live;
        } else {
            r = r->next;
        }
    }
    for (weft_req_t *r = ctx->live, *next; r != NULL; r = next) {
        next = r->next;
        if (g == NULL || r->group == g) {
            weft_req_free(r);
        }
    }
}

weft_status_t weft__req_wait_free(weft_req_t *req)
{
    weft_status_t st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
    weft_req_free(req);
    return st;
}

weft_status_t weft__blocking(weft_status_t start_status, weft_req_t *req)
{
    if (start_status != WEFT_INPROGRESS) {
        return start_status;
    }
    return weft__req_wait_free(req);
}
