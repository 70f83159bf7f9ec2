/*
 * The transport ops table. A transport moves tagged messages between processes and
 * knows nothing of groups, contexts or the store: the comm layer exchanges addresses,
 * builds tags and maps failures to groups. Transports include only public weft headers,
 * their own and util/.
 */
#ifndef WEFT_TRANSPORT_H
#define WEFT_TRANSPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

typedef struct weft_tl weft_tl_t;       /* one transport instance in one process */
typedef struct weft_tl_ep weft_tl_ep_t; /* a connection to one peer */
typedef struct weft_tl_mem weft_tl_mem_t; /* registered memory (RMA) */

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

typedef struct weft_transport_ops {
    size_t size; /* sizeof(weft_transport_ops_t) */
    const char *name;
    /* Nonzero if the transport can run on this machine (library present, devices). */
    int (*available)(void);

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
    /* Drop unexpected messages whose tag matches under mask (stale epochs). Optional. */
    void (*discard)(weft_tl_t *tl, uint64_t tag, uint64_t tag_mask);

    /* One-sided access (migration). Optional: NULL when not supported. */
    weft_status_t (*mem_reg)(weft_tl_t *tl, void *buf, size_t len, weft_tl_mem_t **mem,
                             const void **rkey, size_t *rkey_len);
    void (*mem_dereg)(weft_tl_t *tl, weft_tl_mem_t *mem);
    weft_status_t (*put)(weft_tl_t *tl, weft_tl_ep_t *ep, const void *buf, size_t len,
                         uint64_t remote_addr, const void *rkey, size_t rkey_len, void **req);
    weft_status_t (*get)(weft_tl_t *tl, weft_tl_ep_t *ep, void *buf, size_t len,
                         uint64_t remote_addr, const void *rkey, size_t rkey_len, void **req);
} weft_transport_ops_t;

/* Built-in transports, in preference order; NULL-terminated. */
extern const weft_transport_ops_t *const weft__transports[];
const weft_transport_ops_t *weft__transport_find(const char *name);

extern const weft_transport_ops_t weft__tl_self;
extern const weft_transport_ops_t weft__tl_ucx;
#ifdef WEFT_HAVE_NCCL
extern const weft_transport_ops_t weft__tl_nccl;
#endif

#endif
