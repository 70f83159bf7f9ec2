/*
 * The exchange phase shared by every collective: recursive doubling with a fold for
 * group sizes that are not a power of two, every message led by the header that carries
 * the parameters and the mismatch flag (see coll.h for why this finds every mismatch).
 *
 * Schedule on rank r, with pof2 the largest power of two <= P and rem = P - pof2:
 *   pos 0            ranks >= pof2 send to r - pof2; ranks < rem receive from r + pof2
 *   pos 1..nsteps    ranks < pof2 exchange with r ^ 2^(pos-1)
 *   pos nsteps+1     ranks < rem send to r + pof2; ranks >= pof2 receive from r - pof2
 * The extra ranks are the highest ones so that an allgather's blocks stay in two
 * contiguous ranges per step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"

weft_status_t weft__rd_init(weft_coll_t *c, const weft_rd_ops_t *ops, size_t cap)
{
    weft_rd_t *rd = &c->rd;
    rd->ops = ops;
    rd->cap = cap;
    rd->pof2 = 1;
    rd->nsteps = 0;
    while (rd->pof2 <= c->size / 2) {
        rd->pof2 *= 2;
        rd->nsteps++;
    }
    rd->rem = c->size - rd->pof2;
    rd->pos = 0;
    size_t one = WEFT_COLL_HDR_SIZE + ((cap + 63) & ~(size_t)63);
    if (2 * one <= sizeof(c->inline_buf)) {
        rd->sbuf = c->inline_buf;
    } else if ((rd->sbuf = weft__coll_alloc(c, 2 * one)) == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    rd->rbuf = rd->sbuf + one;
    return WEFT_OK;
}

void weft__rd_fini(weft_coll_t *c)
{
    weft__coll_child_drop(&c->rd.sreq);
    weft__coll_child_drop(&c->rd.rreq);
    if (c->rd.sbuf != c->inline_buf) {
        free(c->rd.sbuf);
    }
    c->rd.sbuf = c->rd.rbuf = NULL;
}

/* What this rank does at its current position: peers to send to / receive from (-1: none). */
static void rd_roles(const weft_coll_t *c, enum weft_rd_stage *stage, int *to, int *from)
{
    const weft_rd_t *rd = &c->rd;
    int r = c->rank;
    *to = *from = -1;
    if (rd->pos == 0) {
        *stage = WEFT_RD_FOLD_IN;
        if (r >= rd->pof2) {
            *to = r - rd->pof2;
        } else if (r < rd->rem) {
            *from = r + rd->pof2;
        }
    } else if (rd->pos <= rd->nsteps) {
        *stage = WEFT_RD_STEP;
        if (r < rd->pof2) {
            *to = *from = r ^ (1 << (rd->pos - 1));
        }
    } else {
        *stage = WEFT_RD_FOLD_OUT;
        if (r >= rd->pof2) {
            *from = r - rd->pof2;
        } else if (r < rd->rem) {
            *to = r + rd->pof2;
        }
    }
}

static int rd_step_tag(const weft_rd_t *rd)
{
    if (rd->pos == 0) {
        return WEFT_COLL_STEP_FOLD_IN;
    }
    return rd->pos <= rd->nsteps ? WEFT_COLL_STEP_RD(rd->pos - 1) : WEFT_COLL_STEP_FOLD_OUT;
}

