/*
 * Collectives through the group's shared-memory segment (layout and counters: shm.h).
 *
 * Every collective of a group with a segment starts the same way, whatever its kind and
 * size: the rank writes its header (and, for small collectives, its data) into its slot,
 * publishes the slot's sequence number, and reads every peer's slot. Each rank compares
 * all headers itself, so a disagreement is seen by every rank in this one step, before
 * any data moves, and no rank can wait for a step that another rank skips.
 *
 * Small collectives finish in that step: every rank combines the slots it needs, in rank
 * order, so all ranks compute bitwise the same result. One cache-line transfer is the
 * whole latency of an 8-byte allreduce.
 *
 * Large collectives move their data in chunks through per-rank stage buffers:
 *   stage   a rank copies what its peers need from its input into its stage buffer
 *   reduce  (reductions) each rank combines one sub-block of the chunk from every
 *           rank's stage buffer (its own input for its own part) into its res buffer
 *   copy    each rank copies the peers' results (res, or stage for allgather and
 *           broadcast) into its output
 * With buffers of WEFT_SHM_CHUNK bytes the intermediate data stays in the caches; the
 * user's buffers are read and written once each. Alltoall stages block q's part of each
 * chunk for rank q. Alltoallv takes only the header step here and moves its data with
 * messages (its blocks have any size); so do large collectives when the data segment
 * could not be allocated, or when one element does not fit a chunk.
 */
#include <stdio.h>
#include <string.h>

#include "comm/coll/coll.h"
#include "comm/progress/copy.h"
#include "comm/shm/shm.h"
#include "util/assert.h"

enum { SH_TURN = 0, SH_SLOT = 1, SH_ROOT = 2, SH_HDRS = 3, SH_DONE = 4 };
enum { CH_STAGE = 0, CH_REDUCE = 1, CH_COPY = 2 };

static weft_status_t shm_data(weft_coll_t *c);

/* Kinds whose buffers hold one block per rank, chunked block by block. */
static bool by_blocks(const weft_coll_t *c)
{
    return c->a.kind == WEFT_COLL_REDUCE_SCATTER || c->a.kind == WEFT_COLL_ALLTOALL;
}

static bool is_red(const weft_coll_t *c)
{
    enum weft_coll_kind k = c->a.kind;
    return k == WEFT_COLL_ALLREDUCE || k == WEFT_COLL_REDUCE || k == WEFT_COLL_REDUCE_SCATTER;
}

/* Whether every peer's counter @p k has reached @p v. */
static bool peers_reached(const weft_shm_t *s, enum weft_shm_ctr k, uint64_t v)
{
    for (int q = 0; q < s->size; q++) {
        if (q != s->rank && weft__shm_load(weft__shm_ctr(s, q, k)) < v) {
            return false;
        }
    }
    return true;
}

static void release_turn(weft_coll_t *c)
{
    if (!c->sh.finished) {
        /* Collectives of a segment hand on their turn in the order they were numbered. */
        WEFT_ASSERT(c->shm->turn == c->sh.idx);
        WEFT_ASSERT(c->shm->turn < c->shm->issued);
        c->sh.finished = true;
        c->shm->turn++;
    }
}

/* out = src[0] (op) src[1] (op) ... in rank order; out may be src[0] but no other. */
static void reduce_ordered(const weft_coll_t *c, uint8_t *out, const uint8_t *const *src, size_t n)
{
    if (n == 0) {
        return;
    }
    weft__reducer_apply3(&c->red, out, src[0], src[1], n);
    for (int q = 2; q < c->size; q++) {
        weft__reducer_apply(&c->red, out, src[q], n);
    }
}

static const uint8_t *slot_data(const weft_coll_t *c, int q)
{
    return weft__shm_slot(c->shm, q, c->sh.idx) + WEFT_SHM_SLOT_HDR;
}

/* Bytes this rank puts in its slot: what the latency path carries. */
static size_t small_payload(const weft_coll_t *c)
{
    size_t bytes = c->a.count * c->elem;
    if (by_blocks(c)) {
        return bytes * (size_t)c->size;
    }
    switch (c->a.kind) {
    case WEFT_COLL_BROADCAST:
        return c->rank == c->a.root ? bytes : 0;
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE:
    case WEFT_COLL_ALLGATHER:
        return bytes;
    default:
        return 0;
    }
}

