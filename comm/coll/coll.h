/*
 * Collective algorithms (internal). A collective is a state machine advanced by a
 * step function that never blocks: the progress() of a compound request for the
 * nonblocking calls, or a wait loop over an object on the stack for the blocking twins
 * (no allocation on their latency path). Every collective runs in two phases:
 *
 * 1. The exchange phase: recursive doubling over the group (non-power-of-two sizes fold
 *    the ranks above the largest power of two onto partners first and hand them the
 *    result last). Every message of this phase starts with a 32-byte header carrying
 *    (kind, seq, count, dtype, op, root, elem_size, mismatch flag). Latency-bound
 *    collectives carry their data in the same messages (allreduce, reduce, reduce_scatter,
 *    allgather and broadcast whose message, header included, fits WEFT_COLL_SMALL_MAX),
 *    so they finish inside this phase; the others exchange headers only.
 * 2. The data phase of bandwidth-bound algorithms: pipelined ring, chain or pairwise
 *    exchanges, started only once the exchange phase has shown that all ranks agree.
 *
 * Mismatch detection. A receiver compares the header it got with its own parameters and
 * sets its flag on any difference; a message that is longer than expected (the transport
 * reports truncation) or shorter also sets it. The flag travels in every later header.
 * Recursive doubling gives every rank, after log2(P) steps, the OR over all ranks: by
 * induction, after step k every rank of an aligned block of 2^(k+1) ranks holds "not all
 * parameters in the block are equal" (either half already disagreed, or the two halves
 * differ and each partner pair compares them directly); the fold adds the extra ranks'
 * headers first and returns the final flag to them last. All collectives share this
 * message pattern (same peers, same tag steps) whatever their kind or size, so ranks that
 * disagree still exchange the same number of messages and none can hang: they all return
 * WEFT_ERR_MISMATCH, and outputs are left untouched. Small collectives pay nothing extra;
 * large ones pay log2(P) header-only rounds before moving data.
 *
 * weft_alltoallv() compares counts pairwise in its data phase: only the two ranks of a
 * disagreeing pair get WEFT_ERR_MISMATCH.
 *
 * Tags: the transport tag carries (group, epoch, seq mod 2^18, step); the step says which
 * message of the collective it is. Data phases send many messages under one step and rely
 * on the transport matching equal tags from one sender in send order.
 */
#ifndef WEFT_COLL_INTERNAL_H
#define WEFT_COLL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/coll/reduce.h"
#include "comm/coll/start.h"
#include "comm/core_impl.h"

/* Tag steps of the messages of one collective. */
#define WEFT_COLL_STEP_FOLD_IN 1
#define WEFT_COLL_STEP_RD(k) (2 + (k)) /* k < 16: groups of up to 2^16 ranks */
#define WEFT_COLL_STEP_FOLD_OUT 18
#define WEFT_COLL_STEP_RING 32
#define WEFT_COLL_STEP_GATHER 33
#define WEFT_COLL_STEP_CHAIN 34
#define WEFT_COLL_STEP_PAIRS 35
#define WEFT_COLL_STEP_COUNTS 36
#define WEFT_COLL_STEP_HIER_UP 37   /* hierarchical allreduce: to the host's leader */
#define WEFT_COLL_STEP_HIER_DOWN 38 /* and back from it */
/* Sliced allreduce over hosts (hier_sliced.c): stage s (0..2) of a segment, segments in
 * flight told apart by their number mod WEFT_SLICED_DEPTH. */
#define WEFT_SLICED_DEPTH 4
#define WEFT_COLL_STEP_SLICED(stage, seg) (40 + (stage)*WEFT_SLICED_DEPTH + (seg))
/* Allgather over hosts (allgather_hosts.c): its blocks across hosts, then within them. */
#define WEFT_COLL_STEP_AG_HOSTS 52
#define WEFT_COLL_STEP_AG_LOCAL 53

/* The header of every exchange-phase message (32 bytes, keeps payloads aligned). */
typedef struct weft_coll_hdr {
    uint64_t count;
    uint64_t elem_size;
    uint32_t seq;
    int32_t op;   /* -1 where there is no operator */
    int32_t root; /* -1 where there is no root */
    uint16_t kind;
    uint8_t dtype;
    uint8_t flags; /* WEFT_COLL_HDR_MISMATCH, WEFT_COLL_HDR_INVALID */
} weft_coll_hdr_t;
#define WEFT_COLL_HDR_SIZE 32
#define WEFT_COLL_HDR_MISMATCH 0x1u
#define WEFT_COLL_HDR_INVALID 0x2u /* the sender refused its arguments of this collective */
#define WEFT_COLL_HDR_LATE 0x4u    /* shared memory: an earlier small broadcast disagreed */
#define WEFT_COLL_HDR_REFUSED 0x8u /* a rank refused (relayed, like the mismatch flag) */

