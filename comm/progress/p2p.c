/*
 * Point-to-point: tags carry (source, group, epoch, class, payload); the transport is the
 * one chosen for the peer. Used by the public send/receive calls and by collectives.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/core_impl.h"
#include "comm/device/memtype.h"

/* The peer behind group rank @p peer; with @p need_ep, connected on first use. Receives
 * need no endpoint: a message from a peer that has since finalized is still received. */
static weft_status_t peer_get(weft_group_t *g, int peer, bool need_ep, weft_peer_t **out,
                              int *id_out)
{
    weft_ctx_t *ctx = g->ctx;
    weft_status_t st = weft__group_status(g);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "group %u epoch %u is revoked", g->id, g->epoch);
    }
    if (peer < 0 || peer >= g->size) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "peer %d is not a rank of a group of %d",
                           peer, g->size);
    }
    int id = g->members[peer];
    weft_peer_t *p = &ctx->peers[id];
    if (need_ep && p->addr == NULL && id != ctx->rank) {
        /* A member that joined after start-up: its address is looked up on first use. */
        st = weft__fetch_address(ctx, id, (int)ctx->cfg.connect_timeout_ms, 0);
        if (st != WEFT_OK) {
            return st;
        }
        p = &ctx->peers[id];
    }
    if (p->failed != WEFT_OK) {
        return weft__error(ctx, p->failed, "peer %d (member %d) has failed", peer, id);
    }
    if (p->ops == NULL) {
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED,
                           "no transport reaches member %d (a job without a store has one "
                           "process)", id);
    }
    if (need_ep && p->ep == NULL && id != ctx->rank) {
        st = p->ops->connect(p->tl, id, p->addr, p->addr_len, &p->ep);
        if (st != WEFT_OK) {
            /* Its shared memory or socket is gone: a member we cannot reach has failed,
             * and every member must learn it the same way. */
            weft__report_failure(ctx, id, "cannot connect");
            return weft__error(ctx, WEFT_ERR_PEER_FAILED, "cannot connect to member %d (%s)",
                               id, weft_status_str(st));
        }
    }
    *out = p;
    *id_out = id;
    return WEFT_OK;
}

static weft_status_t wrap_request(weft_group_t *g, weft_peer_t *p, int id, void *tl_req,
                                  weft_req_t **req)
{
    weft_req_t *r = weft__req_new(g->ctx, g);
    if (r == NULL) {
        p->ops->cancel(p->tl, tl_req);
        return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "no memory for a request");
    }
    r->peer_id = id;
    r->ops = p->ops;
    r->tl = p->tl;
    r->tl_req = tl_req;
    *req = r;
    return WEFT_INPROGRESS;
}

static weft_status_t transport_failed(weft_group_t *g, int id, weft_status_t st,
                                      const char *what)
{
    if (st == WEFT_ERR_PEER_FAILED) {
        weft__report_failure(g->ctx, id, what);
    }
    if (st == WEFT_ERR_MISMATCH) {
        return weft__error(g->ctx, st, "%s member %d: the message is longer than the buffer",
                           what, id);
    }
    return weft__error(g->ctx, st, "%s member %d failed", what, id);
}

weft_status_t weft__isend(weft_group_t *g, int peer, const void *buf, size_t len,
                          enum weft_tag_class cls, uint32_t payload, weft_req_t **req)
{
    weft_peer_t *p;
    int id;
    void *tl_req = NULL;
    weft_status_t st = peer_get(g, peer, true, &p, &id);
    if (st != WEFT_OK) {
        return st;
    }
    uint64_t tag = weft__tag((uint32_t)g->ctx->rank, g->tag_id, g->epoch, cls, payload);
    st = p->ops->isend(p->tl, p->ep, buf, len, tag, &tl_req);
    if (st == WEFT_OK) {
        *req = NULL;
        return WEFT_OK;
    }
    if (st != WEFT_INPROGRESS) {
        return transport_failed(g, id, st, "send to");
    }
    return wrap_request(g, p, id, tl_req, req);
}

weft_status_t weft__irecv_len(weft_group_t *g, int peer, void *buf, size_t len,
                              enum weft_tag_class cls, uint32_t payload, weft_req_t **req,
                              size_t *recvd)
{
    weft_peer_t *p;
    int id;
    void *tl_req = NULL;
    weft_status_t st = peer_get(g, peer, false, &p, &id);
    if (st != WEFT_OK) {
        return st;
    }
    uint64_t tag = weft__tag((uint32_t)id, g->tag_id, g->epoch, cls, payload);
    size_t got = 0;
    st = p->ops->irecv(p->tl, buf, len, tag, WEFT_TAG_MASK_ALL, &tl_req, &got);
    if (st == WEFT_OK) {
        *req = NULL;
        if (recvd != NULL) {
            *recvd = got;
        }
        return WEFT_OK;
    }
    if (st != WEFT_INPROGRESS) {
        return transport_failed(g, id, st, "receive from");
    }
    return wrap_request(g, p, id, tl_req, req);
}

weft_status_t weft__irecv(weft_group_t *g, int peer, void *buf, size_t len,
                          enum weft_tag_class cls, uint32_t payload, weft_req_t **req)
{
    return weft__irecv_len(g, peer, buf, len, cls, payload, req, NULL);
}

