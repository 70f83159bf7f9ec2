/*
 * Running a plan. A migration is one compound request on the group, in three stages:
 *   agree   one small allreduce of the plan's digest (with the chunk size and the
 *           priorities), so members that started different plans all fail, none hangs;
 *   move    every stream (one per peer and direction) keeps WEFT_MIGRATE_WINDOW chunks in
 *           flight; a receiver checks each chunk's xxHash, then tells the sender which
 *           chunks were bad (the verdict); those are sent once more, and a second bad
 *           copy fails the stream; local copies go one chunk at a time (engine_stream.c:
 *           the data work of all of it runs as jobs, outside the context's lock); device
 *           buffers on every side may take the first round GPU to GPU (nccl_path.c);
 *   close   the worst result of every member to group rank 0 and the minimum back, in
 *           messages (it starts at no fixed point of the group's collective sequence),
 *           so every member returns the same (engine_close.c).
 * Tags: class MIGRATE, payload = round (1 bit) | header (1) | migration id (4) | chunk (20).
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll/start.h"
#include "comm/device/nccl_comm.h"
#include "migrate/engine/device.h"
#include "migrate/engine/engine_impl.h"
#include "migrate/engine/xxh.h"
#include "weft/group.h"

#define DEFAULT_MAX_STAGED (64u << 20)

/*
 * After the agreement: when no member has a chunk to or from another in host memory and
 * some member has such chunks in device memory, every member asks the selection (the
 * same answer everywhere) whether NCCL carries CUDA buffers of the group; if it does, the
 * group's communicator is made now where it is not there yet (collective: every member
 * comes here) and the first round goes through NCCL (nccl_path.c). Else the chunks are
 * staged through host memory, as without NCCL.
 */
#ifdef WEFT_HAVE_NCCL
/* The selection, the communicator and the path's state, with the buffers' device current. */
static weft_status_t prepare_nccl(mig_t *m)
{
    bool chosen = false;
    weft_status_t st = weft__nccl_p2p_prepare(m->g, m->nccl_seq, &chosen);
    if (st != WEFT_OK || !chosen) {
        return st;
    }
    if ((st = weft__mig_nccl_init(m)) != WEFT_OK) {
        return st == WEFT_ERR_NO_MEMORY
                   ? weft__error(weft__group_ctx(m->g), st, "weft_migrate: out of memory")
                   : st;
    }
    m->nccl = true;
    return WEFT_OK;
}
#endif

static weft_status_t choose_nccl(mig_t *m)
{
    if (m->agree[8] != 0 || m->agree[9] == 0) {
        return WEFT_OK;
    }
#ifdef WEFT_HAVE_NCCL
    return weft__mig_on_device(m, prepare_nccl);
#else
    return WEFT_OK;
#endif
}

