/*
 * The transports and their capability tables. Every transport is reached through them.
 * A transport (weft_transport_t) is a name, an availability check and one table per
 * capability it has, each starting with its size and filled with designated
 * initializers: its kind is which tables it fills, never a pattern of NULL entries.
 *   - weft_tl_msg_ops_t: tagged messages between processes (self, ucx);
 *   - weft_tl_dev_ops_t: collectives and point-to-point on device memory between the
 *     ranks of a communicator, enqueued on CUDA streams (nccl).
 * No transport knows groups, contexts or the store: the comm layer exchanges addresses
 * and ids, builds tags and maps failures to groups. Every entry of every table is called
 * by the library (tests/scripts/check_tl_entries.py). Transports include only public
 * weft headers, their own and util/.
 */
#ifndef WEFT_TRANSPORT_H
#define WEFT_TRANSPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/coll.h"
#include "weft/status.h"

typedef struct weft_tl weft_tl_t;       /* one transport instance in one process */
typedef struct weft_tl_ep weft_tl_ep_t; /* a connection to one peer */
typedef struct weft_tl_comm weft_tl_comm_t; /* a communicator over the ranks of a group */
typedef struct weft_tl_op weft_tl_op_t;     /* one group operation enqueued on a stream */

/* Memory a buffer lives in. Detected by the comm layer, never assumed. */
typedef enum weft_memtype {
    WEFT_MEM_HOST = 0,
    WEFT_MEM_CUDA = 1,
} weft_memtype_t;

/* Services the comm layer lends a transport. */
typedef struct weft_tl_params {
    size_t size;   /* sizeof(weft_tl_params_t) */
    int self_id;   /* stable id of this process (world rank at start) */
    int num_peers; /* upper bound on peer ids seen so far */
    /* printf-style logger; level is a weft_log_level_t. May be NULL. */
    void (*log)(void *arg, int level, const char *fmt, va_list ap);
    void *log_arg;
    /* Called from progress() when the connection to peer @p peer_id broke. */
    void (*peer_failed)(void *arg, int peer_id, weft_status_t why);
    void *cb_arg;
} weft_tl_params_t;

/* What a message transport reaches (weft_tl_msg_ops_t::flags). */
enum {
    /* Only this process: a loopback with nothing to publish. Without it, a message
     * transport reaches other processes through the address it publishes. */
    WEFT_TL_LOOPBACK = 1u << 0,
};

/* One side of a point-to-point transfer with one rank of a communicator (dev p2p()). */
typedef struct weft_tl_p2p {
    int peer;     /* rank in the communicator */
    int send;     /* nonzero: send @p bytes from @p buf; zero: receive them into @p buf */
    void *buf;    /* device memory */
    size_t bytes; /* the receiver asks for exactly the bytes sent */
} weft_tl_p2p_t;

/* Largest id that the members of a new communicator share (NCCL_UNIQUE_ID_BYTES). */
#define WEFT_TL_COMM_ID_MAX 128

/* What a group-collective transport needs to form one rank's member of a communicator. */
typedef struct weft_tl_comm_params {
    size_t size; /* sizeof(weft_tl_comm_params_t) */
    int nranks, rank;
    int device;               /* CUDA device to use; -1: the caller's current device */
    uint64_t init_timeout_ns; /* creation deadline; the communicator is aborted after it */
    uint64_t op_timeout_ns;   /* an operation unfinished after this aborts the comm */
    /* printf-style logger (level: weft_log_level_t), as weft_tl_params_t::log; may be NULL */
    void (*log)(void *arg, int level, const char *fmt, va_list ap);
    void *log_arg;
} weft_tl_comm_params_t;

/* ---- tagged messages ---- */

