/*
 * Hierarchical allreduce, for groups that span several hosts with several ranks on some
 * host, over messages (such a group has no shared segment).
 *
 * A flat ring over P ranks takes 2(P-1) steps, each as slow as its slowest link, and
 * some links of every step cross the network: for mid-size vectors the network's
 * latency is paid 2(P-1) times. Here the ranks of each host send their vectors to the
 * host's leader (its lowest rank) over the host's own transport (shared memory), the
 * leader reduces them in rank order, the leaders run the ring among themselves (2(H-1)
 * network steps for H hosts, each leader moving 2(H-1)/H of the vector), and each
 * leader sends the result back to its host's ranks. Every rank ends with the leaders'
 * ring result, bitwise the same everywhere.
 *
 * It costs the leader (ranks on its host - 1) vectors of scratch and does not pipeline
 * the three stages, so it is chosen only up to WEFT_COLL_HIER_MAX bytes; larger
 * vectors take the sliced allreduce (hier_sliced.c) where every host has as many
 * ranks, else the ring, whose pipelining wins there. The exchange phase
 * (header-only recursive doubling over the whole group) still checks that every rank
 * agrees before any data moves, so ranks that disagree on the size never pick different
 * algorithms for the data. The host table is the group's (weft__group_host_table): the
 * same on every rank.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"

enum { STAGE_UP = 0, STAGE_RING, STAGE_DOWN, STAGE_DONE };

typedef struct hier {
    int *local; /* group ranks on this rank's host, in rank order; local[0] leads */
    int nlocal;
    bool leader;
    int stage;
    bool posted;       /* the messages of the current stage are posted */
    weft_req_t **reqs; /* [nlocal]: the leader's per rank; a member's send [0], recv [1] */
    uint8_t *in;       /* leader: the received vectors, (nlocal - 1) of them */
    uint8_t *acc;      /* leader: the host's reduced vector, input of the leaders' ring */
    weft_ring_t ring;  /* leaders only */
} hier_t;

bool weft__coll_hier_fits(weft_coll_t *c, size_t bytes)
{
    if (c->a.kind != WEFT_COLL_ALLREDUCE || c->shm != NULL || bytes == 0 ||
        bytes > c->ctx->cfg.coll_hier_max) {
        return false;
    }
    int nhosts;
    const int *host = weft__group_host_table(c->g, &nhosts);
    if (host == NULL || nhosts < 2 || nhosts == c->size) {
        return false;
    }
    for (int r = 0; r < c->size; r++) {
        if (host[r] < 0) {
            return false; /* a member whose host is unknown: the flat ring needs none */
        }
    }
    return true;
}

static void hier_fini(weft_coll_t *c)
{
    hier_t *H = c->alg;
    if (H == NULL) {
        return;
    }
    if (H->leader) {
        weft__ring_fini(&H->ring);
    }
    weft__coll_children_drop(H->reqs, (size_t)(H->nlocal > 2 ? H->nlocal : 2));
    free(H->reqs);
    free(H->local);
    free(H->in);
    free(H->acc);
    free(H);
    c->alg = NULL;
}

/* A message of this collective to or from group rank @p peer (tag step @p step). */
static weft_status_t post(weft_coll_t *c, bool send, int peer, void *buf, int step,
                          weft_req_t **req)
{
    uint32_t tag = weft__tag_coll_payload(c->seq, (uint32_t)step);
    size_t bytes = c->a.count * c->elem;
    weft_status_t st = send ? weft__isend(c->g, peer, buf, bytes, WEFT_TAG_COLL, tag, req)
                            : weft__irecv(c->g, peer, buf, bytes, WEFT_TAG_COLL, tag, req);
    return st == WEFT_INPROGRESS ? WEFT_OK : st;
}

/* A rank that does not lead: its vector up, then the result down. */
static weft_status_t member_data(weft_coll_t *c, hier_t *H)
{
    void *send = (void *)c->a.sendbuf;
    bool inplace = c->a.sendbuf == c->a.recvbuf;
    weft_status_t st;
    if (!H->posted) {
        st = post(c, true, H->local[0], send, WEFT_COLL_STEP_HIER_UP, &H->reqs[0]);
        if (st == WEFT_OK && !inplace) {
            st = post(c, false, H->local[0], c->a.recvbuf, WEFT_COLL_STEP_HIER_DOWN, &H->reqs[1]);
        }
        if (st != WEFT_OK) {
            return st;
        }
        H->posted = true;
    }
    if (H->stage == STAGE_UP) {
        st = weft__coll_children_test(H->reqs, 1);
        if (st != WEFT_OK) {
            return st;
        }
        H->stage = STAGE_DOWN;
        if (inplace) { /* the result may land only once the input has left */
            st = post(c, false, H->local[0], c->a.recvbuf, WEFT_COLL_STEP_HIER_DOWN, &H->reqs[1]);
            if (st != WEFT_OK) {
                return st;
            }
        }
    }
    return weft__coll_children_test(H->reqs, 2);
}

