/*
 * The NCCL transport, split over three files: nccl_lib.c loads the library on first use
 * and answers the queries below, nccl.c creates, shrinks, polls and destroys
 * communicators and fills weft__tl_nccl's device table, nccl_ops.c enqueues and tracks
 * operations. Everything outside transports/ reaches NCCL through weft__tl_nccl; this
 * header is for
 * those three files, plus the queries at its end, which the tools may call.
 *
 * libweft does not link libnccl: the library named by WEFT_NCCL_LIBRARY (default
 * libnccl.so.2) is opened with dlopen the first time NCCL is asked for, and its
 * functions are resolved into weft_nccl_lib_t. Without it, available() says 0 and
 * comm_create() fails with WEFT_ERR_UNSUPPORTED and "NCCL library not found: ...".
 *
 * Nothing here hangs: communicators are created non-blocking and polled against a
 * deadline; every operation is tracked by a CUDA event; asynchronous errors are polled
 * with ncclCommGetAsyncError and turned into weft statuses; an error, or an operation
 * older than the operation timeout, stops the communicator's work (ncclCommRevoke where
 * the library has it, else ncclCommAbort), after which every operation on it completes
 * with the error.
 *
 * Compiled only when WEFT_HAVE_NCCL (nccl.h found at build time).
 */
#ifndef WEFT_NCCL_H
#define WEFT_NCCL_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "transports/transport.h"

/* Shrinking needs ncclCommShrink (NCCL 2.27); stopping work without freeing the
 * communicator needs ncclCommRevoke (2.28). Built in when the headers have them, used
 * when the loaded library has them too. */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0) && defined(NCCL_SHRINK_ABORT)
#define WEFT_NCCL_SHRINK 1
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0) && defined(NCCL_REVOKE_DEFAULT)
#define WEFT_NCCL_REVOKE 1
#endif

/* The environment variable naming the library, and its default (comm/ctx/config.c lists it). */
#define WEFT_NCCL_LIBRARY_ENV "WEFT_NCCL_LIBRARY"
#define WEFT_NCCL_LIBRARY_DEFAULT "libnccl.so.2"

/* NCCL's functions, resolved once from the loaded library. */
typedef struct weft_nccl_lib {
    __typeof__(&ncclGetVersion) GetVersion;
    __typeof__(&ncclGetUniqueId) GetUniqueId;
    __typeof__(&ncclGetErrorString) GetErrorString;
    __typeof__(&ncclGetLastError) GetLastError;
    __typeof__(&ncclCommInitRankConfig) CommInitRankConfig;
    __typeof__(&ncclCommFinalize) CommFinalize;
    __typeof__(&ncclCommDestroy) CommDestroy;
    __typeof__(&ncclCommAbort) CommAbort;
    __typeof__(&ncclCommGetAsyncError) CommGetAsyncError;
    __typeof__(&ncclAllReduce) AllReduce;
    __typeof__(&ncclBroadcast) Broadcast;
    __typeof__(&ncclAllGather) AllGather;
    __typeof__(&ncclReduceScatter) ReduceScatter;
    __typeof__(&ncclSend) Send;
    __typeof__(&ncclRecv) Recv;
    __typeof__(&ncclGroupStart) GroupStart;
    __typeof__(&ncclGroupEnd) GroupEnd;
#ifdef WEFT_NCCL_SHRINK
    __typeof__(&ncclCommShrink) CommShrink; /* NULL in a library older than 2.27 */
#endif
#ifdef WEFT_NCCL_REVOKE
    __typeof__(&ncclCommRevoke) CommRevoke; /* NULL in a library older than 2.28 */
#endif
    int version; /* ncclGetVersion(), e.g. 22809 */
} weft_nccl_lib_t;

/* The loaded library (opened on the first call), or NULL: weft__nccl_status says why. */
const weft_nccl_lib_t *weft__nccl_lib(void);

struct weft_tl_op {
    weft_tl_comm_t *comm; /* NULL once the communicator is gone */
    cudaEvent_t ev;       /* recorded after the work on its stream; NULL when done */
    uint64_t start_ns;
    weft_status_t status; /* WEFT_INPROGRESS until the work finished or failed */
    int released;         /* the owner dropped its handle */
    struct weft_tl_op *next;
};

struct weft_tl_comm {
    const weft_nccl_lib_t *lib;
    ncclComm_t nc; /* NULL once aborted (freed by NCCL) */
    int ready;     /* creation or shrink finished: a failure may revoke instead of abort */
    int revoked;   /* ncclCommRevoke stopped its work: nc stays, for a shrink or abort */
    int rank, nranks, device;
    weft_status_t failed; /* WEFT_OK while usable */
    char error[256];
    uint64_t op_timeout_ns;
    void (*log)(void *arg, int level, const char *fmt, va_list ap);
    void *log_arg;
    weft_tl_op_t *head, *tail; /* operations in flight, oldest first */
    cudaStream_t stream;       /* where p2p() enqueues; made on its first call */
};

/* ---- shared by nccl.c and nccl_ops.c ---- */
uint64_t weft__nccl_deadline_after(uint64_t ns);
void weft__nccl_log(const weft_tl_comm_t *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
weft_status_t weft__nccl_map(ncclResult_t r);
/* Record the first failure, log it once, stop the work; returns the failure. */
weft_status_t weft__nccl_fail(weft_tl_comm_t *c, weft_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Wait until the communicator has no NCCL call in progress, or fail it at @p deadline. */
weft_status_t weft__nccl_wait_ready(weft_tl_comm_t *c, uint64_t deadline, const char *what);
/* Make the communicator's device current; *prev gets the caller's, to restore. */
weft_status_t weft__nccl_enter_device(weft_tl_comm_t *c, int *prev);
void weft__nccl_leave_device(weft_tl_comm_t *c, int prev);
weft_status_t weft__nccl_comm_poll(weft_tl_comm_t *c);
void weft__nccl_unlink_op(weft_tl_comm_t *c, weft_tl_op_t *op);

/* nccl_ops.c: the operation entries of weft__tl_nccl's device table. */
weft_status_t weft__nccl_start_coll(weft_tl_comm_t *c, const weft_tl_dev_coll_t *d, void *stream,
                                    weft_tl_op_t **top);
weft_status_t weft__nccl_start_p2p(weft_tl_comm_t *c, const weft_tl_p2p_t *ops, int nops,
                                   weft_tl_op_t **top);
weft_status_t weft__nccl_op_test(weft_tl_op_t *op);
void weft__nccl_op_release(weft_tl_op_t *op);

/* nccl_lib.c: weft__tl_nccl's available() and comm_id(). */
int weft__nccl_available(void);
/* Why available() is 0: "NCCL library not found: <dlerror>", ...; "" when it is 1. */
const char *weft__nccl_unavailable_why(void);
weft_status_t weft__nccl_unique_id(void *id);

/* ---- queries for the tools ---- */
/* Version of the loaded NCCL library, e.g. 22809 for 2.28.9; 0 when none could be loaded. */
int weft__nccl_version(void);
/* "loaded <path> version 2.28.9, repair by shrink", or "not found: <dlerror>" and the
 * like, written to @p buf (@p n bytes); returns @p buf. Loads the library if needed. */
const char *weft__nccl_status(char *buf, size_t n);
/* How a group's communicator follows an edit that only removes members: "shrink"
 * (ncclCommShrink, built in and present in the loaded library) or "rebuild" (a new
 * communicator from a new unique id; also what a grow always does). */
const char *weft__nccl_repair_mode(void);

#endif