/* The result of a small collective, from the slots. */
static void small_finish(weft_coll_t *c)
{
    const uint8_t *src[WEFT_SHM_MAX_RANKS];
    size_t bytes = c->a.count * c->elem, n = c->a.count;
    uint8_t *out = c->a.recvbuf;
    if (bytes == 0) {
        return;
    }
    switch (c->a.kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE:
        if (c->a.kind == WEFT_COLL_REDUCE && c->rank != c->a.root) {
            return;
        }
        for (int q = 0; q < c->size; q++) {
            src[q] = slot_data(c, q);
        }
        reduce_ordered(c, out, src, n);
        return;
    case WEFT_COLL_REDUCE_SCATTER:
        for (int q = 0; q < c->size; q++) {
            src[q] = slot_data(c, q) + (size_t)c->rank * bytes;
        }
        reduce_ordered(c, out, src, n);
        return;
    case WEFT_COLL_ALLGATHER:
        for (int q = 0; q < c->size; q++) {
            uint8_t *dst = out + (size_t)q * bytes;
            if (q != c->rank || c->a.sendbuf != c->a.recvbuf) {
                memcpy(dst, slot_data(c, q), bytes);
            }
        }
        return;
    case WEFT_COLL_BROADCAST:
        if (c->rank != c->a.root) {
            memcpy(out, slot_data(c, c->a.root), bytes);
        }
        return;
    case WEFT_COLL_ALLTOALL:
        for (int q = 0; q < c->size; q++) {
            memcpy(out + (size_t)q * bytes, slot_data(c, q) + (size_t)c->rank * bytes, bytes);
        }
        return;
    default:
        return;
    }
}

/* Fill this rank's slot of collective @p idx (header, then @p len data bytes) and publish
 * it: the sequence number is written last. */
static void slot_write(weft_shm_t *s, uint64_t idx, const weft_coll_hdr_t *h, const void *data,
                       size_t len)
{
    uint8_t *slot = weft__shm_slot(s, s->rank, idx);
    /* This rank's turn; a refusal posts before it numbers the collective (idx == issued). */
    WEFT_ASSERT(idx <= s->issued && idx >= s->turn);
    WEFT_ASSERT(len <= s->small_max);
    memcpy(slot + 8, h, sizeof(*h));
    if (len > 0) {
        memcpy(slot + WEFT_SHM_SLOT_HDR, data, len);
    }
    weft__shm_store((uint64_t *)slot, idx + 1);
}

static void post_slot(weft_coll_t *c)
{
    size_t len = c->sh.small ? small_payload(c) : 0;
    const void *src = c->a.kind == WEFT_COLL_BROADCAST ? c->a.recvbuf : c->a.sendbuf;
    if (c->a.kind == WEFT_COLL_ALLGATHER && c->a.sendbuf == c->a.recvbuf) {
        src = (const uint8_t *)c->a.recvbuf + (size_t)c->rank * len;
    }
    slot_write(c->shm, c->sh.idx, &c->hdr, src, len);
}

static bool posted(const weft_shm_t *s, int q, uint64_t idx)
{
    return weft__shm_load((const uint64_t *)weft__shm_slot(s, q, idx)) == idx + 1;
}

static weft_coll_hdr_t slot_hdr(const weft_shm_t *s, int q, uint64_t idx)
{
    weft_coll_hdr_t h;
    memcpy(&h, weft__shm_slot(s, q, idx) + 8, sizeof(h));
    return h;
}

static void note_late(weft_shm_t *s, uint32_t seq, const char *why)
{
    if (!s->late) {
        snprintf(s->late_why, sizeof(s->late_why),
                 "an earlier broadcast on this group (#%u) disagreed: %s", seq, why);
        s->late = true;
    }
}

/*
 * Compare the peers' headers of the small broadcasts this rank was the root of with its
 * own, as far as the peers have posted them, and publish how far this rank got with the
 * collectives it finished without waiting for every header (slot_done). A reader compared
 * its header with its root's in the call, and a refusal needs nothing. That is enough for
 * someone to see every disagreement: a reader that agrees with its root names the same
 * root, so if no reader disagrees with its root, every rank named as one believes it is
 * the root, and two of them would see each other. The first disagreement is kept: the
 * next collective that waits for every header reports it on every rank.
 */
