/*
 * The calls on a spill space's blocks (include/weft/spill.h): writing and reading them,
 * their state and errors, dropping them, and the requests that complete when a write's
 * source is free or a read has landed. The requests are polled (weft_test, weft_wait and
 * the progress thread advance them); a space freed under them fails them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "migrate/spill/spill_impl.h"

#define MAX_BLOCKS (1u << 30)

/* A request on a block: it completes once the block has every bit of want. */
typedef struct spill_req {
    weft_spill_t *sp; /* NULL once the space was freed */
    uint64_t id;
    unsigned want;
    struct spill_req *prev, *next; /* in sp->reqs */
} spill_req_t;

static weft_status_t unknown(weft_spill_t *sp, uint64_t id)
{
    return weft__error(sp->ctx, WEFT_ERR_INVALID_ARG, "spill: no block has id %#llx",
                       (unsigned long long)id);
}

/* A free index in the block table (growing it), or false. */
static bool take_index(weft_spill_t *sp, uint32_t *index)
{
    if (sp->nfree_ids > 0) {
        *index = sp->free_ids[--sp->nfree_ids];
        return true;
    }
    if (sp->nblocks == sp->cap_blocks) {
        uint32_t cap = sp->cap_blocks ? sp->cap_blocks * 2 : 64;
        if (cap > MAX_BLOCKS) {
            return false;
        }
        weft__spill_block_t **blocks = realloc(sp->blocks, cap * sizeof(*blocks));
        if (blocks != NULL) {
            sp->blocks = blocks;
        }
        uint32_t *gens = realloc(sp->gens, cap * sizeof(*gens));
        if (gens != NULL) {
            sp->gens = gens;
        }
        uint32_t *ids = realloc(sp->free_ids, cap * sizeof(*ids));
        if (ids != NULL) {
            sp->free_ids = ids;
        }
        if (blocks == NULL || gens == NULL || ids == NULL) {
            return false;
        }
        sp->cap_blocks = cap;
    }
    *index = sp->nblocks++;
    sp->gens[*index] = 0;
    return true;
}

/* A request completing at @p want into *r when @p req asks for one (else *r = NULL),
 * made before the operation starts, so that running out of memory for it starts nothing;
 * request_start() attaches it to the block once the operation is queued, and
 * weft_req_free() drops it if the operation is refused. */
static weft_status_t request_new(weft_spill_t *sp, unsigned want, weft_req_t **req, weft_req_t **r);
static void request_start(weft_spill_t *sp, weft_req_t *r, uint64_t id, weft_req_t **req);

weft_status_t weft_spill_write_start(weft_spill_t *sp, const void *src, size_t bytes, uint64_t *id,
                                     weft_req_t **req)
{
    if (sp == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_spill_write_start: no space");
    }
    WEFT_API_LOCK(sp->ctx);
    if (req != NULL) {
        *req = NULL;
    }
    if (id == NULL || (src == NULL && bytes > 0)) {
        return weft__error(sp->ctx, WEFT_ERR_INVALID_ARG,
                           "weft_spill_write_start: needs an id and a source");
    }
    weft_req_t *r;
    weft_status_t status = request_new(sp, WEFT_SPILL_SOURCE_FREE, req, &r);
    if (status != WEFT_OK) {
        return status;
    }
    weft__spill_block_t *b = calloc(1, sizeof(*b));
    size_t n = (bytes + sp->chunk_bytes - 1) / sp->chunk_bytes;
    if (b == NULL || (n > 0 && (b->chunks = malloc(n * sizeof(*b->chunks))) == NULL)) {
        weft_req_free(r);
        free(b);
        return weft__error(sp->ctx, WEFT_ERR_NO_MEMORY,
                           "spill: out of memory for a block of %zu "
                           "bytes",
                           bytes);
    }
    for (size_t i = 0; i < n; i++) {
        b->chunks[i] = WEFT__SPILL_NONE;
    }
    b->src = src;
    b->bytes = bytes;
    b->nchunks = n;
    pthread_mutex_lock(&sp->mu);
    uint32_t index;
    if (!take_index(sp, &index)) {
        pthread_mutex_unlock(&sp->mu);
        weft_req_free(r);
        weft__spill_block_destroy(b);
        return weft__error(sp->ctx, WEFT_ERR_NO_MEMORY, "spill: out of memory for the block table");
    }
    b->gen = ++sp->gens[index];
    sp->blocks[index] = b;
    sp->stats.blocks_held++;
    sp->stats.bytes_submitted += bytes;
    if (n > 0) {
        weft__spill_enqueue(sp, WEFT__SPILL_WQ, b);
        weft__spill_wake(sp);
    }
    *id = ((uint64_t)b->gen << 32) | (index + 1);
    pthread_mutex_unlock(&sp->mu);
    request_start(sp, r, *id, req);
    return WEFT_OK;
}

/* The block's error if any of its chunks failed to be written (recorded as the space's
 * context's last error). */
