/*
 * Pipelined ring: reduce-scatter and/or allgather over P blocks, each block cut in the
 * same number of chunks. All messages go to the right neighbour and come from the left
 * one under a single tag step, so they match in order.
 *
 * Steps (rank r, blocks mod P):
 *   reduce-scatter step s: send block r-s-1, receive block r-s-2; after the last step
 *                          (s = P-2) rank r holds block r fully reduced
 *   allgather step s:      send block r-s, receive block r-s-1
 * Units are numbered chunk-major (every step of chunk 0, then of chunk 1, ...), the same
 * way on both ends of every link. The send of unit u forwards what arrived in unit u-1,
 * so all ranks stream in lock step and a window of a few units keeps the links busy.
 *
 * Copies: when the allgather buffer is separate from the input (out-of-place allreduce)
 * a reduce-scatter chunk is received straight into its place in the output, combined
 * there with the local input (it is still in cache) and forwarded from there: no
 * temporary memory at all. Otherwise (in place, reduce_scatter, reduce) it is received
 * into one of a few chunk-sized temporary slots, combined there and forwarded from
 * there, and the last step writes input (op) received into the output. Allgather chunks
 * are received in place in the output and forwarded from it. Large messages thus cost
 * one transport copy (single-copy rendezvous intra-node) plus one reduction pass per step.
 *
 * Flow control: receives and sends live in arrays indexed mod WEFT_RING_WIN; a receive is
 * posted only while it is less than WIN-1 units ahead of the oldest incomplete send (the
 * send that forwards a received unit finds its slot still in the array) and less than WIN
 * ahead of the oldest unprocessed receive (step-0 sends need no receive, so sends can run
 * ahead of receives); a reduce-scatter receive into a slot also needs a free slot. The
 * rank with the lowest incomplete send can always post the receive it needs, so the ring
 * cannot deadlock (slots >= 2).
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"

typedef struct unit_info {
    int rs_step;     /* reduce-scatter step, or -1 for an allgather step */
    int ag_step;     /* allgather step, or -1 */
    size_t off;      /* element offset of the chunk in the block layout */
    size_t in_block; /* element offset of the chunk inside its block */
    size_t len;      /* elements; 0 for an empty chunk of a short block */
} unit_info_t;

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

static void unit_get(const weft_ring_t *ring, size_t u, bool recv, unit_info_t *ui)
{
    size_t chunk = u / (size_t)ring->units;
    int j = (int)(u % (size_t)ring->units);
    int b;
    if (j < ring->rs_steps) {
        ui->rs_step = j;
        ui->ag_step = -1;
        b = mod(ring->rank - j - (recv ? 2 : 1), ring->size);
    } else {
        ui->rs_step = -1;
        ui->ag_step = j - ring->rs_steps;
        b = mod(ring->rank - ui->ag_step - (recv ? 1 : 0), ring->size);
    }
    size_t boff, blen;
    if (ring->blk > 0) {
        boff = (size_t)b * ring->blk;
        blen = ring->blk;
    } else {
        boff = weft__coll_blk_off(ring->count, ring->size, b);
        blen = weft__coll_blk_len(ring->count, ring->size, b);
    }
    size_t start = chunk * ring->chunk_elems;
    ui->in_block = start;
    ui->off = boff + start;
    ui->len =
        start >= blen ? 0 : (blen - start < ring->chunk_elems ? blen - start : ring->chunk_elems);
}

/*
 * Chunk size for blocks (or a chain's buffer) of @p blk_bytes, where each chunk costs
 * @p units messages per rank. A message costs either an eager copy through shared memory
 * (up to about 8K with UCX's defaults) or a rendezvous round trip before its single copy,
 * which only pays off for large messages. So medium blocks are cut in eager-sized chunks,
 * as long as that makes at most about 32 messages per rank (each message also costs a
 * scheduling round trip when ranks share cores); larger ones use WEFT_COLL_CHUNK chunks,
 * which amortise the round trip while the reduction of one overlaps the transfer of the
 * next.
 */