typedef struct weft_coll weft_coll_t;

/* Stages of the exchange phase. */
enum weft_rd_stage {
    WEFT_RD_FOLD_IN = 0, /* an extra rank sends to its partner */
    WEFT_RD_STEP = 1,    /* recursive-doubling step k among the first 2^n ranks */
    WEFT_RD_FOLD_OUT = 2 /* a partner hands the result to its extra rank */
};

/*
 * Payload hooks of the exchange phase; NULL hooks mean header-only messages. The payload
 * area of the send buffer (c->rd.sbuf + WEFT_COLL_HDR_SIZE) holds rd.cap bytes and is not
 * touched by the engine, so a hook may keep its running state there.
 */
typedef struct weft_rd_ops {
    /* Bytes of payload to send to @p peer in this stage, written at @p dst. */
    size_t (*pack)(weft_coll_t *c, enum weft_rd_stage stage, int peer, uint8_t *dst);
    /* Largest payload expected from @p peer in this stage. */
    size_t (*expect)(weft_coll_t *c, enum weft_rd_stage stage, int peer);
    /* Take a payload from @p peer; false if its length is not what the parameters imply. */
    bool (*unpack)(weft_coll_t *c, enum weft_rd_stage stage, int peer, const uint8_t *src,
                   size_t len);
    /* Once every rank agreed: write the result to the user's buffers. */
    void (*finish)(weft_coll_t *c);
} weft_rd_ops_t;

typedef struct weft_rd {
    const weft_rd_ops_t *ops;
    int pof2, rem, nsteps; /* largest power of two <= size, size - pof2, log2(pof2) */
    int pos;               /* 0 fold-in, 1..nsteps steps, nsteps+1 fold-out, then done */
    bool posted;
    weft_req_t *sreq, *rreq;
    bool send_busy, recv_busy, recv_failed;
    int recv_peer;
    size_t recv_len;
    uint8_t *sbuf, *rbuf; /* header + cap bytes each */
    size_t cap;
} weft_rd_t;

/* Bytes of the exchange buffers kept inside the collective (two of header + 480). */
#define WEFT_COLL_INLINE 1024

/* Ring sizes: tag-ordered units in flight and temporary chunk slots. */
#define WEFT_RING_WIN 16
#define WEFT_RING_SLOTS 3
/* Chunk of medium rings: the largest message intra-node transports send eagerly. */
#define WEFT_RING_EAGER_CHUNK 8192

/*
 * A pipelined ring over P blocks: reduce-scatter steps (rs_steps = P-1 or 0) then
 * allgather steps (ag_steps = P-1 or 0), both cut in chunks. Units are numbered chunk
 * by chunk (all steps of chunk 0, then chunk 1, ...), the same on every rank, so the
 * send of unit u depends only on the receive of unit u-1 and the ring streams.
 */
typedef struct weft_ring {
    int rank, size, left, right;
    int rs_steps, ag_steps, units; /* units per chunk = rs_steps + ag_steps */
    size_t elem, count;            /* element size; elements over all blocks */
    size_t blk;                    /* block length when uniform, else 0 (split count) */
    size_t nchunks, chunk_elems;
    size_t total;       /* units over all chunks */
    const uint8_t *in;  /* reduce-scatter input: all blocks */
    uint8_t *full;      /* allgather buffer: all blocks; NULL without allgather */
    uint8_t *mine;      /* where my reduced block goes */
    const uint8_t *own; /* allgather only: my block as the user gave it */
    const weft_reducer_t *red;
    uint32_t step; /* tag step of every message: WEFT_COLL_STEP_RING unless set after init */
    bool direct;   /* reduce-scatter chunks are received and combined in place in `full` */
    /* Progress. Units below next_done are received and processed; sends below floor
     * have completed. */
    size_t next_recv, next_done, next_send, floor;
    weft_req_t *rreq[WEFT_RING_WIN], *sreq[WEFT_RING_WIN];
    bool rbusy[WEFT_RING_WIN], sbusy[WEFT_RING_WIN];
    int slot[WEFT_RING_WIN];  /* tmp slot of a received unit, -1 if none */
    int sslot[WEFT_RING_WIN]; /* tmp slot a send reads from, freed when it completes */
    uint8_t *tmp;
    size_t slot_bytes;
    unsigned slot_used; /* bit mask */
} weft_ring_t;

