/*
 * Starting a collective from inside the library (comm/coll/common.c): what vocab/ and
 * migrate/ use to run a collective as a step of their own requests. The algorithms and
 * their state are comm/coll/coll.h, the core's alone.
 */
#ifndef WEFT_COLL_START_H
#define WEFT_COLL_START_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/core.h"

enum weft_coll_kind {
    WEFT_COLL_ALLREDUCE = 1,
    WEFT_COLL_REDUCE_SCATTER = 2,
    WEFT_COLL_ALLGATHER = 3,
    WEFT_COLL_BROADCAST = 4,
    WEFT_COLL_REDUCE = 5,
    WEFT_COLL_ALLTOALL = 6,
    WEFT_COLL_ALLTOALLV = 7,
    WEFT_COLL_BARRIER = 8,
};

/* What the caller asked for. */
typedef struct weft_coll_args {
    enum weft_coll_kind kind;
    const char *name; /* "allreduce", ... for messages */
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    weft_dtype_t dtype;
    weft_op_t op;
    int root;
    const size_t *sendcounts, *sdispls, *recvcounts, *rdispls; /* alltoallv */
    /* What this rank returns when another refused its arguments: WEFT_OK for
     * WEFT_ERR_MISMATCH (the collectives), or the refusal's own status (the vocabulary
     * passes: WEFT_ERR_INVALID_ARG on every rank). */
    weft_status_t refused_status;
} weft_coll_args_t;

/* The arguments of every kind but alltoallv (whose count arrays the caller adds). */
static inline weft_coll_args_t weft__coll_args(enum weft_coll_kind kind, const char *name,
                                               const void *sendbuf, void *recvbuf, size_t count,
                                               weft_dtype_t dtype, weft_op_t op, int root)
{
    return (weft_coll_args_t){.kind = kind,
                              .name = name,
                              .sendbuf = sendbuf,
                              .recvbuf = recvbuf,
                              .count = count,
                              .dtype = dtype,
                              .op = op,
                              .root = root};
}

/*
 * Validate, count, number and set up a collective (the kind's setup hook chooses the
 * algorithm), then post its first messages. Returns WEFT_OK with *req = NULL when it
 * completed inline (one rank), WEFT_INPROGRESS with *req set, or an error.
 */
weft_status_t weft__coll_start(weft_group_t *g, const weft_coll_args_t *a, weft_req_t **req);
/*
 * This rank rejects its arguments of collective @p a (its caller reports why): the others
 * are in that collective all the same. Tell them now rather than at their timeout, and use
 * up its number so that the group stays in step. They fail it with WEFT_ERR_MISMATCH, or
 * with @p a's refused_status. Through shared memory this rank posts a header flagged as
 * refused, in its turn; over messages it posts every message of its part of the exchange
 * phase at once, so its header reaches every peer even if this rank does not call weft
 * again. With @p blocking, the refusal is driven to its end here (as the collective would
 * have been); else it is left to the progress thread and to the waits of later calls.
 * Nothing on CUDA buffers (NCCL has no way to refuse).
 */
void weft__coll_refuse(weft_group_t *g, const weft_coll_args_t *a, bool blocking);

/* A collective started as the child of another request: */
/* Test child request *r once; on completion free it, set *r = NULL, report the length. */
weft_status_t weft__coll_child_test(weft_req_t **r, size_t *bytes);
/* Test children reqs[0..n) once each, as above: the first error, else WEFT_INPROGRESS while
 * any is in flight, else WEFT_OK. */
weft_status_t weft__coll_children_test(weft_req_t **reqs, size_t n);
/* Cancel and free a child request (NULL is fine). */
void weft__coll_child_drop(weft_req_t **r);
/* The same for reqs[0..n) (a NULL array is fine). */
void weft__coll_children_drop(weft_req_t **reqs, size_t n);

#endif
