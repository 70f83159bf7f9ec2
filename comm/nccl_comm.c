/*
 * One NCCL communicator per group and epoch, its unique id exchanged through the store,
 * and NCCL operations wrapped as weft requests. Built only with NCCL.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/memtype.h"
#include "comm/nccl_comm.h"
#include "transports/nccl.h"

#define NCCL_ID_KEY_FMT "nccl/%" PRIu32 "/%" PRIu32 "/%" PRIu64

/* g->cuda->nccl */
struct weft_nccl_group {
    weft_nccl_comm_t *comm;
    uint32_t epoch; /* the group epoch it was created for */
};

/*
 * The transport already logged what failed; keep the detail for weft_last_error()
 * without logging it a second time.
 */
static weft_status_t record(weft_ctx_t *ctx, weft_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static weft_status_t record(weft_ctx_t *ctx, weft_status_t st, const char *fmt, ...)
{
    char msg[sizeof(ctx->last_error) - 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(ctx->last_error, sizeof(ctx->last_error), "rank %d: %s", ctx->rank, msg);
    return st;
}

static void drop_comm(weft_group_t *g, weft_status_t abort_why)
{
    struct weft_nccl_group *ng = g->cuda != NULL ? g->cuda->nccl : NULL;
    if (ng == NULL) {
        return;
    }
    if (abort_why != WEFT_OK) {
        /* GPU work of the old membership may wait for departed peers forever. */
        weft__nccl_comm_abort(ng->comm, abort_why);
    }
    weft__nccl_comm_destroy(ng->comm);
    free(ng);
    g->cuda->nccl = NULL;
}

void weft__nccl_group_release(weft_group_t *g)
{
    if (g != NULL) {
        drop_comm(g, weft__group_status(g));
    }
}

/* The 128-byte NCCL id of this group's communicator: made by group rank 0. */
static weft_status_t exchange_id(weft_group_t *g, uint8_t id[WEFT_NCCL_ID_BYTES])
{
    weft_ctx_t *ctx = g->ctx;
    char key[WEFT_STORE_MAX_KEY];
    void *val = NULL;
    size_t len = 0;
    weft_status_t st;

    if (g->size > 1 && ctx->store == NULL) {
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED,
                           "no store to exchange the NCCL id of group %" PRIu32 " through", g->id);
    }
    if (g->size == 1 || g->rank == 0) {
        if ((st = weft__nccl_unique_id(id)) != WEFT_OK) {
            return record(ctx, st, "cannot make an NCCL unique id");
        }
    }
    if (g->size == 1) {
        return WEFT_OK;
    }
    /* Epoch and collective count keep a reused group id from meeting a stale id. */
    weft__key(ctx, key, sizeof(key), NCCL_ID_KEY_FMT, g->id, g->epoch, g->coll_count);
    if (g->rank == 0) {
        st = weft__store_set(ctx->store, key, id, WEFT_NCCL_ID_BYTES);
        return st == WEFT_OK ? st : weft__error(ctx, st, "store: cannot publish the NCCL id");
    }
    uint64_t ms = ctx->cfg.connect_timeout_ms, start = weft__now_ns();
    st = weft__store_get(ctx->store, key, ms > INT32_MAX ? INT32_MAX : (int)ms, &val, &len);
    if (st != WEFT_OK) {
        return weft__error(ctx, st,
                           "NCCL id of group %" PRIu32 " not published by its rank 0 after %" PRIu64
                           " ms",
                           g->id, (weft__now_ns() - start) / 1000000u);
    }
    if (len != WEFT_NCCL_ID_BYTES) {
        free(val);
        return weft__error(ctx, WEFT_ERR_PROTOCOL, "NCCL id of %zu bytes, expected %d", len,
                           WEFT_NCCL_ID_BYTES);
    }
    memcpy(id, val, WEFT_NCCL_ID_BYTES);
    free(val);
    return WEFT_OK;
}

static weft_status_t create_comm(weft_group_t *g, struct weft_cuda_group *cg)
{
    weft_ctx_t *ctx = g->ctx;
    uint8_t id[WEFT_NCCL_ID_BYTES];
    weft_tsel_t sel;
    weft_nccl_comm_t *comm;

    weft_status_t st = weft__select_group(g, WEFT_MEM_CUDA, &sel);
    if (st != WEFT_OK) {
        return st;
    }
    if (sel.status != WEFT_OK) {
        return weft__error(ctx, sel.status, "CUDA buffers on group %" PRIu32 ": %s", g->id,
                           sel.why);
    }
    if (sel.transport != WEFT_TSEL_NCCL) {
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED,
                           "NCCL is not the transport of group %" PRIu32 " (%s: %s)", g->id,
                           sel.rule, sel.why);
    }
    if ((st = exchange_id(g, id)) != WEFT_OK) {
        return st;
    }
    weft_nccl_params_t p = {
        .size = sizeof(p),
        .nranks = g->size,
        .rank = g->rank,
        .device = -1,
        .init_timeout_ns = weft__ms_to_ns(ctx->cfg.connect_timeout_ms),
        .op_timeout_ns = weft__ms_to_ns(ctx->cfg.timeout_ms),
        .log = weft__log_tl,
        .log_arg = &ctx->logger,
    };
    struct weft_nccl_group *ng = calloc(1, sizeof(*ng));
    if (ng == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "cannot allocate NCCL group state");
    }
    st = weft__nccl_comm_create(&p, id, &comm);
    if (st != WEFT_OK) {
        free(ng);
        return record(ctx, st,
                      "cannot create the NCCL communicator of group %" PRIu32 " (%d ranks): %s",
                      g->id, g->size, weft_status_str(st));
    }
    ng->comm = comm;
    ng->epoch = g->epoch;
    cg->nccl = ng;
    return WEFT_OK;
}

