/*
 * The NCCL transport: communicators and the device table. Communicators are non-blocking
 * (ncclConfig_t.blocking = 0), so every NCCL call that may wait on peers returns at once
 * and is polled against a deadline: a dead peer ends in a revoked or aborted
 * communicator and an error status, never in a hang. The operations are in nccl_ops.c,
 * the library loading in nccl_lib.c.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transports/nccl.h"
#include "util/clock.h"
#include "weft/core.h"

#define SPIN_POLLS 64
#define SLEEP_NS 50000

/* ---- helpers ---- */

uint64_t weft__nccl_deadline_after(uint64_t ns)
{
    uint64_t now = weft__now_ns();
    return (ns == 0 || ns > UINT64_MAX - now) ? UINT64_MAX : now + ns;
}

/* One step of a wait loop: spin a little, then yield, then sleep, so that ranks sharing
 * cores do not starve each other. */
static void idle(uint64_t *polls)
{
    if (++*polls < SPIN_POLLS) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, SLEEP_NS};
    nanosleep(&ts, NULL);
}

void weft__nccl_log(const weft_tl_comm_t *c, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (c != NULL && c->log != NULL) {
        c->log(c->log_arg, level, fmt, ap);
    } else if (level <= WEFT_LOG_WARN) {
        fputs("[weft] nccl: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

weft_status_t weft__nccl_map(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return WEFT_OK;
    case ncclInProgress:
        return WEFT_INPROGRESS;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return WEFT_ERR_INVALID_ARG;
    case ncclRemoteError:
        return WEFT_ERR_PEER_FAILED;
    default:
        return WEFT_ERR_TRANSPORT;
    }
}

/* ---- failure ---- */

static void fail_ops(weft_tl_comm_t *c)
{
    for (weft_tl_op_t *op = c->head; op != NULL; op = op->next) {
        if (op->status == WEFT_INPROGRESS) {
            op->status = c->failed;
        }
    }
}

/* Free NCCL's side of the communicator (ncclCommAbort also cancels its kernels). */
static void release_nc(weft_tl_comm_t *c)
{
    if (c->nc != NULL) {
        ncclResult_t r = c->lib->CommAbort(c->nc);
        if (r != ncclSuccess) {
            weft__nccl_log(c, WEFT_LOG_WARN, "ncclCommAbort: %s", c->lib->GetErrorString(r));
        }
        c->nc = NULL;
    }
}

/* Stop the work in flight. ncclCommRevoke keeps the communicator, so that the repair
 * can shrink it; without it (NCCL < 2.28) only ncclCommAbort can, which frees it. */
static void nccl_comm_abort(weft_tl_comm_t *c, weft_status_t why)
{
    if (c == NULL) {
        return;
    }
    if (c->failed == WEFT_OK) {
        c->failed = why != WEFT_OK ? why : WEFT_ERR_REVOKED;
    }
    if (c->nc != NULL && !c->revoked) {
#ifdef WEFT_NCCL_REVOKE
        if (c->lib->CommRevoke != NULL && c->ready) {
            ncclResult_t r = c->lib->CommRevoke(c->nc, NCCL_REVOKE_DEFAULT);
            if (r == ncclSuccess || r == ncclInProgress) {
                c->revoked = 1;
            } else {
                weft__nccl_log(c, WEFT_LOG_WARN, "ncclCommRevoke: %s; aborting instead",
                               c->lib->GetErrorString(r));
            }
        }
#endif
        if (!c->revoked) {
            release_nc(c);
        }
    }
    fail_ops(c);
}

weft_status_t weft__nccl_fail(weft_tl_comm_t *c, weft_status_t status, const char *fmt, ...)
{
    if (c->failed == WEFT_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->error, sizeof(c->error), fmt, ap);
        va_end(ap);
        weft__nccl_log(c, WEFT_LOG_ERROR, "rank %d/%d: %s; communicator stopped", c->rank,
                       c->nranks, c->error);
    }
    nccl_comm_abort(c, status);
    return c->failed;
}

weft_status_t weft__nccl_wait_ready(weft_tl_comm_t *c, uint64_t deadline, const char *what)
{
    uint64_t polls = 0;
    for (;;) {
        ncclResult_t state = ncclSuccess;
        if (c->nc == NULL || c->revoked) {
            return c->failed;
        }
        ncclResult_t r = c->lib->CommGetAsyncError(c->nc, &state);
        if (r != ncclSuccess) {
            return weft__nccl_fail(c, weft__nccl_map(r), "%s: ncclCommGetAsyncError: %s", what,
                                   c->lib->GetErrorString(r));
        }
        if (state == ncclSuccess) {
            return WEFT_OK;
        }
        if (state != ncclInProgress) {
            return weft__nccl_fail(c, weft__nccl_map(state), "%s: %s (%s)", what,
                                   c->lib->GetErrorString(state), c->lib->GetLastError(c->nc));
        }
        if (weft__now_ns() > deadline) {
            return weft__nccl_fail(c, WEFT_ERR_TIMEOUT, "%s did not finish in time", what);
        }
        idle(&polls);
    }
}

/* ---- devices ---- */

weft_status_t weft__nccl_enter_device(weft_tl_comm_t *c, int *prev)
{
    cudaError_t e = cudaGetDevice(prev);
    if (e == cudaSuccess && *prev != c->device) {
        e = cudaSetDevice(c->device);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        weft__nccl_log(c, WEFT_LOG_ERROR, "cannot make CUDA device %d current: %s", c->device,
                       cudaGetErrorString(e));
        return WEFT_ERR_TRANSPORT;
    }
    return WEFT_OK;
}

void weft__nccl_leave_device(weft_tl_comm_t *c, int prev)
{
    if (prev != c->device && prev >= 0) {
        (void)cudaSetDevice(prev);
    }
}

/* ---- communicators ---- */

static int params_valid(const weft_tl_comm_params_t *p)
{
    return p != NULL && p->size >= sizeof(*p) && p->nranks >= 1 && p->rank >= 0 &&
           p->rank < p->nranks && p->device >= -1;
}

/* A communicator not yet joined, on @p device (-1: the caller's current device). */
static weft_status_t comm_new(const weft_tl_comm_params_t *p, const weft_nccl_lib_t *lib,
                              int device, weft_tl_comm_t **out)
{
    weft_tl_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    c->lib = lib;
    c->rank = p->rank;
    c->nranks = p->nranks;
    c->op_timeout_ns = p->op_timeout_ns;
    c->log = p->log;
    c->log_arg = p->log_arg;
    if (cudaGetDevice(&c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        weft__nccl_log(c, WEFT_LOG_ERROR, "no usable CUDA device for an NCCL communicator");
        free(c);
        return WEFT_ERR_UNSUPPORTED;
    }
    if (device >= 0) {
        c->device = device;
    }
    *out = c;
    return WEFT_OK;
}

static weft_status_t nccl_comm_create(const weft_tl_comm_params_t *p, const void *id,
                                      weft_tl_comm_t **comm)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId uid;
    weft_tl_comm_t *c;
    int prev = -1;

    if (!params_valid(p) || id == NULL || comm == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    const weft_nccl_lib_t *lib = weft__nccl_lib();
    if (lib == NULL) {
        weft__nccl_log(NULL, WEFT_LOG_ERROR, "%s", weft__nccl_unavailable_why());
        return WEFT_ERR_UNSUPPORTED;
    }
    weft_status_t st = comm_new(p, lib, p->device, &c);
    if (st != WEFT_OK) {
        return st;
    }
    st = weft__nccl_enter_device(c, &prev);
    if (st != WEFT_OK) {
        goto err_free_comm;
    }
    memcpy(uid.internal, id, sizeof(uid.internal));
    cfg.blocking = 0; /* creation and operations return at once; we poll with deadlines */
    ncclResult_t r = lib->CommInitRankConfig(&c->nc, c->nranks, uid, c->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        c->nc = NULL; /* not made */
        st = weft__nccl_fail(c, weft__nccl_map(r), "ncclCommInitRankConfig: %s (%s)",
                             lib->GetErrorString(r), lib->GetLastError(NULL));
    } else {
        st = weft__nccl_wait_ready(c, weft__nccl_deadline_after(p->init_timeout_ns),
                                   "communicator creation");
    }
    weft__nccl_leave_device(c, prev);
    if (st != WEFT_OK) {
        goto err_free_comm;
    }
    c->ready = 1;
    *comm = c;
    return WEFT_OK;

err_free_comm:
    release_nc(c);
    free(c);
    return st;
}

static int nccl_comm_can_shrink(const weft_tl_comm_t *parent)
{
#ifdef WEFT_NCCL_SHRINK
    return parent != NULL && parent->nc != NULL && parent->lib->CommShrink != NULL;
#else
    (void)parent;
    return 0;
#endif
}

#ifdef WEFT_NCCL_SHRINK
/* After ncclCommRevoke: wait until NCCL says the communicator is quiescent. */
static weft_status_t wait_quiescent(weft_tl_comm_t *parent, uint64_t deadline)
{
    uint64_t polls = 0;
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = parent->lib->CommGetAsyncError(parent->nc, &state);
        if (r != ncclSuccess) {
            return weft__nccl_map(r);
        }
        if (state != ncclInProgress) {
            return WEFT_OK;
        }
        if (weft__now_ns() > deadline) {
            return WEFT_ERR_TIMEOUT;
        }
        idle(&polls);
    }
}

/*
 * The flags: a revoked parent is quiescent first and then shrinks as a healthy one; a
 * parent that failed without a revoke, or still has work in flight (the old
 * membership's, which may wait for departed peers and whose requests the edit failed
 * already), shrinks with NCCL_SHRINK_ABORT, which stops that work first.
 */
static weft_status_t shrink(weft_tl_comm_t *parent, int *exclude, int n_exclude, uint64_t deadline,
                            weft_tl_comm_t *c)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    int flags = NCCL_SHRINK_DEFAULT;
    if (!parent->revoked && (weft__nccl_comm_poll(parent) != WEFT_OK || parent->head != NULL)) {
        flags = NCCL_SHRINK_ABORT;
    }
    if (parent->nc == NULL) { /* the poll found it failed, and it could only be aborted */
        return weft__nccl_fail(c, parent->failed, "the communicator to shrink failed: %s",
                               parent->error);
    }
    if (parent->revoked) {
        weft_status_t st = wait_quiescent(parent, deadline);
        if (st != WEFT_OK) {
            return weft__nccl_fail(c, st, "the revoked communicator did not quiesce (%s)",
                                   weft_status_str(st));
        }
        flags = NCCL_SHRINK_DEFAULT;
    }
    cfg.blocking = 0;
    ncclResult_t r = c->lib->CommShrink(parent->nc, exclude, n_exclude, &c->nc, &cfg, flags);
    if (r != ncclSuccess && r != ncclInProgress) {
        c->nc = NULL; /* not made */
        return weft__nccl_fail(c, weft__nccl_map(r), "ncclCommShrink: %s (%s)",
                               c->lib->GetErrorString(r), c->lib->GetLastError(parent->nc));
    }
    return weft__nccl_wait_ready(c, deadline, "communicator shrink");
}
#endif

