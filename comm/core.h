/*
 * The core's contract: what comm/ promises the layers above it (vocab/, migrate/), and
 * the only core header they include besides the leaf headers named in
 * scripts/check-includes.py. The context, group and request are opaque here; their
 * layout is comm/core_impl.h, the core's alone.
 *
 * Threading: every call below is made with the context's API lock held (WEFT_API_LOCK),
 * as the public calls hold it, unless its comment says otherwise. Accessors only read;
 * the values they return stay valid until the next call that may edit the group or the
 * context (a repair, an admission, weft_finalize).
 */
#ifndef WEFT_CORE_CONTRACT_H
#define WEFT_CORE_CONTRACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/ctx/config.h"
#include "comm/ctx/log.h"
#include "comm/ctx/tag.h"
#include "transports/transport.h"
#include "util/clock.h"
#include "weft/coll.h"
#include "weft/core.h"

/* ---- the context ---- */
/* The settings read at weft_init (comm/ctx/config.h). */
const weft_config_t *weft__ctx_config(const weft_ctx_t *ctx);
/* The logger, for WEFT_LOG and its level macros (comm/ctx/log.h). */
const weft_logger_t *weft__ctx_logger(const weft_ctx_t *ctx);
/* Whether member @p member runs on this host (it published the same host id); false for
 * an id never seen. */
bool weft__peer_same_host(const weft_ctx_t *ctx, int member);
/* WEFT_OK while member @p member is alive (or never seen); else why it is gone. */
weft_status_t weft__peer_status(const weft_ctx_t *ctx, int member);
/* Whether this host runs more of the job's ranks than it has cores: nothing may count on
 * a peer running at the same time (no spinning on shared memory). */
bool weft__ctx_oversubscribed(const weft_ctx_t *ctx);
/* Whether a public call is waiting for the API lock: long work done under the lock
 * (the progress thread's jobs, a migration's inline copies) should stop and let it in.
 * Safe without the lock. */
bool weft__ctx_caller_waiting(weft_ctx_t *ctx);
/* Make idle waits yield instead of sleep until @p until_ns (weft__now_ns): a transfer
 * through shared memory is under way whose next step is microseconds away and wakes
 * nobody. Safe without the lock. */
void weft__ctx_spin_until(weft_ctx_t *ctx, uint64_t until_ns);

/* Keys for what a layer keeps outside the process (the SSD tier's MACs): 32 bytes of
 * HMAC-SHA256(the job's data key, "weft-ctx-key-v1:" || @p label), the data key being
 * HMAC-SHA256(job token, "weft-data-v1") (weft__store_data_key; a rank weftrun started
 * is handed it without the token, unless --share-token): the same on every member of the
 * job, replacements and joiners included, and different for every @p label. A context
 * without a store (a singleton) and a NULL @p ctx take this process's own
 * secret instead, 32 random bytes drawn once per process: what is keyed with it can be
 * checked by this process (and its forks) only. Safe without the lock.
 * WEFT_ERR_INVALID_ARG for a NULL @p label or @p out; WEFT_ERR_IO when the OS gives no
 * random bytes. */
#define WEFT__CTX_KEY_BYTES 32
weft_status_t weft__ctx_derive_key(const weft_ctx_t *ctx, const char *label,
                                   uint8_t out[WEFT__CTX_KEY_BYTES]);

/* ---- per-context extensions ---- */
/* A layer above the core keeps state per context under a key of its own (the address of
 * a static object of that layer): weft__ctx_ext returns it (NULL when none is set), and
 * weft__ctx_ext_set stores it with the function weft_finalize calls to release it (after
 * the requests are freed, before the transports close; NULL: nothing to release). At most
 * WEFT__CTX_EXT_MAX keys per context: WEFT_ERR_NO_MEMORY past that. Setting NULL removes
 * the key without calling its release function. */
#define WEFT__CTX_EXT_MAX 4
typedef void (*weft__ctx_ext_fini_fn)(weft_ctx_t *ctx, void *value);
void *weft__ctx_ext(const weft_ctx_t *ctx, const void *key);
weft_status_t weft__ctx_ext_set(weft_ctx_t *ctx, const void *key, void *value,
                                weft__ctx_ext_fini_fn fini);

/* ---- groups ---- */
weft_ctx_t *weft__group_ctx(const weft_group_t *g);
/* This member's rank in @p g and the group's size in its current epoch. */
int weft__group_rank(const weft_group_t *g);
int weft__group_size(const weft_group_t *g);
/* Group rank -> stable member id, [weft__group_size(g)] entries. */
const int *weft__group_members(const weft_group_t *g);
/* The group's id (agreed by all members, never reused in the job) and epoch (goes up with
 * every membership edit). */
uint32_t weft__group_id(const weft_group_t *g);
uint32_t weft__group_epoch(const weft_group_t *g);
/* The sequence number the group's next collective will take, and how many collectives it
 * started: the same on every member at the same point of the program, so operations that
 * must agree without a message (a migration's tags, an NCCL sequence) derive from them. */
uint32_t weft__group_coll_seq(const weft_group_t *g);
uint64_t weft__group_coll_count(const weft_group_t *g);
/* WEFT_OK, or the error every operation on @p g returns now. */
weft_status_t weft__group_status(const weft_group_t *g);
/* The host of each rank of @p g into @p host[g->size]: the lowest rank on the same host
 * (util/host_id.h), -1 for a member whose address was never read. Every member of an
 * epoch knows every other's address (weft__learn_members), so all compute the same
 * table. Returns the number of hosts counted. */
int weft__group_hosts(const weft_group_t *g, int *host);