static void verify(weft_shm_t *s)
{
    uint64_t j = s->verified;
    WEFT_ASSERT(s->verified <= s->turn && s->turn <= s->issued);
    for (; j < s->turn; j++) {
        weft_coll_hdr_t m = slot_hdr(s, s->rank, j);
        if ((m.flags & WEFT_COLL_HDR_INVALID) || m.root != s->rank) {
            continue;
        }
        for (int q = 0; q < s->size; q++) {
            if (q != s->rank && !posted(s, q, j)) {
                goto out;
            }
        }
        for (int q = 0; q < s->size && !s->late; q++) {
            if (q == s->rank) {
                continue;
            }
            weft_coll_hdr_t h = slot_hdr(s, q, j);
            char why[160];
            if (!weft__coll_hdr_same(&m, q, &h, why, sizeof(why))) {
                note_late(s, m.seq, why);
            }
        }
    }
out:
    if (j != s->verified) {
        s->verified = j;
        weft__shm_store(weft__shm_ctr(s, s->rank, WEFT_SHM_SLOT_DONE), j);
    }
}

/* Whether this rank may write its slot of collective @p idx: what the slot held before
 * (collective idx - depth) has been read by every peer and checked by this rank. */
static bool slot_free(weft_shm_t *s, uint64_t idx)
{
    if (idx < s->depth) {
        return true;
    }
    uint64_t need = idx - s->depth + 1;
    if (s->verified < need) {
        verify(s);
        if (s->verified < need) {
            return false;
        }
    }
    /* The counters only grow: read them again only when the last reading is not enough
     * (once in depth/2 collectives or so, not every time). */
    if (s->peers_done < need) {
        uint64_t least = UINT64_MAX;
        for (int q = 0; q < s->size; q++) {
            uint64_t v = q == s->rank ? UINT64_MAX
                                      : weft__shm_load(weft__shm_ctr(s, q, WEFT_SHM_SLOT_DONE));
            least = v < least ? v : least;
        }
        s->peers_done = least;
    }
    return s->peers_done >= need;
}

static void check_headers(weft_coll_t *c)
{
    for (int q = 0; q < c->size; q++) {
        if (q == c->rank) {
            continue;
        }
        weft_coll_hdr_t h = slot_hdr(c->shm, q, c->sh.idx);
        if (h.flags & WEFT_COLL_HDR_LATE) {
            weft__coll_set_mismatch(c, "rank %d found that an earlier broadcast on this group "
                                    "disagreed", q);
            return;
        }
        if (!weft__coll_hdr_agrees(c, q, &h, false)) {
            return; /* numbering is the segment's: sequence numbers are not compared */
        }
    }
}

/* The root checks its readers' headers only when it needs its slots again. */
static weft_status_t eager_done(weft_coll_t *c)
{
    c->sh.stage = SH_DONE;
    release_turn(c);
    if (c->rank != c->a.root) {
        verify(c->shm);
    }
    return WEFT_OK;
}

/* A non-root of a small broadcast: the root's slot, checked against this rank's header. */
static weft_status_t eager_recv(weft_coll_t *c)
{
    weft_shm_t *s = c->shm;
    int root = c->a.root;
    if (!posted(s, root, c->sh.idx)) {
        return WEFT_INPROGRESS;
    }
    weft_coll_hdr_t h = slot_hdr(s, root, c->sh.idx);
    if (weft__coll_hdr_agrees(c, root, &h, false)) {
        small_finish(c);
    }
    if (c->mismatch && !(h.flags & WEFT_COLL_HDR_INVALID)) {
        /* The root may not know: tell everyone. (A root that refused knows, and every
         * reader sees its refusal.) */
        note_late(s, c->hdr.seq, c->why);
    }
    return eager_done(c);
}

/* A queued refusal's turn: post its header as weft__shm_refuse does, and hand on. */
static weft_status_t refusal_post(weft_coll_t *c)
{
    slot_write(c->shm, c->sh.idx, &c->hdr, NULL, 0);
    c->sh.stage = SH_DONE;
    release_turn(c);
    verify(c->shm);
    return WEFT_OK;
}