/* The group's communicator for this epoch, created (collectively) on first use. */
static weft_status_t group_comm(weft_group_t *g, weft_nccl_comm_t **out)
{
    struct weft_cuda_group *cg;
    weft_status_t st = weft__group_status(g);
    if (st != WEFT_OK) {
        drop_comm(g, st);
        return st;
    }
    if ((st = weft__cuda_group_get(g, &cg)) != WEFT_OK) {
        return st;
    }
    if (cg->nccl != NULL && cg->nccl->epoch != g->epoch) {
        drop_comm(g, WEFT_ERR_REVOKED); /* made for a membership that is gone */
    }
    if (cg->nccl == NULL && (st = create_comm(g, cg)) != WEFT_OK) {
        return st;
    }
    st = weft__nccl_comm_poll(cg->nccl->comm);
    if (st != WEFT_OK) {
        return record(g->ctx, st, "NCCL communicator of group %" PRIu32 " failed: %s", g->id,
                      weft__nccl_comm_error(cg->nccl->comm));
    }
    *out = cg->nccl->comm;
    return WEFT_OK;
}

/* ---- requests ---- */

static weft_status_t nccl_req_progress(weft_req_t *req)
{
    return weft__nccl_op_test(req->impl);
}

static void nccl_req_cleanup(weft_req_t *req)
{
    weft_group_t *g = req->group;
    weft_nccl_op_t *op = req->impl;
    if (weft__nccl_op_test(op) == WEFT_INPROGRESS && g != NULL && g->cuda != NULL &&
        g->cuda->nccl != NULL && (weft__group_status(g) != WEFT_OK || g->epoch != req->epoch)) {
        /* Abandoned because the group broke: do not leave its kernels waiting. */
        weft__nccl_comm_abort(g->cuda->nccl->comm, WEFT_ERR_REVOKED);
    }
    weft__nccl_op_release(op);
    req->impl = NULL;
}