size_t weft__coll_chunk_bytes(const weft_coll_t *c, size_t blk_bytes, int units)
{
    size_t chunk = c->ctx->cfg.coll_chunk;
    size_t max_chunks = units > 0 && units < 32 ? (size_t)(32 / units) : 1;
    if (chunk > WEFT_RING_EAGER_CHUNK && blk_bytes <= WEFT_RING_EAGER_CHUNK * max_chunks) {
        return WEFT_RING_EAGER_CHUNK;
    }
    return chunk;
}

weft_status_t weft__ring_init(weft_coll_t *c, weft_ring_t *ring, bool rs, bool ag, const void *in,
                              void *full, void *mine, const void *own, size_t count, size_t blk)
{
    /* Ranks on several hosts: some link crosses the network, and the ring goes at its
     * pace (the same answer on every rank, as the chunking must be). */
    bool remote = weft__coll_over_hosts(c);
    weft_ring_pos_t pos = {c->rank, c->size, mod(c->rank - 1, c->size), mod(c->rank + 1, c->size),
                           remote};
    return weft__ring_init_among(c, ring, &pos, rs, ag, in, full, mine, own, count, blk);
}

weft_status_t weft__ring_init_among(weft_coll_t *c, weft_ring_t *ring, const weft_ring_pos_t *pos,
                                    bool rs, bool ag, const void *in, void *full, void *mine,
                                    const void *own, size_t count, size_t blk)
{
    memset(ring, 0, sizeof(*ring));
    ring->rank = pos->rank;
    ring->size = pos->size;
    ring->left = pos->left;
    ring->right = pos->right;
    ring->rs_steps = rs ? pos->size - 1 : 0;
    ring->ag_steps = ag ? pos->size - 1 : 0;
    ring->units = ring->rs_steps + ring->ag_steps;
    ring->elem = c->elem;
    ring->count = count;
    ring->blk = blk;
    ring->in = in;
    ring->full = full;
    ring->mine = mine;
    ring->own = own;
    ring->red = &c->red;
    ring->step = WEFT_COLL_STEP_RING;
    for (int i = 0; i < WEFT_RING_WIN; i++) {
        ring->slot[i] = -1;
    }
    size_t maxblk = blk > 0 ? blk : (count + (size_t)pos->size - 1) / (size_t)pos->size;
    size_t per_chunk = (pos->remote ? c->ctx->cfg.coll_net_chunk
                                    : weft__coll_chunk_bytes(c, maxblk * c->elem, ring->units)) /
                       c->elem;
    if (per_chunk == 0) {
        per_chunk = 1;
    }
    if (maxblk == 0 || ring->units == 0) {
        return WEFT_OK; /* nothing to move: total stays 0 */
    }
    ring->nchunks = (maxblk + per_chunk - 1) / per_chunk;
    ring->chunk_elems = (maxblk + ring->nchunks - 1) / ring->nchunks;
    ring->total = ring->nchunks * (size_t)ring->units;
    /* Staging in the output is safe only when the input is elsewhere. */
    ring->direct = rs && full != NULL && (const void *)full != in;
    if (rs && !ring->direct) {
        ring->slot_bytes = (ring->chunk_elems * c->elem + 63) & ~(size_t)63;
        ring->tmp = weft__coll_alloc(c, ring->slot_bytes * WEFT_RING_SLOTS);
        if (ring->tmp == NULL) {
            return WEFT_ERR_NO_MEMORY;
        }
    }
    return WEFT_OK;
}

void weft__ring_fini(weft_ring_t *ring)
{
    for (int i = 0; i < WEFT_RING_WIN; i++) {
        weft__coll_child_drop(&ring->rreq[i]);
        weft__coll_child_drop(&ring->sreq[i]);
    }
    free(ring->tmp);
    ring->tmp = NULL;
}

