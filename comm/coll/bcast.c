/*
 * Broadcast.
 *
 * Small: recursive doubling where a rank that already holds the data appends it to its
 * exchange messages, so after log2(P) steps (+ the fold) everyone has it. The pattern
 * does not depend on the root, so ranks that disagree on the root still exchange the same
 * messages and all learn of the mismatch instead of waiting for data that never comes.
 *
 * Large: the exchange phase checks agreement, then a pipelined chain root -> root+1 ->
 * ... -> root-1: every rank receives each chunk straight into its buffer and forwards it
 * while the next chunks arrive, so the time is about one transfer of the whole buffer
 * plus (P-2) chunks.
 *
 * Over hosts the chain visits the root's host first, then the other hosts in their
 * leaders' order, each host's ranks one after the other from its entry (the root, and
 * each other host's lowest rank), so it crosses each host boundary once whatever the root.
 * Up to WEFT_COLL_HIER_MAX bytes it is a tree instead: the entries are linked across
 * hosts, and each entry sends every chunk first to the next host's entry and then to its
 * own host's chain, so a chunk reaches the last rank after H - 1 network hops and at most
 * L - 1 local ones (H hosts of at most L ranks) instead of P - 1 hops. Above that the
 * chain, where every rank sends each chunk once, moves large buffers faster.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"

static size_t bc_bytes(const weft_coll_t *c)
{
    return c->a.count * c->elem;
}

static size_t bc_pack(weft_coll_t *c, enum weft_rd_stage stage, int peer, uint8_t *dst)
{
    (void)stage;
    (void)peer;
    (void)dst; /* the data, once held, lives in the payload area */
    return c->holds ? bc_bytes(c) : 0;
}

static size_t bc_expect(weft_coll_t *c, enum weft_rd_stage stage, int peer)
{
    (void)stage;
    (void)peer;
    return bc_bytes(c);
}

static bool bc_unpack(weft_coll_t *c, enum weft_rd_stage stage, int peer, const uint8_t *src,
                      size_t len)
{
    (void)stage;
    (void)peer;
    if (len == 0) {
        return true; /* the peer did not have it yet */
    }
    if (len != bc_bytes(c)) {
        return false;
    }
    if (!c->holds) {
        memcpy(c->rd.sbuf + WEFT_COLL_HDR_SIZE, src, len);
        c->holds = true;
    }
    return true;
}

static void bc_finish(weft_coll_t *c)
{
    /* Without a mismatch every rank has received the data by now (count 0: nothing). */
    if (c->rank != c->a.root && c->holds && bc_bytes(c) > 0) {
        memcpy(c->a.recvbuf, c->rd.sbuf + WEFT_COLL_HDR_SIZE, bc_bytes(c));
    }
}

static const weft_rd_ops_t bc_small_ops = {
    .pack = bc_pack,
    .expect = bc_expect,
    .unpack = bc_unpack,
    .finish = bc_finish,
};

/* ---- large: pipelined chain ---- */

#define CHAIN_WIN 8
#define CHAIN_OUT 2 /* children of a rank: the next host's entry, then the next local rank */

typedef struct chain {
    int prev;            /* -1 at the root */
    int next[CHAIN_OUT]; /* nnext of them, in the order each chunk is sent */
    int nnext;
    size_t nchunks, chunk;
    size_t next_recv, next_done, next_send, floor;
    weft_req_t *rreq[CHAIN_WIN], *sreq[CHAIN_OUT][CHAIN_WIN];
} chain_t;

static void chain_fini(weft_coll_t *c)
{
    chain_t *ch = c->alg;
    if (ch != NULL) {
        for (int i = 0; i < CHAIN_WIN; i++) {
            weft__coll_child_drop(&ch->rreq[i]);
            for (int k = 0; k < CHAIN_OUT; k++) {
                weft__coll_child_drop(&ch->sreq[k][i]);
            }
        }
        free(ch);
        c->alg = NULL;
    }
}

