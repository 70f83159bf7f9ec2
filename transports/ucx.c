/*
 * The UCX transport: one UCP context and worker per weft_tl_t, tagged messages for
 * point-to-point and collectives.
 *
 * Endpoints use UCP_ERR_HANDLING_MODE_PEER so a dead peer surfaces as an error callback;
 * the callback only records the failure and progress() reports it to the comm layer,
 * because UCX may call it from inside any of its own calls.
 *
 * Requests are UCP requests with a small private area (ucx_req_t) in front of which UCP
 * keeps its own state; they are released with ucp_request_free() once final.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include <ucp/api/ucp.h>

#include "transports/transport.h"
#include "util/clock.h"
#include "weft/core.h"

/* How long fini() waits for endpoints to flush and close before tearing down anyway. */
#define UCX_CLOSE_TIMEOUT_NS (2000000000ull)
/* How long cancel() waits for a cancelled receive that is already moving data. */
#define UCX_CANCEL_TIMEOUT_NS (200000000ull)

typedef enum ucx_req_kind {
    UCX_REQ_SEND,
    UCX_REQ_RECV,
    UCX_REQ_DRAIN, /* receive-and-drop of a stale message (discard) */
} ucx_req_kind_t;

/* Private area of every UCP request of this transport (UCP_PARAM_FIELD_REQUEST_SIZE). */
typedef struct ucx_req {
    ucx_req_kind_t kind;
    size_t len;         /* bytes of a send */
    struct ucx_req *next; /* drains: in weft_tl_t::drains */
} ucx_req_t;

struct weft_tl_ep {
    weft_tl_t *tl;
    ucp_ep_h uep;
    int peer_id;
    ucs_status_t err;  /* UCS_OK while the connection is healthy */
    bool reported;     /* peer_failed() was called for it */
    void *close_req;   /* after disconnect: the close in flight, NULL once done */
    struct weft_tl_ep *prev, *next; /* in tl->eps, or tl->closing after disconnect */
};

struct weft_tl {
    weft_tl_params_t params;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    weft_tl_ep_t *eps;     /* connected */
    weft_tl_ep_t *closing; /* disconnected, close not finished */
    ucx_req_t *drains;     /* receive-and-drop requests of discard() */
    bool failures_pending; /* an error callback fired since the last report */
    /* A send was released in flight (cancel): UCX may still hold it on its endpoint, for
     * a receiver that dropped it or never will. A flush could wait on it until the close
     * times out, and the worker cannot be destroyed under it: fini closes by force. */
    bool orphaned_sends;
    unsigned char sink; /* zero-length target of dropped messages */
};

/* ---- helpers ---- */