typedef struct weft_tl_msg_ops {
    size_t size;    /* sizeof(weft_tl_msg_ops_t) */
    unsigned flags; /* WEFT_TL_* */

    weft_status_t (*init)(const weft_tl_params_t *params, weft_tl_t **tl);
    void (*fini)(weft_tl_t *tl);

    /* This process's address, owned by @p tl, to be published to peers. */
    weft_status_t (*address)(weft_tl_t *tl, const void **addr, size_t *len);
    weft_status_t (*connect)(weft_tl_t *tl, int peer_id, const void *addr, size_t len,
                             weft_tl_ep_t **ep);
    /* Drop a connection; outstanding sends on it are cancelled. */
    void (*disconnect)(weft_tl_t *tl, weft_tl_ep_t *ep);

    /*
     * Tagged messages. Receives match the full 64-bit tag under @p tag_mask; the comm
     * layer encodes the sender in the tag. Messages with equal tags from one sender
     * match in send order. Return WEFT_OK when complete inline (*req = NULL),
     * WEFT_INPROGRESS with *req set, or an error (*req untouched).
     */
    weft_status_t (*isend)(weft_tl_t *tl, weft_tl_ep_t *ep, const void *buf, size_t len,
                           uint64_t tag, void **req);
    /* On inline completion (WEFT_OK) *recvd holds the received length. */
    weft_status_t (*irecv)(weft_tl_t *tl, void *buf, size_t len, uint64_t tag,
                           uint64_t tag_mask, void **req, size_t *recvd);
    /*
     * WEFT_INPROGRESS, or the final status; on a final status @p req is released and
     * *len holds the bytes moved. A receive whose message was longer than its buffer
     * completes with WEFT_ERR_MISMATCH.
     */
    weft_status_t (*test)(weft_tl_t *tl, void *req, size_t *len);
    /* Cancel and release a request that has not completed. */
    void (*cancel)(weft_tl_t *tl, void *req);
    /* Drive communication; returns nonzero when anything happened. */
    int (*progress)(weft_tl_t *tl);
    /* Drop unexpected messages whose tag matches under mask (stale epochs). */
    void (*discard)(weft_tl_t *tl, uint64_t tag, uint64_t tag_mask);
} weft_tl_msg_ops_t;

/* ---- device memory ---- */

/* The collectives of weft_tl_dev_ops_t::coll(). */
typedef enum weft_tl_coll_kind {
    WEFT_TL_COLL_ALLREDUCE = 1,
    WEFT_TL_COLL_BROADCAST = 2,
    WEFT_TL_COLL_ALLGATHER = 3,
    WEFT_TL_COLL_REDUCE_SCATTER = 4,
} weft_tl_coll_kind_t;

/* One collective on device buffers; semantics, in place included, are those of
 * include/weft/coll.h. */
typedef struct weft_tl_dev_coll {
    size_t size; /* sizeof(weft_tl_dev_coll_t) */
    weft_tl_coll_kind_t kind;
    const void *sendbuf; /* broadcast: read on the root only */
    void *recvbuf;
    size_t count; /* elements of @p dtype; per rank for allgather and reduce-scatter */
    weft_dtype_t dtype;
    weft_op_t op; /* allreduce, reduce-scatter */
    int root;     /* broadcast: rank in the communicator */
} weft_tl_dev_coll_t;

/*
 * Collectives and point-to-point on device memory, enqueued on CUDA streams between the
 * ranks of a communicator (NCCL). Every entry is filled (comm_shrink and comm_can_shrink
 * may be NULL, together). Nothing here hangs: creation and enqueueing are polled against
 * the deadlines of weft_tl_comm_params_t; a failed communicator fails every operation on
 * it.
 */
