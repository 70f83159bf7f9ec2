/*
 * The streams of a migration: chunks placed in the user's buffers or staged, their
 * checksums, gathers and scatters, local copies and same-host reads as jobs (outside the
 * context's lock, comm/progress/job.h), headers and data as messages, the verdict of each round
 * and the one resend of bad chunks.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/coll/start.h"
#include "comm/progress/copy.h"
#include "comm/ctx/log.h"
#include "migrate/layout/box.h"
#include "migrate/engine/device.h"
#include "migrate/engine/engine_impl.h"
#include "migrate/engine/xxh.h"
#include "transports/select.h"
#include "transports/stream.h"
#include "util/clock.h"
#include "util/assert.h"

bool weft__mig_move_box(mig_t *m, bool dev, void *dst, const weft_box_t *dst_box, const void *src,
                        const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem)
{
#ifdef WEFT_HAVE_CUDA
    if (dev) {
        char why[160];
        if (weft__mig_dev_copy(dst, dst_box, src, src_box, b, nd, elem, why, sizeof(why))) {
            return true;
        }
        if (m->why[0] == '\0') {
            snprintf(m->why, sizeof(m->why), "device buffer: %s", why);
        }
        return false;
    }
#endif
    (void)dev;
    weft__box_copy(dst, dst_box, src, src_box, b, nd, elem);
    return true;
}

/* Whether chunk @p c lies contiguous in the host buffer it is sent from (or received
 * into), at *off of that buffer. */
static bool chunk_contiguous(const mig_t *m, const stream_t *s, const weft_mig_chunk_t *c,
                             size_t *off)
{
    const weft__xfer_t *x = xfer_of(m, c);
    if (s->send) {
        return !src_dev(m, x) &&
               weft__mig_contiguous(&x->src_box, x->src_packed, &c->box, x->ndims, x->elem, off);
    }
    return !m->new_dev &&
           weft__mig_contiguous(&x->dst_box, x->dst_packed, &c->box, x->ndims, x->elem, off);
}

/* Where the chunk's bytes are sent from or received into: the user's packed buffer when
 * @p contiguous there (at @p off), else a staging buffer (NULL when the budget is used up
 * for now). */
static uint8_t *chunk_place(mig_t *m, stream_t *s, slot_t *sl, const weft_mig_chunk_t *c,
                            bool contiguous, size_t off)
{
    const weft__xfer_t *x = xfer_of(m, c);
    if (contiguous) {
        return s->send ? (uint8_t *)src_base(m, x) + off : dst_base(m, x) + off;
    }
    if (sl->ring_q != 0) {
        return weft__ring_slot(s->ring, sl->ring_q - 1); /* gathered straight into it */
    }
    if (sl->staging == NULL) {
        /* Each stream may always stage one chunk, so no stream waits for another's
         * memory (streams waiting on each other across members could never finish). */
        if (s->staged > 0 && m->staged + m->chunk > m->max_staged) {
            return NULL;
        }
        if ((sl->staging = malloc(m->chunk)) == NULL) {
            return NULL;
        }
        m->staged += m->chunk;
        s->staged++;
    }
    return sl->staging;
}

static void drop_staging(mig_t *m, stream_t *s, slot_t *sl)
{
    if (sl->staging != NULL) {
        free(sl->staging);
        sl->staging = NULL;
        m->staged -= m->chunk;
        s->staged--;
    }
}

/* The largest chunk of @p s: a ring's slot size (a chunk is at least one row, so it may
 * exceed the chunk size). The same on both members. */
static size_t max_chunk(const stream_t *s)
{
    size_t n = 0;
    for (uint32_t k = 0; k < s->nchunks; k++) {
        n = s->chunks[k].bytes > n ? s->chunks[k].bytes : n;
    }
    return n;
}

/* Read @p len bytes at @p addr of process @p pid into @p dst (transports/stream_cma.c);
 * false if that fails or the test hook refuses it. */
static bool cma_read(weft__faults_t *f, void *dst, uint64_t pid, uint64_t addr, size_t len)
{
    if (f->cma_refuse) {
        errno = EPERM;
        return false;
    }
    if (weft__tl_stream_cma.read->read(pid, addr, dst, len) != WEFT_OK) {
        return false;
    }
    atomic_fetch_add(&f->counts.cma_reads, 1);
    return true;
}

