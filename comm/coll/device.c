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
    weft_tl_dev_coll_t d = {
        .size = sizeof(d),
        .sendbuf = a->sendbuf,
        .recvbuf = a->recvbuf,
        .count = a->count,
        .dtype = a->dtype,
        .op = a->op,
        .root = a->root,
    };
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE:
        d.kind = WEFT_TL_COLL_ALLREDUCE;
        break;
    case WEFT_COLL_BROADCAST:
        d.kind = WEFT_TL_COLL_BROADCAST;
        d.sendbuf = a->recvbuf; /* in place: the root sends from the buffer it receives in */
        break;
    case WEFT_COLL_ALLGATHER:
        d.kind = WEFT_TL_COLL_ALLGATHER;
        break;
    case WEFT_COLL_REDUCE_SCATTER:
        d.kind = WEFT_TL_COLL_REDUCE_SCATTER;
        break;
    default:
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED,
                           "%s on CUDA buffers is not supported yet (allreduce, broadcast, "
                           "allgather and reduce_scatter are)", a->name);
    }
    st = weft__nccl_coll(g, &d, NULL, req);
    if (st == WEFT_OK || st == WEFT_INPROGRESS) {
        g->coll_count++;
    }
    return st;
}
