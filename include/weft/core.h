/**
 * @file core.h
 * @brief Context, world group, requests and point-to-point messages.
 *
 * Lifecycle: weft_init() creates a context from the environment set by weftrun (or
 * mpirun/srun plus WEFT_STORE); weft_ctx_world() gives the group of all ranks;
 * weft_finalize() releases everything. Handles (context, group) live long and are
 * freed explicitly; requests are short-lived and freed with weft_req_free().
 *
 * Naming: every nonblocking start returns a weft_req_t, finished by weft_test() /
 * weft_wait() and released by weft_req_free(), which cancels one still in flight.
 * A name with `i` before its verb (weft_iallreduce(), weft_vocab_iembed_forward()) is
 * the nonblocking twin of the blocking call with the same name without the `i`
 * (weft_allreduce(), weft_vocab_embed_forward()). A name ending in `_start`
 * (weft_vocab_xent_merge_start(), weft_vocab_embed_grad_bcast_start()) is a nonblocking
 * operation with no blocking twin. `_free` is the one cleanup verb of handles and requests
 * (weft_req_free(), weft_vocab_free()); weft_finalize() is the twin of weft_init().
 *
 * Thread safety: a context and everything created from it may be used by one thread at
 * a time. Different contexts are independent.
 */
#ifndef WEFT_CORE_H
#define WEFT_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "weft/export.h"
#include "weft/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_VERSION_MAJOR 1
#define WEFT_VERSION_MINOR 0
#define WEFT_VERSION_PATCH 0
/** @brief Version as one integer: major * 10000 + minor * 100 + patch. */
#define WEFT_VERSION_CODE                                                                      \
    (WEFT_VERSION_MAJOR * 10000 + WEFT_VERSION_MINOR * 100 + WEFT_VERSION_PATCH)

/** @brief A timeout meaning "the context's default" (setting WEFT_TIMEOUT_MS). */
#define WEFT_TIMEOUT_DEFAULT UINT64_MAX

/**
 * @brief Exit status of a process that ends because the job failed, not itself: its
 * work cannot go on (training state lost, a result that is wrong), so starting it again
 * would not help.
 *
 * weftrun, in every mode (`--keep-going`, `--elastic`, `--replace`, several nodes),
 * replaces no process for it, stops the job (the other ranks get SIGTERM, and every
 * node's weftrun stops its own) and exits with this status, whatever the others do
 * after. Any other non-zero status, or a signal, is a death: a failure of that process,
 * which `--elastic` tolerates and `--replace` replaces. Python: `sys.exit(86)`.
 */
#define WEFT_EXIT_JOB_FAILED 86

typedef struct weft_ctx weft_ctx_t;     /**< A process's weft instance. */
typedef struct weft_group weft_group_t; /**< An ordered set of ranks. */
typedef struct weft_req weft_req_t;     /**< A nonblocking operation in flight. */

/** @brief Severity of a log message. */
typedef enum weft_log_level {
    WEFT_LOG_ERROR = 0,
    WEFT_LOG_WARN = 1,
    WEFT_LOG_INFO = 2,
    WEFT_LOG_DEBUG = 3,
    WEFT_LOG_TRACE = 4,
} weft_log_level_t;

/**
 * @brief A log sink installed by the application.
 * @param[in] level Severity.
 * @param[in] rank  World rank of this process, or -1 before it is known.
 * @param[in] msg   The formatted message without a trailing newline.
 * @param[in] arg   The pointer given in weft_init_params_t::log_arg.
 */
typedef void (*weft_log_fn)(weft_log_level_t level, int rank, const char *msg, void *arg);

/** @brief Optional parameters of weft_init(). Zero-initialise, then set @c size. */
typedef struct weft_init_params {
    size_t size;          /**< sizeof(weft_init_params_t); lets the struct grow. */
    weft_log_fn log_fn;   /**< Log sink; NULL logs to stderr. */
    void *log_arg;        /**< Passed to log_fn. */
} weft_init_params_t;

/**
 * @brief Library version.
 * @param[out] major,minor,patch Each may be NULL.
 * @return The version string, e.g. "1.0.0".
 */