static weft_status_t mig_progress(weft_req_t *req)
{
    mig_t *m = weft__req_impl(req);
    weft_ctx_t *ctx = weft__group_ctx(m->g);
    weft_status_t st;
    if (m->stage == STAGE_AGREE) {
        if ((st = weft__coll_child_test(&m->child, NULL)) != WEFT_OK) {
            return st;
        }
        if (m->bad_args) {
            return weft__error(ctx, WEFT_ERR_INVALID_ARG, "weft_imigrate: %s", m->why);
        }
        if (m->agree[7] != 0) {
            return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                               "weft_migrate: another member's arguments were refused");
        }
        if (m->agree[5] != m->agree[0] || m->agree[6] != m->agree[1]) {
            return weft__error(ctx, WEFT_ERR_MISMATCH,
                               "weft_migrate: members started different plans, chunk sizes "
                               "(WEFT_MIGRATE_CHUNK), priorities or WEFT_MIGRATE_SHM");
        }
        if ((st = choose_nccl(m)) != WEFT_OK) {
            return st;
        }
        m->stage = STAGE_MOVE;
    }
    if (m->stage == STAGE_MOVE) {
        int gate = m->gated ? weft__mig_max_waiting_prio(m) : 0;
        bool all = weft__mig_local_step(m, gate);
#ifdef WEFT_HAVE_NCCL
        if (m->nccl && !m->nccl_done &&
            (st = weft__mig_on_device(m, weft__mig_nccl_progress)) != WEFT_OK &&
            st != WEFT_INPROGRESS) {
            return st;
        }
#endif
        for (int i = 0; i < m->nstreams; i++) {
            if (weft__ctx_caller_waiting(ctx)) {
                return WEFT_INPROGRESS; /* the progress thread's pass: let the caller in */
            }
            if ((st = weft__mig_stream_progress(m, &m->streams[i], gate)) != WEFT_OK &&
                st != WEFT_INPROGRESS) {
                return st;
            }
            all &= m->streams[i].phase == ST_DONE;
        }
        if (!all) {
            return WEFT_INPROGRESS;
        }
        if (m->before_close != NULL && !m->before_done) {
            st = m->before_close(m->before_arg);
            if (st == WEFT_INPROGRESS) {
                return st;
            }
            m->before_done = true;
            if (st != WEFT_OK && m->why[0] == '\0') {
                snprintf(m->why, sizeof(m->why), "%s", weft_last_error(NULL));
            }
            m->before_err = st;
        }
        if ((st = weft__mig_start_close(m)) != WEFT_OK) {
            return st;
        }
    }
    if ((st = weft__mig_close_progress(m)) != WEFT_OK) {
        return st;
    }
    if (m->close_out != WEFT_OK) {
        if (m->why[0] != '\0') {
            return weft__error(ctx, (weft_status_t)m->close_out, "weft_migrate: %s", m->why);
        }
        return weft__error(ctx, (weft_status_t)m->close_out,
                           "weft_migrate: failed on another member (%s)",
                           weft_status_str((weft_status_t)m->close_out));
    }
    return WEFT_OK;
}

/* Free @p p, or keep it until finalize when a cancelled send may still read it. */
static void release(weft_ctx_t *ctx, void *p, bool sending)
{
    if (sending) {
        weft__retire(ctx, p);
    } else {
        free(p);
    }
}

/* Cancel what is in flight and free everything. Buffers of sends that were still in
 * flight (a failed migration) are retired, not freed: the transport may read them until
 * the peer takes the message or its endpoint closes. */
static void mig_free(mig_t *m)
{
    if (m == NULL) {
        return;
    }
    weft_ctx_t *ctx = weft__group_ctx(m->g);
    bool live = false; /* some send of this migration was still in flight */
    /* No job may touch the buffers once they are released. */
    weft__job_cancel(ctx, &m->local_job);
    for (int i = 0; i < m->nstreams; i++) {
        for (size_t w = 0; m->streams[i].slots != NULL && w < m->window; w++) {
            weft__job_cancel(ctx, &m->streams[i].slots[w].job);
        }
    }
    if (m->child != NULL) {
        weft_req_free(m->child);
    }
#ifdef WEFT_HAVE_NCCL
    weft__mig_nccl_free(m);
#endif
    for (int r = 0; m->close_reqs != NULL && r < weft__group_size(m->g); r++) {
        live |= m->close_reqs[r] != NULL;
        weft_req_free(m->close_reqs[r]);
    }
    free(m->close_reqs);
    free(m->close_vals);
    for (int i = 0; i < m->nstreams; i++) {
        stream_t *s = &m->streams[i];
        bool slots_live = false;
        for (size_t w = 0; s->slots != NULL && w < m->window; w++) {
            bool sending = s->send && (s->slots[w].hdr != NULL || s->slots[w].data != NULL);
            weft_req_free(s->slots[w].hdr);
            weft_req_free(s->slots[w].data);
            release(ctx, s->slots[w].staging, sending);
            slots_live |= sending;
        }
        bool verdict_live = !s->send && s->vreq != NULL;
        weft_req_free(s->vreq);
        release(ctx, s->slots, slots_live); /* the headers live in the slots */
        free(s->chunks);
        free(s->work);
        free(s->bad);
        free(s->ok);
        release(ctx, s->verdict, verdict_live);
        release(ctx, s->offer, s->offer_req != NULL);
        weft_req_free(s->offer_req);
        /* A ring is kept for the next migration only when its stream finished: then no
         * write of the other side can still come. */
        weft__ring_give_back(ctx, s->ring, s->phase == ST_DONE && s->err == WEFT_OK);
    }
    free(m->streams);
    free(m->local);
    release(ctx, m, live); /* close_in and close_out live here */
}