/* The rank after (@p dir 1) or before (-1) @p r, cyclically, on host @p h; with h < 0 the
 * next or previous host leader (host[q] == q). @p r itself when there is none. */
static int neighbour(const int *host, int size, int r, int dir, int h)
{
    for (int i = 1; i < size; i++) {
        int q = ((r + dir * i) % size + size) % size;
        if (host[q] == (h >= 0 ? h : q)) {
            return q;
        }
    }
    return r;
}

/*
 * The links over hosts (see the top); @p host[r] is the lowest rank of r's host. In a
 * @p tree a host's entry forwards to the next host's entry and to its own host's chain;
 * else the last rank of each host's chain forwards to the next host's entry.
 */
static void chain_over_hosts(const weft_coll_t *c, chain_t *ch, const int *host, bool tree)
{
    int me = c->rank, root = c->a.root, size = c->size;
    int h = host[me], rh = host[root];
    int entry = h == rh ? root : h;
    int next_host = neighbour(host, size, h, 1, -1); /* hosts in their leaders' order */
    int prev_host = neighbour(host, size, h, -1, -1);
    int local_next = neighbour(host, size, me, 1, h);
    bool last = local_next == me || local_next == entry;
    ch->nnext = 0;
    if (next_host != h && next_host != rh && (tree ? me == entry : last)) {
        ch->next[ch->nnext++] = next_host; /* the next host's entry is its leader */
    }
    if (!last) {
        ch->next[ch->nnext++] = local_next;
    }
    if (me != entry) {
        ch->prev = neighbour(host, size, me, -1, h);
    } else if (h == rh) {
        ch->prev = -1;
    } else {
        int prev_entry = prev_host == rh ? root : prev_host;
        ch->prev = tree ? prev_entry : neighbour(host, size, prev_entry, -1, prev_host);
    }
}

/* The chain in rank order, or the links over hosts where every rank's host is known. */
static void chain_links(const weft_coll_t *c, chain_t *ch)
{
    int nhosts;
    const int *host = weft__group_host_table(c->g, &nhosts);
    bool known = host != NULL && nhosts > 1;
    for (int r = 0; known && r < c->size; r++) {
        known = host[r] >= 0;
    }
    if (known) {
        chain_over_hosts(c, ch, host, bc_bytes(c) <= c->ctx->cfg.coll_hier_max);
        return;
    }
    int pos = (c->rank - c->a.root + c->size) % c->size;
    ch->prev = pos == 0 ? -1 : (c->rank - 1 + c->size) % c->size;
    ch->nnext = pos == c->size - 1 ? 0 : 1;
    ch->next[0] = (c->rank + 1) % c->size;
}

static size_t chunk_len(const weft_coll_t *c, const chain_t *ch, size_t i)
{
    size_t off = i * ch->chunk, total = bc_bytes(c);
    return total - off < ch->chunk ? total - off : ch->chunk;
}

/* Whether every send of chunk @p i has completed. */
static bool sends_done(const chain_t *ch, size_t i)
{
    for (int k = 0; k < ch->nnext; k++) {
        if (ch->sreq[k][i % CHAIN_WIN] != NULL) {
            return false;
        }
    }
    return true;
}

