/*
 * Collectives and messages on CUDA buffers through NCCL, for the comm layer.
 *
 * Each group gets one NCCL communicator per epoch, made on its first use: group rank 0
 * decides whether to shrink the previous epoch's communicator (an edit that only removed
 * members, with NCCL >= 2.27) or to rebuild from a fresh unique id, and sets that plan
 * in the store; the other members get it (a one-member group needs no store). A revoked
 * group stops its communicator's work (ncclCommRevoke, else ncclCommAbort), so GPU work
 * waiting for a dead peer ends. NCCL is reached only through the device table of the
 * "nccl" transport (weft__transport_find).
 *
 * How the collective dispatch uses these entry points: when weft__memtype() says the
 * buffers are WEFT_MEM_CUDA, ask weft__select_group(g, WEFT_MEM_CUDA, &sel) (every
 * member gets the same answer); if sel.transport is WEFT_TSEL_NCCL call the function
 * below, if it is WEFT_TSEL_UCX with sel.staged, stage through host memory; if
 * sel.status is an error, return it (sel.why says why). The functions check the
 * selection again and refuse (WEFT_ERR_UNSUPPORTED) when NCCL was not chosen.
 *
 * They return like every nonblocking start: WEFT_INPROGRESS with *req set (the request
 * completes when the GPU has finished the work), WEFT_OK with *req = NULL (nothing to
 * do: count 0), or an error recorded for weft_last_error(). Freeing a request before it
 * completes does not cancel the GPU work: it stays ordered on its stream. They do not
 * count the collective in coll_count/coll_seq: the dispatcher does, as for any
 * collective. @p stream is a cudaStream_t; NULL means the group's stream
 * (weft_group_set_cuda_stream), itself NULL for the default stream. Semantics, in-place
 * rules included, are those of include/weft/coll.h; user dtypes and operators give
 * WEFT_ERR_UNSUPPORTED.
 *
 * Without NCCL in the build these are inline stubs that return WEFT_ERR_UNSUPPORTED.
 */
#ifndef WEFT_NCCL_COMM_H
#define WEFT_NCCL_COMM_H

#include <stdbool.h>

#include "comm/core.h"

/* One side of a point-to-point transfer of device memory (weft__nccl_p2p). */
typedef struct weft_nccl_xfer {
    int rank;     /* group rank of the peer */
    bool send;    /* send @p bytes from @p buf, or receive them into it */
    void *buf;    /* device memory */
    size_t bytes; /* the receiver asks for exactly the bytes sent */
} weft_nccl_xfer_t;

#ifdef WEFT_HAVE_NCCL

/* Collective @p d (every member calls with the same kind, count, dtype, op and root). */
weft_status_t weft__nccl_coll(weft_group_t *g, const weft_tl_dev_coll_t *d, void *stream,
                              weft_req_t **req);

/*
 * For point-to-point users that start at an agreed point (a migration): *chosen says
 * whether the selection (the same on every member) sends CUDA buffers of @p g through
 * NCCL and the library loads here; when it does, the group's communicator of this epoch
 * is made now if it is not there yet, its id keyed by @p seq (a collective count every
 * member passes alike) instead of the group's current count, which may differ between
 * members by then. Collective over the group when it creates (blocking, bounded by the
 * connect timeout). WEFT_OK with *chosen false when NCCL is not the transport.
 */
weft_status_t weft__nccl_p2p_prepare(weft_group_t *g, uint64_t seq, bool *chosen);
/*
 * The transfers of @p xfers in one NCCL group on the communicator's own stream
 * (weft_tl_dev_ops_t::p2p: the n-th send to a peer matches its n-th receive from
 * this rank, and callers must order their calls alike on every rank). Not collective;
 * the communicator must exist (weft__nccl_p2p_prepare). Returns as the functions above.
 */
weft_status_t weft__nccl_p2p(weft_group_t *g, const weft_nccl_xfer_t *xfers, int n,
                             weft_req_t **req);

/* Destroy the group's communicator (aborting it if the group was revoked). Idempotent. */
void weft__nccl_group_release(weft_group_t *g);

#else /* !WEFT_HAVE_NCCL */

static inline weft_status_t weft__nccl_unsupported(weft_group_t *g)
{
    return weft__error(g != NULL ? weft__group_ctx(g) : NULL, WEFT_ERR_UNSUPPORTED,
                       "CUDA buffers through NCCL: this weft was built without NCCL");
}

static inline weft_status_t weft__nccl_coll(weft_group_t *g, const weft_tl_dev_coll_t *d,
                                            void *stream, weft_req_t **req)
{
    (void)d, (void)stream, (void)req;
    return weft__nccl_unsupported(g);
}

static inline weft_status_t weft__nccl_p2p_prepare(weft_group_t *g, uint64_t seq, bool *chosen)
{
    (void)g, (void)seq;
    *chosen = false;
    return WEFT_OK;
}

static inline weft_status_t weft__nccl_p2p(weft_group_t *g, const weft_nccl_xfer_t *xfers, int n,
                                           weft_req_t **req)
{
    (void)xfers, (void)n, (void)req;
    return weft__nccl_unsupported(g);
}

static inline void weft__nccl_group_release(weft_group_t *g)
{
    (void)g;
}

#endif /* WEFT_HAVE_NCCL */
#endif