/* Turn a transport start into a weft start. */
static weft_status_t wrap(weft_group_t *g, weft_nccl_comm_t *comm, weft_status_t st,
                          weft_nccl_op_t *op, size_t bytes, const char *what, weft_req_t **req)
{
    weft_ctx_t *ctx = g->ctx;
    if (st == WEFT_OK) {
        *req = NULL;
        return WEFT_OK;
    }
    if (st != WEFT_INPROGRESS) {
        const char *detail = weft__nccl_comm_error(comm);
        return record(ctx, st, "%s on group %" PRIu32 ": %s", what, g->id,
                      detail[0] != '\0' ? detail : weft_status_str(st));
    }
    weft_req_t *r = weft__req_new(ctx, g);
    if (r == NULL) {
        weft__nccl_op_release(op); /* the work goes on, ordered on its stream */
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "%s: cannot allocate a request", what);
    }
    r->bytes = bytes;
    r->progress = nccl_req_progress;
    r->cleanup = nccl_req_cleanup;
    r->impl = op;
    *req = r;
    return WEFT_INPROGRESS;
}

/* Common checks of every entry point; *comm and *stream set on success. */
static weft_status_t enter(weft_group_t *g, weft_req_t **req, void **stream,
                           weft_nccl_comm_t **comm)
{
    if (g == NULL || req == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (*stream == NULL) {
        *stream = weft__group_cuda_stream(g);
    }
    return group_comm(g, comm);
}

weft_status_t weft__nccl_allreduce(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, weft_op_t op, void *stream,
                                   weft_req_t **req)
{
    weft_nccl_comm_t *comm;
    weft_nccl_op_t *nop = NULL;
    weft_status_t st = enter(g, req, &stream, &comm);
    if (st != WEFT_OK) {
        return st;
    }
    st = weft__nccl_comm_allreduce(comm, sendbuf, recvbuf, count, dtype, op, stream, &nop);
    return wrap(g, comm, st, nop, count * weft_dtype_size(dtype), "NCCL allreduce", req);
}

weft_status_t weft__nccl_broadcast(weft_group_t *g, void *buf, size_t count, weft_dtype_t dtype,
                                   int root, void *stream, weft_req_t **req)
{
    weft_nccl_comm_t *comm;
    weft_nccl_op_t *nop = NULL;
    weft_status_t st = enter(g, req, &stream, &comm);
    if (st != WEFT_OK) {
        return st;
    }
    st = weft__nccl_comm_broadcast(comm, buf, buf, count, dtype, root, stream, &nop);
    return wrap(g, comm, st, nop, count * weft_dtype_size(dtype), "NCCL broadcast", req);
}

weft_status_t weft__nccl_allgather(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, void *stream, weft_req_t **req)
{
    weft_nccl_comm_t *comm;
    weft_nccl_op_t *nop = NULL;
    weft_status_t st = enter(g, req, &stream, &comm);
    if (st != WEFT_OK) {
        return st;
    }
    st = weft__nccl_comm_allgather(comm, sendbuf, recvbuf, count, dtype, stream, &nop);
    return wrap(g, comm, st, nop, (size_t)g->size * count * weft_dtype_size(dtype),
                "NCCL allgather", req);
}

weft_status_t weft__nccl_reduce_scatter(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                        size_t count, weft_dtype_t dtype, weft_op_t op,
                                        void *stream, weft_req_t **req)
{
    weft_nccl_comm_t *comm;
    weft_nccl_op_t *nop = NULL;
    weft_status_t st = enter(g, req, &stream, &comm);
    if (st != WEFT_OK) {
        return st;
    }
    st = weft__nccl_comm_reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op, stream, &nop);
    return wrap(g, comm, st, nop, count * weft_dtype_size(dtype), "NCCL reduce-scatter", req);
}

weft_status_t weft__nccl_sendrecv(weft_group_t *g, const void *sendbuf, size_t send_bytes, int dst,
                                  void *recvbuf, size_t recv_bytes, int src, void *stream,
                                  weft_req_t **req)
{
    weft_nccl_comm_t *comm;
    weft_nccl_op_t *nop = NULL;
    weft_status_t st = enter(g, req, &stream, &comm);
    if (st != WEFT_OK) {
        return st;
    }
    st = weft__nccl_comm_sendrecv(comm, sendbuf, send_bytes, dst, recvbuf, recv_bytes, src, stream,
                                  &nop);
    return wrap(g, comm, st, nop, src >= 0 ? recv_bytes : send_bytes, "NCCL send/recv", req);
}