static weft_status_t chain_step(weft_coll_t *c, chain_t *ch, bool *moved)
{
    uint8_t *buf = c->a.recvbuf;
    uint32_t tag = weft__tag_coll_payload(c->seq, WEFT_COLL_STEP_CHAIN);
    weft_status_t st;
    /* Receives complete in order; each one releases the send of the same chunk. */
    while (ch->next_done < ch->next_recv) {
        st = weft__coll_child_test(&ch->rreq[ch->next_done % CHAIN_WIN], NULL);
        if (st == WEFT_INPROGRESS) {
            break;
        }
        if (st != WEFT_OK) {
            return st;
        }
        ch->next_done++;
        *moved = true;
    }
    size_t have = ch->prev < 0 ? ch->nchunks : ch->next_done;
    while (ch->nnext > 0 && ch->next_send < have && ch->next_send < ch->floor + CHAIN_WIN) {
        size_t i = ch->next_send;
        for (int k = 0; k < ch->nnext; k++) {
            st = weft__isend(c->g, ch->next[k], buf + i * ch->chunk, chunk_len(c, ch, i),
                             WEFT_TAG_COLL, tag, &ch->sreq[k][i % CHAIN_WIN]);
            if (st < 0) {
                return st;
            }
        }
        ch->next_send++;
        *moved = true;
    }
    for (size_t i = ch->floor; i < ch->next_send; i++) {
        for (int k = 0; k < ch->nnext; k++) {
            st = weft__coll_child_test(&ch->sreq[k][i % CHAIN_WIN], NULL);
            if (st < 0) {
                return st;
            }
        }
    }
    while (ch->floor < ch->next_send && sends_done(ch, ch->floor)) {
        ch->floor++;
        *moved = true;
    }
    while (ch->prev != -1 && ch->next_recv < ch->nchunks &&
           ch->next_recv < ch->next_done + CHAIN_WIN &&
           (ch->nnext == 0 || ch->next_recv < ch->floor + CHAIN_WIN)) {
        size_t i = ch->next_recv;
        st = weft__irecv(c->g, ch->prev, buf + i * ch->chunk, chunk_len(c, ch, i), WEFT_TAG_COLL,
                         tag, &ch->rreq[i % CHAIN_WIN]);
        if (st < 0) {
            return st;
        }
        ch->next_recv++;
        *moved = true;
    }
    return WEFT_OK;
}

static weft_status_t chain_data(weft_coll_t *c)
{
    chain_t *ch = c->alg;
    bool moved = true;
    while (moved) {
        moved = false;
        weft_status_t st = chain_step(c, ch, &moved);
        if (st != WEFT_OK) {
            return st;
        }
    }
    bool recv_done = ch->prev == -1 || ch->next_done == ch->nchunks;
    bool send_done = ch->nnext == 0 || ch->floor == ch->nchunks;
    return recv_done && send_done ? WEFT_OK : WEFT_INPROGRESS;
}

weft_status_t weft__coll_setup_broadcast(weft_coll_t *c)
{
    size_t bytes = bc_bytes(c);
    if (weft__coll_is_small(c, bytes)) {
        weft_status_t st = weft__rd_init(c, &bc_small_ops, bytes);
        if (st == WEFT_OK && c->rank == c->a.root) {
            if (bytes > 0) {
                memcpy(c->rd.sbuf + WEFT_COLL_HDR_SIZE, c->a.recvbuf, bytes);
            }
            c->holds = true;
        }
        return st;
    }
    chain_t *ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "broadcast: no memory");
    }
    chain_links(c, ch);
    /* A receive and a send per chunk; over hosts the network's chunk, as the rings'. */
    ch->chunk =
        weft__coll_over_hosts(c) ? c->ctx->cfg.coll_net_chunk : weft__coll_chunk_bytes(c, bytes, 2);
    if (ch->chunk == 0) {
        ch->chunk = bytes;
    }
    ch->nchunks = (bytes + ch->chunk - 1) / ch->chunk;
    c->alg = ch;
    c->fini = chain_fini;
    c->data = chain_data;
    return weft__rd_init(c, NULL, 0);
}

weft_status_t weft_ibroadcast(weft_group_t *g, void *buf, size_t count, weft_dtype_t dtype,
                              int root, weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_BROADCAST, "broadcast", buf, buf, count, dtype, -1, root);
    return weft__coll_start(g, &a, req);
}

weft_status_t weft_broadcast(weft_group_t *g, void *buf, size_t count, weft_dtype_t dtype, int root)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_BROADCAST, "broadcast", buf, buf, count, dtype, -1, root);
    return weft__coll_run(g, &a);
}
