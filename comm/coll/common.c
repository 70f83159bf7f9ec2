/*
 * What every collective shares: argument checks, sequence numbers, the compound request
 * that drives the two phases (exchange, then data), child-request helpers and the
 * one-rank shortcut.
 */
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/coll/coll.h"
#include "comm/shm/shm.h"
#include "util/assert.h"

_Static_assert(sizeof(weft_coll_hdr_t) == WEFT_COLL_HDR_SIZE, "header must stay 32 bytes");

static bool is_reduction(enum weft_coll_kind k)
{
    return k == WEFT_COLL_ALLREDUCE || k == WEFT_COLL_REDUCE || k == WEFT_COLL_REDUCE_SCATTER;
}

/* Resolve dtype/op into an element size and a reducer; INVALID_ARG (logged) if unusable. */
static weft_status_t resolve_types(weft_ctx_t *ctx, const weft_coll_args_t *a, size_t *elem,
                                   weft_reducer_t *red)
{
    memset(red, 0, sizeof(*red));
    if (a->kind == WEFT_COLL_BARRIER) {
        *elem = 1;
        return WEFT_OK;
    }
    if (!is_reduction(a->kind)) {
        *elem = weft_dtype_size(a->dtype);
        if (*elem == 0) {
            return weft__error(ctx, WEFT_ERR_INVALID_ARG, "%s: dtype %d has no size", a->name,
                               (int)a->dtype);
        }
        return WEFT_OK;
    }
    red->dtype = a->dtype;
    red->op = a->op == WEFT_AVG ? WEFT_SUM : a->op; /* the average divides the sum at the end */
    if (a->op >= WEFT_OP_USER_FIRST) {
        const weft_op_params_t *u = weft__user_op(ctx, a->op);
        if (u == NULL || a->dtype != WEFT_DTYPE_USER) {
            return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                               "%s: op %d is not a live user operator used with "
                               "WEFT_DTYPE_USER",
                               a->name, a->op);
        }
        red->user_fn = u->fn;
        red->user_arg = u->arg;
        red->elem_size = u->elem_size;
    } else if (!weft__reduce_builtin_ok(a->dtype, red->op)) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "%s: op %d does not apply to dtype %s",
                           a->name, a->op, weft_dtype_name(a->dtype));
    } else {
        red->elem_size = weft_dtype_size(a->dtype);
    }
    *elem = red->elem_size;
    return WEFT_OK;
}

/* Check alltoallv's arrays: present, and every block addressable without overflow. */
static weft_status_t check_alltoallv(weft_ctx_t *ctx, const weft_coll_args_t *a, int size,
                                     size_t elem)
{
    if (a->sendcounts == NULL || a->sdispls == NULL || a->recvcounts == NULL ||
        a->rdispls == NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "alltoallv: count/displacement arrays "
                           "must not be NULL");
    }
    for (int j = 0; j < size; j++) {
        size_t s = a->sendcounts[j], r = a->recvcounts[j];
        if ((s > 0 && a->sendbuf == NULL) || (r > 0 && a->recvbuf == NULL) ||
            a->sdispls[j] > SIZE_MAX / elem || a->rdispls[j] > SIZE_MAX / elem ||
            s > SIZE_MAX / elem - a->sdispls[j] || r > SIZE_MAX / elem - a->rdispls[j]) {
            return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                               "alltoallv: bad buffer, count or displacement for rank %d", j);
        }
    }
    return WEFT_OK;
}

static weft_status_t check_args(weft_group_t *g, const weft_coll_args_t *a, size_t *elem,
                                weft_reducer_t *red)
{
    weft_ctx_t *ctx = g->ctx;
    weft_status_t st = resolve_types(ctx, a, elem, red);
    if (st != WEFT_OK) {
        return st;
    }
    if ((a->kind == WEFT_COLL_BROADCAST || a->kind == WEFT_COLL_REDUCE) &&
        (a->root < 0 || a->root >= g->size)) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "%s: root %d outside a group of %d", a->name,
                           a->root, g->size);
    }
    if (a->kind == WEFT_COLL_ALLTOALLV) {
        return check_alltoallv(ctx, a, g->size, *elem);
    }
    /* The largest buffer any kind touches is size * count elements. */
    if (a->count > SIZE_MAX / *elem / (size_t)g->size) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "%s: count %zu is too large", a->name,
                           a->count);
    }
    if (a->count == 0 || a->kind == WEFT_COLL_BARRIER) {
        return WEFT_OK;
    }
    bool need_send = a->kind != WEFT_COLL_BROADCAST;
    bool need_recv = a->kind != WEFT_COLL_REDUCE || g->rank == a->root;
    if ((need_send && a->sendbuf == NULL) || (need_recv && a->recvbuf == NULL)) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "%s: NULL buffer with count %zu", a->name,
                           a->count);
    }
    if (a->kind == WEFT_COLL_ALLTOALL && a->sendbuf == a->recvbuf) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "alltoall cannot work in place");
    }
    return WEFT_OK;
}

