/*
 * Chunks between device buffers through NCCL point-to-point (NCCL builds only). Used for
 * the first round of every stream when every member agreed that all its chunks to and
 * from other members are device memory and the selection sends CUDA buffers of the group
 * through NCCL (engine.c decides); the resend round goes staged through host memory by
 * messages, as everything does without NCCL.
 *
 * NCCL runs the operations of a communicator one after the other, and a send waits for
 * its receive: members must issue their transfers in one order. So the first round is cut
 * into steps: step k is one NCCL group holding the k-th chunk of every stream of this
 * member (sends and receives, with every peer), and every member issues steps 0, 1, ...
 * in that order, WEFT_MIGRATE_WINDOW steps in flight. The k-th chunk a member sends to a
 * peer is the k-th that peer receives from it (both cut and sort the same transfers), so
 * every transfer of step k meets its match in the peer's step k, and steps before it
 * never wait for later ones.
 *
 * Checksums: each side copies the chunk to pinned host memory on a copy stream
 * (cudaMemcpyAsync, overlapped with the transfers of the steps in flight) and hashes
 * the copy with XXH3. The sender's digest goes in the chunk's header message, as on the
 * message path; the receiver compares after the data landed in device memory. A chunk
 * whose box is not contiguous in the packed buffer is gathered into (sender) or
 * scattered from (receiver) a device staging buffer on the copy stream.
 */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll/start.h"
#include "comm/ctx/log.h"
#include "comm/device/nccl_comm.h"
#include "migrate/engine/device.h"
#include "migrate/engine/engine_impl.h"
#include "migrate/engine/xxh.h"

enum { LEG_IDLE, LEG_COPY, LEG_HDR, LEG_DONE };

/* One chunk of one stream in one step. */
typedef struct leg {
    stream_t *s;
    uint32_t ci;
    int state;
    bool copy_failed; /* send: the chunk could not be gathered */
    bool landed;      /* receive: the step's transfer finished, the host copy is queued */
    uint8_t *dptr;    /* device: in the user's buffer, or the slot's staging */
    weft_req_t *hdr;
    uint64_t hdr_buf[4]; /* checksum, length, 0, 0: the message path's header */
} leg_t;

/* What a step's window position owns, per stream: reused by every step there. */
typedef struct leg_mem {
    uint8_t *dstage; /* device staging (cudaMalloc), made on first need */
    uint8_t *host;   /* pinned host copy (cudaMallocHost) */
    cudaEvent_t ev;  /* the host copy is done */
} leg_mem_t;

typedef struct step {
    uint32_t k;
    bool busy;
    weft_req_t *req; /* the NCCL group; NULL once finished */
    int nleg;
    leg_t *legs; /* [nstreams] */
} step_t;

struct mig_nccl {
    cudaStream_t copy;
    uint32_t nsteps, next, done;
    size_t cap;     /* the largest chunk: what each staging buffer holds */
    step_t *steps;  /* [window] */
    leg_mem_t *mem; /* [window * nstreams] */
    weft_nccl_xfer_t *xfers;
    bool leak; /* work may still touch the buffers: do not free them */
};

static weft_status_t cuda_fail(mig_t *m, cudaError_t e, const char *what)
{
    (void)cudaGetLastError();
    if (m->why[0] == '\0') {
        snprintf(m->why, sizeof(m->why), "NCCL path: %s: %s", what, cudaGetErrorString(e));
    }
    return weft__error(weft__group_ctx(m->g), WEFT_ERR_TRANSPORT, "weft_migrate: %s: %s", what,
                       cudaGetErrorString(e));
}

weft_status_t weft__mig_on_device(mig_t *m, weft_status_t (*fn)(mig_t *m))
{
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess ||
        (prev != m->cuda_dev && cudaSetDevice(m->cuda_dev) != cudaSuccess)) {
        (void)cudaGetLastError();
        return weft__error(weft__group_ctx(m->g), WEFT_ERR_TRANSPORT,
                           "weft_migrate: cannot use CUDA device %d", m->cuda_dev);
    }
    weft_status_t st = fn(m);
    if (prev != m->cuda_dev) {
        (void)cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
    return st;
}

