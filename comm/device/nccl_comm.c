/*
 * One NCCL communicator per group and epoch, its unique id exchanged through the store,
 * and NCCL operations wrapped as weft requests. Built only with NCCL.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/device/memtype.h"
#include "comm/device/nccl_comm.h"
#include "transports/transport.h"

#define NCCL_ID_KEY_FMT "nccl/%" PRIu32 "/%" PRIu32 "/%" PRIu64 "/%" PRIu32

/* The NCCL transport, looked up in the registry once: comm reaches it only through its
 * device table. Written once under pthread_once, read-only afterwards. */
static const weft_transport_t *nccl_tl;
static pthread_once_t nccl_tl_once = PTHREAD_ONCE_INIT;

static void nccl_tl_find(void)
{
    nccl_tl = weft__transport_find("nccl");
}

static const weft_transport_t *nccl(void)
{
    pthread_once(&nccl_tl_once, nccl_tl_find);
    return nccl_tl;
}

static const weft_tl_dev_ops_t *tl(void)
{
    return nccl()->dev;
}

/* g->cuda->nccl */
struct weft_nccl_group {
    weft_tl_comm_t *comm;
    uint32_t epoch; /* the group epoch it was made for */
    int size;       /* that epoch's members, by group rank: what a shrink starts from */
    int *members;
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
        tl()->comm_abort(ng->comm, abort_why);
    }
    tl()->comm_destroy(ng->comm);
    free(ng->members);
    free(ng);
    g->cuda->nccl = NULL;
}

/* The group was revoked: stop the communicator's work, and keep it where it can still
 * be shrunk to the survivors by the repair's next epoch. */
static void stop_comm(weft_group_t *g, weft_status_t why)
{
    struct weft_nccl_group *ng = g->cuda != NULL ? g->cuda->nccl : NULL;
    if (ng == NULL) {
        return;
    }
    tl()->comm_abort(ng->comm, why);
    if (tl()->comm_can_shrink == NULL || !tl()->comm_can_shrink(ng->comm)) {
        drop_comm(g, why);
    }
}

void weft__nccl_group_release(weft_group_t *g)
{
    if (g != NULL) {
        drop_comm(g, weft__group_status(g));
    }
}

/*
 * How the communicator of a new epoch is made: rank 0 decides and every member follows.
 * "shrink" when rank 0 holds the communicator of an earlier epoch, the transport can
 * shrink it, and the edits since only removed members (the survivors in their order);
 * else "rebuild" from a fresh id. Published in the store with the id, under a key of
 * this epoch, collective count and attempt, so a reused group id or a retry after a
 * failed attempt never meets a stale plan.
 */
enum { PLAN_REBUILD = 0, PLAN_SHRINK = 1 };
#define PLAN_HDR 5 /* mode (1 byte), the parent's epoch (uint32) */

typedef struct comm_plan {
    uint8_t mode;
    uint32_t from_epoch;
    uint8_t id[WEFT_TL_COMM_ID_MAX];
} comm_plan_t;

/* The parent's ranks that are not in @p g now, when the members of @p g are the others
 * in the same order; -1 when @p g has members the parent lacks (a grow). */
static int removed_ranks(const struct weft_nccl_group *ng, const weft_group_t *g, int *excl)
{
    int j = 0, n = 0;
    for (int i = 0; i < ng->size; i++) {
        if (j < g->size && ng->members[i] == g->members[j]) {
            j++;
        } else {
            excl[n++] = i;
        }
    }
    return j == g->size ? n : -1;
}

static bool shrinkable(const weft_group_t *g, int *excl, int *n_excl)
{
    const struct weft_nccl_group *ng = g->cuda != NULL ? g->cuda->nccl : NULL;
    if (ng == NULL || ng->epoch == g->epoch || tl()->comm_shrink == NULL ||
        !tl()->comm_can_shrink(ng->comm)) {
        return false;
    }
    *n_excl = removed_ranks(ng, g, excl);
    return *n_excl >= 0;
}