struct weft_coll {
    weft_ctx_t *ctx;
    weft_group_t *g;
    int rank, size;
    weft_coll_args_t a;
    size_t elem; /* bytes per element */
    weft_reducer_t red;
    uint32_t seq;
    uint32_t epoch;      /* the group's epoch when it started */
    weft_coll_hdr_t hdr; /* my parameters */
    bool mismatch;       /* OR of the flags seen so far */
    bool refused;        /* a rank refused its arguments (its header, or one relaying it) */
    enum { WEFT_COLL_PH_RD, WEFT_COLL_PH_DATA, WEFT_COLL_PH_DONE } phase;
    weft_rd_t rd;
    /* Data phase after an agreeing exchange: WEFT_INPROGRESS until done. NULL: none. */
    weft_status_t (*data)(weft_coll_t *c);
    void (*fini)(weft_coll_t *c); /* frees alg; may be NULL */
    void *alg;
    uint8_t *scratch; /* freed with the collective */
    bool holds;       /* broadcast: this rank has the data */
    bool detached;    /* this rank's refusal: nobody waits for it, no error text */
    weft_status_t status;
    /* Shared-memory path (comm/coll/shm.c): the group's segment, NULL over messages. */
    struct weft_shm *shm;
    struct {
        uint64_t idx;     /* this collective's number on the segment */
        uint32_t epoch;   /* the group's epoch when it was numbered */
        int stage;        /* of the header step */
        int peer;         /* next peer slot to look at */
        bool small;       /* the data travels in the slots */
        bool eager;       /* small broadcast: no wait for the peers' headers */
        bool finished;    /* the turn is handed on to the next collective */
        bool stream;      /* write the output with non-temporal stores */
        bool no_tl;       /* needs no transport: waits poll it rarely */
        size_t per_chunk; /* elements (per block) of a chunk */
        size_t nchunks, j;
        int step;       /* within chunk j */
        uint64_t gbase; /* segment-wide number of chunk 0 */
    } sh;
    /* Not cleared at start (only why[0]): what this rank saw, when it detected a mismatch. */
    char why[192];
    /* Exchange buffers of small collectives live here: no allocation on the latency path. */
    _Alignas(64) uint8_t inline_buf[WEFT_COLL_INLINE];
};

/* ---- common.c ---- */
/*
 * The blocking twin: the same collective driven to completion with the context's default
 * timeout, its state on the stack and no compound request (saves the allocations on the
 * latency path). Fails with the group's status when it is revoked or edited meanwhile.
 */
weft_status_t weft__coll_run(weft_group_t *g, const weft_coll_args_t *a);

/* Collectives on CUDA buffers (comm/coll/device.c): whether @p a names device memory, and
 * the start that routes it to NCCL (or refuses with the reason). */
bool weft__coll_is_cuda(const weft_coll_args_t *a);
weft_status_t weft__coll_cuda_start(weft_group_t *g, const weft_coll_args_t *a, weft_req_t **req);
/* Built with CUDA only (comm/coll/staged_cuda.c): whether @p a can be staged through host
 * memory (allreduce, broadcast, allgather, reduce-scatter on built-in dtypes), and the
 * start that does it: the host collective on pinned copies, the result copied back on the
 * group's stream; the request completes when the copy back has finished. */
bool weft__coll_can_stage(const weft_group_t *g, const weft_coll_args_t *a);
weft_status_t weft__coll_staged_start(weft_group_t *g, const weft_coll_args_t *a,
                                      weft_req_t **req);
/*
 * Compare @p peer's header with this rank's parameters (the sequence number too when
 * @p with_seq); on any difference record the mismatch with both sides in the message.
 */
bool weft__coll_hdr_agrees(weft_coll_t *c, int peer, const weft_coll_hdr_t *h, bool with_seq);
/* The comparison itself: whether @p peer's header @p h agrees with @p m (sequence numbers
 * not compared); if not, what differs is written to @p why. A header flagged as refused
 * (WEFT_COLL_HDR_INVALID) never agrees. */
bool weft__coll_hdr_same(const weft_coll_hdr_t *m, int peer, const weft_coll_hdr_t *h, char *why,
                         size_t len);