static weft_status_t write_error(weft_spill_t *sp, const weft__spill_block_t *b)
{
    if (b->oom) {
        return weft__error(sp->ctx, WEFT_ERR_NO_MEMORY,
                           "spill: out of memory for the chunks of a block of %zu bytes", b->bytes);
    }
    for (size_t i = 0; i < b->next_copy; i++) {
        const weft__spill_chunk_t *c = &sp->chunks[b->chunks[i]];
        if (c->state == WEFT__SPILL_C_FAILED) {
            return weft__error(sp->ctx, WEFT_ERR_IO,
                               "spill: writing chunk %zu of a block of %zu bytes (file "
                               "offset %llu) failed: %s",
                               i, b->bytes, (unsigned long long)(c->slot * sp->chunk_bytes),
                               c->err == EFBIG ? "the space's max_bytes reached"
                                               : strerror(c->err));
        }
    }
    return WEFT_OK;
}

static weft_status_t block_error(weft_spill_t *sp, const weft__spill_block_t *b)
{
    weft_status_t status = write_error(sp, b);
    if (status != WEFT_OK) {
        return status;
    }
    if (b->read_status != WEFT_OK) {
        return weft__error(sp->ctx, b->read_status, "%s",
                           b->read_why ? b->read_why
                                       : "spill: read "
                                         "failed");
    }
    return WEFT_OK;
}

static unsigned block_state(const weft_spill_t *sp, const weft__spill_block_t *b)
{
    unsigned st = 0;
    if (b->next_copy == b->nchunks || b->oom) {
        st |= WEFT_SPILL_SOURCE_FREE;
    }
    if (b->next_copy == b->nchunks) {
        bool stored = true;
        for (size_t i = 0; i < b->nchunks && stored; i++) {
            stored = sp->chunks[b->chunks[i]].state == WEFT__SPILL_C_STORED;
        }
        if (stored) {
            st |= WEFT_SPILL_STORED;
        }
    }
    if (b->dst != NULL && b->reads_left == 0 && b->read_status == WEFT_OK) {
        st |= WEFT_SPILL_LOADED;
    }
    return st;
}

weft_status_t weft_spill_read_start(weft_spill_t *sp, uint64_t id, void *dst, size_t bytes,
                                    weft_req_t **req)
{
    if (sp == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_spill_read_start: no space");
    }
    WEFT_API_LOCK(sp->ctx);
    if (req != NULL) {
        *req = NULL;
    }
    if (dst == NULL && bytes > 0) {
        return weft__error(sp->ctx, WEFT_ERR_INVALID_ARG,
                           "weft_spill_read_start: needs a destination");
    }
    weft_req_t *r;
    weft_status_t status = request_new(sp, WEFT_SPILL_LOADED, req, &r);
    if (status != WEFT_OK) {
        return status;
    }
    pthread_mutex_lock(&sp->mu);
    weft__spill_block_t *b = weft__spill_block(sp, id);
    if (b == NULL) {
        status = unknown(sp, id);
    } else if (bytes != b->bytes) {
        status = weft__error(sp->ctx, WEFT_ERR_INVALID_ARG,
                             "spill: block %#llx holds %zu bytes, not %zu", (unsigned long long)id,
                             b->bytes, bytes);
    } else if (b->queued[WEFT__SPILL_RQ] || b->inflight > 0) {
        status = weft__error(sp->ctx, WEFT_ERR_INVALID_ARG,
                             "spill: block %#llx is being read already", (unsigned long long)id);
    } else if ((status = write_error(sp, b)) == WEFT_OK) { /* a failed read may be retried */
        b->dst = dst != NULL ? dst : (uint8_t *)b;         /* any non-NULL marks a read */
        b->next_read = 0;
        b->reads_left = b->nchunks;
        b->read_status = WEFT_OK;
        free(b->read_why);
        b->read_why = NULL;
        if (b->nchunks > 0) {
            weft__spill_enqueue(sp, WEFT__SPILL_RQ, b);
            weft__spill_wake(sp);
        }
    }
    pthread_mutex_unlock(&sp->mu);
    if (status != WEFT_OK) {
        weft_req_free(r);
        return status;
    }
    request_start(sp, r, id, req);
    return WEFT_OK;
}

weft_status_t weft_spill_state(weft_spill_t *sp, uint64_t id, unsigned *state)
{
    if (sp == NULL || state == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_spill_state: needs a space and an output");
    }
    WEFT_API_LOCK(sp->ctx);
    pthread_mutex_lock(&sp->mu);
    weft__spill_block_t *b = weft__spill_block(sp, id);
    weft_status_t status = b == NULL ? unknown(sp, id) : block_error(sp, b);
    *state = b != NULL ? block_state(sp, b) : 0;
    pthread_mutex_unlock(&sp->mu);
    return status;
}

void weft__spill_enqueue(weft_spill_t *sp, weft__spill_queue_t q, weft__spill_block_t *b)
{
    b->next[q] = NULL;
    b->queued[q] = true;
    if (sp->queue[q].tail != NULL) {
        sp->queue[q].tail->next[q] = b;
    } else {
        sp->queue[q].head = b;
    }
    sp->queue[q].tail = b;
}

