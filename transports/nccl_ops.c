/*
 * The NCCL transport's operations: each is enqueued on a stream, waited for until NCCL
 * has enqueued it (a non-blocking communicator may still be connecting), and tracked by
 * a CUDA event recorded after it. Communicators are in nccl.c.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "transports/nccl.h"
#include "util/clock.h"
#include "weft/core.h"

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
    case WEFT_AVG:
        *out = ncclAvg;
        return 0;
    default:
        return -1;
    }
}

/* ---- operations ---- */

static weft_status_t op_begin(weft_tl_comm_t *c, int *prev)
{
    weft_status_t st = weft__nccl_comm_poll(c);
    if (st != WEFT_OK) {
        return st;
    }
    return weft__nccl_enter_device(c, prev);
}

/*
 * After the NCCL call(s) of one operation returned @p r: wait until NCCL has enqueued the
 * work (a non-blocking communicator may still be connecting). Only then may other work
 * go to the stream.
 */
static weft_status_t op_enqueued(weft_tl_comm_t *c, ncclResult_t r, const char *what)
{
    if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
        /* Refused before anything was enqueued: the communicator stays usable. */
        weft__nccl_log(c, WEFT_LOG_ERROR, "%s: %s (%s)", what, c->lib->GetErrorString(r),
                       c->lib->GetLastError(c->nc));
        return WEFT_ERR_INVALID_ARG;
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        return weft__nccl_fail(c, weft__nccl_map(r), "%s: %s (%s)", what, c->lib->GetErrorString(r),
                               c->lib->GetLastError(c->nc));
    }
    return weft__nccl_wait_ready(c, weft__nccl_deadline_after(c->op_timeout_ns), what);
}