static void mig_cleanup(weft_req_t *req)
{
    mig_free(weft__req_impl(req));
    weft__req_set_impl(req, NULL);
}

/* The stream with @p member in direction @p send, created if new. */
static stream_t *stream_for(mig_t *m, int member, int rank, bool send)
{
    for (int i = 0; i < m->nstreams; i++) {
        if (m->streams[i].member == member && m->streams[i].send == send) {
            return &m->streams[i];
        }
    }
    stream_t *p = realloc(m->streams, (size_t)(m->nstreams + 1) * sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    m->streams = p;
    stream_t *s = &m->streams[m->nstreams++];
    memset(s, 0, sizeof(*s));
    s->member = member;
    s->rank = rank;
    s->send = send;
    return s;
}

/* Refuse this member's arguments: the migration still takes part in the agreement, so
 * every member fails with WEFT_ERR_INVALID_ARG instead of waiting for this one. */
static weft_status_t refuse(mig_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static weft_status_t refuse(mig_t *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->why, sizeof(m->why), fmt, ap);
    va_end(ap);
    m->bad_args = true;
    return WEFT_ERR_INVALID_ARG;
}

static weft_status_t build_streams(mig_t *m, const weft_migrate_params_t *p, int me)
{
    for (size_t i = 0; i < m->plan->nxfers; i++) {
        const weft__xfer_t *x = &m->plan->xfers[i];
        if (x->t.src != me && x->t.dst != me) {
            continue;
        }
        int prio =
            p->priority != NULL && x->t.tensor < p->num_priorities ? p->priority[x->t.tensor] : 0;
        if (x->t.src == me && x->t.dst == me) {
            if (!weft__mig_cut(x, (uint32_t)i, m->chunk, prio, &m->local, &m->nlocal,
                               &m->local_cap)) {
                return WEFT_ERR_NO_MEMORY;
            }
            continue;
        }
        bool send = x->t.src == me;
        int other = send ? x->t.dst : x->t.src, rank;
        if (weft_group_rank_of(m->g, other, &rank) != WEFT_OK) {
            return refuse(m, "the plan %s member %d, which is not in group %u epoch %u",
                          send ? "sends to" : "receives from", other, weft__group_id(m->g),
                          weft__group_epoch(m->g));
        }
        stream_t *s = stream_for(m, other, rank, send);
        if (s == NULL ||
            !weft__mig_cut(x, (uint32_t)i, m->chunk, prio, &s->chunks, &s->nchunks, &s->cap)) {
            return WEFT_ERR_NO_MEMORY;
        }
    }
    weft__mig_sort(m->local, m->nlocal);
    size_t local_bytes = 0;
    for (uint32_t i = 0; i < m->nlocal; i++) {
        local_bytes += m->local[i].bytes;
    }
    m->local_stream = local_bytes >= WEFT__MIG_STREAM_MIN;
    for (int i = 0; i < m->nstreams; i++) {
        stream_t *s = &m->streams[i];
        if (s->nchunks >= WEFT_MIG_CLOSE) {
            return refuse(m,
                          "%u chunks between this member and member %d (at most %u): "
                          "raise WEFT_MIGRATE_CHUNK",
                          s->nchunks, s->member, WEFT_MIG_CLOSE - 1);
        }
        weft__mig_sort(s->chunks, s->nchunks);
        s->work = malloc((size_t)s->nchunks * sizeof(uint32_t));
        s->bad = malloc((size_t)s->nchunks * sizeof(uint32_t));
        s->verdict = malloc((size_t)(s->nchunks + 1) * sizeof(uint32_t));
        s->slots = calloc(m->window, sizeof(slot_t));
        s->ok = s->send ? NULL : calloc(s->nchunks + 1, 1);
        if (s->work == NULL || s->bad == NULL || s->verdict == NULL || s->slots == NULL ||
            (!s->send && s->ok == NULL)) {
            return WEFT_ERR_NO_MEMORY;
        }
        for (uint32_t k = 0; k < s->nchunks; k++) {
            s->work[k] = k;
        }
        s->nwork = s->nchunks;
        for (size_t w = 0; w < m->window; w++) {
            s->slots[w].chunk = -1;
        }
        weft__mig_stream_paths(m, s);
    }
    return WEFT_OK;
}

/* Where this member's chunks to and from other members lie: *host when any is in host
 * memory here, *dev when there are some and all are in device memory. */
static void cross_memory(const mig_t *m, int me, int64_t *host, int64_t *dev)
{
    bool any = false, all_dev = true;
    for (size_t i = 0; !m->bad_args && i < m->plan->nxfers; i++) {
        const weft__xfer_t *x = &m->plan->xfers[i];
        if ((x->t.src == me) == (x->t.dst == me)) {
            continue; /* a local copy, or not this member's */
        }
        any = true;
        all_dev &= x->t.src == me ? src_dev(m, x) : m->new_dev;
    }
    *host = any && !all_dev;
    *dev = any && all_dev;
}

/* What members must agree on: the plan, the chunk size and the priorities. */
static uint64_t agreement_key(const mig_t *m, const weft_migrate_params_t *p)
{
    uint64_t h = m->plan->digest ^ XXH3_64bits(&m->chunk, sizeof(m->chunk)) ^
                 (weft__ctx_config(weft__group_ctx(m->g))->migrate_shm ? UINT64_C(0x5348) : 0);
    if (p->priority != NULL && p->num_priorities > 0) {
        h ^= XXH3_64bits_withSeed(p->priority, (size_t)p->num_priorities * sizeof(int), 1);
    }
    return h;
}

weft_status_t weft_imigrate(weft_group_t *g, const weft_plan_t *plan, const void *old_buf,
                            void *new_buf, const weft_migrate_params_t *params, weft_req_t **req)
{
    return weft__migrate_start_keyed(g, plan, old_buf, new_buf, params, 0, req);
}

weft_status_t weft__migrate_start_keyed(weft_group_t *g, const weft_plan_t *plan,
                                        const void *old_buf, void *new_buf,
                                        const weft_migrate_params_t *params, uint64_t extra_key,
                                        weft_req_t **req)
{
    return weft__migrate_start_ext(g, plan, old_buf, new_buf, params, extra_key, NULL, req);
}

weft_status_t weft__migrate_start_ext(weft_group_t *g, const weft_plan_t *plan, const void *old_buf,
                                      void *new_buf, const weft_migrate_params_t *params,
                                      uint64_t extra_key, const weft__mig_ext_t *ext,
                                      weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? weft__group_ctx(g) : NULL);
    if (g == NULL || plan == NULL || req == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = weft__group_ctx(g);
    weft_status_t st = weft__group_status(g);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "weft_imigrate: group %u epoch %u is revoked",
                           weft__group_id(g), weft__group_epoch(g));
    }
    weft_migrate_params_t p;
    memset(&p, 0, sizeof(p));
    const char *perr = NULL;
    if (params != NULL && params->size < sizeof(size_t)) {
        perr = "params->size is not set";
    } else if (params != NULL) {
        memcpy(&p, params, params->size < sizeof(p) ? params->size : sizeof(p));
    }
    if (p.priority != NULL && p.num_priorities < 0) {
        perr = "num_priorities < 0";
        p.priority = NULL;
    }
    int me = weft__group_members(g)[weft__group_rank(g)];
    mig_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_imigrate: out of memory");
    }
    m->g = g;
    m->faults = weft__ctx_faults(ctx);
    m->plan = plan;
    m->old_buf = old_buf;
    m->resume_buf = p.resume_buf;
    m->new_buf = new_buf;
    if (ext != NULL) {
        m->new_buf1 = ext->new_buf1;
        m->old_buf2 = ext->old_buf2;
        m->before_close = ext->before_close;
        m->before_arg = ext->arg;
    }
    m->old_dev = weft__memtype(old_buf) == WEFT_MEM_CUDA;
    m->resume_dev = weft__memtype(p.resume_buf) == WEFT_MEM_CUDA;
    m->new_dev = weft__memtype(new_buf) == WEFT_MEM_CUDA;
    m->any_dev = m->old_dev || m->resume_dev || m->new_dev;
