/*
 * The self transport: a process talking to itself. Everything happens inside the calls:
 * a send either matches a posted receive and copies into it, or is copied into the
 * unexpected queue; either way it is complete when isend returns. Receives first look in
 * the unexpected queue, then wait in the posted queue. Both queues are FIFO, so messages
 * with equal tags match in send order.
 *
 * An instance only connects to itself: its address names the process and the instance,
 * and an address of another process or instance is refused. Since the only destination
 * is the instance itself, sends also accept a NULL endpoint.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transports/transport.h"
#include "weft/core.h"

typedef struct self_addr {
    uint64_t magic;
    uint64_t pid;
    uint64_t instance; /* address of the weft_tl_t */
} self_addr_t;

#define SELF_MAGIC UINT64_C(0x7765667473656c66) /* "weftself" */

/* A message no receive was waiting for, with its bytes. */
typedef struct self_msg {
    uint64_t tag;
    size_t len;
    struct self_msg *next;
    unsigned char data[];
} self_msg_t;

/* A posted receive (a request); a completed one has left the posted queue. */
typedef struct self_req {
    void *buf;
    size_t cap;
    uint64_t tag, mask;
    weft_status_t status; /* WEFT_INPROGRESS while posted */
    size_t len;           /* bytes received */
    struct self_req *next;
} self_req_t;

struct weft_tl_ep {
    weft_tl_t *tl;
};

struct weft_tl {
    weft_tl_params_t params;
    self_addr_t addr;
    weft_tl_ep_t ep; /* the one connection, to itself */
    bool connected;
    self_msg_t *unexp_head, **unexp_tail;
    self_req_t *posted_head, **posted_tail;
};