static weft_status_t check_user_args(weft_group_t *g, const void *buf, size_t bytes,
                                     uint32_t tag, weft_req_t **req, const char *what)
{
    if (g == NULL || req == NULL || (buf == NULL && bytes > 0)) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (tag > WEFT_TAG_MAX) {
        return weft__error(g->ctx, WEFT_ERR_INVALID_ARG, "tag %u exceeds WEFT_TAG_MAX (%u)",
                           tag, WEFT_TAG_MAX);
    }
    /* The message transports move host memory only, and messages are not staged: a
     * CUDA buffer handed to them would be read or written as host memory. */
    if (bytes > 0 && weft__cuda_device_count() > 0 && weft__memtype(buf) == WEFT_MEM_CUDA) {
        return weft__error(g->ctx, WEFT_ERR_UNSUPPORTED,
                           "%s on a CUDA buffer: point-to-point messages carry host memory "
                           "only; copy the data to a host buffer",
                           what);
    }
    return WEFT_OK;
}

weft_status_t weft_isend(weft_group_t *g, const void *buf, size_t bytes, int peer, uint32_t tag,
                         weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_status_t st = check_user_args(g, buf, bytes, tag, req, "weft_isend");
    if (st != WEFT_OK) {
        return st;
    }
    st = weft__isend(g, peer, buf, bytes, WEFT_TAG_P2P, tag, req);
    if (st == WEFT_INPROGRESS) {
        weft__req_publish(*req);
    }
    return st;
}

weft_status_t weft_irecv(weft_group_t *g, void *buf, size_t bytes, int peer, uint32_t tag,
                         weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_req_t *r = NULL;
    size_t got = 0;
    weft_status_t st = check_user_args(g, buf, bytes, tag, req, "weft_irecv");
    if (st != WEFT_OK) {
        return st;
    }
    st = weft__irecv_len(g, peer, buf, bytes, WEFT_TAG_P2P, tag, &r, &got);
    if (st == WEFT_OK) {
        /* Completed inline: hand back a completed request so weft_req_bytes() works. */
        r = weft__req_new(g->ctx, g);
        if (r == NULL) {
            return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "no memory for a request");
        }
        r->status = WEFT_OK;
        r->bytes = got;
        st = WEFT_INPROGRESS;
    }
    if (st == WEFT_INPROGRESS) {
        r->recv_cap = bytes;
        r->recv_tag = tag;
        weft__req_publish(r);
        *req = r;
    }
    return st;
}

weft_status_t weft_send(weft_group_t *g, const void *buf, size_t bytes, int peer, uint32_t tag)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_req_t *req = NULL;
    weft_status_t st = weft_isend(g, buf, bytes, peer, tag, &req); /* sets req first */
    return weft__blocking(st, req);
}

weft_status_t weft_recv(weft_group_t *g, void *buf, size_t bytes, int peer, uint32_t tag,
                        size_t *received)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_req_t *req = NULL;
    weft_status_t st = weft_irecv(g, buf, bytes, peer, tag, &req);
    if (st != WEFT_INPROGRESS) {
        return st;
    }
    st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
    if (st == WEFT_OK && received != NULL) {
        *received = req->bytes;
    }
    weft_req_free(req);
    return st;
}

weft_status_t weft__warm_up_peers(weft_group_t *g, int **ranks, int *n)
{
    weft_ctx_t *ctx = g->ctx;
    int *out = malloc(sizeof(int) * (size_t)(g->size > 0 ? g->size : 1));
    if (out == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory to connect");
    }
    int k = 0;
    bool all = strcmp(ctx->cfg.connect, "all") == 0;
    bool local = strcmp(ctx->cfg.connect, "local") == 0;
    for (int r = 0; r < g->size && (all || local); r++) {
        int id = g->members[r];
        if (id == ctx->rank || ctx->peers[id].failed != WEFT_OK) {
            continue;
        }
        if (ctx->peers[id].addr == NULL) {
            weft_status_t st =
                weft__fetch_address(ctx, id, (int)ctx->cfg.connect_timeout_ms, 0);
            if (st != WEFT_OK) {
                free(out);
                return st;
            }
        }
        if (all || ctx->peers[id].same_host) {
            out[k++] = r;
        }
    }
    *ranks = out;
    *n = k;
    return WEFT_OK;
}

weft_status_t weft__warm_up(weft_group_t *g, const int *ranks, int n)
{
    enum { WARM_UP_PAYLOAD = 1 };
    weft_req_t **reqs = calloc((size_t)(2 * n + 1), sizeof(*reqs));
    if (reqs == NULL) {
        return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "no memory to connect");
    }
    weft_status_t st = WEFT_OK;
    static char none;
    for (int i = 0; i < n && st == WEFT_OK; i++) {
        st = weft__irecv(g, ranks[i], &none, 0, WEFT_TAG_CTRL, WARM_UP_PAYLOAD, &reqs[2 * i]);
        if (st == WEFT_OK || st == WEFT_INPROGRESS) {
            st = weft__isend(g, ranks[i], &none, 0, WEFT_TAG_CTRL, WARM_UP_PAYLOAD,
                             &reqs[2 * i + 1]);
        }
        st = st == WEFT_INPROGRESS ? WEFT_OK : st;
    }
    uint64_t timeout = weft__ms_to_ns(g->ctx->cfg.connect_timeout_ms);
    for (int i = 0; i < 2 * n; i++) {
        if (reqs[i] != NULL) {
            weft_status_t w = weft_wait(reqs[i], timeout);
            st = st == WEFT_OK ? w : st;
            weft_req_free(reqs[i]);
        }
    }
    free(reqs);
    return st;
}