weft_status_t weft__mig_nccl_init(mig_t *m)
{
    struct mig_nccl *np = calloc(1, sizeof(*np));
    if (np == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    m->np = np;
    size_t ns = (size_t)(m->nstreams > 0 ? m->nstreams : 1);
    np->steps = calloc(m->window, sizeof(step_t));
    np->mem = calloc(m->window * ns, sizeof(leg_mem_t));
    np->xfers = calloc(ns, sizeof(weft_nccl_xfer_t));
    if (np->steps == NULL || np->mem == NULL || np->xfers == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (size_t w = 0; w < m->window; w++) {
        if ((np->steps[w].legs = calloc(ns, sizeof(leg_t))) == NULL) {
            return WEFT_ERR_NO_MEMORY;
        }
    }
    for (int i = 0; i < m->nstreams; i++) {
        const stream_t *s = &m->streams[i];
        if (s->nchunks > np->nsteps) {
            np->nsteps = s->nchunks;
        }
        for (uint32_t k = 0; k < s->nchunks; k++) {
            np->cap = s->chunks[k].bytes > np->cap ? s->chunks[k].bytes : np->cap;
        }
    }
    cudaError_t e = cudaStreamCreateWithFlags(&np->copy, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        np->copy = NULL;
        return cuda_fail(m, e, "cudaStreamCreate");
    }
    return WEFT_OK;
}

/* The window position's buffers for stream @p i, made on first use. */
static weft_status_t leg_mem(mig_t *m, size_t w, int i, bool staging, leg_mem_t **out)
{
    leg_mem_t *lm = &m->np->mem[w * (size_t)m->nstreams + (size_t)i];
    cudaError_t e = cudaSuccess;
    if (lm->host == NULL && (e = cudaMallocHost((void **)&lm->host, m->np->cap)) != cudaSuccess) {
        lm->host = NULL;
        return cuda_fail(m, e, "cudaMallocHost");
    }
    if (lm->ev == NULL &&
        (e = cudaEventCreateWithFlags(&lm->ev, cudaEventDisableTiming)) != cudaSuccess) {
        lm->ev = NULL;
        return cuda_fail(m, e, "cudaEventCreate");
    }
    if (staging && lm->dstage == NULL &&
        (e = cudaMalloc((void **)&lm->dstage, m->np->cap)) != cudaSuccess) {
        lm->dstage = NULL;
        return cuda_fail(m, e, "cudaMalloc");
    }
    *out = lm;
    return WEFT_OK;
}

/* Queue the copy of a leg's device bytes to its host buffer, then the event. */
static weft_status_t queue_host_copy(mig_t *m, leg_t *l, leg_mem_t *lm)
{
    const weft_mig_chunk_t *c = &l->s->chunks[l->ci];
    cudaError_t e =
        cudaMemcpyAsync(lm->host, l->dptr, c->bytes, cudaMemcpyDeviceToHost, m->np->copy);
    if (e == cudaSuccess) {
        e = cudaEventRecord(lm->ev, m->np->copy);
    }
    if (e != cudaSuccess) {
        return cuda_fail(m, e, "copy to host for the checksum");
    }
    l->state = LEG_COPY;
    return WEFT_OK;
}

/* Start step @p k in window position @p w: place (and gather) every leg, post the
 * receivers' headers, enqueue the NCCL group, then the senders' host copies. */
static weft_status_t issue_step(mig_t *m, size_t w, uint32_t k)
{
    struct mig_nccl *np = m->np;
    step_t *st = &np->steps[w];
    weft_status_t rc;
    int nx = 0;
    bool gathered = false;
    st->k = k;
    st->nleg = 0;
    for (int i = 0; i < m->nstreams; i++) {
        stream_t *s = &m->streams[i];
        leg_t *l = &st->legs[i];
        memset(l, 0, sizeof(*l));
        l->state = LEG_IDLE;
        if (k >= s->nchunks) {
            l->state = LEG_DONE;
            continue;
        }
        const weft_mig_chunk_t *c = &s->chunks[k];
        const weft__xfer_t *x = xfer_of(m, c);
        size_t off;
        bool contiguous = s->send ? weft__mig_contiguous(&x->src_box, x->src_packed, &c->box,
                                                         x->ndims, x->elem, &off)
                                  : weft__mig_contiguous(&x->dst_box, x->dst_packed, &c->box,
                                                         x->ndims, x->elem, &off);
        leg_mem_t *lm = NULL;
        if ((rc = leg_mem(m, w, i, !contiguous, &lm)) != WEFT_OK) {
            return rc;
        }
        l->s = s;
        l->ci = k;
        if (contiguous) {
            l->dptr = s->send ? (uint8_t *)src_base(m, x) + off : m->new_buf + off;
        } else {
            l->dptr = lm->dstage;
        }
        if (s->send && !contiguous) {
            char why[160];
            if (!weft__mig_dev_copy_on(np->copy, lm->dstage, &c->box,
                                       src_base(m, x) + x->src_packed, &x->src_box, &c->box,
                                       x->ndims, x->elem, why, sizeof(why))) {
                /* Sent anyway with a checksum that cannot match: fails alike everywhere. */
                l->copy_failed = true;
                if (m->why[0] == '\0') {
                    snprintf(m->why, sizeof(m->why), "device buffer: %s", why);
                }
            }
            gathered = true;
        }
        if (!s->send) {
            rc = weft__irecv(m->g, s->rank, l->hdr_buf, sizeof(l->hdr_buf), WEFT_TAG_MIGRATE,
                             payload(m, 0, true, k), &l->hdr);
            if (rc != WEFT_OK && rc != WEFT_INPROGRESS) {
                return rc;
            }
        }
        np->xfers[nx++] = (weft_nccl_xfer_t){s->rank, s->send, l->dptr, c->bytes};
        st->nleg++;
    }
    if (gathered) {
        /* NCCL's stream does not wait for the copy stream: the gathers finish first. */
        cudaError_t e = cudaStreamSynchronize(np->copy);
        if (e != cudaSuccess) {
            return cuda_fail(m, e, "gathering chunks on the device");
        }
    }
    rc = weft__nccl_p2p(m->g, np->xfers, nx, &st->req);
    if (rc != WEFT_OK && rc != WEFT_INPROGRESS) {
        return rc;
    }
    atomic_fetch_add(&m->faults->counts.nccl_chunks, (uint64_t)nx);
    st->busy = true;
    /* The senders' host copies read what NCCL reads: they overlap the transfer. */
    for (int i = 0; i < m->nstreams; i++) {
        leg_t *l = &st->legs[i];
        if (l->state == LEG_IDLE && l->s->send &&
            (rc = queue_host_copy(m, l, &np->mem[w * (size_t)m->nstreams + (size_t)i])) !=
                WEFT_OK) {
            return rc;
        }
    }
    return WEFT_OK;
}

/* Is the leg's host copy done? WEFT_OK, WEFT_INPROGRESS, or the CUDA error. */
static weft_status_t copy_done(mig_t *m, leg_mem_t *lm)
{
    cudaError_t e = cudaEventQuery(lm->ev);
    if (e == cudaErrorNotReady) {
        return WEFT_INPROGRESS;
    }
    return e == cudaSuccess ? WEFT_OK : cuda_fail(m, e, "copy to host for the checksum");
}

/* Check a received leg whose header and host copy are in: record it ok or bad. */
static weft_status_t check_leg(mig_t *m, leg_t *l, leg_mem_t *lm)
{
    stream_t *s = l->s;
    const weft_mig_chunk_t *c = &s->chunks[l->ci];
    const weft__xfer_t *x = xfer_of(m, c);
    if (m->faults->recv_hook != NULL) {
        m->faults->recv_hook(m->faults->recv_hook_arg, s->member, l->ci, 0, lm->host, c->bytes);
    }
    bool good = l->hdr_buf[1] == c->bytes && XXH3_64bits(lm->host, c->bytes) == l->hdr_buf[0];
    if (good && l->dptr == lm->dstage) {
        char why[160];
        good =
            weft__mig_dev_copy_on(m->np->copy, m->new_buf + x->dst_packed, &x->dst_box, lm->dstage,
                                  &c->box, &c->box, x->ndims, x->elem, why, sizeof(why));
        cudaError_t e = good ? cudaStreamSynchronize(m->np->copy) : cudaSuccess;
        if (!good || e != cudaSuccess) {
            good = false;
            if (m->why[0] == '\0') {
                snprintf(m->why, sizeof(m->why), "device buffer: %s",
                         e != cudaSuccess ? cudaGetErrorString(e) : why);
            }
        }
    }
    if (good) {
        s->ok[l->ci] = 1;
    } else {
        s->bad[s->nbad++] = l->ci;
    }
    l->state = LEG_DONE;
    return WEFT_OK;
}

/* Advance the step in window position @p w; WEFT_OK once all of it is done. */
static weft_status_t step_progress(mig_t *m, size_t w)
{
    struct mig_nccl *np = m->np;
    step_t *st = &np->steps[w];
    weft_status_t rc, nccl = weft__coll_child_test(&st->req, NULL);
    if (nccl != WEFT_OK && nccl != WEFT_INPROGRESS) {
        if (m->why[0] == '\0') {
            snprintf(m->why, sizeof(m->why), "NCCL send/recv of step %u: %s", st->k,
                     weft_status_str(nccl));
        }
        return nccl;
    }
    bool all = nccl == WEFT_OK;
    for (int i = 0; i < m->nstreams; i++) {
        leg_t *l = &st->legs[i];
        leg_mem_t *lm = &np->mem[w * (size_t)m->nstreams + (size_t)i];
        if (l->state == LEG_DONE) {
            continue;
        }
        if (l->s->send) {
            if (l->state == LEG_COPY) {
                if ((rc = copy_done(m, lm)) != WEFT_OK) {
                    if (rc != WEFT_INPROGRESS) {
                        return rc;
                    }
                    all = false;
                    continue;
                }
                const weft_mig_chunk_t *c = &l->s->chunks[l->ci];
                l->hdr_buf[0] = XXH3_64bits(lm->host, c->bytes) ^ (l->copy_failed ? 1u : 0u);
                l->hdr_buf[1] = c->bytes;
                rc = weft__isend(m->g, l->s->rank, l->hdr_buf, sizeof(l->hdr_buf), WEFT_TAG_MIGRATE,
                                 payload(m, 0, true, l->ci), &l->hdr);
                if (rc != WEFT_OK && rc != WEFT_INPROGRESS) {
                    return rc;
                }
                l->state = LEG_HDR;
            }
            if ((rc = weft__coll_child_test(&l->hdr, NULL)) != WEFT_OK) {
                if (rc != WEFT_INPROGRESS) {
                    return rc;
                }
                all = false;
                continue;
            }
            l->state = LEG_DONE;
            continue;
        }
        /* Receive: the data landed (the group finished), then its host copy. */
        if (nccl != WEFT_OK) {
            all = false;
            continue;
        }
        if (!l->landed) {
            if ((rc = queue_host_copy(m, l, lm)) != WEFT_OK) {
                return rc;
            }
            l->landed = true;
        }
        rc = weft__coll_child_test(&l->hdr, NULL);
        if (rc == WEFT_OK) {
            rc = copy_done(m, lm);
        }
        if (rc == WEFT_INPROGRESS) {
            all = false;
            continue;
        }
        if (rc != WEFT_OK || (rc = check_leg(m, l, lm)) != WEFT_OK) {
            return rc;
        }
    }
    return all ? WEFT_OK : WEFT_INPROGRESS;
}

weft_status_t weft__mig_nccl_progress(mig_t *m)
{
    struct mig_nccl *np = m->np;
    weft_status_t rc;
    for (size_t w = 0; w < m->window; w++) {
        if (!np->steps[w].busy) {
            continue;
        }
        if ((rc = step_progress(m, w)) == WEFT_INPROGRESS) {
            continue;
        }
        if (rc != WEFT_OK) {
            return rc;
        }
        np->steps[w].busy = false;
        np->done++;
    }
    /* Steps go out in order: position k % window frees up for step k. */
    while (np->next < np->nsteps && !np->steps[np->next % m->window].busy) {
        if ((rc = issue_step(m, np->next % m->window, np->next)) != WEFT_OK) {
            return rc;
        }
        np->next++;
    }
    if (np->done < np->nsteps) {
        return WEFT_INPROGRESS;
    }
    m->nccl_done = true;
    return WEFT_OK;
}

static weft_status_t free_on_device(mig_t *m);

void weft__mig_nccl_free(mig_t *m)
{
    if (m->np != NULL) {
        (void)weft__mig_on_device(m, free_on_device);
    }
}

static weft_status_t free_on_device(mig_t *m)
{
    struct mig_nccl *np = m->np;
    for (size_t w = 0; np->steps != NULL && w < m->window; w++) {
        step_t *st = &np->steps[w];
        if (st->req != NULL) {
            /* Freeing a running group stops the communicator when the group broke; else
             * its work finishes with the peer's. Either way, it may still write. */
            np->leak = true;
            weft__coll_child_drop(&st->req);
        }
        bool sending = false; /* a header send may still read its leg */
        for (int i = 0; st->legs != NULL && i < m->nstreams; i++) {
            sending |= st->legs[i].hdr != NULL && st->legs[i].s != NULL && st->legs[i].s->send;
            weft__coll_child_drop(&st->legs[i].hdr);
        }
        if (sending) {
            weft__retire(weft__group_ctx(m->g), st->legs);
        } else {
            free(st->legs);
        }
    }
    if (np->copy != NULL && !np->leak) {
        (void)cudaStreamSynchronize(np->copy);
    }
    size_t nmem = m->window * (size_t)(m->nstreams > 0 ? m->nstreams : 1);
    for (size_t j = 0; np->mem != NULL && j < nmem; j++) {
        leg_mem_t *lm = &np->mem[j];
        if (lm->ev != NULL) {
            (void)cudaEventDestroy(lm->ev);
        }
        if (!np->leak) {
            /* cudaFree waits for the device: only once nothing can be running. */
            (void)cudaFree(lm->dstage);
            (void)cudaFreeHost(lm->host);
        }
    }
    if (np->leak) {
        WEFT_WARN(weft__ctx_logger(weft__group_ctx(m->g)),
                  "weft_migrate: freed with NCCL transfers in flight; their %zu staging "
                  "buffers are kept, since a transfer may still write them",
                  nmem);
    }
    if (np->copy != NULL) {
        (void)cudaStreamDestroy(np->copy);
    }
    (void)cudaGetLastError();
    free(np->mem);
    free(np->steps);
    free(np->xfers);
    free(np);
    m->np = NULL;
    return WEFT_OK;
}