static void self_log(const weft_tl_t *tl, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void self_log(const weft_tl_t *tl, int level, const char *fmt, ...)
{
    if (tl->params.log == NULL) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    tl->params.log(tl->params.log_arg, level, fmt, ap);
    va_end(ap);
}

static inline bool self_match(uint64_t msg_tag, uint64_t tag, uint64_t mask)
{
    return ((msg_tag ^ tag) & mask) == 0;
}

static int self_available(void)
{
    return 1;
}

static weft_status_t self_init(const weft_tl_params_t *params, weft_tl_t **out)
{
    if (params == NULL || out == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_tl_t *tl = calloc(1, sizeof(*tl));
    if (tl == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    memcpy(&tl->params, params,
           params->size < sizeof(tl->params) ? params->size : sizeof(tl->params));
    tl->addr.magic = SELF_MAGIC;
    tl->addr.pid = (uint64_t)getpid();
    tl->addr.instance = (uint64_t)(uintptr_t)tl;
    tl->ep.tl = tl;
    tl->unexp_tail = &tl->unexp_head;
    tl->posted_tail = &tl->posted_head;
    *out = tl;
    return WEFT_OK;
}

static void self_fini(weft_tl_t *tl)
{
    if (tl == NULL) {
        return;
    }
    while (tl->unexp_head != NULL) {
        self_msg_t *m = tl->unexp_head;
        tl->unexp_head = m->next;
        free(m);
    }
    /* Posted receives are requests the comm layer still owns; it cancels them before
     * fini. Any left are freed here so nothing leaks. */
    while (tl->posted_head != NULL) {
        self_req_t *r = tl->posted_head;
        tl->posted_head = r->next;
        free(r);
    }
    free(tl);
}

static weft_status_t self_address(weft_tl_t *tl, const void **addr, size_t *len)
{
    *addr = &tl->addr;
    *len = sizeof(tl->addr);
    return WEFT_OK;
}

static weft_status_t self_connect(weft_tl_t *tl, int peer_id, const void *addr, size_t len,
                                  weft_tl_ep_t **ep)
{
    if (addr == NULL || len != sizeof(self_addr_t) || ep == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (memcmp(addr, &tl->addr, sizeof(self_addr_t)) != 0) {
        self_log(tl, WEFT_LOG_DEBUG, "self: peer %d is not this process's instance", peer_id);
        return WEFT_ERR_UNSUPPORTED;
    }
    tl->connected = true;
    *ep = &tl->ep;
    return WEFT_OK;
}

static void self_disconnect(weft_tl_t *tl, weft_tl_ep_t *ep)
{
    (void)ep;
    tl->connected = false;
}

/* Copy a message into receive @p r and complete it. */
static void self_deliver(self_req_t *r, const void *data, size_t len)
{
    if (len > r->cap) {
        r->status = WEFT_ERR_MISMATCH; /* the message is consumed either way */
        r->len = 0;
        return;
    }
    if (len > 0) {
        memcpy(r->buf, data, len);
    }
    r->status = WEFT_OK;
    r->len = len;
}

static weft_status_t self_isend(weft_tl_t *tl, weft_tl_ep_t *ep, const void *buf, size_t len,
                                uint64_t tag, void **req)
{
    if (ep != NULL && ep != &tl->ep) {
        return WEFT_ERR_INVALID_ARG;
    }
    for (self_req_t **link = &tl->posted_head; *link != NULL; link = &(*link)->next) {
        self_req_t *r = *link;
        if (!self_match(tag, r->tag, r->mask)) {
            continue;
        }
        *link = r->next;
        if (tl->posted_tail == &r->next) {
            tl->posted_tail = link;
        }
        r->next = NULL;
        self_deliver(r, buf, len);
        *req = NULL;
        return WEFT_OK;
    }
    self_msg_t *m = malloc(sizeof(*m) + len);
    if (m == NULL) {
        self_log(tl, WEFT_LOG_ERROR, "self: no memory to queue a message of %zu bytes", len);
        return WEFT_ERR_NO_MEMORY;
    }
    m->tag = tag;
    m->len = len;
    m->next = NULL;
    if (len > 0) {
        memcpy(m->data, buf, len);
    }
    *tl->unexp_tail = m;
    tl->unexp_tail = &m->next;
    *req = NULL;
    return WEFT_OK;
}

static weft_status_t self_irecv(weft_tl_t *tl, void *buf, size_t len, uint64_t tag,
                                uint64_t tag_mask, void **req, size_t *recvd)
{
    for (self_msg_t **link = &tl->unexp_head; *link != NULL; link = &(*link)->next) {
        self_msg_t *m = *link;
        if (!self_match(m->tag, tag, tag_mask)) {
            continue;
        }
        *link = m->next;
        if (tl->unexp_tail == &m->next) {
            tl->unexp_tail = link;
        }
        size_t mlen = m->len;
        if (mlen <= len && mlen > 0) {
            memcpy(buf, m->data, mlen);
        }
        free(m);
        if (mlen > len) {
            self_log(tl, WEFT_LOG_DEBUG, "self: message of %zu bytes truncated to %zu", mlen,
                     len);
            return WEFT_ERR_MISMATCH;
        }
        if (recvd != NULL) {
            *recvd = mlen;
        }
        *req = NULL;
        return WEFT_OK;
    }
    self_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    r->buf = buf;
    r->cap = len;
    r->tag = tag;
    r->mask = tag_mask;
    r->status = WEFT_INPROGRESS;
    *tl->posted_tail = r;
    tl->posted_tail = &r->next;
    *req = r;
    return WEFT_INPROGRESS;
}

static weft_status_t self_test(weft_tl_t *tl, void *req, size_t *len)
{
    (void)tl;
    self_req_t *r = req;
    weft_status_t st = r->status;
    if (st == WEFT_INPROGRESS) {
        return st;
    }
    if (len != NULL) {
        *len = r->len;
    }
    free(r);
    return st;
}

static void self_cancel(weft_tl_t *tl, void *req)
{
    self_req_t *r = req;
    if (r->status == WEFT_INPROGRESS) {
        for (self_req_t **link = &tl->posted_head; *link != NULL; link = &(*link)->next) {
            if (*link == r) {
                *link = r->next;
                if (tl->posted_tail == &r->next) {
                    tl->posted_tail = link;
                }
                break;
            }
        }
    }
    free(r);
}

static int self_progress(weft_tl_t *tl)
{
    (void)tl;
    return 0; /* everything completes inside the calls */
}

static void self_discard(weft_tl_t *tl, uint64_t tag, uint64_t tag_mask)
{
    self_msg_t **link = &tl->unexp_head;
    while (*link != NULL) {
        self_msg_t *m = *link;
        if (!self_match(m->tag, tag, tag_mask)) {
            link = &m->next;
            continue;
        }
        *link = m->next;
        if (tl->unexp_tail == &m->next) {
            tl->unexp_tail = link;
        }
        free(m);
    }
}

static const weft_tl_msg_ops_t self_msg_ops = {
    .size = sizeof(weft_tl_msg_ops_t),
    .flags = WEFT_TL_LOOPBACK,
    .init = self_init,
    .fini = self_fini,
    .address = self_address,
    .connect = self_connect,
    .disconnect = self_disconnect,
    .isend = self_isend,
    .irecv = self_irecv,
    .test = self_test,
    .cancel = self_cancel,
    .progress = self_progress,
    .discard = self_discard,
};

const weft_transport_t weft__tl_self = {
    .size = sizeof(weft_transport_t),
    .name = "self",
    .available = self_available,
    .msg = &self_msg_ops,
};
