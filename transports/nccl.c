/*
 * The NCCL transport. Communicators are non-blocking (ncclConfig_t.blocking = 0), so
 * every NCCL call that may wait on peers returns at once and is polled against a
 * deadline: a dead peer ends in ncclCommAbort and an error status, never in a hang.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transports/nccl.h"
#include "transports/transport.h"
#include "util/clock.h"
#include "weft/core.h"

#define SPIN_POLLS 64
#define SLEEP_NS 50000

struct weft_nccl_op {
    weft_nccl_comm_t *comm; /* NULL once the communicator is gone */
    cudaEvent_t ev;         /* recorded after the work on its stream; NULL when done */
    uint64_t start_ns;
    weft_status_t status; /* WEFT_INPROGRESS until the work finished or failed */
    int released;         /* the owner dropped its handle */
    struct weft_nccl_op *next;
};

struct weft_nccl_comm {
    ncclComm_t nc; /* NULL after abort */
    int rank, nranks, device;
    weft_status_t failed; /* WEFT_OK while usable */
    char error[256];
    uint64_t op_timeout_ns;
    void (*log)(void *arg, int level, const char *fmt, va_list ap);
    void *log_arg;
    weft_nccl_op_t *head, *tail; /* operations in flight, oldest first */
};

/* ---- helpers ---- */

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

static void nlog(const weft_nccl_comm_t *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void nlog(const weft_nccl_comm_t *c, int level, const char *fmt, ...)
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

static weft_status_t map_nccl(ncclResult_t r)
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

static int map_dtype(weft_dtype_t d, ncclDataType_t *out)
{
    switch (d) {
    case WEFT_F32:
        *out = ncclFloat32;
        return 0;
    case WEFT_F64:
        *out = ncclFloat64;
        return 0;
    case WEFT_F16:
        *out = ncclFloat16;
        return 0;
    case WEFT_BF16:
        *out = ncclBfloat16;
        return 0;
    case WEFT_I32:
        *out = ncclInt32;
        return 0;
    case WEFT_I64:
        *out = ncclInt64;
        return 0;
    case WEFT_U8:
        *out = ncclUint8;
        return 0;
    default:
        return -1; /* user dtypes: NCCL cannot reduce opaque elements */
    }
}

static int map_op(weft_op_t op, ncclRedOp_t *out)
{
    switch (op) {
    case WEFT_SUM:
        *out = ncclSum;
        return 0;
    case WEFT_PROD:
        *out = ncclProd;
        return 0;
    case WEFT_MAX:
        *out = ncclMax;
        return 0;
    case WEFT_MIN:
        *out = ncclMin;
        return 0;
    default:
        return -1;
    }
}

/* ---- failure ---- */

static void fail_ops(weft_nccl_comm_t *c)
{
    for (weft_nccl_op_t *op = c->head; op != NULL; op = op->next) {
        if (op->status == WEFT_INPROGRESS) {
            op->status = c->failed;
        }
    }
}

void weft__nccl_comm_abort(weft_nccl_comm_t *c, weft_status_t why)
{
    if (c == NULL) {
        return;
    }
    if (c->failed == WEFT_OK) {
        c->failed = why != WEFT_OK ? why : WEFT_ERR_REVOKED;
    }
    if (c->nc != NULL) {
        /* Cancels the kernels of pending operations, so their streams drain. */
        ncclResult_t r = ncclCommAbort(c->nc);
        if (r != ncclSuccess) {
            nlog(c, WEFT_LOG_WARN, "ncclCommAbort: %s", ncclGetErrorString(r));
        }
        c->nc = NULL;
    }
    fail_ops(c);
}

/* Record the first failure, log it once, abort; returns @p status. */
static weft_status_t comm_fail(weft_nccl_comm_t *c, weft_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static weft_status_t comm_fail(weft_nccl_comm_t *c, weft_status_t status, const char *fmt, ...)
{
    if (c->failed == WEFT_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->error, sizeof(c->error), fmt, ap);
        va_end(ap);
        nlog(c, WEFT_LOG_ERROR, "rank %d/%d: %s; communicator aborted", c->rank, c->nranks,
             c->error);
    }
    weft__nccl_comm_abort(c, status);
    return c->failed;
}

/* Wait until the communicator has no NCCL call in progress, or fail it at @p deadline. */
static weft_status_t wait_ready(weft_nccl_comm_t *c, uint64_t deadline, const char *what)
{
    uint64_t polls = 0;
    for (;;) {
        ncclResult_t state = ncclSuccess;
        if (c->nc == NULL) {
            return c->failed;
        }
        ncclResult_t r = ncclCommGetAsyncError(c->nc, &state);
        if (r != ncclSuccess) {
            return comm_fail(c, map_nccl(r), "%s: ncclCommGetAsyncError: %s", what,
                             ncclGetErrorString(r));
        }
        if (state == ncclSuccess) {
            return WEFT_OK;
        }
        if (state != ncclInProgress) {
            return comm_fail(c, map_nccl(state), "%s: %s (%s)", what, ncclGetErrorString(state),
                             ncclGetLastError(c->nc));
        }
        if (weft__now_ns() > deadline) {
            return comm_fail(c, WEFT_ERR_TIMEOUT, "%s did not finish in time", what);
        }
        idle(&polls);
    }
}

/* ---- availability ---- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probed_devices; /* written once under probe_once */

static void probe_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        n = 0;
        (void)cudaGetLastError(); /* no driver or no device: not an error for us */
    }
    probed_devices = n;
}

