/*
 * Running a plan. A migration is one compound request on the group, in three stages:
 *   agree   one small allreduce of the plan's digest (with the chunk size and the
 *           priorities), so members that started different plans all fail, none hangs;
 *   move    every stream (one per peer and direction) keeps WEFT_MIGRATE_WINDOW chunks in
 *           flight; a receiver checks each chunk's xxHash, then tells the sender which
 *           chunks were bad (the verdict); those are sent once more, and a second bad
 *           copy fails the stream; local copies go one chunk per progress call;
 *   close   the worst result of every member to group rank 0 and the minimum back, in
 *           messages (it starts at no fixed point of the group's collective sequence),
 *           so every member returns the same.
 * Tags: class MIGRATE, payload = round (1 bit) | header (1) | migration id (4) | chunk (20).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include "comm/coll/coll.h"
#include "comm/job.h"
#include "comm/memtype.h"
#include "migrate/box.h"
#include "migrate/device.h"
#include "migrate/engine.h"
#include "weft/group.h"

#define DEFAULT_MAX_STAGED (64u << 20)
/* In a verdict's count: the receiver could not read the sender's memory (CMA). */
#define VERDICT_NO_CMA (1u << 31)

void (*weft__migrate_recv_hook)(int src_member, uint32_t seq, int round, void *data,
                                size_t len) = NULL;
bool weft__migrate_cma_refuse = false;
_Atomic uint64_t weft__migrate_cma_reads = 0;

enum { ST_CHUNKS, ST_VERDICT, ST_DONE };
enum { STAGE_AGREE, STAGE_MOVE, STAGE_CLOSE };

/* A slot's stage, per direction. Send: the job gathers (if staged) and checksums, then the
 * header (and, without CMA, the data) go out. Receive: the header comes; then either this
 * member reads the data from the sender's memory (CMA) in the job, or a data message
 * comes and the job checks it; the job also scatters a staged chunk. */
enum { SL_FREE, SL_JOB, SL_SENDING, SL_HDR, SL_DATA };

typedef struct slot {
    weft_job_t job; /* first: the job's run() finds its slot */
    int32_t chunk;  /* index into the stream's chunks; -1: free */
    int phase;
    struct mig *m;
    struct stream *s;
    weft_req_t *hdr, *data;
    uint64_t hdr_buf[4]; /* checksum, length, sender pid and address (CMA) or 0 */
    uint8_t *staging;    /* when the chunk is not contiguous in the packed buffer */
    uint8_t *ptr;        /* where the data is (user buffer or staging) */
    size_t recvd;
    bool cma;         /* send: the receiver reads it; receive: read it from the sender */
    bool copy_failed; /* send: the chunk could not be read (device memory) */
    bool good;        /* receive: the job found the checksum right and placed the data */
    bool cma_failed;  /* receive: the sender's memory could not be read */
} slot_t;

typedef struct stream {
    int rank, member;
    bool send;
    weft_mig_chunk_t *chunks;
    uint32_t nchunks;
    size_t cap;
    uint32_t *work; /* chunks of this round */
    uint32_t nwork, next, done;
    uint32_t *bad; /* receiver: bad chunks of this round */
    uint8_t *ok;   /* receiver: ok[k] once chunk k arrived and its checksum matched */
    uint32_t nbad;
    uint32_t *verdict; /* [0]: count (| VERDICT_NO_CMA), then chunk numbers */
    weft_req_t *vreq;
    int round, phase;
    int staged;      /* slots holding a staging buffer */
    bool cma;        /* the peer is on this host: contiguous chunks are read from its memory */
    bool cma_failed; /* receiver: a read of the sender's memory failed (sent again by message) */
    weft_status_t err;
    slot_t *slots;
} stream_t;