void weft__mig_stream_paths(mig_t *m, stream_t *s)
{
    weft_ctx_t *ctx = weft__group_ctx(m->g);
    const weft_config_t *cfg = weft__ctx_config(ctx);
    s->peer = (weft_tl_stream_peer_t){
        .size = sizeof(weft_tl_stream_peer_t),
        .same_host = weft__peer_same_host(ctx, s->member),
        .pid = 0, /* the sender's comes with each chunk's header, the owner's with the offer */
        .mem = m->any_dev ? WEFT_MEM_CUDA : WEFT_MEM_HOST,
        .peer_mem = WEFT_MEM_HOST, /* not known: the receiver refuses what it cannot take */
        .refused = false,
    };
    s->paths = (weft_chunk_path_query_t){
        .size = sizeof(weft_chunk_path_query_t),
        .receiver = !s->send,
        .same_host = s->peer.same_host,
        .migrate_shm = cfg->migrate_shm != 0,
        .migrate_cma = cfg->migrate_cma != 0,
        .oversubscribed = weft__ctx_oversubscribed(ctx),
        .ring_fits = weft__ring_fits(max_chunk(s), s->nchunks),
    };
    weft__select_reach(&s->peer, &s->paths);
}

/* The verdict of a round says the receiver could not read this stream's chunks from the
 * sender's memory or ring: what is sent again goes by message. */
static void stream_refused(stream_t *s)
{
    s->peer.refused = true;
    weft__select_reach(&s->peer, &s->paths);
}

/* Which path chunks of @p s take (transports/select.c decides), with the ring as
 * @p ring says and the chunk @p contiguous in the sender's buffer. */
static weft_tl_path_t chunk_path(const mig_t *m, const stream_t *s, weft_chunk_ring_t ring,
                                 bool contiguous)
{
    weft_chunk_path_query_t q = s->paths;
    q.nccl_round = m->nccl && s->round == 0;
    q.ring = ring;
    /* Test hooks: 1, senders cannot map the offered ring; 2, receivers cannot make one. */
    q.ring_refused = m->faults->ring_refuse == (s->send ? 1 : 2);
    q.contiguous = contiguous;
    return weft__select_chunk_path(&q);
}

/* The data work of a slot, outside the context's lock (comm/progress/job.h). */
static void slot_job(weft_job_t *job)
{
    slot_t *sl = (slot_t *)job;
    mig_t *m = sl->m;
    stream_t *s = sl->s;
    const weft_mig_chunk_t *c = &s->chunks[sl->chunk];
    const weft__xfer_t *x = xfer_of(m, c);
    if (s->send) {
        if (!sl->contig) {
            sl->copy_failed = !weft__mig_move_box(m, src_dev(m, x), sl->ptr, &c->box,
                                                  src_base(m, x) + x->src_packed, &x->src_box,
                                                  &c->box, x->ndims, x->elem);
        }
        uint64_t h = sl->ring_q != 0 && sl->contig
                         ? weft__hash_copy(weft__ring_slot(s->ring, sl->ring_q - 1), sl->ptr,
                                           c->bytes, false)
                         : XXH3_64bits(sl->ptr, c->bytes);
        /* A chunk that could not be read goes out with a checksum that cannot match, so
         * the receiver rejects it twice and every member fails alike. */
        sl->hdr_buf[0] = h ^ (sl->copy_failed ? 1u : 0u);
        return;
    }
    sl->good = false;
    uint64_t h = 0; /* the ring's path checksums as it copies; the others after */
    if (sl->ring_q != 0) {
        uint64_t q = sl->ring_q - 1;
        uint8_t *src = weft__ring_slot(s->ring, q);
        if (m->faults->recv_hook != NULL) { /* in transit: the ring holds it */
            m->faults->recv_hook(m->faults->recv_hook_arg, s->member, (uint32_t)sl->chunk, s->round,
                                 src, c->bytes);
        }
        h = weft__hash_copy(sl->ptr, src, c->bytes, true);
        weft__ring_release(s->ring, q);
        atomic_fetch_add(&m->faults->counts.ring_chunks, 1);
    } else {
        if (sl->cma) {
            sl->recvd = c->bytes;
            if (!cma_read(m->faults, sl->ptr, sl->hdr_buf[2], sl->hdr_buf[3], c->bytes)) {
                atomic_fetch_add(&m->faults->counts.cma_fallbacks, 1);
                sl->cma_failed = true;
                return;
            }
        }
        if (m->faults->recv_hook != NULL) {
            m->faults->recv_hook(m->faults->recv_hook_arg, s->member, (uint32_t)sl->chunk, s->round,
                                 sl->ptr, c->bytes);
        }
    }
    if (sl->recvd != c->bytes || sl->hdr_buf[1] != c->bytes ||
        (sl->ring_q != 0 ? h : XXH3_64bits(sl->ptr, c->bytes)) != sl->hdr_buf[0]) {
        return;
    }
    sl->good = sl->ptr != sl->staging ||
               weft__mig_move_box(m, m->new_dev, dst_base(m, x) + x->dst_packed, &x->dst_box,
                                  sl->staging, &c->box, &c->box, x->ndims, x->elem);
}