void weft__coll_single(const weft_coll_args_t *a, size_t elem)
{
    size_t bytes = a->count * elem;
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE_SCATTER:
    case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_REDUCE:
    case WEFT_COLL_ALLTOALL:
        if (bytes > 0 && a->sendbuf != a->recvbuf) {
            memcpy(a->recvbuf, a->sendbuf, bytes);
        }
        break;
    case WEFT_COLL_ALLTOALLV:
        if (a->sendcounts[0] > 0) {
            memmove((uint8_t *)a->recvbuf + a->rdispls[0] * elem,
                    (const uint8_t *)a->sendbuf + a->sdispls[0] * elem, a->sendcounts[0] * elem);
        }
        break;
    case WEFT_COLL_BROADCAST:
    case WEFT_COLL_BARRIER:
        break;
    }
}

void weft__coll_set_mismatch(weft_coll_t *c, const char *fmt, ...)
{
    if (c->why[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, sizeof(c->why), fmt, ap);
        va_end(ap);
    }
    c->mismatch = true;
}

static const char *op_str(int op)
{
    return op < 0 ? "none" : weft_op_name(op);
}

/* The name of collective kind @p k, as the public call that starts it. */
static const char *kind_str(unsigned k)
{
    static const char *const names[] = {
        [WEFT_COLL_ALLREDUCE] = "allreduce", [WEFT_COLL_REDUCE_SCATTER] = "reduce_scatter",
        [WEFT_COLL_ALLGATHER] = "allgather", [WEFT_COLL_BROADCAST] = "broadcast",
        [WEFT_COLL_REDUCE] = "reduce",       [WEFT_COLL_ALLTOALL] = "alltoall",
        [WEFT_COLL_ALLTOALLV] = "alltoallv", [WEFT_COLL_BARRIER] = "barrier",
    };
    return k < sizeof(names) / sizeof(names[0]) && names[k] != NULL ? names[k]
                                                                    : "an unknown collective";
}

static bool hdr_same(const weft_coll_hdr_t *m, int peer, const weft_coll_hdr_t *h, bool with_seq,
                     char *why, size_t len)
{
    if (h->flags & WEFT_COLL_HDR_INVALID) {
        snprintf(why, len,
                 "rank %d refused its arguments of this collective (it got "
                 "WEFT_ERR_INVALID_ARG)",
                 peer);
        return false;
    }
    if (h->kind == m->kind && (!with_seq || h->seq == m->seq) && h->count == m->count &&
        h->elem_size == m->elem_size && h->dtype == m->dtype && h->op == m->op &&
        h->root == m->root) {
        return true;
    }
    char differ[64] = "";
    const struct {
        bool same;
        const char *name;
    } parts[] = {
        {h->kind == m->kind, "collective"},
        {!with_seq || h->seq == m->seq, "sequence"},
        {h->count == m->count, "count"},
        {h->dtype == m->dtype && h->elem_size == m->elem_size, "dtype"},
        {h->op == m->op, "op"},
        {h->root == m->root, "root"},
    };
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        if (!parts[i].same) {
            size_t n = strlen(differ);
            snprintf(differ + n, sizeof(differ) - n, "%s%s", n > 0 ? ", " : "", parts[i].name);
        }
    }
    snprintf(why, len,
             "they differ in %s: rank %d called %s #%u (count %llu, dtype %s, op %s, root %d), "
             "this rank %s #%u (count %llu, dtype %s, op %s, root %d)",
             differ, peer, kind_str(h->kind), h->seq, (unsigned long long)h->count,
             weft_dtype_name((weft_dtype_t)h->dtype), op_str(h->op), h->root, kind_str(m->kind),
             m->seq, (unsigned long long)m->count, weft_dtype_name((weft_dtype_t)m->dtype),
             op_str(m->op), m->root);
    return false;
}