static weft_status_t exchange_plan(weft_group_t *g, bool can_shrink, uint64_t seq,
                                   comm_plan_t *plan)
{
    weft_ctx_t *ctx = g->ctx;
    size_t idn = tl()->comm_id_bytes, len = 0;
    char key[WEFT_STORE_MAX_KEY];
    uint8_t buf[PLAN_HDR + WEFT_TL_COMM_ID_MAX];
    void *val = NULL;
    weft_status_t st;

    memset(plan, 0, sizeof(*plan));
    if (g->size > 1 && ctx->store == NULL) {
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED,
                           "no store to exchange the NCCL id of group %" PRIu32 " through", g->id);
    }
    if (g->size == 1 || g->rank == 0) {
        plan->mode = can_shrink ? PLAN_SHRINK : PLAN_REBUILD;
        plan->from_epoch = can_shrink ? g->cuda->nccl->epoch : 0;
        if (!can_shrink && (st = tl()->comm_id(plan->id)) != WEFT_OK) {
            return record(ctx, st, "cannot make an NCCL unique id: %s", tl()->comm_error(NULL));
        }
        if (g->size == 1) {
            return WEFT_OK;
        }
    }
    weft__key(ctx, key, sizeof(key), NCCL_ID_KEY_FMT, g->id, g->epoch, seq,
              g->cuda->nccl_attempts);
    if (g->rank == 0) {
        buf[0] = plan->mode;
        memcpy(buf + 1, &plan->from_epoch, sizeof(plan->from_epoch));
        memcpy(buf + PLAN_HDR, plan->id, idn);
        st = weft__store_set(ctx->store, key, buf, PLAN_HDR + idn);
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
    if (len != PLAN_HDR + idn) {
        free(val);
        return weft__error(ctx, WEFT_ERR_PROTOCOL, "NCCL id of %zu bytes, expected %zu", len,
                           PLAN_HDR + idn);
    }
    plan->mode = ((const uint8_t *)val)[0];
    memcpy(&plan->from_epoch, (const uint8_t *)val + 1, sizeof(plan->from_epoch));
    memcpy(plan->id, (const uint8_t *)val + PLAN_HDR, idn);
    free(val);
    return WEFT_OK;
}

static weft_status_t create_comm(weft_group_t *g, struct weft_cuda_group *cg, uint64_t seq)
{
    weft_ctx_t *ctx = g->ctx;
    weft_tsel_t sel;
    weft_tl_comm_t *comm;
    comm_plan_t plan;
    int n_excl = 0;

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
    if (!nccl()->available()) {
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED, "CUDA buffers on group %" PRIu32 ": %s",
                           g->id, tl()->comm_error(NULL));
    }
    struct weft_nccl_group *ng = calloc(1, sizeof(*ng));
    int *members = malloc(sizeof(int) * (size_t)g->size);
    int *excl = malloc(sizeof(int) * (size_t)(cg->nccl != NULL ? cg->nccl->size : 1));
    if (ng == NULL || members == NULL || excl == NULL) {
        st = weft__error(ctx, WEFT_ERR_NO_MEMORY, "cannot allocate NCCL group state");
        goto out;
    }
    bool can_shrink = shrinkable(g, excl, &n_excl);
    cg->nccl_attempts++; /* every member tries at the same collectives: keys stay agreed */
    if ((st = exchange_plan(g, can_shrink, seq, &plan)) != WEFT_OK) {
        goto out;
    }
    if (plan.mode == PLAN_SHRINK &&
        (!can_shrink || cg->nccl->epoch != plan.from_epoch)) {
        st = weft__error(ctx, WEFT_ERR_PROTOCOL,
                         "group %" PRIu32 ": rank 0 shrinks the NCCL communicator of epoch %" PRIu32
                         ", which this member cannot",
                         g->id, plan.from_epoch);
        drop_comm(g, WEFT_ERR_REVOKED); /* the next attempt rebuilds */
        goto out;
    }
    weft_tl_comm_params_t p = {
        .size = sizeof(p),
        .nranks = g->size,
        .rank = g->rank,
        .device = -1,
        .init_timeout_ns = weft__ms_to_ns(ctx->cfg.connect_timeout_ms),
        .op_timeout_ns = weft__ms_to_ns(ctx->cfg.timeout_ms),
        .log = weft__log_tl,
        .log_arg = &ctx->logger,
    };
    if (plan.mode == PLAN_SHRINK) {
        st = tl()->comm_shrink(cg->nccl->comm, excl, n_excl, &p, &comm);
    } else {
        drop_comm(g, WEFT_ERR_REVOKED); /* made for a membership that is gone */
        st = tl()->comm_create(&p, plan.id, &comm);
    }
    /* The parent served its purpose: shrunk, or not shrinkable, it goes. */
    drop_comm(g, WEFT_ERR_REVOKED);
    if (st != WEFT_OK) {
        st = record(ctx, st, "cannot %s the NCCL communicator of group %" PRIu32 " (%d ranks): %s",
                    plan.mode == PLAN_SHRINK ? "shrink" : "create", g->id, g->size,
                    weft_status_str(st));
        goto out;
    }
    memcpy(members, g->members, sizeof(int) * (size_t)g->size);
    ng->comm = comm;
    ng->epoch = g->epoch;
    ng->size = g->size;
    ng->members = members;
    members = NULL;
    cg->nccl = ng;
    ng = NULL;
