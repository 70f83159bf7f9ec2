/*
 * Collectives on CUDA buffers. The memory type is detected from the buffers, never taken
 * from a flag; the transport is the one every member of the group agrees on
 * (weft__select_group): NCCL for GPUs that can reach each other; where the decision is
 * staging, allreduce, broadcast, allgather and reduce-scatter go through pinned host
 * memory and the host collectives (staged_cuda.c); anything else is an explicit
 * WEFT_ERR_UNSUPPORTED that says why. Host buffers never come here.
 */
#include "comm/coll/coll.h"
#include "comm/device/memtype.h"
#include "comm/device/nccl_comm.h"

bool weft__coll_is_cuda(const weft_coll_args_t *a)
{
    const void *probe = a->sendbuf != NULL ? a->sendbuf : a->recvbuf;
    if (probe == NULL || a->count == 0 || weft__cuda_device_count() == 0) {
        return false;
    }
    return weft__memtype(probe) == WEFT_MEM_CUDA ||
           (a->recvbuf != NULL && weft__memtype(a->recvbuf) == WEFT_MEM_CUDA);
}

weft_status_t weft__coll_cuda_start(weft_group_t *g, const weft_coll_args_t *a,
                                    weft_req_t **req)
{
    weft_ctx_t *ctx = g->ctx;
    if (a->sendbuf != NULL && a->recvbuf != NULL &&
        weft__memtype(a->sendbuf) != weft__memtype(a->recvbuf)) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "%s: one buffer is in host memory, the other on a GPU", a->name);
    }
    weft_tsel_t sel;
    weft_status_t st = weft__select_group(g, WEFT_MEM_CUDA, &sel);
    if (st != WEFT_OK) {
        return st;
    }
    if (sel.status != WEFT_OK) {
        return weft__error(ctx, sel.status, "%s on CUDA buffers: %s", a->name, sel.why);
    }
    if (sel.transport != WEFT_TSEL_NCCL) {
#ifdef WEFT_HAVE_CUDA
        if (sel.staged && weft__coll_can_stage(g, a)) {
            return weft__coll_staged_start(g, a, req); /* counted by the host collective */
        }
#endif
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED,
                           "%s on CUDA buffers needs NCCL, but %s (only allreduce, broadcast, "
                           "allgather and reduce-scatter on built-in dtypes are staged through "
                           "host memory: copy to host buffers)",
                           a->name, sel.why);
    }
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE:
        st = weft__nccl_allreduce(g, a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, NULL, req);
        break;
    case WEFT_COLL_BROADCAST:
        st = weft__nccl_broadcast(g, a->recvbuf, a->count, a->dtype, a->root, NULL, req);
        break;
    case WEFT_COLL_ALLGATHER:
        st = weft__nccl_allgather(g, a->sendbuf, a->recvbuf, a->count, a->dtype, NULL, req);
        break;
    case WEFT_COLL_REDUCE_SCATTER:
        st = weft__nccl_reduce_scatter(g, a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, NULL,
                                       req);
        break;
    default:
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED,
                           "%s on CUDA buffers is not supported yet (allreduce, broadcast, "
                           "allgather and reduce_scatter are)", a->name);
    }
    if (st == WEFT_OK || st == WEFT_INPROGRESS) {
        g->coll_count++;
    }
    return st;
}