bool weft__coll_hdr_same(const weft_coll_hdr_t *m, int peer, const weft_coll_hdr_t *h, char *why,
                         size_t len)
{
    return hdr_same(m, peer, h, false, why, len);
}

bool weft__coll_hdr_agrees(weft_coll_t *c, int peer, const weft_coll_hdr_t *h, bool with_seq)
{
    char why[sizeof(c->why)];
    if (h->flags & (WEFT_COLL_HDR_INVALID | WEFT_COLL_HDR_REFUSED)) {
        c->refused = true;
    }
    if (hdr_same(&c->hdr, peer, h, with_seq, why, sizeof(why))) {
        return true;
    }
    weft__coll_set_mismatch(c, "%s", why);
    return false;
}

weft_status_t weft__coll_child_test(weft_req_t **r, size_t *bytes)
{
    if (*r == NULL) {
        return WEFT_OK;
    }
    weft_status_t st = weft__req_advance(*r);
    if (st == WEFT_INPROGRESS) {
        return st;
    }
    if (bytes != NULL) {
        *bytes = (*r)->bytes;
    }
    weft_req_free(*r);
    *r = NULL;
    return st;
}

weft_status_t weft__coll_children_test(weft_req_t **reqs, size_t n)
{
    weft_status_t result = WEFT_OK;
    for (size_t i = 0; i < n; i++) {
        weft_status_t st = weft__coll_child_test(&reqs[i], NULL);
        if (st < 0) {
            return st;
        }
        if (st == WEFT_INPROGRESS) {
            result = WEFT_INPROGRESS;
        }
    }
    return result;
}

void weft__coll_child_drop(weft_req_t **r)
{
    if (*r != NULL) {
        weft_req_free(*r);
        *r = NULL;
    }
}

void weft__coll_children_drop(weft_req_t **reqs, size_t n)
{
    for (size_t i = 0; reqs != NULL && i < n; i++) {
        weft__coll_child_drop(&reqs[i]);
    }
}

uint8_t *weft__coll_alloc(weft_coll_t *c, size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes > 0 ? bytes : 64) != 0) {
        weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory for %zu bytes of scratch", c->a.name,
                    bytes);
        return NULL;
    }
    return p;
}

/*
 * A collective this rank leaves before it finished (its wait timed out, its request was
 * freed in flight, a local error stopped it) is abandoned: the others may be waiting in
 * it, or may have finished it. That is a group event (include/weft/group.h): the epoch is
 * revoked for every member. A mismatch (every rank learns it from the headers), a
 * refusal, and a failure the group already knows of need nothing more.
 */
static void coll_note_abandoned(weft_coll_t *c, const char *how)
{
    if (c->detached || (c->phase == WEFT_COLL_PH_DONE && (c->status == WEFT_OK || c->mismatch))) {
        return;
    }
    char what[96];
    snprintf(what, sizeof(what), "%s #%u (%s)", c->a.name, c->seq, how);
    weft__group_abandon(c->g, c->epoch, what);
}

/* Another member abandoned a collective on this epoch's segment: WEFT_OK if not. */
static weft_status_t coll_peer_abandoned(weft_coll_t *c)
{
    int who = weft__shm_abandoned(c->shm);
    if (who < 0) {
        return WEFT_OK;
    }
    weft_group_t *g = c->g;
    if (g->epoch == c->epoch) {
        weft__group_revoke_here(g);
    }
    c->sh.finished = true; /* nothing to hand on: the segment is unusable */
    return weft__error(c->ctx, WEFT_ERR_REVOKED,
                       "%s #%u: group rank %d abandoned a collective of group %u epoch %u "
                       "(timed out or cancelled); repair the group",
                       c->a.name, c->seq, who, g->id, c->epoch);
}

/* Release everything a collective holds except its own memory. */
static void coll_release(weft_coll_t *c)
{
    weft__shm_abandon(c);
    weft__rd_fini(c);
    if (c->fini != NULL) {
        c->fini(c);
    }
    free(c->scratch);
    c->scratch = NULL;
}