void weft__spill_dequeue(weft_spill_t *sp, weft__spill_queue_t q, weft__spill_block_t *b)
{
    if (!b->queued[q]) {
        return;
    }
    weft__spill_block_t **link = &sp->queue[q].head, *prev = NULL;
    while (*link != b) {
        prev = *link;
        link = &prev->next[q];
    }
    *link = b->next[q];
    if (sp->queue[q].tail == b) {
        sp->queue[q].tail = prev;
    }
    b->next[q] = NULL;
    b->queued[q] = false;
}

weft_status_t weft_spill_drop(weft_spill_t *sp, uint64_t id)
{
    if (sp == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_spill_drop: no space");
    }
    WEFT_API_LOCK(sp->ctx);
    pthread_mutex_lock(&sp->mu);
    weft__spill_block_t *b;
    while ((b = weft__spill_block(sp, id)) != NULL && b->busy) {
        pthread_cond_wait(&sp->done, &sp->mu); /* a chunk of it is being copied */
    }
    if (b == NULL) {
        pthread_mutex_unlock(&sp->mu);
        return unknown(sp, id);
    }
    weft__spill_dequeue(sp, WEFT__SPILL_WQ, b);
    weft__spill_dequeue(sp, WEFT__SPILL_RQ, b);
    for (size_t i = 0; i < b->next_copy; i++) {
        weft__spill_chunk_unref(sp, b->chunks[i]);
    }
    b->next_copy = 0;
    uint32_t index = (uint32_t)(id & 0xffffffffu) - 1;
    sp->free_ids[sp->nfree_ids++] = index;
    sp->stats.blocks_held--;
    if (b->inflight > 0) {
        b->freed = true; /* the worker destroys it when its last read lands */
        sp->blocks[index] = NULL;
    } else {
        sp->blocks[index] = NULL;
        weft__spill_block_destroy(b);
    }
    weft__spill_trim(sp);
    pthread_mutex_unlock(&sp->mu);
    return WEFT_OK;
}

static weft_status_t req_progress(weft_req_t *req)
{
    spill_req_t *q = weft__req_impl(req);
    weft_spill_t *sp = q->sp;
    if (sp == NULL) {
        return weft__error(weft__req_ctx(req), WEFT_ERR_INVALID_ARG,
                           "spill: the space was freed with this request in flight");
    }
    pthread_mutex_lock(&sp->mu);
    weft__spill_block_t *b = weft__spill_block(sp, q->id);
    weft_status_t st;
    if (b == NULL) {
        st = weft__error(sp->ctx, WEFT_ERR_INVALID_ARG,
                         "spill: block %#llx was dropped with this request in flight",
                         (unsigned long long)q->id);
    } else if ((st = block_error(sp, b)) == WEFT_OK) {
        st = (block_state(sp, b) & q->want) == q->want ? WEFT_OK : WEFT_INPROGRESS;
    }
    pthread_mutex_unlock(&sp->mu);
    return st;
}

static void unlink_req(spill_req_t *q)
{
    weft_spill_t *sp = q->sp;
    if (q->prev != NULL) {
        q->prev->next = q->next;
    } else {
        sp->reqs = q->next;
    }
    if (q->next != NULL) {
        q->next->prev = q->prev;
    }
}

static void req_cleanup(weft_req_t *req)
{
    spill_req_t *q = weft__req_impl(req);
    if (q == NULL) {
        return;
    }
    if (q->sp != NULL) {
        pthread_mutex_lock(&q->sp->mu);
        unlink_req(q);
        pthread_mutex_unlock(&q->sp->mu);
    }
    free(q);
}

static weft_status_t request_new(weft_spill_t *sp, unsigned want, weft_req_t **req, weft_req_t **r)
{
    *r = NULL;
    if (req == NULL) {
        return WEFT_OK;
    }
    spill_req_t *q = calloc(1, sizeof(*q));
    *r = q != NULL ? weft__req_new(sp->ctx, NULL) : NULL;
    if (*r == NULL) {
        free(q);
        return weft__error(sp->ctx, WEFT_ERR_NO_MEMORY, "spill: out of memory for a request");
    }
    q->want = want; /* q->sp stays NULL until started: a refused one is not in sp->reqs */
    weft__req_set_ops(*r, req_progress, req_cleanup, q);
    return WEFT_OK;
}

static void request_start(weft_spill_t *sp, weft_req_t *r, uint64_t id, weft_req_t **req)
{
    if (r == NULL) {
        return;
    }
    spill_req_t *q = weft__req_impl(r);
    pthread_mutex_lock(&sp->mu);
    q->sp = sp;
    q->id = id;
    q->next = sp->reqs;
    if (sp->reqs != NULL) {
        sp->reqs->prev = q;
    }
    sp->reqs = q;
    pthread_mutex_unlock(&sp->mu);
    weft__req_publish(r);
    *req = r;
}

void weft__spill_detach_requests(weft_spill_t *sp)
{
    for (spill_req_t *q = sp->reqs; q != NULL; q = q->next) {
        q->sp = NULL;
    }
    sp->reqs = NULL;
}