WEFT_API const char *weft_version(int *major, int *minor, int *patch);

/**
 * @brief Create a context: read WEFT_* settings, find rank and size from the launcher's
 * environment, connect to the rendezvous store and to the transports.
 *
 * Collective over all ranks of the job: every rank must call it.
 * @param[in]  params Optional (NULL for defaults).
 * @param[out] ctx    The new context, set only on success.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG for a bad setting or an inconsistent launch
 *         environment; WEFT_ERR_AUTH if the store refuses the job token; WEFT_ERR_TIMEOUT
 *         if the other ranks did not arrive in time; WEFT_ERR_IO, WEFT_ERR_TRANSPORT.
 */
WEFT_API weft_status_t weft_init(const weft_init_params_t *params, weft_ctx_t **ctx);

/**
 * @brief Destroy a context and every group and request created from it.
 *
 * A process that ends without it (returns from main, calls exit(), dies of an uncaught
 * Python exception) ends cleanly, with its own exit status: the first weft_init()
 * registers an exit handler that, before OpenSSL's own exit handler runs, stops the
 * threads weft started for each live context (waiting at most 1 s for them) and makes
 * the context's store connection unusable, without taking the context's lock (another
 * thread may be in a weft call). The other members see such a process fail, as they see
 * any death. weft_finalize() called after that handler ran (from a later exit handler or
 * a static destructor) does nothing.
 * @param[in] ctx May be NULL (no-op).
 * @return WEFT_OK.
 */
WEFT_API weft_status_t weft_finalize(weft_ctx_t *ctx);

/**
 * @brief Detail of the last error on this context: which call, which rank, why.
 * @param[in] ctx The context, or NULL for the calling thread's last error of a call that
 *                takes no context (layouts and plans, weft/migrate.h) or of a weft_init()
 *                that failed (why the environment or the store was refused).
 * @return A string owned by the context (or the thread), valid until its next call; ""
 *         if none.
 */
WEFT_API const char *weft_last_error(const weft_ctx_t *ctx);

/**
 * @brief The group of all ranks of the job. Owned by the context: do not destroy it.
 * @return WEFT_OK, or WEFT_ERR_INVALID_ARG for NULL arguments.
 */
WEFT_API weft_status_t weft_ctx_world(weft_ctx_t *ctx, weft_group_t **world);

/** @brief This process's position in @p g (0 .. size-1). @return WEFT_OK or an error. */
WEFT_API weft_status_t weft_group_rank(const weft_group_t *g, int *rank);

/** @brief Number of active members of @p g. @return WEFT_OK or an error. */
WEFT_API weft_status_t weft_group_size(const weft_group_t *g, int *size);

/**
 * @brief Start sending @p bytes from @p buf to group rank @p peer with a user tag.
 *
 * Messages between one pair with one tag arrive in the order they were sent. The buffer
 * must not be changed until the request completes.
 * @param[in]  tag  0 .. WEFT_TAG_MAX.
 * @param[out] req  The request, or NULL when the send completed inline (WEFT_OK).
 * @return WEFT_OK (completed, *req = NULL), WEFT_INPROGRESS (*req set), or an error.
 */
WEFT_API weft_status_t weft_isend(weft_group_t *g, const void *buf, size_t bytes, int peer,
                                  uint32_t tag, weft_req_t **req);

/**
 * @brief Start receiving at most @p bytes into @p buf from group rank @p peer.
 *
 * A message longer than @p bytes completes the request with WEFT_ERR_MISMATCH (the
 * content of @p buf is then undefined; weft_last_error() names the peer, the tag and the
 * buffer's size). As in MPI, the sender is not told: its send completes normally.
 * weft_req_bytes() gives the received length.
 * @return WEFT_OK (completed, *req = NULL), WEFT_INPROGRESS (*req set), or an error.
 */
WEFT_API weft_status_t weft_irecv(weft_group_t *g, void *buf, size_t bytes, int peer, uint32_t tag,
                                  weft_req_t **req);

/** @brief Largest user tag accepted by weft_isend() / weft_irecv(). */
#define WEFT_TAG_MAX ((1u << 24) - 1)