static weft_status_t coll_mismatch_error(weft_coll_t *c)
{
    if (c->refused && c->a.refused_status != WEFT_OK) {
        return weft__error(c->ctx, c->a.refused_status, "%s #%u: %s", c->a.name, c->seq,
                           c->why[0] != '\0' ? c->why : "another rank refused its arguments of it");
    }
    if (c->why[0] != '\0') {
        return weft__error(c->ctx, WEFT_ERR_MISMATCH, "%s #%u: %s", c->a.name, c->seq, c->why);
    }
    return weft__error(c->ctx, WEFT_ERR_MISMATCH,
                       "%s #%u: other ranks disagree on count, dtype, op or root", c->a.name,
                       c->seq);
}

/* Advance both phases as far as possible without blocking. */
static weft_status_t coll_step(weft_coll_t *c)
{
    weft_status_t st;
    if (c->shm != NULL && c->phase != WEFT_COLL_PH_DONE && !c->detached &&
        (st = coll_peer_abandoned(c)) != WEFT_OK) {
        c->phase = WEFT_COLL_PH_DONE;
        c->status = st;
        return st;
    }
    switch (c->phase) {
    case WEFT_COLL_PH_RD:
        st = c->shm != NULL ? weft__shm_exchange(c)
             : c->detached  ? weft__rd_refuse_progress(c)
                            : weft__rd_progress(c);
        if (st != WEFT_OK) {
            return st;
        }
        if (c->mismatch) {
            c->phase = WEFT_COLL_PH_DONE;
            c->status = c->detached ? WEFT_ERR_MISMATCH : coll_mismatch_error(c);
            return c->status;
        }
        if (c->rd.ops != NULL && c->rd.ops->finish != NULL) {
            c->rd.ops->finish(c);
        }
        weft__rd_fini(c);
        c->phase = WEFT_COLL_PH_DATA;
        /* fall through */
    case WEFT_COLL_PH_DATA:
        st = c->data != NULL ? c->data(c) : WEFT_OK;
        if (st == WEFT_INPROGRESS) {
            return st;
        }
        if (st == WEFT_OK && c->a.op == WEFT_AVG && is_reduction(c->a.kind) &&
            c->a.recvbuf != NULL && (c->a.kind != WEFT_COLL_REDUCE || c->rank == c->a.root)) {
            weft__reduce_average(c->a.recvbuf, c->a.count, c->a.dtype, c->size);
        }
        c->phase = WEFT_COLL_PH_DONE;
        c->status = st;
        return st;
    case WEFT_COLL_PH_DONE:
        WEFT_ASSERT(c->status != WEFT_INPROGRESS);
        break;
    }
    return c->status;
}

static weft_status_t coll_progress(weft_req_t *req);

/*
 * Advance once every other nonblocking collective of the context. A rank waiting for one
 * collective must keep its others moving: ranks that wait for them in different orders
 * would otherwise each wait for a step the other never takes. Steps run directly (not
 * through weft__req_advance) so this never recurses; children a step frees are always
 * ahead of their parent in the live list, so the walk stays valid.
 */
static void progress_others(weft_ctx_t *ctx, const weft_req_t *self)
{
    weft_req_t *next;
    for (weft_req_t *r = ctx->live; r != NULL; r = next) {
        next = r->next;
        if (r == self || r->progress != coll_progress || r->status != WEFT_INPROGRESS ||
            r->impl == NULL || weft__group_status(r->group) != WEFT_OK ||
            r->group->epoch != r->epoch) {
            continue; /* its own wait reports a revoked or edited group */
        }
        weft_status_t st = coll_step(r->impl);
        if (st != WEFT_INPROGRESS) {
            r->status = st; /* as weft__req_advance records a final status */
            if (r->detached && !r->in_bg) {
                weft_req_free(r); /* nobody holds it (the progress thread frees its own) */
            }
        }
    }
}

static weft_status_t coll_progress(weft_req_t *req)
{
    weft_status_t st = coll_step(req->impl);
    if (st == WEFT_INPROGRESS) {
        progress_others(req->ctx, req);
    }
    return st;
}