#ifdef WEFT_HAVE_CUDA
    if (m->any_dev) {
        m->cuda_dev = weft__mig_dev_of(m->new_dev ? new_buf : m->old_dev ? old_buf : p.resume_buf);
    }
#endif
    m->chunk = weft__ctx_config(ctx)->migrate_chunk > 0 ? weft__ctx_config(ctx)->migrate_chunk : 1;
    m->window =
        weft__ctx_config(ctx)->migrate_window > 0 ? weft__ctx_config(ctx)->migrate_window : 1;
    m->max_staged = p.max_staged_bytes != 0 ? p.max_staged_bytes : DEFAULT_MAX_STAGED;
    m->gated = p.priority != NULL;
    m->tag_id = weft__group_coll_seq(g) & 0xf;
    if (perr != NULL) {
        refuse(m, "%s", perr);
    }
    for (size_t i = 0; i < plan->nxfers && !m->bad_args; i++) {
        const weft__xfer_t *x = &plan->xfers[i];
        const weft_transfer_t *t = &x->t;
        if ((t->src == me && src_base(m, x) == NULL) || (t->dst == me && dst_base(m, x) == NULL)) {
            refuse(m, "member %d %s but its %s buffer is NULL", me,
                   t->src == me ? "sends" : "receives",
                   t->src != me      ? "new"
                   : x->src_buf == 1 ? "resume"
                                     : "old");
        }
    }
    if (!m->bad_args && (st = build_streams(m, &p, me)) == WEFT_ERR_NO_MEMORY) {
        mig_free(m);
        return weft__error(ctx, st, "weft_imigrate: out of memory");
    }
    if (m->bad_args) { /* nothing moves; the agreement tells the others */
        for (int i = 0; i < m->nstreams; i++) {
            m->streams[i].phase = ST_DONE;
        }
        m->nlocal = 0;
    }
    uint64_t key = agreement_key(m, &p) ^ XXH3_64bits_withSeed(&extra_key, sizeof(extra_key), 2);
    m->agree[0] = (int64_t)key;
    m->agree[1] = (int64_t)~key;
    m->agree[2] = m->bad_args;
    cross_memory(m, me, &m->agree[3], &m->agree[4]);
    m->nccl_seq = weft__group_coll_count(g); /* the agreement's: the same on every member */
    weft_req_t *r = weft__req_new(ctx, g);
    if (r == NULL) {
        mig_free(m);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_imigrate: out of memory");
    }
    weft__req_set_ops(r, mig_progress, mig_cleanup, m);
    weft__req_set_runs_jobs(r, true);
    st = weft_iallreduce(g, m->agree, &m->agree[5], 5, WEFT_I64, WEFT_MAX, &m->child);
    if (st != WEFT_OK && st != WEFT_INPROGRESS) {
        weft_req_free(r);
        return st;
    }
    weft__req_publish(r);
    *req = r;
    return WEFT_INPROGRESS;
}

weft_status_t weft_migrate(weft_group_t *g, const weft_plan_t *plan, const void *old_buf,
                           void *new_buf, const weft_migrate_params_t *params)
{
    WEFT_API_LOCK(g != NULL ? weft__group_ctx(g) : NULL);
    weft_req_t *req = NULL;
    weft_status_t st = weft_imigrate(g, plan, old_buf, new_buf, params, &req);
    return weft__blocking(st, req);
}

bool weft__mig_is(const weft_req_t *req)
{
    return req != NULL && weft__req_progress(req) == mig_progress && weft__req_impl(req) != NULL;
}

const weft_plan_t *weft__mig_plan(const weft_req_t *req)
{
    return ((const mig_t *)weft__req_impl(req))->plan;
}

bool weft__mig_received(const weft_req_t *req, weft__mig_piece_fn fn, void *arg)
{
    const mig_t *m = weft__req_impl(req);
    for (int i = 0; i < m->nstreams; i++) {
        const stream_t *s = &m->streams[i];
        for (uint32_t k = 0; !s->send && k < s->nchunks; k++) {
            if (s->ok[k] && !fn(arg, xfer_of(m, &s->chunks[k]), &s->chunks[k].box)) {
                return false;
            }
        }
    }
    return true;
}