/* Record that this rank saw a disagreement (first reason kept). */
void weft__coll_set_mismatch(weft_coll_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Scratch memory owned by the collective, 64-byte aligned; NULL on failure (logged). */
uint8_t *weft__coll_alloc(weft_coll_t *c, size_t bytes);
/*
 * Whether @p payload bytes take the latency path (data inside the exchange messages). For
 * two ranks the whole message, header included, must fit in WEFT_COLL_SMALL_MAX: past the
 * transport's eager size a message needs a rendezvous round trip, and a ring of
 * eager-sized chunks is then faster than one big exchange. With more ranks the ring needs
 * 2(P-1) steps against log2(P), so in the alpha-beta model the crossover moves up by
 * (2(P-1) - L) / L, L = log2 of the largest power of two <= P (2x at 4 ranks, 3.7x at 8).
 * Over several hosts the base is WEFT_COLL_NET_SMALL_MAX: each step pays the network's
 * latency, tens of microseconds, so the crossover lies at larger vectors.
 */
/* Whether the group of @p c has ranks on several hosts (the same answer on every rank). */
static inline bool weft__coll_over_hosts(const weft_coll_t *c)
{
    int nhosts = 1;
    return c->size > 1 && weft__group_host_table(c->g, &nhosts) != NULL && nhosts > 1;
}

static inline size_t weft__coll_small_limit(size_t base, int size)
{
    size_t lg = 0;
    while ((2u << lg) <= (unsigned)size) {
        lg++;
    }
    if (lg > 1) {
        size_t ring_steps = 2 * (size_t)(size - 1);
        base = base / lg * (ring_steps - lg);
    }
    return base;
}

static inline bool weft__coll_is_small(const weft_coll_t *c, size_t payload)
{
    if (c->shm != NULL) {
        return false; /* headers go through shared memory, without payload */
    }
    size_t limit = weft__coll_small_limit(weft__coll_over_hosts(c) ? c->ctx->cfg.coll_net_small_max
                                                                   : c->ctx->cfg.coll_small_max,
                                          c->size);
    return payload <= limit && WEFT_COLL_HDR_SIZE + payload <= limit;
}

/* Block b of @p count elements split in @p size near-equal blocks. */
static inline size_t weft__coll_blk_off(size_t count, int size, int b)
{
    size_t q = count / (size_t)size, r = count % (size_t)size;
    return (size_t)b * q + ((size_t)b < r ? (size_t)b : r);
}
static inline size_t weft__coll_blk_len(size_t count, int size, int b)
{
    return count / (size_t)size + ((size_t)b < count % (size_t)size ? 1 : 0);
}

/* Choose the message algorithm of c's kind and size (sets c->data and the exchange). */
weft_status_t weft__coll_setup_msgs(weft_coll_t *c);

/* ---- shm.c: collectives through the group's shared memory ---- */
/* Choose the shared-memory algorithm (g->shm is set); WEFT_OK or an error. */
weft_status_t weft__coll_setup_shm(weft_coll_t *c);
/* The header step (replaces the exchange phase); WEFT_OK when done (c->mismatch final). */
weft_status_t weft__shm_exchange(weft_coll_t *c);
/* Called when a collective is released: if it stopped half way, the segment is broken. */
void weft__shm_abandon(weft_coll_t *c);
/*
 * This rank refused the arguments of a collective (WEFT_ERR_INVALID_ARG): if @p g
 * collects through this epoch's shared memory and is healthy, and no earlier collective
 * of it is outstanding, post @p h (flagged WEFT_COLL_HDR_INVALID) and consume the
 * collective's number, so the other ranks get WEFT_ERR_MISMATCH at once instead of
 * waiting for a timeout, and the group stays in step. False when an earlier collective
 * is outstanding: the refusal must be queued (weft__shm_queue_refusal).
 */
bool weft__shm_refuse(weft_group_t *g, const weft_coll_hdr_t *h);
/* The refusal of @p c (flagged header, detached) numbered on the group's segment behind
 * the outstanding collectives: weft__shm_exchange posts its header in its turn. */
void weft__shm_queue_refusal(weft_coll_t *c);

/* ---- rd.c: the exchange phase ---- */
/* Allocate rd.sbuf/rd.rbuf with @p cap payload bytes each and set the schedule. */
weft_status_t weft__rd_init(weft_coll_t *c, const weft_rd_ops_t *ops, size_t cap);
/* Advance; WEFT_OK when this rank's part is over (c->mismatch then final). */
weft_status_t weft__rd_progress(weft_coll_t *c);
/* A refusal's part of the exchange (c->hdr flagged): every send and receive of every
 * position posted at once, what arrives dropped; the schedule set by weft__rd_init. */
weft_status_t weft__rd_refuse_start(weft_coll_t *c);
weft_status_t weft__rd_refuse_progress(weft_coll_t *c);
void weft__rd_fini(weft_coll_t *c);

/* ---- ring.c ---- */
/*
 * Set up a ring. @p in (reduce-scatter input) and @p full (allgather buffer) are indexed
 * in elements of the block layout: blocks of @p blk elements when blk > 0, else @p count
 * split in near-equal blocks. Returns WEFT_ERR_NO_MEMORY (logged) on failure.
 */
weft_status_t weft__ring_init(weft_coll_t *c, weft_ring_t *ring, bool rs, bool ag, const void *in,
                              void *full, void *mine, const void *own, size_t count, size_t blk);
/* A ring over some ranks of the group only: this rank's place in it (@p rank of @p size)
 * and the group ranks of its neighbours. @p remote: some link crosses hosts, so chunks
 * are WEFT_COLL_NET_CHUNK whatever the size (eager-sized chunks pay off over shared
 * memory; over the network larger ones amortise its latency, and smaller ones than
 * WEFT_COLL_CHUNK keep every link busy at once). */
typedef struct weft_ring_pos {
    int rank, size, left, right;
    bool remote;
} weft_ring_pos_t;
weft_status_t weft__ring_init_among(weft_coll_t *c, weft_ring_t *ring, const weft_ring_pos_t *pos,
                                    bool rs, bool ag, const void *in, void *full, void *mine,
                                    const void *own, size_t count, size_t blk);
weft_status_t weft__ring_progress(weft_coll_t *c, weft_ring_t *ring);
/* Pipelining chunk for blocks of @p blk_bytes, each chunk costing @p units messages per
 * rank: eager-sized for medium blocks, else WEFT_COLL_CHUNK (0 only if that is 0). */
size_t weft__coll_chunk_bytes(const weft_coll_t *c, size_t blk_bytes, int units);
void weft__ring_fini(weft_ring_t *ring);

/* ---- setup hooks of each kind (allreduce.c, allgather.c, bcast.c, alltoall.c), called by
 * weft__coll_start ---- */
weft_status_t weft__coll_setup_reduction(weft_coll_t *c); /* allreduce, reduce, r-s */
weft_status_t weft__coll_setup_allgather(weft_coll_t *c);
weft_status_t weft__coll_setup_broadcast(weft_coll_t *c);
weft_status_t weft__coll_setup_alltoall(weft_coll_t *c); /* alltoall, alltoallv */
/* Allreduce over a group that spans several hosts with several ranks on some: whether
 * @p c qualifies (hier.c; every rank decides alike), and its setup. */
bool weft__coll_hier_fits(weft_coll_t *c, size_t bytes);
weft_status_t weft__coll_setup_hier(weft_coll_t *c);
/* The same for larger vectors when every host has as many ranks (hier_sliced.c). */
bool weft__coll_sliced_fits(weft_coll_t *c, size_t bytes);
weft_status_t weft__coll_setup_sliced(weft_coll_t *c);
/* The ranks of a group whose hosts all hold the same number L >= 2 of them (hosts numbered
 * in their leaders' order, ranks within a host in rank order). */
typedef struct weft_host_grid {
    int nlocal, nhosts; /* L, H */
    int lidx, hidx;     /* this rank's local index and host index */
    int *at;            /* [H * L]: the rank with host index h and local index l at h * L + l */
} weft_host_grid_t;
/* @p c's group as such a grid (hier_sliced.c): WEFT_OK with grid->at allocated (the caller
 * frees it), WEFT_ERR_UNSUPPORTED when the hosts differ in size, WEFT_ERR_NO_MEMORY.
 * Linear in the group's size: it runs at the start of every large collective that uses it. */
weft_status_t weft__coll_host_grid(weft_coll_t *c, weft_host_grid_t *grid);
/* The rank with host index @p h and local index @p l. */
static inline int weft__grid_rank(const weft_host_grid_t *grid, int h, int l)
{
    return grid->at[h * grid->nlocal + l];
}
/* Allgather over hosts of equal size (allgather_hosts.c): whether @p c qualifies (every
 * rank decides alike), and its setup. */
bool weft__coll_allgather_hosts_fits(weft_coll_t *c);
weft_status_t weft__coll_setup_allgather_hosts(weft_coll_t *c);
/* Local result with one rank (no communication). */
void weft__coll_single(const weft_coll_args_t *a, size_t elem);
/* The rule table the setups above follow, with the values of @p cfg (rules.c; printed by
 * weft-info --algorithms). */
void weft__coll_rules_print(FILE *out, const weft_config_t *cfg);

#endif