/* Record an event after the enqueued work on @p stream and track it as an operation. */
static weft_status_t op_track(weft_tl_comm_t *c, void *stream, const char *what, weft_tl_op_t **out)
{
    weft_tl_op_t *op = calloc(1, sizeof(*op));
    if (op == NULL) {
        /* The work is enqueued but cannot be tracked: fail loudly rather than lose it. */
        return weft__nccl_fail(c, WEFT_ERR_NO_MEMORY, "%s: cannot allocate an operation", what);
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
        return weft__nccl_fail(c, WEFT_ERR_TRANSPORT, "%s: cannot record a CUDA event: %s", what,
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
static weft_status_t op_end(weft_tl_comm_t *c, ncclResult_t r, void *stream, int prev,
                            const char *what, weft_tl_op_t **out)
{
    weft_status_t st = op_enqueued(c, r, what);
    if (st == WEFT_OK) {
        st = op_track(c, stream, what, out);
    }
    weft__nccl_leave_device(c, prev);
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

/* The arguments NCCL would refuse, or that would make it read a NULL buffer. */
static bool coll_args_valid(const weft_tl_comm_t *c, const weft_tl_dev_coll_t *d)
{
    switch (d->kind) {
    case WEFT_TL_COLL_ALLREDUCE:
    case WEFT_TL_COLL_ALLGATHER:
    case WEFT_TL_COLL_REDUCE_SCATTER:
        return d->count == 0 || (d->sendbuf != NULL && d->recvbuf != NULL);
    case WEFT_TL_COLL_BROADCAST:
        return d->root >= 0 && d->root < c->nranks &&
               (d->count == 0 ||
                (d->recvbuf != NULL && (c->rank != d->root || d->sendbuf != NULL)));
    }
    return false;
}

static const char *coll_name(weft_tl_coll_kind_t kind)
{
    switch (kind) {
    case WEFT_TL_COLL_ALLREDUCE:
        return "ncclAllReduce";
    case WEFT_TL_COLL_BROADCAST:
        return "ncclBroadcast";
    case WEFT_TL_COLL_ALLGATHER:
        return "ncclAllGather";
    case WEFT_TL_COLL_REDUCE_SCATTER:
        return "ncclReduceScatter";
    }
    return "collective";
}

/* weft's in-place reduce-scatter keeps the result at the start of the buffer; NCCL's
 * writes it at this rank's block: reduce there, then move it to the front (the regions
 * do not overlap for rank > 0). Enqueued, not tracked. */
static weft_status_t reduce_scatter(weft_tl_comm_t *c, const weft_tl_dev_coll_t *d,
                                    ncclDataType_t nt, ncclRedOp_t no, void *stream)
{
    size_t block = d->count * dtype_bytes(nt);
    int shift = d->sendbuf == d->recvbuf && c->rank > 0;
    char *dst = shift ? (char *)d->recvbuf + (size_t)c->rank * block : d->recvbuf;
    ncclResult_t r =
        c->lib->ReduceScatter(d->sendbuf, dst, d->count, nt, no, c->nc, (cudaStream_t)stream);
    weft_status_t st = op_enqueued(c, r, "ncclReduceScatter");
    if (st == WEFT_OK && shift) {
        cudaError_t e =
            cudaMemcpyAsync(d->recvbuf, dst, block, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = weft__nccl_fail(c, WEFT_ERR_TRANSPORT, "in-place reduce-scatter copy: %s",
                                 cudaGetErrorString(e));
        }
    }
    return st;
}

/* The NCCL call of every other kind; their result is waited for by op_enqueued(). */
static ncclResult_t coll_call(weft_tl_comm_t *c, const weft_tl_dev_coll_t *d, ncclDataType_t nt,
                              ncclRedOp_t no, cudaStream_t s)
{
    switch (d->kind) {
    case WEFT_TL_COLL_ALLREDUCE:
        return c->lib->AllReduce(d->sendbuf, d->recvbuf, d->count, nt, no, c->nc, s);
    case WEFT_TL_COLL_BROADCAST:
        return c->lib->Broadcast(d->sendbuf, d->recvbuf, d->count, nt, d->root, c->nc, s);
    case WEFT_TL_COLL_ALLGATHER:
        return c->lib->AllGather(d->sendbuf, d->recvbuf, d->count, nt, c->nc, s);
    default:
        return ncclInvalidArgument; /* refused by coll_args_valid() before */
    }
}

weft_status_t weft__nccl_start_coll(weft_tl_comm_t *c, const weft_tl_dev_coll_t *d, void *stream,
                                    weft_tl_op_t **top)
{
    ncclDataType_t nt;
    ncclRedOp_t no = ncclSum;
    int prev;
    if (c == NULL || d == NULL || d->size < sizeof(*d) || top == NULL || !coll_args_valid(c, d)) {
        return WEFT_ERR_INVALID_ARG;
    }
    int reduces = d->kind == WEFT_TL_COLL_ALLREDUCE || d->kind == WEFT_TL_COLL_REDUCE_SCATTER;
    weft_status_t st = check_types(d->dtype, d->op, reduces, &nt, &no);
    if (st != WEFT_OK || d->count == 0) {
        if (st == WEFT_OK) {
            *top = NULL;
        }
        return st;
    }
    if ((st = op_begin(c, &prev)) != WEFT_OK) {
        return st;
    }
    if (d->kind == WEFT_TL_COLL_REDUCE_SCATTER) {
        st = reduce_scatter(c, d, nt, no, stream);
        if (st == WEFT_OK) {
            st = op_track(c, stream, "ncclReduceScatter", top);
        }
        weft__nccl_leave_device(c, prev);
        return st;
    }
    ncclResult_t r = coll_call(c, d, nt, no, (cudaStream_t)stream);
    return op_end(c, r, stream, prev, coll_name(d->kind), top);
}

weft_status_t weft__nccl_start_p2p(weft_tl_comm_t *c, const weft_tl_p2p_t *ops, int nops,
                                   weft_tl_op_t **top)
{
    int prev, live = 0;
    if (c == NULL || top == NULL || nops < 0 || (nops > 0 && ops == NULL)) {
        return WEFT_ERR_INVALID_ARG;
    }
    for (int i = 0; i < nops; i++) {
        if (ops[i].peer < 0 || ops[i].peer >= c->nranks ||
            (ops[i].bytes > 0 && ops[i].buf == NULL)) {
            return WEFT_ERR_INVALID_ARG;
        }
        live += ops[i].bytes > 0;
    }
    if (live == 0) {
        *top = NULL;
        return WEFT_OK;
    }
    weft_status_t st = op_begin(c, &prev);
    if (st != WEFT_OK) {
        return st;
    }
    if (c->stream == NULL) {
        /* Its own stream: the caller's streams never wait behind a transfer. */
        cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            c->stream = NULL;
            weft__nccl_leave_device(c, prev);
            weft__nccl_log(c, WEFT_LOG_ERROR, "point-to-point: cannot create a CUDA stream: %s",
                           cudaGetErrorString(e));
            return WEFT_ERR_TRANSPORT;
        }
    }
    /* One group: the transfers with every peer progress together, none waits for another. */
    ncclResult_t r = c->lib->GroupStart(), first = ncclSuccess;
    for (int i = 0; r == ncclSuccess && i < nops; i++) {
        const weft_tl_p2p_t *o = &ops[i];
        if (o->bytes == 0) {
            continue;
        }
        ncclResult_t ri = o->send ? c->lib->Send(o->buf, o->bytes, ncclUint8, o->peer, c->nc,
                                                 c->stream)
                                  : c->lib->Recv(o->buf, o->bytes, ncclUint8, o->peer, c->nc,
                                                 c->stream);
        if (ri != ncclSuccess && ri != ncclInProgress && first == ncclSuccess) {
            first = ri;
        }
    }
    if (r == ncclSuccess) {
        r = c->lib->GroupEnd();
    }
    if (first != ncclSuccess) {
        r = first;
    }
    return op_end(c, r, c->stream, prev, "ncclSend/ncclRecv", top);
}

weft_status_t weft__nccl_op_test(weft_tl_op_t *op)
{
    if (op == NULL) {
        return WEFT_OK;
    }
    if (op->status == WEFT_INPROGRESS && op->comm != NULL) {
        (void)weft__nccl_comm_poll(op->comm); /* updates op->status */
    }
    return op->status;
}

void weft__nccl_op_release(weft_tl_op_t *op)
{
    if (op == NULL) {
        return;
    }
    if (op->comm != NULL && op->status == WEFT_INPROGRESS) {
        op->released = 1; /* the communicator frees it once its work has finished */
        return;
    }
    if (op->comm != NULL) {
        weft__nccl_unlink_op(op->comm, op);
    }
    free(op);
}