weft_status_t weft__shm_exchange(weft_coll_t *c)
{
    weft_shm_t *s = c->shm;
    switch (c->sh.stage) {
    case SH_TURN:
        if (s->broken) {
            c->sh.finished = true; /* nothing to hand on: the segment is unusable */
            return weft__error(c->ctx, WEFT_ERR_REVOKED,
                               "%s: an earlier collective on group %u was abandoned half "
                               "way (timed out, or its request freed in flight); repair or "
                               "recreate the group",
                               c->a.name, c->g->id);
        }
        if (s->turn != c->sh.idx) {
            return WEFT_INPROGRESS; /* an earlier collective of this group runs first */
        }
        c->sh.stage = SH_SLOT;
        /* fall through */
    case SH_SLOT:
        if (!slot_free(s, c->sh.idx)) {
            return WEFT_INPROGRESS;
        }
        if (c->detached) {
            return refusal_post(c);
        }
        if (c->sh.eager) {
            post_slot(c);
            if (c->rank == c->a.root) {
                return eager_done(c);
            }
            c->sh.stage = SH_ROOT;
            return eager_recv(c);
        }
        /* Every earlier header checked first, so that what this one says is final. */
        if (s->verified < c->sh.idx) {
            verify(s);
            if (s->verified < c->sh.idx) {
                return WEFT_INPROGRESS;
            }
        }
        if (s->late) {
            s->late = false;
            c->hdr.flags |= WEFT_COLL_HDR_LATE;
            weft__coll_set_mismatch(c, "%s", s->late_why);
        }
        post_slot(c);
        c->sh.stage = SH_HDRS;
        c->sh.peer = 0;
        /* fall through */
    case SH_HDRS:
        for (; c->sh.peer < c->size; c->sh.peer++) {
            if (c->sh.peer != c->rank && weft__shm_load((uint64_t *)weft__shm_slot(
                                             s, c->sh.peer, c->sh.idx)) != c->sh.idx + 1) {
                return WEFT_INPROGRESS;
            }
        }
        check_headers(c);
        if (!c->mismatch && c->sh.small) {
            small_finish(c);
        }
        s->verified = c->sh.idx + 1;
        weft__shm_store(weft__shm_ctr(s, c->rank, WEFT_SHM_SLOT_DONE), s->verified);
        c->sh.stage = SH_DONE;
        if (c->mismatch || c->data != shm_data) {
            release_turn(c);
        } else {
            c->sh.gbase = s->chunk_next; /* the same on every rank: they agree on count */
            s->chunk_next += c->sh.nchunks;
        }
        return WEFT_OK;
    case SH_ROOT:
        return eager_recv(c);
    default:
        return WEFT_OK;
    }
}

/* ---- large collectives: chunks ---- */

/* Elements of chunk j, and where it starts (in elements of one block). */
static size_t chunk_len(const weft_coll_t *c, size_t j, size_t *base)
{
    *base = j * c->sh.per_chunk;
    size_t left = c->a.count - *base;
    return left < c->sh.per_chunk ? left : c->sh.per_chunk;
}

/* Copy to the user's output: streaming for outputs far larger than the caches. */
static void out_copy(const weft_coll_t *c, void *dst, const void *src, size_t n)
{
    if (c->sh.stream) {
        weft__copy_stream(dst, src, n);
    } else {
        memcpy(dst, src, n);
    }
}

/* Allreduce / reduce: sub-block q of a chunk of len elements. */
static size_t sub_off(const weft_coll_t *c, size_t len, int q)
{
    return weft__coll_blk_off(len, c->size, q);
}
static size_t sub_len(const weft_coll_t *c, size_t len, int q)
{
    return weft__coll_blk_len(len, c->size, q);
}

static const uint8_t *own_input(const weft_coll_t *c)
{
    if (c->a.kind == WEFT_COLL_ALLGATHER && c->a.sendbuf == c->a.recvbuf) {
        return (const uint8_t *)c->a.recvbuf + (size_t)c->rank * c->a.count * c->elem;
    }
    return c->a.kind == WEFT_COLL_BROADCAST ? c->a.recvbuf : c->a.sendbuf;
}