typedef struct mig {
    weft_group_t *g;
    const weft_plan_t *plan;
    const uint8_t *old_buf;
    const uint8_t *resume_buf; /* a failed migration's new buffer (weft_migrate_resume) */
    uint8_t *new_buf;
    bool old_dev, resume_dev, new_dev; /* CUDA buffers: every chunk is staged on the host */
    bool any_dev;                      /* jobs run at once, on the caller's thread */
    bool local_err;                    /* a local copy failed (device memory) */
    weft_job_t local_job;              /* the local copy in progress (chunk local_cur) */
    uint32_t local_cur;
    bool local_busy;
    size_t chunk, window, max_staged, staged;
    uint32_t tag_id;
    int stage;
    bool gated;       /* priorities given: post nothing below the highest waiting */
    int64_t agree[6]; /* mine (key, ~key, bad arguments), then the maxima */
    bool bad_args;    /* this member's arguments were refused (why[] says how) */
    int32_t close_in, close_out;
    int32_t *close_vals;     /* rank 0: every member's result */
    weft_req_t **close_reqs; /* [group size] */
    bool close_bcast;        /* rank 0 has sent the result */
    weft_req_t *child;
    stream_t *streams;
    int nstreams;
    weft_mig_chunk_t *local;
    uint32_t nlocal, local_next;
    size_t local_cap;
    char why[256]; /* the first stream error of this member */
} mig_t;

static uint32_t payload(const mig_t *m, int round, bool hdr, uint32_t seq)
{
    return ((uint32_t)round << 25) | ((uint32_t)hdr << 24) | (m->tag_id << WEFT_MIG_SEQ_BITS) |
           (seq & WEFT_MIG_VERDICT);
}

static const weft__xfer_t *xfer_of(const mig_t *m, const weft_mig_chunk_t *c)
{
    return &m->plan->xfers[c->x];
}

/* The buffer a transfer's source region lies in. */
static const uint8_t *src_base(const mig_t *m, const weft__xfer_t *x)
{
    return x->src_buf == 1 ? m->resume_buf : m->old_buf;
}

static bool src_dev(const mig_t *m, const weft__xfer_t *x)
{
    return x->src_buf == 1 ? m->resume_dev : m->old_dev;
}

/* weft__box_copy where @p dev says either side is device memory; false (and the reason
 * in m->why) when a device copy failed. */
