/*
 * The NCCL transport: collectives and point-to-point on CUDA buffers between the ranks
 * of one NCCL communicator, enqueued on a caller-given CUDA stream.
 *
 * NCCL does not fit the tagged-message ops table (it moves whole collectives, ordered
 * on a stream, between the ranks of a communicator), so weft__tl_nccl only answers
 * available(); the comm layer (comm/nccl_comm.c) drives NCCL through this API instead.
 * The caller distributes the unique id (through the store) and maps ranks.
 *
 * Nothing here hangs: communicators are created non-blocking and polled against a
 * deadline; every operation is tracked by a CUDA event; asynchronous errors are polled
 * with ncclCommGetAsyncError and turned into weft statuses; an error, or an operation
 * older than the operation timeout, aborts the communicator (ncclCommAbort), after which
 * every operation on it completes with the error.
 *
 * Compiled only when WEFT_HAVE_NCCL. Includes only public weft headers.
 */
#ifndef WEFT_NCCL_H
#define WEFT_NCCL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/coll.h"
#include "weft/status.h"

#define WEFT_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct weft_nccl_comm weft_nccl_comm_t; /* one NCCL communicator */
typedef struct weft_nccl_op weft_nccl_op_t;     /* one enqueued operation */

typedef struct weft_nccl_params {
    size_t size; /* sizeof(weft_nccl_params_t) */
    int nranks, rank;
    int device;               /* CUDA device to use; -1: the caller's current device */
    uint64_t init_timeout_ns; /* creation deadline; the communicator is aborted after it */
    uint64_t op_timeout_ns;   /* an operation unfinished after this aborts the comm */
    /* printf-style logger (level: weft_log_level_t), as weft_tl_params_t::log; may be NULL */
    void (*log)(void *arg, int level, const char *fmt, va_list ap);
    void *log_arg;
} weft_nccl_params_t;

/* Nonzero if NCCL is built in and a CUDA device is visible (probed once). */
int weft__nccl_available(void);

/* Version of the linked NCCL library, e.g. 22809 for 2.28.9; 0 if unknown. */
int weft__nccl_version(void);

/*
 * A fresh unique id (WEFT_NCCL_ID_BYTES bytes) for one communicator; one rank makes it
 * and every rank passes the same bytes to weft__nccl_comm_create().
 * WEFT_OK or WEFT_ERR_TRANSPORT.
 */
weft_status_t weft__nccl_unique_id(void *id);

/*
 * Create this rank's member of a communicator and wait (polling, yielding) until every
 * rank has joined or the init timeout passes. Collective over the p->nranks ranks.
 * Returns WEFT_OK, WEFT_ERR_INVALID_ARG, WEFT_ERR_NO_MEMORY, WEFT_ERR_TIMEOUT (aborted),
 * WEFT_ERR_PEER_FAILED or WEFT_ERR_TRANSPORT (NCCL or CUDA errors, logged once).
 */
weft_status_t weft__nccl_comm_create(const weft_nccl_params_t *p, const void *id,
                                     weft_nccl_comm_t **comm);

/*
 * Destroy the communicator: wait for its operations (bounded by the operation timeout),
 * finalize and free it; abort instead when it failed or the wait times out. Operations
 * not yet released stay valid, complete with WEFT_ERR_REVOKED unless already complete,
 * and must still be released. NULL is a no-op.
 */
void weft__nccl_comm_destroy(weft_nccl_comm_t *c);

/*
 * Abort the communicator now (ncclCommAbort): GPU work of pending operations is
 * cancelled and each of them completes with @p why. Idempotent; the first reason stays.
 */
void weft__nccl_comm_abort(weft_nccl_comm_t *c, weft_status_t why);

/*
 * Check for asynchronous errors and for operations older than the operation timeout
 * (either aborts the communicator), and retire finished operations.
 * Returns WEFT_OK while the communicator is usable, else the error it failed with.
 */
weft_status_t weft__nccl_comm_poll(weft_nccl_comm_t *c);

/* Why the communicator failed ("" while it is fine). Owned by @p c. */
const char *weft__nccl_comm_error(const weft_nccl_comm_t *c);

/*
 * Operations. Buffers are CUDA device (or managed) memory; counts are in elements of
 * @p dtype (bytes for send/recv). @p stream is a cudaStream_t (NULL: the legacy default
 * stream). Each returns WEFT_INPROGRESS with *op set once the work is enqueued,
 * WEFT_OK with *op = NULL when there is nothing to do (count 0), or an error (*op
 * untouched): WEFT_ERR_INVALID_ARG, WEFT_ERR_UNSUPPORTED (user dtype or operator),
 * the communicator's failure, WEFT_ERR_TIMEOUT (enqueue did not finish), or
 * WEFT_ERR_TRANSPORT. In place follows weft (include/weft/coll.h): sendbuf == recvbuf
 * for allreduce and broadcast; sendbuf == recvbuf + rank*count elements for allgather;
 * sendbuf == recvbuf for reduce_scatter (input in recvbuf, result at its start).
 */
weft_status_t weft__nccl_comm_allreduce(weft_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                        size_t count, weft_dtype_t dtype, weft_op_t op,
                                        void *stream, weft_nccl_op_t **nop);
weft_status_t weft__nccl_comm_broadcast(weft_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                        size_t count, weft_dtype_t dtype, int root, void *stream,
                                        weft_nccl_op_t **nop);
/* recvbuf holds nranks * count elements in rank order. */
weft_status_t weft__nccl_comm_allgather(weft_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                        size_t count, weft_dtype_t dtype, void *stream,
                                        weft_nccl_op_t **nop);
/* sendbuf holds nranks * count elements; recvbuf receives this rank's count. */
weft_status_t weft__nccl_comm_reduce_scatter(weft_nccl_comm_t *c, const void *sendbuf,
                                             void *recvbuf, size_t count, weft_dtype_t dtype,
                                             weft_op_t op, void *stream, weft_nccl_op_t **nop);
/*
 * Send @p send_bytes to rank @p dst and receive @p recv_bytes from rank @p src in one
 * NCCL group (so a rank may send to itself). Either side is skipped with a rank of -1.
 * The receiver must ask for exactly the number of bytes sent.
 */
weft_status_t weft__nccl_comm_sendrecv(weft_nccl_comm_t *c, const void *sendbuf, size_t send_bytes,
                                       int dst, void *recvbuf, size_t recv_bytes, int src,
                                       void *stream, weft_nccl_op_t **nop);

/*
 * Progress: WEFT_INPROGRESS until the operation's work has finished on the GPU, then
 * WEFT_OK, or the error that failed it (its communicator was aborted). Never blocks.
 */
weft_status_t weft__nccl_op_test(weft_nccl_op_t *op);

/*
 * Drop the caller's handle. An operation still running is not cancelled (GPU work
 * cannot be): it stays ordered on its stream, and the communicator retires it. NULL is
 * a no-op.
 */
void weft__nccl_op_release(weft_nccl_op_t *op);

#endif