static weft_status_t rd_post(weft_coll_t *c, enum weft_rd_stage stage, int to, int from)
{
    weft_rd_t *rd = &c->rd;
    uint32_t tag = weft__tag_coll_payload(c->seq, (uint32_t)rd_step_tag(rd));
    weft_status_t st;
    if (from >= 0) {
        size_t exp = rd->ops != NULL ? rd->ops->expect(c, stage, from) : 0;
        rd->recv_peer = from;
        rd->recv_len = 0;
        rd->recv_failed = false;
        st = weft__irecv_len(c->g, from, rd->rbuf, WEFT_COLL_HDR_SIZE + exp, WEFT_TAG_COLL, tag,
                             &rd->rreq, &rd->recv_len);
        if (st == WEFT_ERR_MISMATCH) {
            rd->recv_failed = true; /* longer than expected: the sender disagrees */
        } else if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            return st;
        }
        rd->recv_busy = st == WEFT_INPROGRESS;
    }
    if (to >= 0) {
        weft_coll_hdr_t h = c->hdr; /* flags: WEFT_COLL_HDR_INVALID from a refusal */
        if (c->mismatch) {
            h.flags |= WEFT_COLL_HDR_MISMATCH;
        }
        if (c->refused) {
            h.flags |= WEFT_COLL_HDR_REFUSED;
        }
        memcpy(rd->sbuf, &h, sizeof(h));
        size_t len =
            rd->ops != NULL ? rd->ops->pack(c, stage, to, rd->sbuf + WEFT_COLL_HDR_SIZE) : 0;
        st = weft__isend(c->g, to, rd->sbuf, WEFT_COLL_HDR_SIZE + len, WEFT_TAG_COLL, tag,
                         &rd->sreq);
        if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            return st;
        }
        rd->send_busy = st == WEFT_INPROGRESS;
    }
    return WEFT_OK;
}

/* Compare a received header with ours and take its payload. */
static void rd_receive(weft_coll_t *c, enum weft_rd_stage stage)
{
    weft_rd_t *rd = &c->rd;
    int peer = rd->recv_peer;
    if (rd->recv_failed) {
        weft__coll_set_mismatch(c,
                                "rank %d sent a longer message than this rank's "
                                "parameters allow",
                                peer);
        return;
    }
    if (rd->recv_len < WEFT_COLL_HDR_SIZE) {
        weft__coll_set_mismatch(c, "rank %d sent a %zu-byte message", peer, rd->recv_len);
        return;
    }
    weft_coll_hdr_t h;
    memcpy(&h, rd->rbuf, sizeof(h));
    (void)weft__coll_hdr_agrees(c, peer, &h, true);
    if (h.flags & WEFT_COLL_HDR_MISMATCH) {
        c->mismatch = true;
    }
    if (c->mismatch || rd->ops == NULL) {
        if (!c->mismatch && rd->recv_len != WEFT_COLL_HDR_SIZE) {
            weft__coll_set_mismatch(c, "rank %d sent %zu payload bytes, expected none", peer,
                                    rd->recv_len - WEFT_COLL_HDR_SIZE);
        }
        return;
    }
    size_t len = rd->recv_len - WEFT_COLL_HDR_SIZE;
    if (!rd->ops->unpack(c, stage, peer, rd->rbuf + WEFT_COLL_HDR_SIZE, len)) {
        weft__coll_set_mismatch(c,
                                "rank %d sent %zu payload bytes, not what the parameters "
                                "imply",
                                peer, len);
    }
}

weft_status_t weft__rd_progress(weft_coll_t *c)
{
    weft_rd_t *rd = &c->rd;
    while (rd->pos <= rd->nsteps + 1) {
        enum weft_rd_stage stage;
        int to, from;
        rd_roles(c, &stage, &to, &from);
        if (to < 0 && from < 0) {
            rd->pos++;
            continue;
        }
        weft_status_t st;
        if (!rd->posted) {
            st = rd_post(c, stage, to, from);
            if (st != WEFT_OK) {
                return st;
            }
            rd->posted = true;
        }
        if (rd->recv_busy) {
            st = weft__coll_child_test(&rd->rreq, &rd->recv_len);
            if (st == WEFT_ERR_MISMATCH) {
                rd->recv_failed = true;
            } else if (st != WEFT_OK && st != WEFT_INPROGRESS) {
                return st;
            }
            rd->recv_busy = st == WEFT_INPROGRESS;
        }
        if (rd->send_busy) {
            st = weft__coll_child_test(&rd->sreq, NULL);
            if (st != WEFT_OK && st != WEFT_INPROGRESS) {
                return st;
            }
            rd->send_busy = st == WEFT_INPROGRESS;
        }
        if (rd->recv_busy || rd->send_busy) {
            return WEFT_INPROGRESS;
        }
        if (from >= 0) {
            rd_receive(c, stage);
        }
        rd->posted = false;
        rd->pos++;
    }
    return WEFT_OK;
}

