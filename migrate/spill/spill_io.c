/*
 * A spill space's worker thread: it takes chunks from the blocks queued for writing
 * (hashing each, and copying it into a free slot's aligned buffer unless a chunk of the
 * same content is held), reads chunks of blocks queued for reading (reads first), submits
 * both through io_uring and sleeps in the ring until one completes or a caller wakes it
 * through an eventfd polled there. Everything runs under the space's lock but the wait.
 */
#include <errno.h>
#include <sched.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "migrate/engine/xxh.h"
#include "migrate/spill/spill_impl.h"
#include "util/clock.h"

#define WAKE_TAG UINT64_MAX

#define ROUND_UP(n) (((n) + WEFT__SPILL_ALIGN - 1) / WEFT__SPILL_ALIGN * WEFT__SPILL_ALIGN)

void weft__spill_wake(weft_spill_t *sp)
{
    if (sp->waiting) {
        uint64_t one = 1;
        (void)!write(sp->wake_fd, &one, sizeof(one));
    }
}

static void busy_begin(weft_spill_t *sp, bool write)
{
    int *n = write ? &sp->writes_inflight : &sp->reads_inflight;
    uint64_t *since = write ? &sp->write_since : &sp->read_since;
    if ((*n)++ == 0) {
        *since = weft__now_ns();
    }
    sp->inflight++;
}

static void busy_end(weft_spill_t *sp, bool write)
{
    int *n = write ? &sp->writes_inflight : &sp->reads_inflight;
    uint64_t *since = write ? &sp->write_since : &sp->read_since;
    if (--(*n) == 0) {
        (write ? &sp->stats.write_ns : &sp->stats.read_ns)[0] += weft__now_ns() - *since;
        *since = 0;
    }
    sp->inflight--;
}

/* Queue the request of @p slot (slot->write, io_bytes at file offset @p off), from its
 * registered buffer where the ring took the slots' buffers (no pinning of its pages per
 * request), tagged with the slot's index, and count it in flight. */
static void submit_slot(weft_spill_t *sp, weft__spill_slot_t *slot, uint64_t off)
{
    int index = (int)(slot - sp->slots);
    bool write = slot->write;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&sp->ring);
    if (sp->fixed && write) {
        io_uring_prep_write_fixed(sqe, sp->fd, slot->buf, (unsigned)slot->io_bytes, off, index);
    } else if (sp->fixed) {
        io_uring_prep_read_fixed(sqe, sp->fd, slot->buf, (unsigned)slot->io_bytes, off, index);
    } else if (write) {
        io_uring_prep_write(sqe, sp->fd, slot->buf, (unsigned)slot->io_bytes, off);
    } else {
        io_uring_prep_read(sqe, sp->fd, slot->buf, (unsigned)slot->io_bytes, off);
    }
    io_uring_sqe_set_data64(sqe, (uint64_t)index);
    busy_begin(sp, write);
}

static weft__spill_slot_t *free_slot(weft_spill_t *sp)
{
    for (int i = 0; i < sp->queue_depth; i++) {
        if (!sp->slots[i].busy) {
            return &sp->slots[i];
        }
    }
    return NULL;
}

/* A chunk record holding @p len bytes hashed as @p h: a new one, or WEFT__SPILL_NONE when
 * memory runs out. */
static uint32_t new_chunk(weft_spill_t *sp)
{
    if (sp->free_chunk == WEFT__SPILL_NONE) {
        uint32_t cap = sp->nchunks_cap ? sp->nchunks_cap * 2 : 256;
        weft__spill_chunk_t *chunks = realloc(sp->chunks, cap * sizeof(*chunks));
        if (chunks == NULL) {
            return WEFT__SPILL_NONE;
        }
        sp->chunks = chunks;
        for (uint32_t i = cap; i-- > sp->nchunks_cap;) {
            chunks[i] = (weft__spill_chunk_t){.next = sp->free_chunk};
            sp->free_chunk = i;
        }
        sp->nchunks_cap = cap;
    }
    uint32_t ci = sp->free_chunk;
    sp->free_chunk = sp->chunks[ci].next;
    sp->chunks_live++;
    return ci;
}

/* A place in the file for a new chunk; false when max_bytes is reached or memory runs out
 * (*err says which). */