/* The leader: receive and reduce its host's vectors, the ring among leaders, send the
 * result to its host's ranks. */
static weft_status_t leader_data(weft_coll_t *c, hier_t *H)
{
    size_t bytes = c->a.count * c->elem;
    weft_status_t st;
    if (H->stage == STAGE_UP) {
        if (!H->posted) {
            for (int i = 1; i < H->nlocal; i++) {
                st = post(c, false, H->local[i], H->in + (size_t)(i - 1) * bytes,
                          WEFT_COLL_STEP_HIER_UP, &H->reqs[i]);
                if (st != WEFT_OK) {
                    return st;
                }
            }
            H->posted = true;
        }
        if ((st = weft__coll_children_test(H->reqs, (size_t)H->nlocal)) != WEFT_OK) {
            return st;
        }
        if (H->nlocal > 1) { /* in rank order: the same bits whatever arrived first */
            weft__reducer_apply3(&c->red, H->acc, c->a.sendbuf, H->in, c->a.count);
            for (int i = 2; i < H->nlocal; i++) {
                weft__reducer_apply(&c->red, H->acc, H->in + (size_t)(i - 1) * bytes, c->a.count);
            }
        }
        H->stage = STAGE_RING;
        H->posted = false;
    }
    if (H->stage == STAGE_RING) {
        if ((st = weft__ring_progress(c, &H->ring)) != WEFT_OK) {
            return st;
        }
        H->stage = STAGE_DOWN;
    }
    if (!H->posted) {
        for (int i = 1; i < H->nlocal; i++) {
            st = post(c, true, H->local[i], c->a.recvbuf, WEFT_COLL_STEP_HIER_DOWN, &H->reqs[i]);
            if (st != WEFT_OK) {
                return st;
            }
        }
        H->posted = true;
    }
    return weft__coll_children_test(H->reqs, (size_t)H->nlocal);
}

static weft_status_t hier_data(weft_coll_t *c)
{
    hier_t *H = c->alg;
    if (H->stage == STAGE_DONE) {
        return WEFT_OK;
    }
    weft_status_t st = H->leader ? leader_data(c, H) : member_data(c, H);
    if (st == WEFT_OK) {
        H->stage = STAGE_DONE;
    }
    return st;
}

weft_status_t weft__coll_setup_hier(weft_coll_t *c)
{
    int nhosts;
    const int *host = weft__group_host_table(c->g, &nhosts);
    hier_t *H = calloc(1, sizeof(*H));
    if (H == NULL || host == NULL) {
        free(H);
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    c->alg = H;
    c->fini = hier_fini;
    c->data = hier_data;
    H->local = malloc((size_t)c->size * sizeof(int));
    H->reqs = calloc((size_t)(c->size > 2 ? c->size : 2), sizeof(*H->reqs));
    if (H->local == NULL || H->reqs == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    /* This host's ranks; the leaders' ring: this leader's place and its neighbours. */
    int me = host[c->rank], lrank = 0, nleaders = 0;
    for (int r = 0; r < c->size; r++) {
        if (host[r] == me) {
            H->local[H->nlocal++] = r;
        }
        if (host[r] == r) {
            lrank = r == me ? nleaders : lrank;
            nleaders++;
        }
    }
    H->leader = me == c->rank;
    if (H->leader) {
        size_t bytes = c->a.count * c->elem;
        int left = -1, right = -1, k = 0;
        for (int r = 0; r < c->size; r++) {
            if (host[r] == r) {
                left = k == (lrank + nleaders - 1) % nleaders ? r : left;
                right = k == (lrank + 1) % nleaders ? r : right;
                k++;
            }
        }
        const void *in = c->a.sendbuf;
        if (H->nlocal > 1) {
            H->in = weft__coll_alloc(c, (size_t)(H->nlocal - 1) * bytes);
            H->acc = weft__coll_alloc(c, bytes);
            if (H->in == NULL || H->acc == NULL) {
                return WEFT_ERR_NO_MEMORY;
            }
            in = H->acc;
        }
        weft_ring_pos_t pos = {lrank, nleaders, left, right, true};
        uint8_t *recv = c->a.recvbuf;
        weft_status_t st = weft__ring_init_among(
            c, &H->ring, &pos, true, true, in, recv,
            recv + weft__coll_blk_off(c->a.count, nleaders, lrank) * c->elem, NULL, c->a.count, 0);
        if (st != WEFT_OK) {
            return st;
        }
    }
    return weft__rd_init(c, NULL, 0);
}