/* ---- a refusal ---- */

enum { RD_POSITIONS = 16 + 2 }; /* fold-in, up to 16 steps, fold-out */

/* Every message of a refusal's part, posted at once (in the collective's scratch). */
typedef struct rd_refusal {
    weft_req_t *req[2 * RD_POSITIONS];
    size_t len[2 * RD_POSITIONS];
    weft_status_t failed; /* the first error of a message other than a truncation */
    _Alignas(8) uint8_t hdr[WEFT_COLL_HDR_SIZE];
    uint8_t rbuf[RD_POSITIONS][WEFT_COLL_HDR_SIZE]; /* longer messages are cut: dropped */
} rd_refusal_t;

/* Drop what is still in flight (a refusal abandoned: its group freed or failed). */
static void rd_refuse_fini(weft_coll_t *c)
{
    rd_refusal_t *f = (rd_refusal_t *)c->scratch;
    for (int k = 0; f != NULL && k < 2 * RD_POSITIONS; k++) {
        weft__coll_child_drop(&f->req[k]);
    }
}

weft_status_t weft__rd_refuse_start(weft_coll_t *c)
{
    rd_refusal_t *f = (rd_refusal_t *)weft__coll_alloc(c, sizeof(*f));
    if (f == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    memset(f, 0, sizeof(*f));
    c->scratch = (uint8_t *)f;
    c->fini = rd_refuse_fini;
    weft_coll_hdr_t h = c->hdr;
    h.flags |= WEFT_COLL_HDR_MISMATCH | WEFT_COLL_HDR_REFUSED;
    memcpy(f->hdr, &h, sizeof(h));
    weft_rd_t *rd = &c->rd;
    for (rd->pos = 0; rd->pos <= rd->nsteps + 1; rd->pos++) {
        enum weft_rd_stage stage;
        int to, from, k = 2 * rd->pos;
        rd_roles(c, &stage, &to, &from);
        uint32_t tag = weft__tag_coll_payload(c->seq, (uint32_t)rd_step_tag(rd));
        weft_status_t st = WEFT_OK;
        if (from >= 0) {
            st = weft__irecv_len(c->g, from, f->rbuf[rd->pos], WEFT_COLL_HDR_SIZE, WEFT_TAG_COLL,
                                 tag, &f->req[k], &f->len[k]);
        }
        if (to >= 0 && (st == WEFT_OK || st == WEFT_INPROGRESS || st == WEFT_ERR_MISMATCH)) {
            st = weft__isend(c->g, to, f->hdr, WEFT_COLL_HDR_SIZE, WEFT_TAG_COLL, tag,
                             &f->req[k + 1]);
        }
        if (st != WEFT_OK && st != WEFT_INPROGRESS && st != WEFT_ERR_MISMATCH) {
            return st; /* the group is failing: its revocation tells the others */
        }
    }
    return WEFT_OK;
}

weft_status_t weft__rd_refuse_progress(weft_coll_t *c)
{
    rd_refusal_t *f = (rd_refusal_t *)c->scratch;
    bool busy = false;
    for (int k = 0; f != NULL && k < 2 * RD_POSITIONS; k++) {
        weft_status_t st = weft__coll_child_test(&f->req[k], &f->len[k]);
        if (st == WEFT_INPROGRESS) {
            busy = true;
        } else if (st != WEFT_OK && st != WEFT_ERR_MISMATCH && f->failed == WEFT_OK) {
            f->failed = st;
        }
    }
    if (busy) {
        return WEFT_INPROGRESS;
    }
    weft_status_t st = f != NULL ? f->failed : WEFT_OK;
    free(c->scratch); /* nothing in flight reads it now */
    c->scratch = NULL;
    return st;
}