static void ucx_log(const weft_tl_t *tl, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void ucx_log(const weft_tl_t *tl, int level, const char *fmt, ...)
{
    if (tl->params.log == NULL) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    tl->params.log(tl->params.log_arg, level, fmt, ap);
    va_end(ap);
}

static bool ucx_is_peer_error(ucs_status_t st)
{
    switch (st) {
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CANCELED: /* only the endpoint closing cancels on its own */
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SOME_CONNECTS_FAILED:
        return true;
    default:
        return false;
    }
}

static weft_status_t ucx_map_status(ucs_status_t st)
{
    if (st == UCS_OK) {
        return WEFT_OK;
    }
    if (st == UCS_INPROGRESS) {
        return WEFT_INPROGRESS;
    }
    if (ucx_is_peer_error(st)) {
        return WEFT_ERR_PEER_FAILED;
    }
    switch (st) {
    case UCS_ERR_MESSAGE_TRUNCATED: return WEFT_ERR_MISMATCH;
    case UCS_ERR_NO_MEMORY: return WEFT_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM: return WEFT_ERR_INVALID_ARG;
    case UCS_ERR_UNSUPPORTED: return WEFT_ERR_UNSUPPORTED;
    case UCS_ERR_TIMED_OUT: return WEFT_ERR_TIMEOUT;
    default: return WEFT_ERR_TRANSPORT;
    }
}

/* Map a UCX error of operation @p what and log it once, at a level fitting its cause. */
static weft_status_t ucx_error(const weft_tl_t *tl, ucs_status_t st, const char *what)
{
    weft_status_t ws = ucx_map_status(st);
    int level = WEFT_LOG_ERROR;
    if (ws == WEFT_ERR_MISMATCH || ws == WEFT_ERR_PEER_FAILED) {
        level = WEFT_LOG_DEBUG; /* expected outcomes the comm layer reports with context */
    }
    ucx_log(tl, level, "ucx: %s: %s", what, ucs_status_string(st));
    return ws;
}

static void ucx_list_remove(weft_tl_ep_t **head, weft_tl_ep_t *ep)
{
    if (ep->prev != NULL) {
        ep->prev->next = ep->next;
    } else {
        *head = ep->next;
    }
    if (ep->next != NULL) {
        ep->next->prev = ep->prev;
    }
    ep->prev = ep->next = NULL;
}

static void ucx_list_push(weft_tl_ep_t **head, weft_tl_ep_t *ep)
{
    ep->prev = NULL;
    ep->next = *head;
    if (*head != NULL) {
        (*head)->prev = ep;
    }
    *head = ep;
}

/* ---- settings ---- */

/*
 * Set a UCX default unless the user set the variable (or one it inherits from, listed in
 * @p also) in the environment: the user's UCX_* settings always win.
 */
static void ucx_config_default(const weft_tl_t *tl, ucp_config_t *cfg, const char *name,
                               const char *value, const char *const *also)
{
    char env[96];
    snprintf(env, sizeof(env), "UCX_%s", name);
    if (getenv(env) != NULL) {
        return;
    }
    for (; also != NULL && *also != NULL; also++) {
        snprintf(env, sizeof(env), "UCX_%s", *also);
        if (getenv(env) != NULL) {
            return;
        }
    }
    ucs_status_t st = ucp_config_modify(cfg, name, value);
    if (st != UCS_OK) {
        /* Another UCX version may not know the setting: not an error. */
        ucx_log(tl, WEFT_LOG_DEBUG, "ucx: setting %s=%s: %s", name, value, ucs_status_string(st));
    }
}

/*
 * Defaults that make peer-failure handling and single-copy intra-node transfers work
 * together. UCX 1.13 only selects transports that advertise peer-failure support when
 * endpoints use UCP_ERR_HANDLING_MODE_PEER: without these, shared memory and CMA are
 * dropped and all intra-node traffic goes over TCP loopback.
 *  - MM_ERROR_HANDLING: let sysv/posix shared memory carry small messages (their peer
 *    check is the keepalive below).
 *  - CMA MEMORY_INVALIDATE: let CMA serve the rendezvous protocol (single copy with
 *    process_vm_readv). UCX wants registrations it can invalidate after a peer failure;
 *    CMA reads the peer's memory directly and a dead process cannot be read, so the
 *    missing invalidation cannot hand stale data to a survivor.
 *  - KEEPALIVE_INTERVAL: probe endpoints every second instead of every 20 s, so a peer
 *    that died while idle is noticed in seconds.
 *  - RNDV_THRESH: copy messages up to 512 KiB through shared memory instead of the
 *    rendezvous handshake; measured 1.2-1.45x faster allreduce from 16 KiB to 1 MiB with
 *    2 ranks (weft-perf allreduce with UCX_RNDV_THRESH=auto vs 512K, one run).
 */
static void ucx_config_defaults(const weft_tl_t *tl, ucp_config_t *cfg)
{
    static const char *const mm_related[] = {"SYSV_ERROR_HANDLING", "POSIX_ERROR_HANDLING",
                                             NULL};
    /* The CMA setting is named without its component prefix: that is how UCP hands
     * settings it does not know itself on to the memory domains. */
    static const char *const cma_related[] = {"CMA_MEMORY_INVALIDATE", NULL};
    ucx_config_default(tl, cfg, "MM_ERROR_HANDLING", "y", mm_related);
    ucx_config_default(tl, cfg, "MEMORY_INVALIDATE", "y", cma_related);
    ucx_config_default(tl, cfg, "KEEPALIVE_INTERVAL", "1s", NULL);
    ucx_config_default(tl, cfg, "RNDV_THRESH", "512K", NULL);
}

/* ---- init / fini ---- */

static int ucx_available(void)
{
    unsigned major, minor, release;
    ucp_get_version(&major, &minor, &release);
    return major >= 1;
}

static weft_status_t ucx_create_context(weft_tl_t *tl)
{
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        return ucx_error(tl, st, "reading the UCX configuration");
    }
    ucx_config_defaults(tl, cfg);
    ucp_params_t p = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME,
        .features = UCP_FEATURE_TAG,
        .request_size = sizeof(ucx_req_t),
        .mt_workers_shared = 0,
        .name = "weft",
    };
    if (tl->params.num_peers > 0) {
        p.field_mask |= UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
        p.estimated_num_eps = (size_t)tl->params.num_peers;
    }
    st = ucp_init(&p, cfg, &tl->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        return ucx_error(tl, st, "ucp_init");
    }
    return WEFT_OK;
}