out:
    free(excl);
    free(members);
    free(ng);
    return st;
}

/* The group's communicator for this epoch, made (collectively) on first use, its id
 * keyed by @p seq. */
static weft_status_t group_comm_at(weft_group_t *g, uint64_t seq, weft_tl_comm_t **out)
{
    struct weft_cuda_group *cg;
    weft_status_t st = weft__group_status(g);
    if (st != WEFT_OK) {
        stop_comm(g, st);
        return st;
    }
    if ((st = weft__cuda_group_get(g, &cg)) != WEFT_OK) {
        return st;
    }
    if ((cg->nccl == NULL || cg->nccl->epoch != g->epoch) &&
        (st = create_comm(g, cg, seq)) != WEFT_OK) {
        return st;
    }
    st = tl()->comm_poll(cg->nccl->comm);
    if (st != WEFT_OK) {
        return record(g->ctx, st, "NCCL communicator of group %" PRIu32 " failed: %s", g->id,
                      tl()->comm_error(cg->nccl->comm));
    }
    *out = cg->nccl->comm;
    return WEFT_OK;
}

static weft_status_t group_comm(weft_group_t *g, weft_tl_comm_t **out)
{
    return group_comm_at(g, g->coll_count, out);
}

/* ---- requests ---- */

static weft_status_t nccl_req_progress(weft_req_t *req)
{
    return tl()->op_test(req->impl);
}

static void nccl_req_cleanup(weft_req_t *req)
{
    weft_group_t *g = req->group;
    weft_tl_op_t *op = req->impl;
    if (tl()->op_test(op) == WEFT_INPROGRESS && g != NULL && g->cuda != NULL &&
        g->cuda->nccl != NULL && (weft__group_status(g) != WEFT_OK || g->epoch != req->epoch)) {
        /* Abandoned because the group broke: do not leave its kernels waiting. */
        tl()->comm_abort(g->cuda->nccl->comm, WEFT_ERR_REVOKED);
    }
    tl()->op_release(op);
    req->impl = NULL;
}