static void do_stage(weft_coll_t *c, size_t j, uint64_t g)
{
    weft_shm_t *s = c->shm;
    size_t base, len = chunk_len(c, j, &base), e = c->elem;
    uint8_t *st = weft__shm_stage(s, c->rank, g);
    const uint8_t *in = own_input(c);
    switch (c->a.kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE: {
        /* Everything but my own sub-block, which I combine straight from my input. */
        size_t lo = sub_off(c, len, c->rank), hi = lo + sub_len(c, len, c->rank);
        memcpy(st, in + base * e, lo * e);
        memcpy(st + hi * e, in + (base + hi) * e, (len - hi) * e);
        break;
    }
    case WEFT_COLL_REDUCE_SCATTER:
    case WEFT_COLL_ALLTOALL: /* block q's part of the chunk, for rank q */
        for (int q = 0; q < c->size; q++) {
            if (q != c->rank) {
                memcpy(st + (size_t)q * len * e, in + ((size_t)q * c->a.count + base) * e, len * e);
            }
        }
        break;
    case WEFT_COLL_ALLGATHER:
        memcpy(st, in + base * e, len * e);
        break;
    case WEFT_COLL_BROADCAST:
        if (c->rank == c->a.root) {
            memcpy(st, in + base * e, len * e);
        }
        break;
    default:
        break;
    }
}

static void do_reduce(weft_coll_t *c, size_t j, uint64_t g)
{
    weft_shm_t *s = c->shm;
    const uint8_t *src[WEFT_SHM_MAX_RANKS];
    size_t base, len = chunk_len(c, j, &base), e = c->elem;
    const uint8_t *in = c->a.sendbuf;
    if (c->a.kind == WEFT_COLL_REDUCE_SCATTER) {
        for (int q = 0; q < c->size; q++) {
            src[q] = q == c->rank ? in + ((size_t)q * c->a.count + base) * e
                                  : weft__shm_stage(s, q, g) + (size_t)c->rank * len * e;
        }
        uint8_t *out = (uint8_t *)c->a.recvbuf + base * e;
        if (c->size > 2 && out != src[0]) {
            memcpy(out, src[0], len * e); /* reduce_ordered's out may alias src[0] only */
            src[0] = out;
        }
        reduce_ordered(c, out, src, len);
        return;
    }
    size_t off = sub_off(c, len, c->rank), n = sub_len(c, len, c->rank);
    for (int q = 0; q < c->size; q++) {
        src[q] = q == c->rank ? in + (base + off) * e : weft__shm_stage(s, q, g) + off * e;
    }
    uint8_t *res = weft__shm_res(s, c->rank, g);
    reduce_ordered(c, res, src, n);
    if (c->a.kind == WEFT_COLL_ALLREDUCE || c->rank == c->a.root) {
        out_copy(c, (uint8_t *)c->a.recvbuf + (base + off) * e, res, n * e);
    }
}

static bool needs_copy(const weft_coll_t *c)
{
    switch (c->a.kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_ALLTOALL:
        return true;
    case WEFT_COLL_REDUCE:
        return c->rank == c->a.root;
    case WEFT_COLL_BROADCAST:
        return c->rank != c->a.root;
    default:
        return false;
    }
}

static void do_copy(weft_coll_t *c, size_t j, uint64_t g)
{
    weft_shm_t *s = c->shm;
    size_t base, len = chunk_len(c, j, &base), e = c->elem;
    uint8_t *out = c->a.recvbuf;
    switch (c->a.kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE:
        for (int q = 0; q < c->size; q++) {
            if (q != c->rank) {
                out_copy(c, out + (base + sub_off(c, len, q)) * e, weft__shm_res(s, q, g),
                         sub_len(c, len, q) * e);
            }
        }
        break;
    case WEFT_COLL_ALLGATHER: {
        size_t blk = c->a.count * e;
        for (int q = 0; q < c->size; q++) {
            uint8_t *dst = out + (size_t)q * blk + base * e;
            if (q != c->rank) {
                out_copy(c, dst, weft__shm_stage(s, q, g), len * e);
            } else if (c->a.sendbuf != c->a.recvbuf) {
                out_copy(c, dst, (const uint8_t *)c->a.sendbuf + base * e, len * e);
            }
        }
        break;
    }
    case WEFT_COLL_BROADCAST:
        out_copy(c, out + base * e, weft__shm_stage(s, c->a.root, g), len * e);
        break;
    case WEFT_COLL_ALLTOALL: {
        size_t blk = c->a.count * e;
        const uint8_t *in = c->a.sendbuf;
        for (int q = 0; q < c->size; q++) {
            const uint8_t *from = q == c->rank
                                      ? in + (size_t)q * blk + base * e
                                      : weft__shm_stage(s, q, g) + (size_t)c->rank * len * e;
            out_copy(c, out + (size_t)q * blk + base * e, from, len * e);
        }
        break;
    }
    default:
        break;
    }
}