static void submit(mig_t *m, slot_t *sl)
{
    sl->phase = SL_JOB;
    weft__job_submit(weft__group_ctx(m->g), &sl->job, m->any_dev);
}

/* A ring moved: its next step (a slot emptied, a chunk put in) is likely microseconds
 * away and wakes nobody, so this member's waits yield rather than sleep for a while. */
static void ring_busy(mig_t *m)
{
    if (!weft__ctx_oversubscribed(weft__group_ctx(m->g))) {
        weft__ctx_spin_until(weft__group_ctx(m->g), weft__now_ns() + WEFT_RING_SPIN_NS);
    }
}

/* Take chunk @p ci into free slot @p sl: place it, then start its job (send) or post the
 * receive of its header. */
static weft_status_t post_chunk(mig_t *m, stream_t *s, slot_t *sl, uint32_t ci)
{
    const weft_mig_chunk_t *c = &s->chunks[ci];
    size_t off = 0;
    bool contiguous = chunk_contiguous(m, s, c, &off);
    weft_tl_path_t path = WEFT_TL_PATH_MSG; /* the receiver learns it from the header */
    sl->ring_q = 0;
    if (s->send) {
        path = chunk_path(m, s, s->ring_state == RING_ON ? WEFT_CHUNK_RING_ON : WEFT_CHUNK_RING_OFF,
                          contiguous);
    }
    if (path == WEFT_TL_PATH_RING) {
        if (!weft__ring_free_for(s->ring, s->ring_seq)) {
            /* The receiver has not emptied that slot yet: try on a later pass. */
            weft_ctx_t *ctx = weft__group_ctx(m->g);
            return weft__peer_status(ctx, s->member);
        }
        ring_busy(m);
        sl->ring_q = s->ring_seq + 1;
    }
    uint8_t *p = chunk_place(m, s, sl, c, contiguous, off);
    if (p == NULL) {
        return WEFT_OK; /* no staging memory now: try on a later call */
    }
    s->ring_seq += sl->ring_q != 0;
    sl->contig = contiguous;
    sl->chunk = (int32_t)ci;
    sl->ptr = p;
    sl->m = m;
    sl->s = s;
    sl->job.run = slot_job;
    sl->copy_failed = sl->good = sl->cma_failed = false;
    if (s->send) {
        sl->cma = path == WEFT_TL_PATH_CMA;
        sl->hdr_buf[1] = c->bytes;
        sl->hdr_buf[2] = sl->cma ? (uint64_t)getpid() : 0;
        sl->hdr_buf[3] = sl->cma ? (uint64_t)(uintptr_t)p : 0;
        sl->hdr_buf[4] = sl->ring_q;
        submit(m, sl);
        return WEFT_OK;
    }
    sl->recvd = c->bytes;
    sl->phase = SL_HDR;
    weft_status_t st = weft__irecv(m->g, s->rank, sl->hdr_buf, sizeof(sl->hdr_buf),
                                   WEFT_TAG_MIGRATE, payload(m, s->round, true, ci), &sl->hdr);
    return st == WEFT_INPROGRESS ? WEFT_OK : st;
}