typedef struct weft_tl_dev_ops {
    size_t size;          /* sizeof(weft_tl_dev_ops_t) */
    size_t comm_id_bytes; /* <= WEFT_TL_COMM_ID_MAX */
    /* A fresh id for one communicator: one rank makes it, every rank passes it to
     * comm_create(). WEFT_OK or WEFT_ERR_TRANSPORT. */
    weft_status_t (*comm_id)(void *id);
    /* This rank's member of a new communicator; waits (polling) until every rank joined
     * or the init timeout passed. Collective. WEFT_OK, WEFT_ERR_INVALID_ARG,
     * WEFT_ERR_NO_MEMORY, WEFT_ERR_UNSUPPORTED (no device or library), WEFT_ERR_TIMEOUT,
     * WEFT_ERR_PEER_FAILED or WEFT_ERR_TRANSPORT (logged once). */
    weft_status_t (*comm_create)(const weft_tl_comm_params_t *p, const void *id,
                                 weft_tl_comm_t **comm);
    /* Nonzero when comm_shrink() can derive a communicator from @p parent now. */
    int (*comm_can_shrink)(const weft_tl_comm_t *parent);
    /* A communicator of the ranks of @p parent not listed in exclude[0..n_exclude)
     * (ranks of the parent), in their order; work left on a failed parent is aborted.
     * Collective over those ranks. Returns as comm_create(); @p parent stays and must
     * still be destroyed. Optional. */
    weft_status_t (*comm_shrink)(weft_tl_comm_t *parent, const int *exclude, int n_exclude,
                                 const weft_tl_comm_params_t *p, weft_tl_comm_t **comm);
    /* Wait for the operations (bounded by the operation timeout), then free; abort when
     * failed or late. Unreleased operations stay valid and complete with
     * WEFT_ERR_REVOKED unless already complete. NULL is a no-op. */
    void (*comm_destroy)(weft_tl_comm_t *c);
    /* Stop the work in flight now; every pending operation completes with @p why.
     * Idempotent, the first reason stays. The communicator may still be shrunk. */
    void (*comm_abort)(weft_tl_comm_t *c, weft_status_t why);
    /* Poll asynchronous errors and operation ages (either aborts), retire finished
     * operations. WEFT_OK while usable, else the error it failed with. */
    weft_status_t (*comm_poll)(weft_tl_comm_t *c);
    /* Why the communicator failed ("" while it is fine), owned by @p c; with NULL, why
     * the transport is not available ("" when it is). */
    const char *(*comm_error)(const weft_tl_comm_t *c);
    /*
     * Enqueue collective @p d on device buffers. @p stream is a cudaStream_t (NULL: the
     * legacy default stream). WEFT_INPROGRESS with *op set once enqueued, WEFT_OK with
     * *op = NULL when there is nothing to do (count 0), or an error (*op untouched):
     * WEFT_ERR_INVALID_ARG (a NULL buffer, a root out of range, an unknown kind),
     * WEFT_ERR_UNSUPPORTED (user dtype or operator), the communicator's failure,
     * WEFT_ERR_TIMEOUT or WEFT_ERR_TRANSPORT.
     */
    weft_status_t (*coll)(weft_tl_comm_t *c, const weft_tl_dev_coll_t *d, void *stream,
                          weft_tl_op_t **op);
    /*
     * Point-to-point on device buffers: every transfer of @p ops (with any ranks, sends
     * and receives) in one group, enqueued on a stream the communicator owns (made on
     * the first call), so that the caller's streams never wait for it. The n-th transfer
     * this rank sends to a peer matches the n-th that peer receives from this rank.
     * Transfers of one call progress together; calls run one after the other, in the
     * order they were made, so callers on different ranks must order their calls alike
     * or a transfer may wait for a peer's call queued behind one that waits for this
     * rank (the operation timeout then fails the communicator). Returns as coll();
     * WEFT_OK with *op = NULL when every transfer is empty.
     */
    weft_status_t (*p2p)(weft_tl_comm_t *c, const weft_tl_p2p_t *ops, int nops, weft_tl_op_t **op);
    /* WEFT_INPROGRESS until the work finished on the GPU, then WEFT_OK or the error that
     * failed it. Never blocks. NULL: WEFT_OK. */
    weft_status_t (*op_test)(weft_tl_op_t *op);
    /* Drop the handle; running GPU work is not cancelled (the communicator retires it).
     * NULL is a no-op. */
    void (*op_release)(weft_tl_op_t *op);
} weft_tl_dev_ops_t;

/* ---- the transports ---- */

typedef struct weft_transport {
    size_t size; /* sizeof(weft_transport_t) */
    const char *name;
    /* Nonzero if the transport can run on this machine (library present, devices). */
    int (*available)(void);
    /* Its capability tables; NULL: it has not that capability. */
    const weft_tl_msg_ops_t *msg;
    const weft_tl_dev_ops_t *dev;
} weft_transport_t;

/* Built-in transports, in preference order; NULL-terminated. */
extern const weft_transport_t *const weft__transports[];
const weft_transport_t *weft__transport_find(const char *name);

extern const weft_transport_t weft__tl_self;
extern const weft_transport_t weft__tl_ucx;
#ifdef WEFT_HAVE_NCCL
extern const weft_transport_t weft__tl_nccl;
#endif

#endif
