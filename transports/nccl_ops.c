/*
 * The NCCL transport's operations: each is enqueued on a stream, waited for until NCCL
 * has enqueued it (a non-blocking communicator may still be connecting), and tracked by
 * a CUDA event recorded after it. Communicators are in nccl.c.
 */
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

weft_status_t weft__nccl_start_allreduce(weft_tl_comm_t *c, const void *sendbuf, void *recvbuf,
                                         size_t count, weft_dtype_t dtype, weft_op_t op,
                                         void *stream, weft_tl_op_t **top)
{
    ncclDataType_t nt;
    ncclRedOp_t no;
    int prev;
    if (c == NULL || top == NULL || (count > 0 && (sendbuf == NULL || recvbuf == NULL))) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = check_types(dtype, op, 1, &nt, &no);
    if (st != WEFT_OK || count == 0) {
        if (st == WEFT_OK) {
            *top = NULL;
        }
        return st;
    }
    if ((st = op_begin(c, &prev)) != WEFT_OK) {
        return st;
    }
    ncclResult_t r =
        c->lib->AllReduce(sendbuf, recvbuf, count, nt, no, c->nc, (cudaStream_t)stream);
    return op_end(c, r, stream, prev, "ncclAllReduce", top);
}

weft_status_t weft__nccl_start_broadcast(weft_tl_comm_t *c, const void *sendbuf, void *recvbuf,
                                         size_t count, weft_dtype_t dtype, int root, void *stream,
                                         weft_tl_op_t **top)
{
    ncclDataType_t nt;
    int prev;
    if (c == NULL || top == NULL || root < 0 || root >= c->nranks ||
        (count > 0 && (recvbuf == NULL || (c->rank == root && sendbuf == NULL)))) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = check_types(dtype, WEFT_SUM, 0, &nt, NULL);
    if (st != WEFT_OK || count == 0) {
        if (st == WEFT_OK) {
            *top = NULL;
        }
        return st;
    }
    if ((st = op_begin(c, &prev)) != WEFT_OK) {
        return st;
    }
    ncclResult_t r =
        c->lib->Broadcast(sendbuf, recvbuf, count, nt, root, c->nc, (cudaStream_t)stream);
    return op_end(c, r, stream, prev, "ncclBroadcast", top);
}

weft_status_t weft__nccl_start_allgather(weft_tl_comm_t *c, const void *sendbuf, void *recvbuf,
                                         size_t count, weft_dtype_t dtype, void *stream,
                                         weft_tl_op_t **top)
{
    ncclDataType_t nt;
    int prev;
    if (c == NULL || top == NULL || (count > 0 && (sendbuf == NULL || recvbuf == NULL))) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = check_types(dtype, WEFT_SUM, 0, &nt, NULL);
    if (st != WEFT_OK || count == 0) {
        if (st == WEFT_OK) {
            *top = NULL;
        }
        return st;
    }
    if ((st = op_begin(c, &prev)) != WEFT_OK) {
        return st;
    }
    ncclResult_t r = c->lib->AllGather(sendbuf, recvbuf, count, nt, c->nc, (cudaStream_t)stream);
    return op_end(c, r, stream, prev, "ncclAllGather", top);
}

weft_status_t weft__nccl_start_reduce_scatter(weft_tl_comm_t *c, const void *sendbuf, void *recvbuf,
                                              size_t count, weft_dtype_t dtype, weft_op_t op,
                                              void *stream, weft_tl_op_t **top)
{
    ncclDataType_t nt;
    ncclRedOp_t no;
    int prev;
    if (c == NULL || top == NULL || (count > 0 && (sendbuf == NULL || recvbuf == NULL))) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = check_types(dtype, op, 1, &nt, &no);
    if (st != WEFT_OK || count == 0) {
        if (st == WEFT_OK) {
            *top = NULL;
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
    ncclResult_t r =
        c->lib->ReduceScatter(sendbuf, dst, count, nt, no, c->nc, (cudaStream_t)stream);
    st = op_enqueued(c, r, "ncclReduceScatter");
    if (st == WEFT_OK && shift) {
        cudaError_t e =
            cudaMemcpyAsync(recvbuf, dst, block, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = weft__nccl_fail(c, WEFT_ERR_TRANSPORT, "in-place reduce-scatter copy: %s",
                                 cudaGetErrorString(e));
        }
    }
    if (st == WEFT_OK) {
        st = op_track(c, stream, "ncclReduceScatter", top);
    }
    weft__nccl_leave_device(c, prev);
    return st;
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