/** @brief Blocking weft_isend() with the default timeout. */
WEFT_API weft_status_t weft_send(weft_group_t *g, const void *buf, size_t bytes, int peer,
                                 uint32_t tag);

/** @brief Blocking weft_irecv() with the default timeout; @p received may be NULL. */
WEFT_API weft_status_t weft_recv(weft_group_t *g, void *buf, size_t bytes, int peer, uint32_t tag,
                                 size_t *received);

/**
 * @brief Make progress on @p req without blocking. When the progress thread is advancing
 * @p req and keeping up, only its status is read: the work stays on that thread.
 * @return WEFT_OK when it completed successfully, WEFT_INPROGRESS when not yet, or the
 *         error it completed with. A NULL request counts as completed (WEFT_OK).
 */
WEFT_API weft_status_t weft_test(weft_req_t *req);

/**
 * @brief Wait until @p req completes or @p timeout_ns passes.
 *
 * Waiting yields the processor between progress attempts, so oversubscribed ranks do
 * not starve each other. Once the rendezvous store is lost, a hung peer can no longer be
 * detected, so a wait (and every blocking call) lasts at most WEFT_FAILURE_TIMEOUT_MS,
 * counted from its start or from the loss, whichever is later.
 * @param[in] timeout_ns Nanoseconds, or WEFT_TIMEOUT_DEFAULT.
 * @return The request's status, or WEFT_ERR_TIMEOUT (the request stays valid and may be
 *         waited on again or freed).
 */
WEFT_API weft_status_t weft_wait(weft_req_t *req, uint64_t timeout_ns);

/** @brief Bytes transferred by a completed request. @return WEFT_OK or an error. */
WEFT_API weft_status_t weft_req_bytes(const weft_req_t *req, size_t *bytes);

/**
 * @brief Release a request. A request still in flight is cancelled first; its buffer
 * may be reused once this returns. NULL is a no-op.
 */
WEFT_API weft_status_t weft_req_free(weft_req_t *req);

/**
 * @brief Host memory for large state a rank keeps (its shard of parameters and optimizer
 * state, buffers a restore writes into), like MPI_Alloc_mem. Zeroed; from 2 MiB up it is
 * 2 MiB aligned and asks the kernel for huge pages (MADV_HUGEPAGE; plain pages where
 * transparent huge pages are off). That matters under failure: the kernel frees a killed
 * process's memory before it closes its sockets, so its peers learn of the death only
 * after that, and memory on 2 MiB pages is freed much sooner than the same memory on
 * 4 KiB pages. Snapshots keep their copies in such memory. Needs no context. Buffered
 * read() from files into huge pages can be slower than into plain pages (O_DIRECT reads
 * are not affected): read checkpoints into plain memory or with O_DIRECT.
 * @param[in] bytes Size; 0 gives a valid pointer to free.
 * @param[out] ptr The memory.
 * @return WEFT_OK, WEFT_ERR_INVALID_ARG (NULL @p ptr) or WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_mem_alloc(size_t bytes, void **ptr);

/**
 * @brief Free memory of weft_mem_alloc; @p bytes as allocated. NULL is a no-op.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG, with nothing freed, when @p ptr is not a buffer
 *         weft_mem_alloc handed out (or was freed already) or @p bytes is not its size.
 */
WEFT_API weft_status_t weft_mem_free(void *ptr, size_t bytes);

/** @brief Description of one WEFT_* setting, for listings such as `weft-info --config`. */
typedef struct weft_config_entry {
    const char *name;     /**< Variable name, e.g. "WEFT_LOG_LEVEL". */
    const char *deflt;    /**< Default value as text. */
    const char *doc;      /**< One-line documentation. */
} weft_config_entry_t;

/**
 * @brief The table of settings: entry @p index, or NULL past the end.
 * @param[in]  index 0 .. n-1.
 * @param[out] value If not NULL, the value in effect for @p ctx (NULL ctx: the
 *                   environment's value or the default); the string is static or owned
 *                   by @p ctx.
 */
WEFT_API const weft_config_entry_t *weft_config_entry(const weft_ctx_t *ctx, size_t index,
                                                      const char **value);

#ifdef __cplusplus
}
#endif
#endif