int weft__nccl_available(void)
{
    pthread_once(&probe_once, probe_devices);
    return probed_devices > 0;
}

int weft__nccl_version(void)
{
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

weft_status_t weft__nccl_unique_id(void *id)
{
    ncclUniqueId uid;
    if (id == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess) {
        nlog(NULL, WEFT_LOG_ERROR, "ncclGetUniqueId: %s", ncclGetErrorString(r));
        return WEFT_ERR_TRANSPORT;
    }
    memcpy(id, uid.internal, WEFT_NCCL_ID_BYTES);
    return WEFT_OK;
}

/* ---- communicators ---- */

static uint64_t deadline_after(uint64_t ns)
{
    uint64_t now = weft__now_ns();
    return (ns == 0 || ns > UINT64_MAX - now) ? UINT64_MAX : now + ns;
}

/* Make the communicator's device current; *prev gets the caller's, to restore. */
static weft_status_t enter_device(weft_nccl_comm_t *c, int *prev)
{
    cudaError_t e = cudaGetDevice(prev);
    if (e == cudaSuccess && *prev != c->device) {
        e = cudaSetDevice(c->device);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        nlog(c, WEFT_LOG_ERROR, "cannot make CUDA device %d current: %s", c->device,
             cudaGetErrorString(e));
        return WEFT_ERR_TRANSPORT;
    }
    return WEFT_OK;
}

static void leave_device(const weft_nccl_comm_t *c, int prev)
{
    if (prev != c->device && prev >= 0) {
        (void)cudaSetDevice(prev);
    }
}

static int params_valid(const weft_nccl_params_t *p)
{
    return p != NULL && p->size >= sizeof(*p) && p->nranks >= 1 && p->rank >= 0 &&
           p->rank < p->nranks && p->device >= -1;
}

weft_status_t weft__nccl_comm_create(const weft_nccl_params_t *p, const void *id,
                                     weft_nccl_comm_t **comm)
{
    weft_status_t st;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId uid;
    int prev = -1;

    if (!params_valid(p) || id == NULL || comm == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_nccl_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    c->rank = p->rank;
    c->nranks = p->nranks;
    c->op_timeout_ns = p->op_timeout_ns;
    c->log = p->log;
    c->log_arg = p->log_arg;
    if (cudaGetDevice(&c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        nlog(c, WEFT_LOG_ERROR, "no usable CUDA device for an NCCL communicator");
        st = WEFT_ERR_UNSUPPORTED;
        goto err_free_comm;
    }
    if (p->device >= 0) {
        c->device = p->device;
    }
    st = enter_device(c, &prev);
    if (st != WEFT_OK) {
        goto err_free_comm;
    }
    memcpy(uid.internal, id, WEFT_NCCL_ID_BYTES);
    cfg.blocking = 0; /* creation and operations return at once; we poll with deadlines */
    ncclResult_t r = ncclCommInitRankConfig(&c->nc, c->nranks, uid, c->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        st = comm_fail(c, map_nccl(r), "ncclCommInitRankConfig: %s (%s)", ncclGetErrorString(r),
                       ncclGetLastError(NULL));
    } else {
        st = wait_ready(c, deadline_after(p->init_timeout_ns), "communicator creation");
    }
    leave_device(c, prev);
    if (st != WEFT_OK) {
        goto err_free_comm;
    }
    *comm = c;
    return WEFT_OK;

err_free_comm:
    free(c);
    return st;
}

static void unlink_op(weft_nccl_comm_t *c, weft_nccl_op_t *op)
{
    weft_nccl_op_t *prev = NULL;
    for (weft_nccl_op_t *o = c->head; o != NULL; prev = o, o = o->next) {
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
static void retire(weft_nccl_comm_t *c)
{
    weft_nccl_op_t *op = c->head;
    while (op != NULL && c->failed == WEFT_OK) {
        weft_nccl_op_t *next = op->next;
        if (op->status == WEFT_INPROGRESS) {
            cudaError_t e = cudaEventQuery(op->ev);
            if (e == cudaSuccess) {
                op->status = WEFT_OK;
            } else if (e != cudaErrorNotReady) {
                (void)cudaGetLastError();
                comm_fail(c, WEFT_ERR_TRANSPORT, "CUDA error on an NCCL stream: %s",
                          cudaGetErrorString(e));
                return;
            }
        }
        if (op->status != WEFT_INPROGRESS) {
            int released = op->released;
            unlink_op(c, op);
            if (released) {
                free(op);
            }
        }
        op = next;
    }
}

weft_status_t weft__nccl_comm_poll(weft_nccl_comm_t *c)
{
    ncclResult_t state = ncclSuccess;
    if (c == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (c->failed != WEFT_OK) {
        return c->failed;
    }
    ncclResult_t r = ncclCommGetAsyncError(c->nc, &state);
    if (r != ncclSuccess) {
        return comm_fail(c, map_nccl(r), "ncclCommGetAsyncError: %s", ncclGetErrorString(r));
    }
    if (state != ncclSuccess && state != ncclInProgress) {
        return comm_fail(c, map_nccl(state), "asynchronous NCCL error: %s (%s)",
                         ncclGetErrorString(state), ncclGetLastError(c->nc));
    }
    retire(c);
    uint64_t age = c->head != NULL ? weft__now_ns() - c->head->start_ns : 0;
    if (c->failed == WEFT_OK && c->head != NULL && c->op_timeout_ns != 0 &&
        age > c->op_timeout_ns) {
        return comm_fail(c, WEFT_ERR_TIMEOUT,
                         "an NCCL operation did not finish after %llu ms (limit %llu ms)",
                         (unsigned long long)(age / 1000000u),
                         (unsigned long long)(c->op_timeout_ns / 1000000u));
    }
    return c->failed;
}

const char *weft__nccl_comm_error(const weft_nccl_comm_t *c)
{
    return c != NULL ? c->error : "";
}

/* Wait for the operations in flight, then finalize; abort on failure or timeout. */
static void drain_and_finalize(weft_nccl_comm_t *c)
{
    uint64_t deadline = deadline_after(c->op_timeout_ns);
    uint64_t polls = 0;
    while (weft__nccl_comm_poll(c) == WEFT_OK && c->head != NULL) {
        if (weft__now_ns() > deadline) {
            comm_fail(c, WEFT_ERR_TIMEOUT, "operations still running at destroy");
            return;
        }
        idle(&polls);
    }
    if (c->failed != WEFT_OK) {
        return;
    }
    ncclResult_t r = ncclCommFinalize(c->nc);
    if (r != ncclSuccess && r != ncclInProgress) {
        comm_fail(c, map_nccl(r), "ncclCommFinalize: %s", ncclGetErrorString(r));
        return;
    }
    if (wait_ready(c, deadline, "communicator finalize") != WEFT_OK) {
        return;
    }
    r = ncclCommDestroy(c->nc);
    if (r != ncclSuccess) {
        nlog(c, WEFT_LOG_WARN, "ncclCommDestroy: %s", ncclGetErrorString(r));
    }
    c->nc = NULL;
}

void weft__nccl_comm_destroy(weft_nccl_comm_t *c)
{
    if (c == NULL) {
        return;
    }
    drain_and_finalize(c);
    if (c->nc != NULL) {
        weft__nccl_comm_abort(c, WEFT_ERR_REVOKED);
    }
    while (c->head != NULL) {
        weft_nccl_op_t *op = c->head;
        int released = op->released;
        if (op->status == WEFT_INPROGRESS) {
            op->status = WEFT_ERR_REVOKED;
        }
        unlink_op(c, op);
        if (released) {
            free(op);
        }
    }
    free(c);
}

/* ---- operations ---- */

static weft_status_t op_begin(weft_nccl_comm_t *c, int *prev)
{
    weft_status_t st = weft__nccl_comm_poll(c);
    if (st != WEFT_OK) {
        return st;
    }
    return enter_device(c, prev);
}

/*
 * After the NCCL call(s) of one operation returned @p r: wait until NCCL has enqueued the
 * work (a non-blocking communicator may still be connecting). Only then may other work
 * go to the stream.
 */
static weft_status_t op_enqueued(weft_nccl_comm_t *c, ncclResult_t r, const char *what)
{
    if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
        /* Refused before anything was enqueued: the communicator stays usable. */
        nlog(c, WEFT_LOG_ERROR, "%s: %s (%s)", what, ncclGetErrorString(r),
             ncclGetLastError(c->nc));
        return WEFT_ERR_INVALID_ARG;
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        return comm_fail(c, map_nccl(r), "%s: %s (%s)", what, ncclGetErrorString(r),
                         ncclGetLastError(c->nc));
    }
    return wait_ready(c, deadline_after(c->op_timeout_ns), what);
}

/* Record an event after the enqueued work on @p stream and track it as an operation. */
static weft_status_t op_track(weft_nccl_comm_t *c, void *stream, const char *what,
                              weft_nccl_op_t **out)
{
    weft_nccl_op_t *op = calloc(1, sizeof(*op));
    if (op == NULL) {
        /* The work is enqueued but cannot be tracked: fail loudly rather than lose it. */
        return comm_fail(c, WEFT_ERR_NO_MEMORY, "%s: cannot allocate an operation", what);
    }
    cudaError_t e = cudaEventCreateWithFlags(&op->ev, cudaEventDisableTiming);
    if (e == cudaSuccess) {
        e = cudaEventRecord(op->ev, (cudaStream_t)stream);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (op->ev != NULL) {
            (void)cudaEventDestroy(op->ev);
        }
        free(op);
        return comm_fail(c, WEFT_ERR_TRANSPORT, "%s: cannot record a CUDA event: %s", what,
                         cudaGetErrorString(e));
    }
    op->comm = c;
    op->start_ns = weft__now_ns();
    op->status = WEFT_INPROGRESS;
    if (c->tail != NULL) {
        c->tail->next = op;
    } else {
        c->head = op;
    }
    c->tail = op;
    *out = op;
    return WEFT_INPROGRESS;
}

/* op_enqueued() then op_track(); restores the caller's device. */
static weft_status_t op_end(weft_nccl_comm_t *c, ncclResult_t r, void *stream, int prev,
                            const char *what, weft_nccl_op_t **out)
{
    weft_status_t st = op_enqueued(c, r, what);
    if (st == WEFT_OK) {
        st = op_track(c, stream, what, out);
    }
    leave_device(c, prev);
    return st;
}

static size_t dtype_bytes(ncclDataType_t t)
{
    switch (t) {
    case ncclFloat64:
    case ncclInt64:
    case ncclUint64:
        return 8;
    case ncclFloat32:
    case ncclInt32:
    case ncclUint32:
        return 4;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    default:
        return 1;
    }
}

static weft_status_t check_types(weft_dtype_t dtype, weft_op_t op, int with_op, ncclDataType_t *nt,
                                 ncclRedOp_t *no)
{
    if (map_dtype(dtype, nt) != 0) {
        return dtype == WEFT_DTYPE_USER ? WEFT_ERR_UNSUPPORTED : WEFT_ERR_INVALID_ARG;
    }
    if (with_op && map_op(op, no) != 0) {
        return op >= WEFT_OP_USER_FIRST ? WEFT_ERR_UNSUPPORTED : WEFT_ERR_INVALID_ARG;
    }
    return WEFT_OK;
}

weft_status_t weft__nccl_comm_allreduce(weft_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                        size_t count, weft_dtype_t dtype, weft_op_t op,
                                        void *stream, weft_nccl_op_t **nop)
{
    ncclDataType_t nt;
    ncclRedOp_t no;
    int prev;
    if (c == NULL || nop == NULL || (count > 0 && (sendbuf == NULL || recvbuf == NULL))) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = check_types(dtype, op, 1, &nt, &no);
    if (st != WEFT_OK || count == 0) {
        if (st == WEFT_OK) {
            *nop = NULL;
        }
        return st;
    }
    if ((st = op_begin(c, &prev)) != WEFT_OK) {
        return st;
    }
    ncclResult_t r = ncclAllReduce(sendbuf, recvbuf, count, nt, no, c->nc, (cudaStream_t)stream);
    return op_end(c, r, stream, prev, "ncclAllReduce", nop);
}

weft_status_t weft__nccl_comm_broadcast(weft_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                        size_t count, weft_dtype_t dtype, int root, void *stream,
                                        weft_nccl_op_t **nop)
{
    ncclDataType_t nt;
    int prev;
    if (c == NULL || nop == NULL || root < 0 || root >= c->nranks ||
        (count > 0 && (recvbuf == NULL || (c->rank == root && sendbuf == NULL)))) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = check_types(dtype, WEFT_SUM, 0, &nt, NULL);
    if (st != WEFT_OK || count == 0) {
        if (st == WEFT_OK) {
            *nop = NULL;
        }
        return st;
    }
    if ((st = op_begin(c, &prev)) != WEFT_OK) {
        return st;
    }
    ncclResult_t r = ncclBroadcast(sendbuf, recvbuf, count, nt, root, c->nc, (cudaStream_t)stream);
    return op_end(c, r, stream, prev, "ncclBroadcast", nop);
}

weft_status_t weft__nccl_comm_allgather(weft_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                        size_t count, weft_dtype_t dtype, void *stream,
                                        weft_nccl_op_t **nop)
{
    ncclDataType_t nt;
    int prev;
    if (c == NULL || nop == NULL || (count > 0 && (sendbuf == NULL || recvbuf == NULL))) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = check_types(dtype, WEFT_SUM, 0, &nt, NULL);
    if (st != WEFT_OK || count == 0) {
        if (st == WEFT_OK) {
            *nop = NULL;
        }
        return st;
    }
    if ((st = op_begin(c, &prev)) != WEFT_OK) {
        return st;
    }
    ncclResult_t r = ncclAllGather(sendbuf, recvbuf, count, nt, c->nc, (cudaStream_t)stream);
    return op_end(c, r, stream, prev, "ncclAllGather", nop);
}

weft_status_t weft__nccl_comm_reduce_scatter(weft_nccl_comm_t *c, const void *sendbuf,
                                             void *recvbuf, size_t count, weft_dtype_t dtype,
                                             weft_op_t op, void *stream, weft_nccl_op_t **nop)
{
    ncclDataType_t nt;
    ncclRedOp_t no;
    int prev;
    if (c == NULL || nop == NULL || (count > 0 && (sendbuf == NULL || recvbuf == NULL))) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = check_types(dtype, op, 1, &nt, &no);
    if (st != WEFT_OK || count == 0) {
        if (st == WEFT_OK) {
            *nop = NULL;
        }
        return st;
    }
    if ((st = op_begin(c, &prev)) != WEFT_OK) {
        return st;
    }
    /* weft's in place keeps the result at the start of the buffer; NCCL's writes it at
     * this rank's block: reduce there, then move it to the front (the regions do not
     * overlap for rank > 0). */
    size_t block = count * dtype_bytes(nt);
    int shift = sendbuf == recvbuf && c->rank > 0;
    char *dst = shift ? (char *)recvbuf + (size_t)c->rank * block : recvbuf;
    ncclResult_t r = ncclReduceScatter(sendbuf, dst, count, nt, no, c->nc, (cudaStream_t)stream);
    st = op_enqueued(c, r, "ncclReduceScatter");
    if (st == WEFT_OK && shift) {
        cudaError_t e =
            cudaMemcpyAsync(recvbuf, dst, block, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = comm_fail(c, WEFT_ERR_TRANSPORT, "in-place reduce-scatter copy: %s",
                           cudaGetErrorString(e));
        }
    }
    if (st == WEFT_OK) {
        st = op_track(c, stream, "ncclReduceScatter", nop);
    }
    leave_device(c, prev);
    return st;
}

weft_status_t weft__nccl_comm_sendrecv(weft_nccl_comm_t *c, const void *sendbuf, size_t send_bytes,
                                       int dst, void *recvbuf, size_t recv_bytes, int src,
                                       void *stream, weft_nccl_op_t **nop)
{
    int prev;
    if (c == NULL || nop == NULL || dst < -1 || dst >= c->nranks || src < -1 || src >= c->nranks ||
        (dst >= 0 && send_bytes > 0 && sendbuf == NULL) ||
        (src >= 0 && recv_bytes > 0 && recvbuf == NULL)) {
        return WEFT_ERR_INVALID_ARG;
    }
    int do_send = dst >= 0 && send_bytes > 0;
    int do_recv = src >= 0 && recv_bytes > 0;
    if (!do_send && !do_recv) {
        *nop = NULL;
        return WEFT_OK;
    }
    weft_status_t st = op_begin(c, &prev);
    if (st != WEFT_OK) {
        return st;
    }
    /* One group, so that a send to oneself and the matching receive can both progress. */
    ncclResult_t r = ncclGroupStart();
    ncclResult_t rs = ncclSuccess, rr = ncclSuccess;
    if (r == ncclSuccess && do_send) {
        rs = ncclSend(sendbuf, send_bytes, ncclUint8, dst, c->nc, (cudaStream_t)stream);
    }
    if (r == ncclSuccess && do_recv) {
        rr = ncclRecv(recvbuf, recv_bytes, ncclUint8, src, c->nc, (cudaStream_t)stream);
    }
    if (r == ncclSuccess) {
        r = ncclGroupEnd();
    }
    if (rs != ncclSuccess && rs != ncclInProgress) {
        r = rs;
    } else if (rr != ncclSuccess && rr != ncclInProgress) {
        r = rr;
    }
    return op_end(c, r, stream, prev, "ncclSend/ncclRecv", nop);
}

weft_status_t weft__nccl_op_test(weft_nccl_op_t *op)
{
    if (op == NULL) {
        return WEFT_OK;
    }
    if (op->status == WEFT_INPROGRESS && op->comm != NULL) {
        (void)weft__nccl_comm_poll(op->comm); /* updates op->status */
    }
    return op->status;
}

void weft__nccl_op_release(weft_nccl_op_t *op)
{
    if (op == NULL) {
        return;
    }
    if (op->comm != NULL && op->status == WEFT_INPROGRESS) {
        op->released = 1; /* the communicator frees it once its work has finished */
        return;
    }
    if (op->comm != NULL) {
        unlink_op(op->comm, op);
    }
    free(op);
}

/* ---- ops table entry ---- */

/* NCCL moves whole collectives on streams, not tagged messages: only available() is
 * meaningful here; the comm layer uses the API of transports/nccl.h. */
static weft_status_t tl_nccl_init(const weft_tl_params_t *params, weft_tl_t **tl)
{
    (void)params, (void)tl;
    return WEFT_ERR_UNSUPPORTED;
}

static void tl_nccl_fini(weft_tl_t *tl)
{
    (void)tl;
}

const weft_transport_ops_t weft__tl_nccl = {
    .size = sizeof(weft_transport_ops_t),
    .name = "nccl",
    .available = weft__nccl_available,
    .init = tl_nccl_init,
    .fini = tl_nccl_fini,
};