/* Advance slot @p sl; WEFT_OK when its chunk is finished with (the slot is free again). */
static weft_status_t slot_progress(mig_t *m, stream_t *s, slot_t *sl)
{
    weft_status_t st;
    uint32_t ci = (uint32_t)sl->chunk;
    const weft_mig_chunk_t *c = &s->chunks[ci];
    if (sl->phase == SL_JOB && !weft__job_done(&sl->job)) {
        return WEFT_INPROGRESS;
    }
    if (sl->phase == SL_JOB && s->send) { /* checksummed: send */
        sl->phase = SL_SENDING;
        st = weft__isend(m->g, s->rank, sl->hdr_buf, sizeof(sl->hdr_buf), WEFT_TAG_MIGRATE,
                         payload(m, s->round, true, ci), &sl->hdr);
        if ((st == WEFT_OK || st == WEFT_INPROGRESS) && !sl->cma && sl->ring_q == 0) {
            st = weft__isend(m->g, s->rank, sl->ptr, c->bytes, WEFT_TAG_MIGRATE,
                             payload(m, s->round, false, ci), &sl->data);
        }
        if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            return st;
        }
    }
    if (sl->phase == SL_SENDING) {
        weft_status_t a = weft__coll_child_test(&sl->hdr, NULL),
                      b = weft__coll_child_test(&sl->data, NULL);
        if (a != WEFT_OK) {
            return a;
        }
        return b;
    }
    if (sl->phase == SL_HDR) {
        if ((st = weft__coll_child_test(&sl->hdr, NULL)) != WEFT_OK) {
            return st;
        }
        /* Take it from the ring or read it from the sender's memory only where this
         * member agrees it may; where not, the chunk counts as bad and is sent again by
         * message. */
        bool in_ring = s->ring_state == RING_ON && sl->hdr_buf[4] != 0;
        weft_tl_path_t path = chunk_path(m, s, in_ring ? WEFT_CHUNK_RING_ON : WEFT_CHUNK_RING_OFF,
                                         sl->hdr_buf[3] != 0);
        sl->ring_q = path == WEFT_TL_PATH_RING ? sl->hdr_buf[4] : 0;
        if (sl->ring_q != 0) {
            ring_busy(m);
        }
        sl->cma = path == WEFT_TL_PATH_CMA;
        if (sl->cma || sl->ring_q != 0) {
            submit(m, sl);
            return WEFT_INPROGRESS;
        }
        if (sl->hdr_buf[3] != 0 || sl->hdr_buf[4] != 0) {
            sl->good = false;
            sl->cma_failed = true;
            s->bad[s->nbad++] = ci;
            s->cma_failed = true;
            return WEFT_OK;
        }
        sl->phase = SL_DATA;
        st = weft__irecv_len(m->g, s->rank, sl->ptr, c->bytes, WEFT_TAG_MIGRATE,
                             payload(m, s->round, false, ci), &sl->data, &sl->recvd);
        if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            return st;
        }
    }
    if (sl->phase == SL_DATA) {
        size_t got = sl->recvd;
        if ((st = weft__coll_child_test(&sl->data, &got)) != WEFT_OK) {
            return st;
        }
        sl->recvd = got;
        submit(m, sl);
        return WEFT_INPROGRESS;
    }
    /* The receive job is done: record the chunk. */
    if (sl->good) {
        s->ok[ci] = 1;
    } else {
        s->bad[s->nbad++] = ci;
        s->cma_failed |= sl->cma_failed;
    }
    return WEFT_OK;
}

int weft__mig_max_waiting_prio(const mig_t *m)
{
    int best = INT32_MIN;
    for (int i = 0; i < m->nstreams; i++) {
        const stream_t *s = &m->streams[i];
        if (s->phase == ST_CHUNKS && s->next < s->nwork &&
            s->chunks[s->work[s->next]].prio > best) {
            best = s->chunks[s->work[s->next]].prio;
        }
    }
    if (m->local_next < m->nlocal && m->local[m->local_next].prio > best) {
        best = m->local[m->local_next].prio;
    }
    return best;
}

/* A stream's chunks arrived corrupted twice: it fails, and the first such is told. */
static void stream_fail(mig_t *m, stream_t *s)
{
    s->err = WEFT_ERR_TRANSPORT;
    if (m->why[0] == '\0') {
        snprintf(m->why, sizeof(m->why), "%u chunk(s) %s member %d arrived corrupted twice",
                 s->nbad, s->send ? "sent to" : "received from", s->member);
    }
}

/* The verdict of a round is in (sender) or out (receiver): finish or retry. */
static weft_status_t end_round(mig_t *m, stream_t *s, uint32_t nbad, const uint32_t *bad)
{
    if (nbad == 0) {
        s->phase = ST_DONE;
        return WEFT_OK;
    }
    if (s->round == 1) {
        s->nbad = nbad;
        stream_fail(m, s);
        s->phase = ST_DONE;
        return WEFT_OK;
    }
    for (uint32_t i = 0; i < nbad; i++) {
        if (bad[i] >= s->nchunks) {
            return weft__error(weft__group_ctx(m->g), WEFT_ERR_PROTOCOL,
                               "migration: member %d named chunk %u of %u", s->member, bad[i],
                               s->nchunks);
        }
        s->work[i] = bad[i];
    }
    s->nwork = nbad;
    s->next = s->done = 0;
    s->nbad = 0;
    s->round = 1;
    s->phase = ST_CHUNKS;
    return WEFT_OK;
}