static weft_status_t ucx_init(const weft_tl_params_t *params, weft_tl_t **out)
{
    weft_status_t status;
    if (params == NULL || out == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_tl_t *tl = calloc(1, sizeof(*tl));
    if (tl == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    memcpy(&tl->params, params,
           params->size < sizeof(tl->params) ? params->size : sizeof(tl->params));
    status = ucx_create_context(tl);
    if (status != WEFT_OK) {
        goto err_free_tl;
    }
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    ucs_status_t st = ucp_worker_create(tl->ctx, &wp, &tl->worker);
    if (st != UCS_OK) {
        status = ucx_error(tl, st, "ucp_worker_create");
        /* The usual cause in containers: UCX's shared-memory transport maps about 4 MiB
         * of /dev/shm per process, and UCX only says "no resources". */
        struct statvfs vfs;
        if (statvfs("/dev/shm", &vfs) == 0 &&
            (unsigned long long)vfs.f_bavail * vfs.f_frsize < (16ull << 20)) {
            ucx_log(tl, WEFT_LOG_ERROR,
                    "ucx: /dev/shm has %llu KiB free; UCX needs about 4 MiB per process "
                    "(docker --shm-size)",
                    (unsigned long long)vfs.f_bavail * vfs.f_frsize / 1024);
        }
        goto err_cleanup_ctx;
    }
    st = ucp_worker_get_address(tl->worker, &tl->addr, &tl->addr_len);
    if (st != UCS_OK) {
        status = ucx_error(tl, st, "ucp_worker_get_address");
        goto err_destroy_worker;
    }
    *out = tl;
    return WEFT_OK;

err_destroy_worker:
    ucp_worker_destroy(tl->worker);
err_cleanup_ctx:
    ucp_cleanup(tl->ctx);
err_free_tl:
    free(tl);
    return status;
}

static weft_status_t ucx_address(weft_tl_t *tl, const void **addr, size_t *len)
{
    *addr = tl->addr;
    *len = tl->addr_len;
    return WEFT_OK;
}

/* Forget closing endpoints whose close finished. */
static int ucx_reap_closing(weft_tl_t *tl)
{
    int n = 0;
    weft_tl_ep_t *ep = tl->closing;
    while (ep != NULL) {
        weft_tl_ep_t *next = ep->next;
        if (ep->close_req != NULL && ucp_request_check_status(ep->close_req) != UCS_INPROGRESS) {
            ucp_request_free(ep->close_req);
            ep->close_req = NULL;
        }
        if (ep->close_req == NULL) {
            ucx_list_remove(&tl->closing, ep);
            free(ep);
            n++;
        }
        ep = next;
    }
    return n;
}

static int ucx_reap_drains(weft_tl_t *tl)
{
    int n = 0;
    ucx_req_t **link = &tl->drains;
    while (*link != NULL) {
        ucx_req_t *ur = *link;
        if (ucp_request_check_status(ur) == UCS_INPROGRESS) {
            link = &ur->next;
            continue;
        }
        *link = ur->next;
        ucp_request_free(ur);
        n++;
    }
    return n;
}

/* Start closing @p ep: flush if healthy, force if its peer failed. Moves it to closing. */
static void ucx_start_close(weft_tl_t *tl, weft_tl_ep_t *ep, bool force)
{
    ucx_list_remove(&tl->eps, ep);
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = force || ep->err != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0,
    };
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep->uep, &p);
    if (UCS_PTR_IS_ERR(r)) {
        /* The endpoint is gone either way; a failed flush of a dead peer is expected. */
        ucx_log(tl, WEFT_LOG_DEBUG, "ucx: closing the endpoint to %d: %s", ep->peer_id,
                ucs_status_string(UCS_PTR_STATUS(r)));
        r = NULL;
    }
    ep->close_req = r;
    ucx_list_push(&tl->closing, ep);
}