/* The data phase of large collectives: WEFT_INPROGRESS until every chunk is through. */
static weft_status_t shm_data(weft_coll_t *c)
{
    weft_shm_t *s = c->shm;
    uint64_t *staged = weft__shm_ctr(s, c->rank, WEFT_SHM_STAGED);
    uint64_t *reduced = weft__shm_ctr(s, c->rank, WEFT_SHM_REDUCED);
    uint64_t *copied = weft__shm_ctr(s, c->rank, WEFT_SHM_COPIED);
    bool red = is_red(c), copy = needs_copy(c);
    while (c->sh.j < c->sh.nchunks) {
        size_t j = c->sh.j;
        uint64_t g = c->sh.gbase + j;
        switch (c->sh.step) {
        case CH_STAGE:
            WEFT_ASSERT(weft__shm_load(copied) == g && weft__shm_load(staged) == g);
            /* My buffers of chunk g - NB must have been read by everyone. */
            if (g >= WEFT_SHM_NB && !peers_reached(s, WEFT_SHM_COPIED, g + 1 - WEFT_SHM_NB)) {
                return WEFT_INPROGRESS;
            }
            do_stage(c, j, g);
            weft__shm_store(staged, g + 1);
            if (!red) {
                weft__shm_store(reduced, g + 1);
            }
            c->sh.step = red ? CH_REDUCE : CH_COPY;
            break;
        case CH_REDUCE:
            if (!peers_reached(s, WEFT_SHM_STAGED, g + 1)) {
                return WEFT_INPROGRESS;
            }
            WEFT_ASSERT(weft__shm_load(staged) == g + 1 && weft__shm_load(reduced) == g);
            do_reduce(c, j, g);
            weft__shm_store(reduced, g + 1);
            c->sh.step = CH_COPY;
            break;
        default: /* CH_COPY */
            WEFT_ASSERT(weft__shm_load(reduced) == g + 1 && weft__shm_load(copied) == g);
            if (copy) {
                if (!peers_reached(s, WEFT_SHM_REDUCED, g + 1)) {
                    return WEFT_INPROGRESS;
                }
                do_copy(c, j, g);
            }
            weft__shm_store(copied, g + 1);
            c->sh.step = CH_STAGE;
            c->sh.j++;
            c->ctx->shm_moves++; /* news for the wait loops: they keep spinning */
            break;
        }
    }
    if (c->sh.stream) {
        weft__copy_fence();
    }
    release_turn(c);
    return WEFT_OK;
}

/* Bytes of this rank's output. */
static size_t out_bytes(const weft_coll_t *c)
{
    size_t bytes = c->a.count * c->elem;
    bool all = c->a.kind == WEFT_COLL_ALLGATHER || c->a.kind == WEFT_COLL_ALLTOALL;
    return all ? bytes * (size_t)c->size : bytes; /* allgather's input is one block */
}

/* Elements (of every block, for the block kinds) that one chunk holds; 0 if not one. */
static size_t chunk_elems(const weft_coll_t *c, const weft_shm_t *s)
{
    return s->chunk / (by_blocks(c) ? c->elem * (size_t)c->size : c->elem);
}