static weft_status_t nccl_comm_shrink(weft_tl_comm_t *parent, const int *exclude, int n_exclude,
                                      const weft_tl_comm_params_t *p, weft_tl_comm_t **comm)
{
    if (!params_valid(p) || comm == NULL || parent == NULL || n_exclude < 0 ||
        (n_exclude > 0 && exclude == NULL) || p->nranks != parent->nranks - n_exclude) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (!nccl_comm_can_shrink(parent)) {
        return WEFT_ERR_UNSUPPORTED;
    }
#ifdef WEFT_NCCL_SHRINK
    weft_tl_comm_t *c;
    int prev = -1;
    int *ex = malloc(sizeof(int) * (size_t)(n_exclude > 0 ? n_exclude : 1));
    weft_status_t st =
        ex != NULL ? comm_new(p, parent->lib, parent->device, &c) : WEFT_ERR_NO_MEMORY;
    if (st != WEFT_OK) {
        free(ex);
        return st;
    }
    if (n_exclude > 0) {
        memcpy(ex, exclude, sizeof(int) * (size_t)n_exclude); /* NCCL takes int * */
    }
    st = weft__nccl_enter_device(c, &prev);
    if (st == WEFT_OK) {
        st = shrink(parent, ex, n_exclude, weft__nccl_deadline_after(p->init_timeout_ns), c);
        weft__nccl_leave_device(c, prev);
    }
    free(ex);
    if (st != WEFT_OK) {
        release_nc(c);
        free(c);
        return st;
    }
    c->ready = 1;
    *comm = c;
    return WEFT_OK;
#else
    return WEFT_ERR_UNSUPPORTED;
#endif
}