static void ucx_fini(weft_tl_t *tl)
{
    if (tl == NULL) {
        return;
    }
    while (tl->eps != NULL) {
        ucx_start_close(tl, tl->eps, tl->orphaned_sends);
    }
    for (ucx_req_t *ur = tl->drains; ur != NULL; ur = ur->next) {
        ucp_request_cancel(tl->worker, ur); /* receives; a send ends with its endpoint */
    }
    /* Bounded: a peer that died without UCX noticing must not hang finalize. */
    uint64_t start = weft__now_ns(), deadline = start + UCX_CLOSE_TIMEOUT_NS;
    while ((tl->closing != NULL || tl->drains != NULL) && weft__now_ns() < deadline) {
        if (ucp_worker_progress(tl->worker) == 0) {
            sched_yield();
        }
        ucx_reap_closing(tl);
        ucx_reap_drains(tl);
    }
    if (tl->closing != NULL || tl->drains != NULL) {
        ucx_log(tl, WEFT_LOG_WARN, "ucx: endpoints did not close after %llu ms; tearing down",
                (unsigned long long)((weft__now_ns() - start) / 1000000));
    }
    while (tl->closing != NULL) {
        weft_tl_ep_t *ep = tl->closing;
        ucx_list_remove(&tl->closing, ep);
        if (ep->close_req != NULL) {
            ucp_request_free(ep->close_req); /* UCP releases it when the worker goes */
        }
        free(ep);
    }
    while (tl->drains != NULL) {
        ucx_req_t *ur = tl->drains;
        tl->drains = ur->next;
        ucp_request_free(ur);
    }
    ucp_worker_release_address(tl->worker, tl->addr);
    ucp_worker_destroy(tl->worker);
    ucp_cleanup(tl->ctx);
    free(tl);
}

/* ---- connections ---- */

static void ucx_ep_error_cb(void *arg, ucp_ep_h uep, ucs_status_t status)
{
    weft_tl_ep_t *ep = arg;
    (void)uep;
    if (ep->err == UCS_OK) {
        ep->err = status;
    }
    ep->tl->failures_pending = true;
}

static weft_status_t ucx_connect(weft_tl_t *tl, int peer_id, const void *addr, size_t len,
                                 weft_tl_ep_t **out)
{
    if (addr == NULL || len == 0 || out == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_tl_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    ep->tl = tl;
    ep->peer_id = peer_id;
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ucx_ep_error_cb, .arg = ep},
    };
    ucs_status_t st = ucp_ep_create(tl->worker, &p, &ep->uep);
    if (st != UCS_OK) {
        char what[64];
        snprintf(what, sizeof(what), "connecting to %d", peer_id);
        weft_status_t ws = ucx_error(tl, st, what);
        free(ep);
        return ws;
    }
    ucx_list_push(&tl->eps, ep);
    *out = ep;
    return WEFT_OK;
}

static void ucx_disconnect(weft_tl_t *tl, weft_tl_ep_t *ep)
{
    if (ep == NULL) {
        return;
    }
    /* Closing finishes in progress() (or fini): disconnect never waits for the peer. */
    ucx_start_close(tl, ep, false);
    ucx_reap_closing(tl);
}