static bool new_place(weft_spill_t *sp, uint64_t *slot, int *err)
{
    if (sp->nfree_slots > 0) {
        *slot = sp->free_slots[--sp->nfree_slots];
        return true;
    }
    if (sp->max_bytes != 0 && (sp->file_slots + 1) * sp->chunk_bytes > sp->max_bytes) {
        *err = EFBIG;
        return false;
    }
    if (sp->file_slots == sp->cap_free_slots) { /* room to give every place back */
        uint64_t cap = sp->cap_free_slots ? sp->cap_free_slots * 2 : 256;
        uint64_t *fs = realloc(sp->free_slots, cap * sizeof(*fs));
        if (fs == NULL) {
            *err = ENOMEM;
            return false;
        }
        sp->free_slots = fs;
        sp->cap_free_slots = cap;
    }
    *slot = sp->file_slots++;
    sp->stats.file_bytes = sp->file_slots * sp->chunk_bytes;
    if (sp->stats.file_bytes > sp->stats.file_bytes_peak) {
        sp->stats.file_bytes_peak = sp->stats.file_bytes;
    }
    return true;
}

static uint32_t find_chunk(const weft_spill_t *sp, XXH128_hash_t h, uint32_t bytes)
{
    uint32_t ci = sp->buckets[h.low64 & (sp->nbuckets - 1)];
    while (ci != WEFT__SPILL_NONE) {
        const weft__spill_chunk_t *c = &sp->chunks[ci];
        if (c->hash_lo == h.low64 && c->hash_hi == h.high64 && c->bytes == bytes) {
            return ci;
        }
        ci = c->next;
    }
    return WEFT__SPILL_NONE;
}

static void map_remove(weft_spill_t *sp, uint32_t ci)
{
    weft__spill_chunk_t *c = &sp->chunks[ci];
    if (!c->in_map) {
        return;
    }
    uint32_t *link = &sp->buckets[c->hash_lo & (sp->nbuckets - 1)];
    while (*link != ci) {
        link = &sp->chunks[*link].next;
    }
    *link = c->next;
    c->in_map = false;
}

/* Take the next chunk of the head of the write queue, writing it through @p slot unless
 * its content is held already (then @p slot stays free). */
static void take_chunk(weft_spill_t *sp, weft__spill_slot_t *slot)
{
    weft__spill_block_t *b = sp->queue[WEFT__SPILL_WQ].head;
    size_t i = b->next_copy;
    size_t off = i * sp->chunk_bytes;
    uint32_t len = (uint32_t)(b->bytes - off < sp->chunk_bytes ? b->bytes - off : sp->chunk_bytes);
    const uint8_t *src = b->src + off;
    /* Copy and hash without the lock, so that callers' calls do not wait behind it;
     * b->busy keeps the block (and its source) from being freed meanwhile. */
    b->busy = true;
    pthread_mutex_unlock(&sp->mu);
    memcpy(slot->buf, src, len);
    XXH128_hash_t h = XXH3_128bits(slot->buf, len);
    pthread_mutex_lock(&sp->mu);
    b->busy = false;
    pthread_cond_broadcast(&sp->done);
    uint32_t ci = find_chunk(sp, h, len);
    if (ci != WEFT__SPILL_NONE) {
        sp->chunks[ci].refs++;
        sp->stats.bytes_deduplicated += len;
    } else if ((ci = new_chunk(sp)) != WEFT__SPILL_NONE) {
        weft__spill_chunk_t *c = &sp->chunks[ci];
        *c = (weft__spill_chunk_t){.hash_lo = h.low64,
                                   .hash_hi = h.high64,
                                   .bytes = len,
                                   .refs = 1,
                                   .state = WEFT__SPILL_C_WRITING};
        int err = 0;
        if (!(c->placed = new_place(sp, &c->slot, &err))) {
            c->state = WEFT__SPILL_C_FAILED;
            c->err = err;
        } else if (sp->fail_write != 0 && ++sp->writes_begun == sp->fail_write) {
            c->state = WEFT__SPILL_C_FAILED;
            c->err = EIO;
        } else {
            c->next = sp->buckets[h.low64 & (sp->nbuckets - 1)];
            sp->buckets[h.low64 & (sp->nbuckets - 1)] = ci;
            c->in_map = true;
            c->in_flight = true;
            size_t io = sp->direct ? ROUND_UP(len) : len;
            memset(slot->buf + len, 0, io - len);
            *slot = (weft__spill_slot_t){
                .busy = true, .write = true, .chunk = ci, .io_bytes = io, .buf = slot->buf};
            submit_slot(sp, slot, c->slot * sp->chunk_bytes);
        }
    }
    if (ci != WEFT__SPILL_NONE) {
        b->chunks[i] = ci;
        b->next_copy++;
    } else {
        b->oom = true; /* no record: the block fails, and its source is free */
    }
    if (b->next_copy == b->nchunks || b->oom) {
        weft__spill_dequeue(sp, WEFT__SPILL_WQ, b);
    }
}