void weft__nccl_unlink_op(weft_tl_comm_t *c, weft_tl_op_t *op)
{
    weft_tl_op_t *prev = NULL;
    for (weft_tl_op_t *o = c->head; o != NULL; prev = o, o = o->next) {
        if (o == op) {
            if (prev != NULL) {
                prev->next = o->next;
            } else {
                c->head = o->next;
            }
            if (c->tail == o) {
                c->tail = prev;
            }
            break;
        }
    }
    op->next = NULL;
    op->comm = NULL;
    if (op->ev != NULL) {
        (void)cudaEventDestroy(op->ev);
        op->ev = NULL;
    }
}

/* Update the operations in flight from their events; free the finished released ones. */
static void retire(weft_tl_comm_t *c)
{
    weft_tl_op_t *op = c->head;
    while (op != NULL && c->failed == WEFT_OK) {
        weft_tl_op_t *next = op->next;
        if (op->status == WEFT_INPROGRESS) {
            cudaError_t e = cudaEventQuery(op->ev);
            if (e == cudaSuccess) {
                op->status = WEFT_OK;
            } else if (e != cudaErrorNotReady) {
                (void)cudaGetLastError();
                weft__nccl_fail(c, WEFT_ERR_TRANSPORT, "CUDA error on an NCCL stream: %s",
                                cudaGetErrorString(e));
                return;
            }
        }
        if (op->status != WEFT_INPROGRESS) {
            int released = op->released;
            weft__nccl_unlink_op(c, op);
            if (released) {
                free(op);
            }
        }
        op = next;
    }
}