static weft_status_t setup_chunks(weft_coll_t *c, const weft_shm_t *s)
{
    c->sh.per_chunk = chunk_elems(c, s);
    c->sh.nchunks = (c->a.count + c->sh.per_chunk - 1) / c->sh.per_chunk;
    /* An allreduce or reduce in place reads every output line in the same chunk step
     * before it writes it (its own part in the reduce, the others in the stage): the
     * lines are in the cache already, and non-temporal stores would only evict them. */
    bool in_place_red = is_red(c) && c->a.kind != WEFT_COLL_REDUCE_SCATTER &&
                        c->a.sendbuf == c->a.recvbuf;
    c->sh.stream = out_bytes(c) >= c->ctx->cfg.shm_stream_min && !in_place_red;
    c->data = shm_data;
    return WEFT_OK;
}

/* Headers through the segment, data with messages (the algorithm that groups without a
 * segment use; weft__coll_is_small() says no while c->shm is set, since the header step
 * carries no payload). */
static weft_status_t setup_msgs_data(weft_coll_t *c, weft_shm_t *s)
{
    c->shm = s;
    c->sh.no_tl = false;
    weft_status_t st = weft__coll_setup_msgs(c);
    c->shm = NULL;
    return st;
}

weft_status_t weft__coll_setup_shm(weft_coll_t *c)
{
    weft_shm_t *s = c->g->shm;
    weft_status_t st = WEFT_OK;
    size_t bytes = c->a.count * c->elem;
    size_t small = by_blocks(c) ? bytes * (size_t)c->size : bytes;
    c->sh.no_tl = true;
    if (c->a.kind == WEFT_COLL_ALLTOALLV) {
        st = setup_msgs_data(c, s); /* blocks of any size */
    } else if (c->a.kind != WEFT_COLL_BARRIER && small <= s->small_max) {
        c->sh.small = true;
        c->sh.eager = c->a.kind == WEFT_COLL_BROADCAST && c->ctx->cfg.shm_bcast_eager;
    } else if (c->a.kind != WEFT_COLL_BARRIER) {
        /* The data segment, or the same answer on every rank that it cannot be had. */
        st = weft__shm_data(c->g);
        if (st == WEFT_OK) {
            st = s->data_state == 1 && chunk_elems(c, s) > 0 ? setup_chunks(c, s)
                                                             : setup_msgs_data(c, s);
        }
    }
    if (st == WEFT_OK) {
        /* Numbered only once it will run: a number left unused would stall the next. */
        c->shm = s;
        c->sh.idx = s->issued++;
        c->sh.epoch = c->g->epoch;
    }
    return st;
}

bool weft__shm_refuse(weft_group_t *g, const weft_coll_hdr_t *h)
{
    weft_shm_t *s = g->shm;
    if (s == NULL || s->epoch != g->epoch || weft__group_status(g) != WEFT_OK || s->broken) {
        return true; /* over messages, the segment is not this epoch's yet, or unusable */
    }
    uint64_t idx = s->issued;
    if (s->turn != idx) {
        return false; /* an earlier collective is outstanding: queue this one behind it */
    }
    /* My slot must be free; the peers are finishing what it held. */
    uint64_t start = weft__now_ns(), timeout = weft__ms_to_ns(g->ctx->cfg.timeout_ms);
    uint64_t idle = 0;
    while (!slot_free(s, idx)) {
        if (weft__group_status(g) != WEFT_OK ||
            weft__now_ns() - start > weft__wait_limit(g->ctx, start, timeout)) {
            return true;
        }
        weft__progress(g->ctx);
        weft__idle(g->ctx, &idle);
    }
    slot_write(s, idx, h, NULL, 0);
    s->issued++;
    s->turn++;
    verify(s); /* nothing of the others' slots is needed for this one */
    g->coll_seq++; /* weft_group_coll_count() counts started collectives only */
    return true;
}

void weft__shm_queue_refusal(weft_coll_t *c)
{
    weft_shm_t *s = c->g->shm;
    WEFT_ASSERT(s != NULL && s->turn <= s->issued);
    c->shm = s;
    c->sh.idx = s->issued++;
    c->sh.epoch = c->g->epoch;
}

void weft__shm_abandon(weft_coll_t *c)
{
    /* Only the segment this collective ran on: after an edit, g->shm is a new one. */
    if (c->shm != NULL && c->shm == c->g->shm && c->g->epoch == c->sh.epoch &&
        c->g->shm_epoch == c->sh.epoch + 1 && !c->sh.finished) {
        c->shm->broken = true;
    }
}