static void coll_cleanup(weft_req_t *req)
{
    weft_coll_t *c = req->impl;
    if (c == NULL) {
        return;
    }
    req->impl = NULL;
    coll_note_abandoned(c, req->status == WEFT_INPROGRESS ? "freed in flight"
                                                          : weft_status_str(req->status));
    if (req->status == WEFT_OK || (c->detached && c->phase == WEFT_COLL_PH_DONE)) {
        coll_release(c); /* (a refusal that ran to its end has no message in flight) */
        free(c);
        return;
    }
    /* Failed or abandoned in flight: a cancelled send may still read the scratch or the
     * headers kept in @p c (weft__retire), so they outlive the request. */
    void *scratch = c->scratch;
    c->scratch = NULL;
    coll_release(c);
    weft__retire(req->ctx, scratch);
    weft__retire(req->ctx, c);
}

/* The parameters every rank must agree on, as sent in the exchange headers. */
static weft_coll_hdr_t coll_header(const weft_coll_args_t *a, size_t elem, uint32_t seq)
{
    bool red = is_reduction(a->kind);
    bool rooted = a->kind == WEFT_COLL_BROADCAST || a->kind == WEFT_COLL_REDUCE;
    bool counted = a->kind != WEFT_COLL_ALLTOALLV && a->kind != WEFT_COLL_BARRIER;
    return (weft_coll_hdr_t){
        .count = counted ? a->count : 0,
        .elem_size = a->kind == WEFT_COLL_BARRIER ? 0 : elem,
        .seq = seq,
        .op = red ? a->op : -1,
        .root = rooted ? a->root : -1,
        .kind = (uint16_t)a->kind,
        .dtype = a->kind == WEFT_COLL_BARRIER ? 0 : (uint8_t)a->dtype,
    };
}

weft_status_t weft__coll_setup_msgs(weft_coll_t *c)
{
    switch (c->a.kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE:
    case WEFT_COLL_REDUCE_SCATTER:
        return weft__coll_setup_reduction(c);
    case WEFT_COLL_ALLGATHER:
        return weft__coll_setup_allgather(c);
    case WEFT_COLL_BROADCAST:
        return weft__coll_setup_broadcast(c);
    case WEFT_COLL_ALLTOALL:
    case WEFT_COLL_ALLTOALLV:
        return weft__coll_setup_alltoall(c);
    case WEFT_COLL_BARRIER:
        return weft__rd_init(c, NULL, 0);
    }
    return WEFT_ERR_INVALID_ARG;
}

static weft_status_t coll_setup(weft_coll_t *c)
{
    return c->g->shm != NULL ? weft__coll_setup_shm(c) : weft__coll_setup_msgs(c);
}

/* A collective of @p g with nothing set yet. Everything but the mismatch text and the
 * inline buffers is cleared; those need no clearing (a struct literal would clear and
 * copy them: measurable on the 8-byte path). */
static void coll_clear(weft_coll_t *c, weft_group_t *g)
{
    memset(c, 0, offsetof(weft_coll_t, why));
    c->why[0] = '\0';
    c->ctx = g->ctx;
    c->g = g;
    c->rank = g->rank;
    c->size = g->size;
    c->epoch = g->epoch;
}

/*
 * Check the arguments, count and number the collective and choose its algorithm.
 * Returns WEFT_INPROGRESS when @p c is ready to run, WEFT_OK when it completed locally
 * (one rank), or an error (nothing left to release).
 */
static weft_status_t coll_init(weft_group_t *g, const weft_coll_args_t *a, weft_coll_t *c,
                               bool blocking)
{
    weft_ctx_t *ctx = g->ctx;
    size_t elem;
    weft_reducer_t red;
    weft_status_t st = check_args(g, a, &elem, &red);
    if (st != WEFT_OK) {
        if (st == WEFT_ERR_INVALID_ARG) {
            weft__coll_refuse(g, a, blocking); /* tell the others now, not at their timeout */
        }
        return st;
    }
    if (g->shm == NULL && g->size > 1) {
        /* Over messages a member that abandoned this epoch's collective cannot take back
         * what it sent: its revocation, already here, must be seen before this one could
         * complete on that. (Through shared memory the segment itself tells.) */
        weft__poll_failure_notices(ctx);
    }
    st = weft__group_status(g);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "%s: group %u is revoked", a->name, g->id);
    }
    g->coll_count++;
    uint32_t seq = g->coll_seq++;
    if (g->size == 1) {
        if (a->kind == WEFT_COLL_ALLTOALLV && a->sendcounts[0] != a->recvcounts[0]) {
            return weft__error(ctx, WEFT_ERR_MISMATCH,
                               "alltoallv: sends %zu elements to itself but expects %zu",
                               a->sendcounts[0], a->recvcounts[0]);
        }
        weft__coll_single(a, elem);
        return WEFT_OK;
    }
    coll_clear(c, g);
    c->a = *a;
    c->elem = elem;
    c->red = red;
    c->seq = seq;
    c->phase = WEFT_COLL_PH_RD;
    c->status = WEFT_INPROGRESS;
    c->hdr = coll_header(a, elem, seq);
    st = coll_setup(c);
    if (st != WEFT_OK) {
        coll_note_abandoned(c, weft_status_str(st));
        coll_release(c);
        return st;
    }
    return WEFT_INPROGRESS;
}