static uint8_t *slot_ptr(const weft_ring_t *ring, int s)
{
    return ring->tmp + (size_t)s * ring->slot_bytes;
}

static int slot_take(weft_ring_t *ring)
{
    for (int s = 0; s < WEFT_RING_SLOTS; s++) {
        if (!(ring->slot_used & (1u << s))) {
            ring->slot_used |= 1u << s;
            return s;
        }
    }
    return -1;
}

static void slot_give(weft_ring_t *ring, int s)
{
    if (s >= 0) {
        ring->slot_used &= ~(1u << s);
    }
}

static weft_status_t post_recv(weft_coll_t *c, weft_ring_t *ring, bool *blocked)
{
    size_t u = ring->next_recv;
    int w = (int)(u % WEFT_RING_WIN);
    unit_info_t ui;
    unit_get(ring, u, true, &ui);
    ring->slot[w] = -1;
    ring->rbusy[w] = false;
    if (ui.len == 0) {
        ring->next_recv++;
        return WEFT_OK;
    }
    uint8_t *dst;
    if (ui.rs_step >= 0 && !ring->direct) {
        int s = slot_take(ring);
        if (s < 0) {
            *blocked = true;
            return WEFT_OK;
        }
        ring->slot[w] = s;
        dst = slot_ptr(ring, s);
    } else {
        dst = ring->full + ui.off * ring->elem;
    }
    uint32_t tag = weft__tag_coll_payload(c->seq, ring->step);
    weft_status_t st =
        weft__irecv(c->g, ring->left, dst, ui.len * ring->elem, WEFT_TAG_COLL, tag, &ring->rreq[w]);
    if (st != WEFT_OK && st != WEFT_INPROGRESS) {
        return st;
    }
    ring->rbusy[w] = st == WEFT_INPROGRESS;
    ring->next_recv++;
    return WEFT_OK;
}

/* Combine a received reduce-scatter chunk with the local input. */
static void process_recv(weft_ring_t *ring, size_t u)
{
    int w = (int)(u % WEFT_RING_WIN);
    unit_info_t ui;
    unit_get(ring, u, true, &ui);
    if (ui.len == 0 || ui.rs_step < 0) {
        return;
    }
    const uint8_t *in = ring->in + ui.off * ring->elem;
    if (ring->direct) {
        /* Received in place in the output; forwarded from there by send u+1. */
        weft__reducer_apply(ring->red, ring->full + ui.off * ring->elem, in, ui.len);
        return;
    }
    uint8_t *tmp = slot_ptr(ring, ring->slot[w]);
    if (ui.rs_step < ring->rs_steps - 1) {
        weft__reducer_apply(ring->red, tmp, in, ui.len); /* forwarded by send u+1 */
    } else {
        weft__reducer_apply3(ring->red, ring->mine + ui.in_block * ring->elem, in, tmp, ui.len);
        slot_give(ring, ring->slot[w]);
        ring->slot[w] = -1;
    }
}

static bool send_ready(const weft_ring_t *ring, size_t u)
{
    return u % (size_t)ring->units == 0 || u - 1 < ring->next_done;
}