/* Report failures recorded by the error callback. The comm layer may disconnect the
 * endpoint from inside peer_failed(), so the scan restarts after each report. */
static int ucx_report_failures(weft_tl_t *tl)
{
    int n = 0;
    tl->failures_pending = false;
    bool again = true;
    while (again) {
        again = false;
        for (weft_tl_ep_t *ep = tl->eps; ep != NULL; ep = ep->next) {
            if (ep->err == UCS_OK || ep->reported) {
                continue;
            }
            ep->reported = true;
            /* Expected when a peer dies, and what follows is the comm layer's to report
             * (the caller's error, its own line about the member): no warning at every
             * recovery, the cause kept for whoever asks for WEFT_LOG_LEVEL=info. */
            ucx_log(tl, WEFT_LOG_INFO, "ucx: connection to %d failed: %s", ep->peer_id,
                    ucs_status_string(ep->err));
            n++;
            if (tl->params.peer_failed != NULL) {
                tl->params.peer_failed(tl->params.cb_arg, ep->peer_id, WEFT_ERR_PEER_FAILED);
                again = true;
                break;
            }
        }
    }
    return n;
}

static int ucx_progress(weft_tl_t *tl)
{
    int n = (int)ucp_worker_progress(tl->worker);
    if (tl->failures_pending) {
        n += ucx_report_failures(tl);
    }
    if (tl->closing != NULL) {
        n += ucx_reap_closing(tl);
    }
    if (tl->drains != NULL) {
        n += ucx_reap_drains(tl);
    }
    return n != 0;
}

/* ---- tagged messages ---- */

static weft_status_t ucx_isend(weft_tl_t *tl, weft_tl_ep_t *ep, const void *buf, size_t len,
                               uint64_t tag, void **req)
{
    if (ep->err != UCS_OK) {
        return WEFT_ERR_PEER_FAILED;
    }
    ucp_request_param_t p = {.op_attr_mask = 0};
    ucs_status_ptr_t r = ucp_tag_send_nbx(ep->uep, buf, len, tag, &p);
    if (r == NULL) {
        *req = NULL;
        return WEFT_OK;
    }
    if (UCS_PTR_IS_ERR(r)) {
        return ucx_error(tl, UCS_PTR_STATUS(r), "tag send");
    }
    ucx_req_t *ur = r;
    ur->kind = UCX_REQ_SEND;
    ur->len = len;
    ur->next = NULL;
    *req = r;
    return WEFT_INPROGRESS;
}

static weft_status_t ucx_test(weft_tl_t *tl, void *req, size_t *len)
{
    ucx_req_t *ur = req;
    ucx_req_kind_t kind = ur->kind;
    ucs_status_t st;
    size_t moved = ur->len;
    if (kind == UCX_REQ_RECV) {
        ucp_tag_recv_info_t info = {0};
        st = ucp_tag_recv_request_test(req, &info);
        moved = info.length;
    } else {
        st = ucp_request_check_status(req);
    }
    if (st == UCS_INPROGRESS) {
        return WEFT_INPROGRESS;
    }
    ucp_request_free(req);
    if (len != NULL) {
        *len = st == UCS_OK ? moved : 0;
    }
    if (st == UCS_OK) {
        return WEFT_OK;
    }
    const char *what = kind == UCX_REQ_SEND ? "tag send" : "tag receive";
    return ucx_error(tl, st, what);
}