/*
 * Set up stream @p s's ring as transports/select.c decides: whether the members exchange
 * an offer (alike on both), then whether the receiver makes a ring to offer (or offers
 * none) and whether the sender maps the ring offered before it posts a chunk (or goes
 * without; so does a member that fails to make or map one). WEFT_OK once settled.
 */
static weft_status_t ring_progress(mig_t *m, stream_t *s)
{
    weft_status_t st = WEFT_OK;
    if (s->ring_state == RING_UNDECIDED) {
        weft_ctx_t *ctx = weft__group_ctx(m->g);
        size_t slot = max_chunk(s);
        if (chunk_path(m, s, WEFT_CHUNK_RING_UNDECIDED, false) != WEFT_TL_PATH_RING) {
            s->ring_state = RING_NONE;
            return WEFT_OK;
        }
        if ((s->offer = calloc(1, sizeof(*s->offer))) == NULL) {
            return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_migrate: out of memory");
        }
        uint32_t pl = payload(m, 0, false, WEFT_MIG_VERDICT);
        if (s->send) {
            s->ring_state = RING_WAIT;
            st = weft__irecv(m->g, s->rank, s->offer, sizeof(*s->offer), WEFT_TAG_MIGRATE, pl,
                             &s->offer_req);
        } else {
            /* Not with more ranks than cores (transports/select.c): a ring, which needs
             * both members running at once, lost to CMA, which needs only the receiver:
             * 8-rank restores on 2 cores took 10-35% longer through rings. */
            if (chunk_path(m, s, WEFT_CHUNK_RING_OFFER, false) == WEFT_TL_PATH_RING) {
                uint32_t slots = weft__ring_slots(slot, s->nchunks, m->window);
                s->ring = weft__ring_take_owned(ctx, s->member, slot, slots, s->offer);
                if (s->ring == NULL) {
                    WEFT_DEBUG(weft__ctx_logger(ctx), "migration: no ring for member %d (%s)",
                               s->member, strerror(errno));
                }
            }
            s->ring_state = s->ring != NULL ? RING_ON : RING_OFF;
            st = weft__isend(m->g, s->rank, s->offer, sizeof(*s->offer), WEFT_TAG_MIGRATE, pl,
                             &s->offer_req);
        }
        if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            return st;
        }
    }
    if (s->ring_state == RING_WAIT) {
        if ((st = weft__coll_child_test(&s->offer_req, NULL)) != WEFT_OK) {
            return st;
        }
        weft_chunk_ring_t offered =
            s->offer->slots != 0 ? WEFT_CHUNK_RING_OFFER : WEFT_CHUNK_RING_OFF;
        if (chunk_path(m, s, offered, false) == WEFT_TL_PATH_RING) {
            s->ring =
                weft__ring_take_mapped(weft__group_ctx(m->g), s->member, s->offer, max_chunk(s));
            if (s->ring == NULL) {
                WEFT_DEBUG(weft__ctx_logger(weft__group_ctx(m->g)),
                           "migration: cannot map member %d's ring (%s)", s->member,
                           strerror(errno));
            }
        }
        s->ring_state = s->ring != NULL ? RING_ON : RING_OFF;
    }
    return WEFT_OK;
}