static weft_status_t post_send(weft_coll_t *c, weft_ring_t *ring)
{
    size_t u = ring->next_send;
    int w = (int)(u % WEFT_RING_WIN);
    unit_info_t ui;
    unit_get(ring, u, false, &ui);
    ring->sbusy[w] = false;
    ring->sslot[w] = -1;
    ring->next_send++;
    if (ui.len == 0) {
        return WEFT_OK;
    }
    const uint8_t *src;
    if (ui.rs_step == 0) {
        src = ring->in + ui.off * ring->elem;
    } else if (ui.rs_step > 0 && ring->direct) {
        src = ring->full + ui.off * ring->elem;
    } else if (ui.rs_step > 0) {
        /* What unit u-1 received and combined; the slot is ours until this send is done. */
        int prev = (int)((u - 1) % WEFT_RING_WIN);
        ring->sslot[w] = ring->slot[prev];
        ring->slot[prev] = -1;
        src = slot_ptr(ring, ring->sslot[w]);
    } else if (ui.ag_step == 0 && ring->rs_steps == 0) {
        src = ring->own + ui.in_block * ring->elem;
    } else {
        src = ring->full + ui.off * ring->elem;
    }
    uint32_t tag = weft__tag_coll_payload(c->seq, ring->step);
    weft_status_t st = weft__isend(c->g, ring->right, src, ui.len * ring->elem, WEFT_TAG_COLL, tag,
                                   &ring->sreq[w]);
    if (st != WEFT_OK && st != WEFT_INPROGRESS) {
        return st;
    }
    ring->sbusy[w] = st == WEFT_INPROGRESS;
    if (!ring->sbusy[w]) {
        slot_give(ring, ring->sslot[w]);
        ring->sslot[w] = -1;
    }
    return WEFT_OK;
}

/* Receive completions, in unit order. */
static weft_status_t drain_recvs(weft_ring_t *ring, bool *moved)
{
    while (ring->next_done < ring->next_recv) {
        int w = (int)(ring->next_done % WEFT_RING_WIN);
        if (ring->rbusy[w]) {
            weft_status_t st = weft__coll_child_test(&ring->rreq[w], NULL);
            if (st == WEFT_INPROGRESS) {
                break;
            }
            if (st != WEFT_OK) {
                return st;
            }
            ring->rbusy[w] = false;
        }
        process_recv(ring, ring->next_done);
        ring->next_done++;
        *moved = true;
    }
    return WEFT_OK;
}

/* Send completions, in any order; floor moves past the completed prefix. */
static weft_status_t drain_sends(weft_ring_t *ring, bool *moved)
{
    for (size_t u = ring->floor; u < ring->next_send; u++) {
        int w = (int)(u % WEFT_RING_WIN);
        if (!ring->sbusy[w]) {
            continue;
        }
        weft_status_t st = weft__coll_child_test(&ring->sreq[w], NULL);
        if (st == WEFT_INPROGRESS) {
            continue;
        }
        if (st != WEFT_OK) {
            return st;
        }
        ring->sbusy[w] = false;
        slot_give(ring, ring->sslot[w]);
        ring->sslot[w] = -1;
    }
    while (ring->floor < ring->next_send && !ring->sbusy[ring->floor % WEFT_RING_WIN]) {
        ring->floor++;
        *moved = true;
    }
    return WEFT_OK;
}

weft_status_t weft__ring_progress(weft_coll_t *c, weft_ring_t *ring)
{
    bool moved = true;
    while (moved) {
        moved = false;
        weft_status_t st = drain_recvs(ring, &moved);
        if (st != WEFT_OK) {
            return st;
        }
        while (ring->next_send < ring->total && ring->next_send < ring->floor + WEFT_RING_WIN &&
               send_ready(ring, ring->next_send)) {
            st = post_send(c, ring);
            if (st != WEFT_OK) {
                return st;
            }
            moved = true;
        }
        st = drain_sends(ring, &moved);
        if (st != WEFT_OK) {
            return st;
        }
        bool blocked = false;
        while (!blocked && ring->next_recv < ring->total &&
               ring->next_recv + 1 < ring->floor + WEFT_RING_WIN &&
               ring->next_recv < ring->next_done + WEFT_RING_WIN) {
            size_t before = ring->next_recv;
            st = post_recv(c, ring, &blocked);
            if (st != WEFT_OK) {
                return st;
            }
            moved = moved || ring->next_recv != before;
        }
    }
    return ring->floor == ring->total && ring->next_done == ring->total ? WEFT_OK : WEFT_INPROGRESS;
}