static void fail_read(weft_spill_t *sp, weft__spill_block_t *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail_read(weft_spill_t *sp, weft__spill_block_t *b, const char *fmt, ...)
{
    if (b->read_status != WEFT_OK) {
        return;
    }
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    b->read_status = WEFT_ERR_IO;
    free(b->read_why);
    b->read_why = strdup(why);
    weft__spill_dequeue(sp, WEFT__SPILL_RQ, b);
}

/* Start the next read of the head of the read queue through @p slot; false when its next
 * chunk is not in the file yet. */
static bool start_read(weft_spill_t *sp, weft__spill_slot_t *slot)
{
    weft__spill_block_t *b = sp->queue[WEFT__SPILL_RQ].head;
    size_t i = b->next_read;
    if (b->oom) {
        fail_read(sp, b, "spill: a block of %zu bytes was never written: out of memory", b->bytes);
        return true;
    }
    if (i >= b->next_copy) {
        return false; /* not taken from its source yet */
    }
    uint32_t ci = b->chunks[i];
    weft__spill_chunk_t *c = &sp->chunks[ci];
    if (c->state == WEFT__SPILL_C_WRITING) {
        return false;
    }
    if (c->state != WEFT__SPILL_C_STORED) {
        fail_read(sp, b, "spill: chunk %zu of a block of %zu bytes was never written: %s", i,
                  b->bytes, strerror(c->err ? c->err : EIO));
        return true;
    }
    size_t io = sp->direct ? ROUND_UP(c->bytes) : c->bytes;
    *slot = (weft__spill_slot_t){.busy = true,
                                 .write = false,
                                 .chunk = ci,
                                 .block = b,
                                 .index = i,
                                 .io_bytes = io,
                                 .buf = slot->buf};
    submit_slot(sp, slot, c->slot * sp->chunk_bytes);
    b->inflight++;
    if (++b->next_read == b->nchunks) {
        weft__spill_dequeue(sp, WEFT__SPILL_RQ, b);
    }
    return true;
}

/* Whether the pace lets one more chunk start now (and count it); else sp->pace_ns says
 * how long until it does. */
static bool paced_ok(weft_spill_t *sp)
{
    if (sp->rate == 0) {
        return true;
    }
    uint64_t now = weft__now_ns();
    double cap = (double)sp->chunk_bytes;
    sp->tokens += (double)(now - sp->refill_ns) * (double)sp->rate / 1e9;
    sp->tokens = sp->tokens < cap ? sp->tokens : cap;
    sp->refill_ns = now;
    if (sp->tokens >= cap) {
        sp->tokens -= cap;
        return true;
    }
    sp->pace_ns = (uint64_t)((cap - sp->tokens) * 1e9 / (double)sp->rate) + 1;
    return false;
}

/* Give every free slot work: reads first, then writes. */
static void fill(weft_spill_t *sp)
{
    sp->pace_ns = 0;
    if (sp->stop) {
        return;
    }
    weft__spill_slot_t *slot;
    while ((slot = free_slot(sp)) != NULL) {
        if ((sp->queue[WEFT__SPILL_RQ].head != NULL || sp->queue[WEFT__SPILL_WQ].head != NULL) &&
            !paced_ok(sp)) {
            return;
        }
        bool started = false;
        while (!started && sp->queue[WEFT__SPILL_RQ].head != NULL) {
            if (!start_read(sp, slot)) {
                break;
            }
            started = slot->busy;
        }
        while (!started && sp->queue[WEFT__SPILL_WQ].head != NULL) {
            take_chunk(sp, slot);
            started = slot->busy;
        }
        if (!started) {
            sp->tokens += sp->rate != 0 ? (double)sp->chunk_bytes : 0; /* nothing started */
            return;
        }
    }
}

static void read_done(weft_spill_t *sp, weft__spill_slot_t *slot, int res)
{
    weft__spill_block_t *b = slot->block;
    b->inflight--;
    if (b->freed) {
        if (b->inflight == 0) {
            weft__spill_block_destroy(b);
        }
        return;
    }
    const weft__spill_chunk_t *c = &sp->chunks[slot->chunk];
    uint64_t at = c->slot * sp->chunk_bytes;
    if (res < 0 || (size_t)res < c->bytes) {
        fail_read(sp, b,
                  "spill: reading chunk %zu of a block of %zu bytes (file offset %llu): "
                  "%s",
                  slot->index, b->bytes, (unsigned long long)at,
                  res < 0 ? strerror(-res) : "short read");
        return;
    }
    if (b->read_status != WEFT_OK) {
        return; /* an earlier chunk failed it */
    }
    uint64_t lo = c->hash_lo, hi = c->hash_hi;
    uint32_t bytes = c->bytes;
    /* Check and deliver without the lock; b->busy keeps the block from being freed. */
    b->busy = true;
    pthread_mutex_unlock(&sp->mu);
    XXH128_hash_t h = XXH3_128bits(slot->buf, bytes);
    bool good = h.low64 == lo && h.high64 == hi;
    if (good) {
        memcpy(b->dst + slot->index * sp->chunk_bytes, slot->buf, bytes);
    }
    pthread_mutex_lock(&sp->mu);
    b->busy = false;
    pthread_cond_broadcast(&sp->done);
    if (!good) {
        fail_read(sp, b,
                  "spill: chunk %zu of a block of %zu bytes (file offset %llu) came back "
                  "corrupted: its hash differs from the one taken when it was written",
                  slot->index, b->bytes, (unsigned long long)at);
        return;
    }
    b->reads_left--;
    sp->stats.bytes_read += bytes;
}

void weft__spill_chunk_unref(weft_spill_t *sp, uint32_t ci)
{
    weft__spill_chunk_t *c = &sp->chunks[ci];
    if (--c->refs > 0 || c->in_flight) {
        return;
    }
    map_remove(sp, ci);
    if (c->placed) {
        sp->free_slots[sp->nfree_slots++] = c->slot;
    }
    c->state = WEFT__SPILL_C_FREE;
    c->next = sp->free_chunk;
    sp->free_chunk = ci;
    sp->chunks_live--;
}

static void write_done(weft_spill_t *sp, weft__spill_slot_t *slot, int res)
{
    uint32_t ci = slot->chunk;
    weft__spill_chunk_t *c = &sp->chunks[ci];
    c->in_flight = false;
    if (res < 0 || (size_t)res != slot->io_bytes) {
        c->state = WEFT__SPILL_C_FAILED;
        c->err = res < 0 ? -res : EIO;
        map_remove(sp, ci); /* the same content written later gets a chunk of its own */
    } else {
        c->state = WEFT__SPILL_C_STORED;
        sp->stats.bytes_written += c->bytes;
    }
    if (c->refs == 0) { /* every block holding it was freed meanwhile */
        c->refs = 1;
        weft__spill_chunk_unref(sp, ci);
        weft__spill_trim(sp);
    }
}

static void arm_wake(weft_spill_t *sp)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&sp->ring);
    io_uring_prep_poll_add(sqe, sp->wake_fd, POLLIN);
    io_uring_sqe_set_data64(sqe, WAKE_TAG);
}