/* Turn a transport start into a weft start. */
static weft_status_t wrap(weft_group_t *g, weft_tl_comm_t *comm, weft_status_t st,
                          weft_tl_op_t *op, size_t bytes, const char *what, weft_req_t **req)
{
    weft_ctx_t *ctx = g->ctx;
    if (st == WEFT_OK) {
        *req = NULL;
        return WEFT_OK;
    }
    if (st != WEFT_INPROGRESS) {
        const char *detail = tl()->comm_error(comm);
        return record(ctx, st, "%s on group %" PRIu32 ": %s", what, g->id,
                      detail[0] != '\0' ? detail : weft_status_str(st));
    }
    weft_req_t *r = weft__req_new(ctx, g);
    if (r == NULL) {
        tl()->op_release(op); /* the work goes on, ordered on its stream */
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
                           weft_tl_comm_t **comm)
{
    if (g == NULL || req == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (*stream == NULL) {
        *stream = weft__group_cuda_stream(g);
    }
    return group_comm(g, comm);
}

static const char *coll_what(weft_tl_coll_kind_t kind)
{
    switch (kind) {
    case WEFT_TL_COLL_ALLREDUCE:
        return "NCCL allreduce";
    case WEFT_TL_COLL_BROADCAST:
        return "NCCL broadcast";
    case WEFT_TL_COLL_ALLGATHER:
        return "NCCL allgather";
    case WEFT_TL_COLL_REDUCE_SCATTER:
        return "NCCL reduce-scatter";
    }
    return "NCCL collective";
}

weft_status_t weft__nccl_coll(weft_group_t *g, const weft_tl_dev_coll_t *d, void *stream,
                              weft_req_t **req)
{
    weft_tl_comm_t *comm;
    weft_tl_op_t *op = NULL;
    if (d == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = enter(g, req, &stream, &comm);
    if (st != WEFT_OK) {
        return st;
    }
    st = tl()->coll(comm, d, stream, &op);
    /* What lands in this rank's buffer: every rank's block for an allgather. */
    size_t bytes = d->count * weft_dtype_size(d->dtype);
    if (d->kind == WEFT_TL_COLL_ALLGATHER) {
        bytes *= (size_t)g->size;
    }
    return wrap(g, comm, st, op, bytes, coll_what(d->kind), req);
}

weft_status_t weft__nccl_p2p_prepare(weft_group_t *g, uint64_t seq, bool *chosen)
{
    weft_tsel_t sel;
    weft_tl_comm_t *comm;
    *chosen = false;
    weft_status_t st = weft__select_group(g, WEFT_MEM_CUDA, &sel);
    if (st != WEFT_OK) {
        return st;
    }
    if (sel.status != WEFT_OK || sel.transport != WEFT_TSEL_NCCL) {
        return WEFT_OK; /* the same answer on every member */
    }
    if (!nccl()->available()) {
        return weft__error(g->ctx, WEFT_ERR_UNSUPPORTED, "CUDA buffers on group %" PRIu32 ": %s",
                           g->id, tl()->comm_error(NULL));
    }
    if ((st = group_comm_at(g, seq, &comm)) == WEFT_OK) {
        *chosen = true;
    }
    return st;
}

weft_status_t weft__nccl_p2p(weft_group_t *g, const weft_nccl_xfer_t *xfers, int n,
                             weft_req_t **req)
{
    weft_tl_comm_t *comm;
    weft_tl_op_t *nop = NULL;
    size_t bytes = 0;
    if (g == NULL || req == NULL || n < 0 || (n > 0 && xfers == NULL)) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_tl_p2p_t *ops = malloc(sizeof(*ops) * (size_t)(n > 0 ? n : 1));
    if (ops == NULL) {
        return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "NCCL point-to-point: out of memory");
    }
    for (int i = 0; i < n; i++) {
        ops[i] = (weft_tl_p2p_t){xfers[i].rank, xfers[i].send, xfers[i].buf, xfers[i].bytes};
        bytes += xfers[i].bytes;
    }
    weft_status_t st = group_comm(g, &comm);
    if (st == WEFT_OK) {
        st = tl()->p2p(comm, ops, n, &nop);
        st = wrap(g, comm, st, nop, bytes, "NCCL send/recv", req);
    }
    free(ops);
    return st;
}