static bool move_box(mig_t *m, bool dev, void *dst, const weft_box_t *dst_box, const void *src,
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

/* Where the chunk's bytes are sent from or received into: the user's packed buffer when
 * contiguous there (and host memory), else a staging buffer (NULL when the budget is used
 * up for now). *contiguous says which. */
static uint8_t *chunk_place(mig_t *m, stream_t *s, slot_t *sl, const weft_mig_chunk_t *c,
                            bool *contiguous)
{
    const weft__xfer_t *x = xfer_of(m, c);
    size_t off;
    bool dev = s->send ? src_dev(m, x) : m->new_dev;
    *contiguous = !dev && s->send ? weft__mig_contiguous(&x->src_box, x->src_packed, &c->box,
                                                         x->ndims, x->elem, &off)
                                  : !dev && weft__mig_contiguous(&x->dst_box, x->dst_packed,
                                                                 &c->box, x->ndims, x->elem, &off);
    if (*contiguous) {
        return s->send ? (uint8_t *)src_base(m, x) + off : m->new_buf + off;
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

/* Read @p len bytes at @p addr of process @p pid into @p dst; false if that fails. */
static bool cma_read(void *dst, uint64_t pid, uint64_t addr, size_t len)
{
    if (weft__migrate_cma_refuse) {
        errno = EPERM;
        return false;
    }
    size_t got = 0;
    while (got < len) {
        struct iovec local = {(char *)dst + got, len - got};
        struct iovec remote = {(void *)(uintptr_t)(addr + got), len - got};
        ssize_t n = process_vm_readv((pid_t)pid, &local, 1, &remote, 1, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) {
                continue;
            }
            return false;
        }
        got += (size_t)n;
    }
    atomic_fetch_add(&weft__migrate_cma_reads, 1);
    return true;
}

/* The data work of a slot, outside the context's lock (comm/job.h). */
static void slot_job(weft_job_t *job)
{
    slot_t *sl = (slot_t *)job;
    mig_t *m = sl->m;
    stream_t *s = sl->s;
    const weft_mig_chunk_t *c = &s->chunks[sl->chunk];
    const weft__xfer_t *x = xfer_of(m, c);
    if (s->send) {
        if (sl->ptr == sl->staging) {
            sl->copy_failed =
                !move_box(m, src_dev(m, x), sl->staging, &c->box, src_base(m, x) + x->src_packed,
                          &x->src_box, &c->box, x->ndims, x->elem);
        }
        /* A chunk that could not be read goes out with a checksum that cannot match, so
         * the receiver rejects it twice and every member fails alike. */
        sl->hdr_buf[0] = XXH3_64bits(sl->ptr, c->bytes) ^ (sl->copy_failed ? 1u : 0u);
        return;
    }
    sl->good = false;
    if (sl->cma) {
        sl->recvd = c->bytes;
        if (!cma_read(sl->ptr, sl->hdr_buf[2], sl->hdr_buf[3], c->bytes)) {
            sl->cma_failed = true;
            return;
        }
    }
    if (weft__migrate_recv_hook != NULL) {
        weft__migrate_recv_hook(s->member, (uint32_t)sl->chunk, s->round, sl->ptr, c->bytes);
    }
    if (sl->recvd != c->bytes || sl->hdr_buf[1] != c->bytes ||
        XXH3_64bits(sl->ptr, c->bytes) != sl->hdr_buf[0]) {
        return;
    }
    sl->good =
        sl->ptr != sl->staging || move_box(m, m->new_dev, m->new_buf + x->dst_packed, &x->dst_box,
                                           sl->staging, &c->box, &c->box, x->ndims, x->elem);
}

static void submit(mig_t *m, slot_t *sl)
{
    sl->phase = SL_JOB;
    weft__job_submit(m->g->ctx, &sl->job, m->any_dev);
}

/* Take chunk @p ci into free slot @p sl: place it, then start its job (send) or post the
 * receive of its header. */
static weft_status_t post_chunk(mig_t *m, stream_t *s, slot_t *sl, uint32_t ci)
{
    const weft_mig_chunk_t *c = &s->chunks[ci];
    bool contiguous;
    uint8_t *p = chunk_place(m, s, sl, c, &contiguous);
    if (p == NULL) {
        return WEFT_OK; /* no staging memory now: try on a later call */
    }
    sl->chunk = (int32_t)ci;
    sl->ptr = p;
    sl->m = m;
    sl->s = s;
    sl->job.run = slot_job;
    sl->copy_failed = sl->good = sl->cma_failed = false;
    if (s->send) {
        sl->cma = s->cma && contiguous;
        sl->hdr_buf[1] = c->bytes;
        sl->hdr_buf[2] = sl->cma ? (uint64_t)getpid() : 0;
        sl->hdr_buf[3] = sl->cma ? (uint64_t)(uintptr_t)p : 0;
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
        if ((st == WEFT_OK || st == WEFT_INPROGRESS) && !sl->cma) {
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
        /* Read it from the sender's memory only where this member agrees it may; where
         * not, the chunk counts as bad and is sent again by message. */
        sl->cma = sl->hdr_buf[3] != 0 && s->cma;
        if (sl->cma) {
            submit(m, sl);
            return WEFT_INPROGRESS;
        }
        if (sl->hdr_buf[3] != 0) {
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

static int max_waiting_prio(const mig_t *m)
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
            return weft__error(m->g->ctx, WEFT_ERR_PROTOCOL,
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

static weft_status_t stream_progress(mig_t *m, stream_t *s, int gate)
{
    weft_status_t st;
    if (s->phase == ST_CHUNKS) {
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
        if ((st = weft__coll_child_test(&s->vreq, NULL)) != WEFT_OK) {
            return st;
        }
        if (s->send) {
            if (s->verdict[0] & VERDICT_NO_CMA) {
                s->cma = false; /* the receiver cannot read this member's memory */
            }
            uint32_t count = s->verdict[0] & ~VERDICT_NO_CMA;
            uint32_t nbad = count <= s->nchunks ? count : s->nchunks;
            memcpy(s->bad, &s->verdict[1], (size_t)nbad * sizeof(uint32_t));
            return end_round(m, s, nbad, s->bad);
        }
        if (s->cma_failed) {
            s->cma = false; /* what is sent again comes by message */
        }
        return end_round(m, s, s->nbad, s->bad);
    }
    return WEFT_OK;
}

static void local_job(weft_job_t *job)
{
    mig_t *m = (mig_t *)((char *)job - offsetof(mig_t, local_job));
    const weft_mig_chunk_t *c = &m->local[m->local_cur];
    const weft__xfer_t *x = xfer_of(m, c);
    if (!move_box(m, src_dev(m, x) || m->new_dev, m->new_buf + x->dst_packed, &x->dst_box,
                  src_base(m, x) + x->src_packed, &x->src_box, &c->box, x->ndims, x->elem)) {
        m->local_err = true;
    }
}

/* Local copies one chunk at a time, each a job; true once all are done. */
static bool local_step(mig_t *m, int gate)
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
    weft__job_submit(m->g->ctx, &m->local_job, m->any_dev);
    return false;
}

/*
 * The close: every member's worst stream status goes to group rank 0, which sends the
 * minimum back. Messages, not a collective: the close starts whenever this member's
 * streams end, which is not the same point of the group's collective sequence on every
 * member, while messages are matched by the migration's own tags.
 */
static weft_status_t start_close(mig_t *m)
{
    weft_status_t worst = m->local_err ? WEFT_ERR_TRANSPORT : WEFT_OK;
    for (int i = 0; i < m->nstreams; i++) {
        if (m->streams[i].err != WEFT_OK) {
            worst = m->streams[i].err;
        }
    }
    m->close_in = (int32_t)worst;
    m->close_out = m->close_in;
    m->stage = STAGE_CLOSE;
    int p = m->g->size;
    m->close_reqs = calloc((size_t)p, sizeof(*m->close_reqs));
    m->close_vals = calloc((size_t)p, sizeof(*m->close_vals));
    if (m->close_reqs == NULL || m->close_vals == NULL) {
        return weft__error(m->g->ctx, WEFT_ERR_NO_MEMORY, "weft_migrate: out of memory");
    }
    uint32_t up = payload(m, 0, true, WEFT_MIG_CLOSE), down = payload(m, 1, true, WEFT_MIG_CLOSE);
    weft_status_t st = WEFT_OK;
    if (m->g->rank == 0) {
        m->close_vals[0] = m->close_in;
        for (int r = 1; r < p && (st == WEFT_OK || st == WEFT_INPROGRESS); r++) {
            st = weft__irecv(m->g, r, &m->close_vals[r], sizeof(int32_t), WEFT_TAG_MIGRATE, up,
                             &m->close_reqs[r]);
        }
    } else {
        st = weft__isend(m->g, 0, &m->close_in, sizeof(int32_t), WEFT_TAG_MIGRATE, up,
                         &m->close_reqs[0]);
        if (st == WEFT_OK || st == WEFT_INPROGRESS) {
            st = weft__irecv(m->g, 0, &m->close_out, sizeof(int32_t), WEFT_TAG_MIGRATE, down,
                             &m->close_reqs[1]);
        }
    }
    return st == WEFT_INPROGRESS ? WEFT_OK : st;
}

/* WEFT_OK once every message of the close is done. */
static weft_status_t close_progress(mig_t *m)
{
    int p = m->g->size;
    for (int r = 0; r < p; r++) {
        weft_status_t st = weft__coll_child_test(&m->close_reqs[r], NULL);
        if (st != WEFT_OK) {
            return st;
        }
    }
    if (m->g->rank != 0 || m->close_bcast) {
        return WEFT_OK;
    }
    for (int r = 1; r < p; r++) {
        if (m->close_vals[r] < m->close_out) {
            m->close_out = m->close_vals[r];
        }
    }
    m->close_bcast = true;
    uint32_t down = payload(m, 1, true, WEFT_MIG_CLOSE);
    for (int r = 1; r < p; r++) {
        weft_status_t st = weft__isend(m->g, r, &m->close_out, sizeof(int32_t), WEFT_TAG_MIGRATE,
                                       down, &m->close_reqs[r]);
        if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            return st;
        }
    }
    return close_progress(m);
}

static weft_status_t mig_progress(weft_req_t *req)
{
    mig_t *m = req->impl;
    weft_ctx_t *ctx = m->g->ctx;
    weft_status_t st;
    if (m->stage == STAGE_AGREE) {
        if ((st = weft__coll_child_test(&m->child, NULL)) != WEFT_OK) {
            return st;
        }
        if (m->bad_args) {
            return weft__error(ctx, WEFT_ERR_INVALID_ARG, "weft_migrate_start: %s", m->why);
        }
        if (m->agree[5] != 0) {
            return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                               "weft_migrate: another member's arguments were refused");
        }
        if (m->agree[3] != m->agree[0] || m->agree[4] != m->agree[1]) {
            return weft__error(ctx, WEFT_ERR_MISMATCH,
                               "weft_migrate: members started different plans, chunk sizes "
                               "(WEFT_MIGRATE_CHUNK) or priorities");
        }
        m->stage = STAGE_MOVE;
    }
    if (m->stage == STAGE_MOVE) {
        int gate = m->gated ? max_waiting_prio(m) : 0;
        bool all = local_step(m, gate);
        for (int i = 0; i < m->nstreams; i++) {
            if (atomic_load(&ctx->api_waiting) > 0) {
                return WEFT_INPROGRESS; /* the progress thread's pass: let the caller in */
            }
            if ((st = stream_progress(m, &m->streams[i], gate)) != WEFT_OK &&
                st != WEFT_INPROGRESS) {
                return st;
            }
            all &= m->streams[i].phase == ST_DONE;
        }
        if (!all) {
            return WEFT_INPROGRESS;
        }
        if ((st = start_close(m)) != WEFT_OK) {
            return st;
        }
    }
    if ((st = close_progress(m)) != WEFT_OK) {
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
    weft_ctx_t *ctx = m->g->ctx;
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
    for (int r = 0; m->close_reqs != NULL && r < m->g->size; r++) {
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
    }
    free(m->streams);
    free(m->local);
    release(ctx, m, live); /* close_in and close_out live here */
}

static void mig_cleanup(weft_req_t *req)
{
    mig_free(req->impl);
    req->impl = NULL;
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
                          send ? "sends to" : "receives from", other, m->g->id, m->g->epoch);
        }
        stream_t *s = stream_for(m, other, rank, send);
        if (s == NULL ||
            !weft__mig_cut(x, (uint32_t)i, m->chunk, prio, &s->chunks, &s->nchunks, &s->cap)) {
            return WEFT_ERR_NO_MEMORY;
        }
    }
    weft__mig_sort(m->local, m->nlocal);
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
        /* On one host, contiguous chunks are read by the receiver from the sender's
         * memory (one copy, off the transport, outside the context's lock). */
        weft_ctx_t *ctx = m->g->ctx;
        s->cma = ctx->cfg.migrate_cma && !m->any_dev && s->member < ctx->npeers &&
                 ctx->peers[s->member].same_host;
    }
    return WEFT_OK;
}

/* What members must agree on: the plan, the chunk size and the priorities. */
static uint64_t agreement_key(const mig_t *m, const weft_migrate_params_t *p)
{
    uint64_t h = m->plan->digest ^ XXH3_64bits(&m->chunk, sizeof(m->chunk));
    if (p->priority != NULL && p->num_priorities > 0) {
        h ^= XXH3_64bits_withSeed(p->priority, (size_t)p->num_priorities * sizeof(int), 1);
    }
    return h;
}

weft_status_t weft_migrate_start(weft_group_t *g, const weft_plan_t *plan, const void *old_buf,
                                 void *new_buf, const weft_migrate_params_t *params,
                                 weft_req_t **req)
{
    return weft__migrate_start_keyed(g, plan, old_buf, new_buf, params, 0, req);
}

weft_status_t weft__migrate_start_keyed(weft_group_t *g, const weft_plan_t *plan,
                                        const void *old_buf, void *new_buf,
                                        const weft_migrate_params_t *params, uint64_t extra_key,
                                        weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || plan == NULL || req == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = g->ctx;
    weft_status_t st = weft__group_status(g);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "weft_migrate_start: group %u epoch %u is revoked", g->id,
                           g->epoch);
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
    int me = g->members[g->rank];
    mig_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_migrate_start: out of memory");
    }
    m->g = g;
    m->plan = plan;
    m->old_buf = old_buf;
    m->resume_buf = p.resume_buf;
    m->new_buf = new_buf;
    m->old_dev = weft__memtype(old_buf) == WEFT_MEM_CUDA;
    m->resume_dev = weft__memtype(p.resume_buf) == WEFT_MEM_CUDA;
    m->new_dev = weft__memtype(new_buf) == WEFT_MEM_CUDA;
    m->any_dev = m->old_dev || m->resume_dev || m->new_dev;
    m->chunk = ctx->cfg.migrate_chunk > 0 ? ctx->cfg.migrate_chunk : 1;
    m->window = ctx->cfg.migrate_window > 0 ? ctx->cfg.migrate_window : 1;
    m->max_staged = p.max_staged_bytes != 0 ? p.max_staged_bytes : DEFAULT_MAX_STAGED;
    m->gated = p.priority != NULL;
    m->tag_id = g->coll_seq & 0xf;
    if (perr != NULL) {
        refuse(m, "%s", perr);
    }
    for (size_t i = 0; i < plan->nxfers && !m->bad_args; i++) {
        const weft__xfer_t *x = &plan->xfers[i];
        const weft_transfer_t *t = &x->t;
        if ((t->src == me && src_base(m, x) == NULL) || (t->dst == me && new_buf == NULL)) {
            refuse(m, "member %d %s but its %s buffer is NULL", me,
                   t->src == me ? "sends" : "receives",
                   t->src != me      ? "new"
                   : x->src_buf == 1 ? "resume"
                                     : "old");
        }
    }
    if (!m->bad_args && (st = build_streams(m, &p, me)) == WEFT_ERR_NO_MEMORY) {
        mig_free(m);
        return weft__error(ctx, st, "weft_migrate_start: out of memory");
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
    weft_req_t *r = weft__req_new(ctx, g);
    if (r == NULL) {
        mig_free(m);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_migrate_start: out of memory");
    }
    r->impl = m;
    r->progress = mig_progress;
    r->cleanup = mig_cleanup;
    st = weft_iallreduce(g, m->agree, &m->agree[3], 3, WEFT_I64, WEFT_MAX, &m->child);
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
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_req_t *req = NULL;
    weft_status_t st = weft_migrate_start(g, plan, old_buf, new_buf, params, &req);
    return weft__blocking(st, req);
}

bool weft__mig_is(const weft_req_t *req)
{
    return req != NULL && req->progress == mig_progress && req->impl != NULL;
}

const weft_plan_t *weft__mig_plan(const weft_req_t *req)
{
    return ((const mig_t *)req->impl)->plan;
}

bool weft__mig_received(const weft_req_t *req, weft__mig_piece_fn fn, void *arg)
{
    const mig_t *m = req->impl;
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