void *weft__spill_worker(void *arg)
{
    weft_spill_t *sp = arg;
    /* SCHED_BATCH: its wakeups (one per completion) do not preempt the caller's compute
     * threads at once; it runs at its fair share, at the next tick or in their gaps. */
    struct sched_param none = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &none);
    pthread_mutex_lock(&sp->mu);
    bool armed = false;
    for (;;) {
        if (!armed && !sp->stop) {
            arm_wake(sp);
            armed = true;
        }
        fill(sp);
        io_uring_submit(&sp->ring);
        pthread_cond_broadcast(&sp->done); /* sources may be free now */
        if (sp->stop && sp->inflight == 0) {
            break;
        }
        /* With every slot busy, wake when half of them are done rather than at each: a
         * worker that wakes a thousand times a second takes the core from compute. */
        unsigned want = sp->inflight >= sp->queue_depth && sp->queue_depth >= 4
                            ? (unsigned)sp->queue_depth / 2
                            : 1;
        uint64_t pace = sp->pace_ns;
        sp->waiting = true;
        pthread_mutex_unlock(&sp->mu);
        struct io_uring_cqe *cqe;
        int rc;
        if (pace > 0) { /* paced: wake when the next chunk may start, or sooner */
            struct __kernel_timespec ts = {.tv_sec = (long long)(pace / 1000000000u),
                                           .tv_nsec = (long long)(pace % 1000000000u)};
            rc = io_uring_wait_cqe_timeout(&sp->ring, &cqe, &ts);
        } else {
            rc = io_uring_wait_cqe_nr(&sp->ring, &cqe, want);
        }
        pthread_mutex_lock(&sp->mu);
        sp->waiting = false;
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIME) {
            continue;
        }
        while (io_uring_peek_cqe(&sp->ring, &cqe) == 0) {
            uint64_t tag = io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(&sp->ring, cqe);
            if (tag == WAKE_TAG) {
                uint64_t v;
                (void)!read(sp->wake_fd, &v, sizeof(v));
                armed = false;
                continue;
            }
            weft__spill_slot_t *slot = &sp->slots[tag];
            slot->busy = false;
            busy_end(sp, slot->write);
            if (slot->write) {
                write_done(sp, slot, res);
            } else {
                read_done(sp, slot, res);
            }
        }
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}