weft_status_t weft__coll_start(weft_group_t *g, const weft_coll_args_t *a, weft_req_t **req)
{
    if (g == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (req == NULL) {
        weft_status_t st = weft__error(g->ctx, WEFT_ERR_INVALID_ARG, "%s: no request pointer",
                                       a->name);
        weft__coll_refuse(g, a, false);
        return st;
    }
    if (weft__coll_is_cuda(a)) {
        return weft__coll_cuda_start(g, a, req);
    }
    weft_status_t st = weft__shm_ensure(g);
    if (st != WEFT_OK) {
        return st;
    }
    weft_coll_t *c = malloc(sizeof(*c));
    if (c == NULL) {
        return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", a->name);
    }
    st = coll_init(g, a, c, false);
    if (st != WEFT_INPROGRESS) {
        free(c);
        if (st == WEFT_OK) {
            *req = NULL;
        }
        return st;
    }
    weft_req_t *r = weft__req_new(g->ctx, g);
    if (r == NULL) {
        coll_release(c);
        free(c);
        return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory for a request", a->name);
    }
    r->impl = c;
    r->progress = coll_progress;
    r->cleanup = coll_cleanup;
    /* Post the first messages now so communication starts before the first test. */
    st = weft__req_advance(r);
    if (st == WEFT_INPROGRESS) {
        weft__req_publish(r); /* the progress thread takes it on while the caller is away */
        *req = r;
        return st;
    }
    weft_req_free(r);
    if (st == WEFT_OK) {
        *req = NULL;
    }
    return st;
}

/* The idle step of weft_wait() (comm/progress/req.c): it already starts yielding at once when this
 * host runs more ranks than it has cores (WEFT_YIELD_SPINS=auto), then sleeps on the
 * failure notices. */
static void coll_idle(weft_coll_t *c, uint64_t *idle)
{
    weft__idle(c->ctx, idle);
}

/* The wait loop of weft_wait(), around a collective that is not a request. */
static weft_status_t coll_wait_inline(weft_coll_t *c)
{
    weft_ctx_t *ctx = c->ctx;
    weft_group_t *g = c->g;
    uint32_t epoch = g->epoch;
    uint64_t timeout = weft__ms_to_ns(ctx->cfg.timeout_ms);
    uint64_t start = 0, idle = 0; /* the clock is read once this rank first waits */
    unsigned polls = 0;
    for (;;) {
        weft_status_t st = weft__group_status(g);
        if (st == WEFT_OK && g->epoch != epoch) {
            st = WEFT_ERR_REVOKED; /* the group was edited under this collective */
        }
        if (st == WEFT_OK) {
            st = coll_step(c);
        }
        if (st != WEFT_INPROGRESS) {
            return st;
        }
        progress_others(ctx, NULL);
        /* A collective through shared memory needs no transport: drive it (for other
         * requests, and failure notices) on every 16th poll only. */
        bool drive = c->shm == NULL || !c->sh.no_tl || (++polls & 15) == 0;
        if (drive ? weft__progress(ctx) > 0 : weft__shm_news(ctx)) {
            idle = 0;
            continue;
        }
        /* The timeout is seconds long: the clock is read on the first idle poll and then
         * every 64th, not on each (a clock read costs as much as a poll). */
        if (start == 0 || (idle & 63) == 0) {
            uint64_t now = weft__now_ns();
            if (start == 0) {
                start = now;
            } else if (now - start >= weft__wait_limit(ctx, start, timeout)) {
                char what[64];
                snprintf(what, sizeof(what), "%s #%u", c->a.name, c->seq);
                return weft__wait_timeout(ctx, start, timeout, what);
            }
        }
        coll_idle(c, &idle);
    }
}

/* The refusal of @p c, driven to its end here; its memory freed, or kept for messages that
 * a cancel left in flight. */
static void refusal_wait(weft_coll_t *c)
{
    weft_status_t st = coll_wait_inline(c);
    void *scratch = c->scratch;
    c->scratch = NULL;
    coll_release(c);
    if (st == WEFT_ERR_MISMATCH) {
        free(scratch);
        free(c);
    } else {
        weft__retire(c->ctx, scratch);
        weft__retire(c->ctx, c);
    }
}

/* A refusal left to run: the progress thread, or the waits of later calls, drive it, and
 * whoever completes it frees it. */
static void refusal_detach(weft_coll_t *c)
{
    weft_req_t *r = weft__req_new(c->ctx, c->g);
    if (r == NULL) {
        refusal_wait(c); /* nothing to hand it to: do it now */
        return;
    }
    r->impl = c;
    r->progress = coll_progress;
    r->cleanup = coll_cleanup;
    r->detached = true;
    if (weft__req_advance(r) == WEFT_INPROGRESS) {
        weft__req_publish(r);
    } else {
        weft_req_free(r);
    }
}

void weft__coll_refuse(weft_group_t *g, const weft_coll_args_t *a, bool blocking)
{
    weft_ctx_t *ctx = g->ctx;
    if (weft__coll_is_cuda(a) || weft__shm_ensure(g) != WEFT_OK) {
        return;
    }
    weft_coll_hdr_t h = coll_header(a, 0, g->coll_seq);
    h.flags = WEFT_COLL_HDR_INVALID;
    if (g->shm != NULL && weft__shm_refuse(g, &h)) {
        return; /* posted, or nobody to tell */
    }
    if (g->size < 2 || weft__group_status(g) != WEFT_OK) {
        return;
    }
    weft_coll_t *c = malloc(sizeof(*c));
    if (c == NULL) {
        return;
    }
    /* The caller's error stays the one weft_last_error() gives. */
    char saved[sizeof(ctx->last_error)];
    memcpy(saved, ctx->last_error, sizeof(saved));
    coll_clear(c, g);
    c->a = weft__coll_args(a->kind, a->name, NULL, NULL, a->count, a->dtype, a->op, a->root);
    c->seq = g->coll_seq++;
    c->phase = WEFT_COLL_PH_RD;
    c->status = WEFT_INPROGRESS;
    c->detached = true;
    c->mismatch = true;
    c->refused = true;
    c->hdr = h;
    weft_status_t st = WEFT_OK;
    if (g->shm != NULL) {
        weft__shm_queue_refusal(c); /* behind the collectives still outstanding */
    } else if ((st = weft__rd_init(c, NULL, 0)) == WEFT_OK) {
        st = weft__rd_refuse_start(c);
    }
    if (st != WEFT_OK) {
        void *scratch = c->scratch;
        c->scratch = NULL;
        coll_release(c);
        weft__retire(ctx, scratch); /* a receive or send may be in flight */
        weft__retire(ctx, c);
    } else if (blocking) {
        refusal_wait(c);
    } else {
        refusal_detach(c);
    }
    memcpy(ctx->last_error, saved, sizeof(saved));
}

weft_status_t weft__coll_run(weft_group_t *g, const weft_coll_args_t *a)
{
    if (g == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (weft__coll_is_cuda(a)) {
        weft_req_t *req = NULL;
        weft_status_t st = weft__coll_cuda_start(g, a, &req);
        return weft__blocking(st, req);
    }
    weft_status_t st = weft__shm_ensure(g);
    if (st != WEFT_OK) {
        return st;
    }
    weft_coll_t c;
    st = coll_init(g, a, &c, true);
    if (st != WEFT_INPROGRESS) {
        return st;
    }
    st = coll_wait_inline(&c);
    coll_note_abandoned(&c, st == WEFT_ERR_TIMEOUT ? "timed out" : weft_status_str(st));
    coll_release(&c);
    return st;
}

weft_status_t weft_group_coll_count(const weft_group_t *g, uint64_t *count)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || count == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    *count = g->coll_count;
    return WEFT_OK;
}