/* ---- requests ---- */
/* A compound request (one that is not a single transport message) is made by
 * weft__req_new and given its behaviour by weft__req_set_ops: @p progress advances it,
 * returning WEFT_INPROGRESS or its final status; @p cleanup (called once, when it is
 * freed, completed or not) cancels and frees its children and @p impl. */
typedef weft_status_t (*weft__req_progress_fn)(weft_req_t *req);
typedef void (*weft__req_cleanup_fn)(weft_req_t *req);
void weft__req_set_ops(weft_req_t *req, weft__req_progress_fn progress,
                       weft__req_cleanup_fn cleanup, void *impl);
void *weft__req_impl(const weft_req_t *req);
void weft__req_set_impl(weft_req_t *req, void *impl);
/* Its progress function: tells which kind of compound request it is. */
weft__req_progress_fn weft__req_progress(const weft_req_t *req);
weft_ctx_t *weft__req_ctx(const weft_req_t *req);
/* WEFT_INPROGRESS until complete, then its status. */
weft_status_t weft__req_status(const weft_req_t *req);
/* A wait on @p req runs queued jobs while it waits (comm/progress/job.h): for requests
 * whose own work is jobs. Waits on other requests leave jobs to the progress thread. */
void weft__req_set_runs_jobs(weft_req_t *req, bool runs_jobs);
/* Drive transports and failure notices once; nonzero when anything happened. */
int weft__progress(weft_ctx_t *ctx);
/* A new compound request in flight on @p g (status WEFT_INPROGRESS). */
weft_req_t *weft__req_new(weft_ctx_t *ctx, weft_group_t *g);
/* Advance @p req once (without driving the transports) and return its status. */
weft_status_t weft__req_advance(weft_req_t *req);
/* Wait for @p req with the context's default timeout, then free it. NULL: WEFT_OK. */
weft_status_t weft__req_wait_free(weft_req_t *req);
/* Waits for a start call's request: the blocking twin of any nonblocking call. */
weft_status_t weft__blocking(weft_status_t start_status, weft_req_t *req);
/* One idle step of a wait loop: spin, then yield, then sleep briefly. */
void weft__idle(weft_ctx_t *ctx, uint64_t *idle_polls);

/* ---- the API lock (comm/progress/progress_thread.c) ---- */
/* Public calls hold the context's lock while they run, released on every return:
 *     WEFT_API_LOCK(g->ctx);
 * The lock is recursive (public calls call others) and taken only while the thread
 * runs. NULL is allowed (no lock). */
weft_ctx_t *weft__api_lock(weft_ctx_t *ctx);
void weft__api_unlock(weft_ctx_t **held);
#define WEFT_API_LOCK(c)                                                                           \
    weft_ctx_t *weft__held __attribute__((cleanup(weft__api_unlock), unused)) = weft__api_lock(c)
/* Hand a request a public call returns to the thread, which advances it until done. */
void weft__req_publish(weft_req_t *req);

/* ---- buffers of cancelled sends ---- */
/* A send cannot always be withdrawn from the transport once started (UCX keeps a pending
 * or rendezvous send until its peer takes it or its endpoint closes), so a buffer it
 * reads must outlive the request that was cancelled. weft__retire keeps @p ptr (from
 * malloc) until weft_finalize has stopped the transports, then frees it. If the list
 * cannot grow, the buffer is leaked rather than freed early. weft__retire_big does the
 * same for a buffer of @p bytes from weft__bigmem_alloc (util/bigmem.h). */
void weft__retire(weft_ctx_t *ctx, void *ptr);
void weft__retire_big(weft_ctx_t *ctx, void *ptr, size_t bytes);

/* ---- errors ---- */
/* Record detail for weft_last_error(), log it, and return @p status. Peer errors are
 * logged at info level. Once the store is lost, WEFT_ERR_IO and WEFT_ERR_TIMEOUT are its
 * consequences: the loss is appended, and only the first of them is logged (as an error;
 * the others at debug level), so a rank that keeps calling the store does not flood. */
weft_status_t weft__error(weft_ctx_t *ctx, weft_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record detail for weft_last_error() and log it at @p level, as it is. */
weft_status_t weft__error_at(weft_ctx_t *ctx, weft_status_t status, weft_log_level_t level,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Record detail for weft_last_error(NULL), the calling thread's error of a call that has
 * no context (layouts, plans), and return @p status. Nothing is logged. */
weft_status_t weft__error_noctx(weft_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- point-to-point inside the library ---- */
/*
 * Send/receive to group rank @p peer with tag (this group, its epoch, @p cls, @p payload).
 * Same completion convention as the public calls: WEFT_OK with *req = NULL when done.
 * Fails fast with the group's revoke status, or WEFT_ERR_PEER_FAILED for a dead peer.
 */
weft_status_t weft__isend(weft_group_t *g, int peer, const void *buf, size_t len,
                          enum weft_tag_class cls, uint32_t payload, weft_req_t **req);
weft_status_t weft__irecv(weft_group_t *g, int peer, void *buf, size_t len, enum weft_tag_class cls,
                          uint32_t payload, weft_req_t **req);

/* weft__irecv that also reports the length when it completes inline (recvd may be NULL). */
weft_status_t weft__irecv_len(weft_group_t *g, int peer, void *buf, size_t len,
                              enum weft_tag_class cls, uint32_t payload, weft_req_t **req,
                              size_t *recvd);

/* ---- memory ---- */
/*
 * WEFT_MEM_CUDA for CUDA device or managed memory, WEFT_MEM_HOST otherwise (pinned host
 * memory included). Never fails: CUDA errors count as host memory and are cleared. In a
 * process that has not loaded the CUDA driver nothing of CUDA is touched; otherwise the
 * device count is probed once and cached.
 */
weft_memtype_t weft__memtype(const void *ptr);

#endif