weft_status_t weft__nccl_comm_poll(weft_tl_comm_t *c)
{
    ncclResult_t state = ncclSuccess;
    if (c == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (c->failed != WEFT_OK) {
        return c->failed;
    }
    ncclResult_t r = c->lib->CommGetAsyncError(c->nc, &state);
    if (r != ncclSuccess) {
        return weft__nccl_fail(c, weft__nccl_map(r), "ncclCommGetAsyncError: %s",
                               c->lib->GetErrorString(r));
    }
    if (state != ncclSuccess && state != ncclInProgress) {
        return weft__nccl_fail(c, weft__nccl_map(state), "asynchronous NCCL error: %s (%s)",
                               c->lib->GetErrorString(state), c->lib->GetLastError(c->nc));
    }
    retire(c);
    uint64_t age = c->head != NULL ? weft__now_ns() - c->head->start_ns : 0;
    if (c->failed == WEFT_OK && c->head != NULL && c->op_timeout_ns != 0 &&
        age > c->op_timeout_ns) {
        return weft__nccl_fail(c, WEFT_ERR_TIMEOUT,
                               "an NCCL operation did not finish after %llu ms (limit %llu ms)",
                               (unsigned long long)(age / 1000000u),
                               (unsigned long long)(c->op_timeout_ns / 1000000u));
    }
    return c->failed;
}

static const char *nccl_comm_error(const weft_tl_comm_t *c)
{
    return c != NULL ? c->error : weft__nccl_unavailable_why();
}

/* Wait for the operations in flight, then finalize; stop it on failure or timeout. */
static void drain_and_finalize(weft_tl_comm_t *c)
{
    uint64_t deadline = weft__nccl_deadline_after(c->op_timeout_ns);
    uint64_t polls = 0;
    while (weft__nccl_comm_poll(c) == WEFT_OK && c->head != NULL) {
        if (weft__now_ns() > deadline) {
            weft__nccl_fail(c, WEFT_ERR_TIMEOUT, "operations still running at destroy");
            return;
        }
        idle(&polls);
    }
    if (c->failed != WEFT_OK) {
        return;
    }
    ncclResult_t r = c->lib->CommFinalize(c->nc);
    if (r != ncclSuccess && r != ncclInProgress) {
        weft__nccl_fail(c, weft__nccl_map(r), "ncclCommFinalize: %s", c->lib->GetErrorString(r));
        return;
    }
    if (weft__nccl_wait_ready(c, deadline, "communicator finalize") != WEFT_OK) {
        return;
    }
    r = c->lib->CommDestroy(c->nc);
    if (r != ncclSuccess) {
        weft__nccl_log(c, WEFT_LOG_WARN, "ncclCommDestroy: %s", c->lib->GetErrorString(r));
    }
    c->nc = NULL;
}

static void nccl_comm_destroy(weft_tl_comm_t *c)
{
    if (c == NULL) {
        return;
    }
    drain_and_finalize(c);
    if (c->nc != NULL) {
        /* Failed, revoked or late: ncclCommFinalize is not allowed after a revoke. */
        nccl_comm_abort(c, WEFT_ERR_REVOKED);
        release_nc(c);
    }
    while (c->head != NULL) {
        weft_tl_op_t *op = c->head;
        int released = op->released;
        if (op->status == WEFT_INPROGRESS) {
            op->status = WEFT_ERR_REVOKED;
        }
        weft__nccl_unlink_op(c, op);
        if (released) {
            free(op);
        }
    }
    if (c->stream != NULL) {
        (void)cudaStreamDestroy(c->stream); /* its work was finished or aborted above */
        (void)cudaGetLastError();
    }
    free(c);
}

/* ---- the transport ---- */

/* NCCL moves collectives and point-to-point transfers on streams between the ranks of a
 * communicator, not tagged messages: it has a device table only, through which the comm
 * layer (comm/device/nccl_comm.c) forms one communicator per group and epoch. */
static const weft_tl_dev_ops_t nccl_dev_ops = {
    .size = sizeof(weft_tl_dev_ops_t),
    .comm_id_bytes = sizeof(ncclUniqueId),
    .comm_id = weft__nccl_unique_id,
    .comm_create = nccl_comm_create,
    .comm_can_shrink = nccl_comm_can_shrink,
    .comm_shrink = nccl_comm_shrink,
    .comm_destroy = nccl_comm_destroy,
    .comm_abort = nccl_comm_abort,
    .comm_poll = weft__nccl_comm_poll,
    .comm_error = nccl_comm_error,
    .coll = weft__nccl_start_coll,
    .p2p = weft__nccl_start_p2p,
    .op_test = weft__nccl_op_test,
    .op_release = weft__nccl_op_release,
};

const weft_transport_t weft__tl_nccl = {
    .size = sizeof(weft_transport_t),
    .name = "nccl",
    .available = weft__nccl_available,
    .dev = &nccl_dev_ops,
};