weft_status_t weft__mig_stream_progress(mig_t *m, stream_t *s, int gate)
{
    weft_status_t st;
    if (s->phase == ST_CHUNKS && (s->ring_state == RING_UNDECIDED || s->ring_state == RING_WAIT) &&
        (st = ring_progress(m, s)) != WEFT_OK) {
        return st;
    }
    if (s->phase == ST_CHUNKS) {
        if (chunk_path(m, s, WEFT_CHUNK_RING_OFF, false) == WEFT_TL_PATH_NCCL) {
            /* The first round goes through NCCL (nccl_path.c), which fills ok[] and bad[]. */
            if (!m->nccl_done) {
                return WEFT_INPROGRESS;
            }
            s->next = s->done = s->nwork;
        }
        for (size_t w = 0; w < m->window; w++) {
            slot_t *sl = &s->slots[w];
            if (sl->chunk < 0) {
                continue;
            }
            if ((st = slot_progress(m, s, sl)) == WEFT_INPROGRESS) {
                continue;
            }
            if (st != WEFT_OK) {
                return st;
            }
            drop_staging(m, s, sl);
            sl->chunk = -1;
            sl->phase = SL_FREE;
            s->done++;
            WEFT_ASSERT(s->done <= s->next && s->next <= s->nwork); /* done only what started */
        }
        for (size_t w = 0; w < m->window && s->next < s->nwork; w++) {
            slot_t *sl = &s->slots[w];
            if (sl->chunk >= 0 || (m->gated && s->chunks[s->work[s->next]].prio < gate)) {
                continue;
            }
            if ((st = post_chunk(m, s, sl, s->work[s->next])) != WEFT_OK) {
                return st;
            }
            if (sl->chunk < 0) {
                break; /* waiting for staging memory */
            }
            s->next++;
        }
        if (s->done < s->nwork) {
            return WEFT_INPROGRESS;
        }
        uint32_t vp = payload(m, s->round, true, WEFT_MIG_VERDICT);
        size_t vlen = (size_t)(s->nchunks + 1) * sizeof(uint32_t);
        if (s->send) {
            st = weft__irecv(m->g, s->rank, s->verdict, vlen, WEFT_TAG_MIGRATE, vp, &s->vreq);
        } else {
            s->verdict[0] = s->nbad | (s->cma_failed ? VERDICT_NO_CMA : 0);
            memcpy(&s->verdict[1], s->bad, (size_t)s->nbad * sizeof(uint32_t));
            st = weft__isend(m->g, s->rank, s->verdict, (size_t)(s->nbad + 1) * sizeof(uint32_t),
                             WEFT_TAG_MIGRATE, vp, &s->vreq);
        }
        if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            return st;
        }
        s->phase = ST_VERDICT;
    }
    if (s->phase == ST_VERDICT) {
        if ((st = weft__coll_child_test(&s->vreq, NULL)) != WEFT_OK ||
            (st = weft__coll_child_test(&s->offer_req, NULL)) != WEFT_OK) {
            return st;
        }
        if (s->send) {
            if (s->verdict[0] & VERDICT_NO_CMA) {
                stream_refused(s); /* the receiver cannot read this member's memory */
            }
            uint32_t count = s->verdict[0] & ~VERDICT_NO_CMA;
            uint32_t nbad = count <= s->nchunks ? count : s->nchunks;
            memcpy(s->bad, &s->verdict[1], (size_t)nbad * sizeof(uint32_t));
            return end_round(m, s, nbad, s->bad);
        }
        if (s->cma_failed) {
            stream_refused(s); /* what is sent again comes by message */
        }
        return end_round(m, s, s->nbad, s->bad);
    }
    return WEFT_OK;
}

/* A run of a local copy, with non-temporal stores (comm/progress/copy.h). */
static bool stream_run(void *dst, const void *src, size_t n, void *arg)
{
    (void)arg;
    weft__copy_stream(dst, src, n);
    return true;
}

static void local_job(weft_job_t *job)
{
    mig_t *m = (mig_t *)((char *)job - offsetof(mig_t, local_job));
    const weft_mig_chunk_t *c = &m->local[m->local_cur];
    const weft__xfer_t *x = xfer_of(m, c);
    uint8_t *dst = dst_base(m, x) + x->dst_packed;
    const uint8_t *src = src_base(m, x) + x->src_packed;
    if (dst == src && memcmp(&x->dst_box, &x->src_box, sizeof(x->dst_box)) == 0) {
        return; /* the same memory: the bytes are in place already */
    }
    bool dev = src_dev(m, x) || m->new_dev;
    if (!dev && m->local_stream) {
        (void)weft__box_copy_with(dst, &x->dst_box, src, &x->src_box, &c->box, x->ndims, x->elem,
                                  stream_run, NULL);
        weft__copy_fence(); /* before the job is seen done on another thread */
        return;
    }
    if (!weft__mig_move_box(m, dev, dst, &x->dst_box, src, &x->src_box, &c->box, x->ndims,
                            x->elem)) {
        m->local_err = true;
    }
}

bool weft__mig_local_step(mig_t *m, int gate)
{
    if (m->local_busy) {
        if (!weft__job_done(&m->local_job)) {
            return false;
        }
        m->local_busy = false;
    }
    if (m->local_next >= m->nlocal) {
        return true;
    }
    if (m->gated && m->local[m->local_next].prio < gate) {
        return false;
    }
    m->local_cur = m->local_next++;
    m->local_job.run = local_job;
    m->local_busy = true;
    weft__job_submit(weft__group_ctx(m->g), &m->local_job, m->any_dev);
    return false;
}