static weft_status_t ucx_irecv(weft_tl_t *tl, void *buf, size_t len, uint64_t tag,
                               uint64_t tag_mask, void **req, size_t *recvd)
{
    /*
     * Always ask for a request: UCX 1.13 can report length 0 for a receive that completes
     * at once from the unexpected queue (seen after a rendezvous message with the same
     * tag), while the request's own receive info is right.
     */
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL};
    ucs_status_ptr_t r = ucp_tag_recv_nbx(tl->worker, buf, len, tag, tag_mask, &p);
    if (UCS_PTR_IS_ERR(r)) {
        return ucx_error(tl, UCS_PTR_STATUS(r), "tag receive");
    }
    ucx_req_t *ur = r;
    ur->kind = UCX_REQ_RECV;
    ur->len = 0;
    ur->next = NULL;
    /* Finish at once what is already complete, so the caller sees inline completion. */
    if (ucp_request_check_status(r) != UCS_INPROGRESS) {
        size_t got = 0;
        weft_status_t st = ucx_test(tl, r, &got);
        if (st == WEFT_OK) {
            if (recvd != NULL) {
                *recvd = got;
            }
            *req = NULL;
        }
        return st;
    }
    *req = r;
    return WEFT_INPROGRESS;
}

static void ucx_cancel(weft_tl_t *tl, void *req)
{
    ucx_req_t *ur = req;
    ucp_request_cancel(tl->worker, req);
    if (ur->kind == UCX_REQ_SEND) {
        /*
         * UCX cannot withdraw a rendezvous send that its receiver has not matched, and
         * waiting would not change that: return at once. A peer that matches it later
         * still reads the buffer; the comm layer cancels sends only to failed peers or
         * of revoked epochs, whose receivers drop them.
         */
        if (ucp_request_check_status(req) == UCS_INPROGRESS) {
            /* Kept until it ends (tl->drains): UCX cannot tear down an endpoint under a
             * send that was given back to it in flight. */
            tl->orphaned_sends = true;
            ur->next = tl->drains;
            tl->drains = ur;
            return;
        }
        ucp_request_free(req);
        return;
    }
    /* A matched receive may be in the middle of a rendezvous: wait for it to
     * end, so the buffer is not written after we return; bounded all the same. */
    uint64_t deadline = 0;
    while (ucp_request_check_status(req) == UCS_INPROGRESS) {
        uint64_t now = weft__now_ns();
        if (deadline == 0) {
            deadline = now + UCX_CANCEL_TIMEOUT_NS;
        } else if (now >= deadline) {
            ucx_log(tl, WEFT_LOG_WARN, "ucx: request %p still in flight %llu ms after cancel",
                    req, (unsigned long long)(UCX_CANCEL_TIMEOUT_NS / 1000000));
            break;
        }
        if (ucp_worker_progress(tl->worker) == 0) {
            sched_yield();
        }
    }
    ucp_request_free(req); /* UCP frees it once complete if it is still in flight */
}

static void ucx_discard(weft_tl_t *tl, uint64_t tag, uint64_t tag_mask)
{
    for (;;) {
        ucp_tag_recv_info_t info;
        ucp_tag_message_h msg = ucp_tag_probe_nb(tl->worker, tag, tag_mask, 1, &info);
        if (msg == NULL) {
            return;
        }
        /* A zero-length receive drops the payload (truncation) without copying it, and
         * for a rendezvous message still lets the sender's request complete. */
        ucp_request_param_t p = {.op_attr_mask = 0};
        ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(tl->worker, &tl->sink, 0, msg, &p);
        if (r == NULL || UCS_PTR_IS_ERR(r)) {
            continue;
        }
        ucx_req_t *ur = r;
        ur->kind = UCX_REQ_DRAIN;
        ur->len = 0;
            ur->next = tl->drains;
        tl->drains = ur;
    }
}

static const weft_tl_msg_ops_t ucx_msg_ops = {
    .size = sizeof(weft_tl_msg_ops_t),
    .init = ucx_init,
    .fini = ucx_fini,
    .address = ucx_address,
    .connect = ucx_connect,
    .disconnect = ucx_disconnect,
    .isend = ucx_isend,
    .irecv = ucx_irecv,
    .test = ucx_test,
    .cancel = ucx_cancel,
    .progress = ucx_progress,
    .discard = ucx_discard,
};

const weft_transport_t weft__tl_ucx = {
    .size = sizeof(weft_transport_t),
    .name = "ucx",
    .available = ucx_available,
    .msg = &ucx_msg_ops,
};
