/*
 * Inside a spill space (include/weft/spill.h): its blocks, the chunks of the file that
 * hold their content (named by hash, shared between blocks), the I/O slots with their
 * aligned buffers, and the worker thread that moves bytes. Shared by spill.c (the handle
 * and the calls), spill_block.c (the calls on blocks) and spill_io.c (the worker). Everything but
 * the slots' buffers and the ring (the worker's alone) is guarded by mu; the worker copies and
 * hashes a chunk with mu released and the block marked busy, which weft_spill_free() waits out.
 */
#ifndef WEFT_MIGRATE_SPILL_IMPL_H
#define WEFT_MIGRATE_SPILL_IMPL_H

#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/spill.h"

#define WEFT__SPILL_ALIGN 4096u
#define WEFT__SPILL_NONE UINT32_MAX

/* What a chunk of the file is doing. */
typedef enum weft__spill_cstate {
    WEFT__SPILL_C_FREE,    /* unused record */
    WEFT__SPILL_C_WRITING, /* its bytes are in a slot's buffer, the write in flight */
    WEFT__SPILL_C_STORED,  /* in the file */
    WEFT__SPILL_C_FAILED,  /* its write failed: err and why say how */
} weft__spill_cstate_t;

/* One chunk of distinct content, at file offset slot * chunk_bytes. */
typedef struct weft__spill_chunk {
    uint64_t hash_lo, hash_hi; /* XXH3-128 of its bytes */
    uint64_t slot;             /* its place in the file */
    uint32_t bytes;
    uint32_t refs;  /* chunk references of held blocks */
    uint32_t next;  /* in its hash bucket, or in the free list */
    uint8_t state;  /* weft__spill_cstate_t */
    bool in_map;    /* found by its hash (not once its write failed) */
    bool in_flight; /* its write is in a slot */
    bool placed;    /* slot is its own (not when max_bytes left it no room) */
    int err;        /* errno of a failed write */
} weft__spill_chunk_t;

/* A block the caller wrote. */
typedef struct weft__spill_block {
    uint32_t gen; /* of its id */
    bool freed;   /* dropped by the caller while I/O of it was in flight */
    bool oom;     /* no memory for a chunk record: chunks from next_copy on are lost */
    bool busy;    /* the worker copies from its source or into its destination unlocked */
    const uint8_t *src;
    size_t bytes;
    size_t nchunks;
    uint32_t *chunks;  /* record per chunk, WEFT__SPILL_NONE until copied */
    size_t next_copy;  /* next chunk to take from src */
    uint8_t *dst;      /* of the read, or NULL */
    size_t next_read;  /* next chunk to read */
    size_t reads_left; /* chunks of the read not yet delivered */
    int inflight;      /* its reads in slots */
    weft_status_t read_status;
    char *read_why;                    /* the read's failure, for the caller's thread */
    struct weft__spill_block *next[2]; /* in each queue (weft__spill_queue_t) */
    bool queued[2];
} weft__spill_block_t;

/* The worker's two queues of blocks, each in its own order: chunks still to take from
 * their source, and chunks still to read. */
typedef enum weft__spill_queue {
    WEFT__SPILL_WQ = 0,
    WEFT__SPILL_RQ = 1,
} weft__spill_queue_t;

/* An I/O slot: one chunk write or read in flight. */
typedef struct weft__spill_slot {
    bool busy;
    bool write;
    uint32_t chunk;             /* the record written or read */
    weft__spill_block_t *block; /* a read's block */
    size_t index;               /* a read's chunk of the block */
    size_t io_bytes;
    uint8_t *buf; /* chunk_bytes, WEFT__SPILL_ALIGN-aligned */
} weft__spill_slot_t;

struct spill_req;

struct weft_spill {
    weft_ctx_t *ctx;        /* its requests' and errors' */
    struct spill_req *reqs; /* requests in flight (spill_block.c) */
    pthread_mutex_t mu;
    pthread_cond_t done; /* broadcast when any state changes */
    pthread_t worker;
    bool worker_started;
    bool stop;
    bool waiting; /* the worker sleeps in the ring: wake it through the eventfd */
    int wake_fd;  /* eventfd polled in the ring */
    int fd;       /* the unlinked file */
    bool direct;
    bool fixed; /* the slots' buffers are registered with the ring */
    struct io_uring ring;
    size_t chunk_bytes;
    int queue_depth;
    uint64_t max_bytes;
    uint64_t rate;         /* max_rate, bytes per second (0: unpaced) */
    double tokens;         /* bytes of I/O that may start now (at most one chunk) */
    uint64_t refill_ns;    /* when tokens were last topped up */
    uint64_t pace_ns;      /* how long until the next chunk may start, 0 when not paced */
    uint64_t fail_write;   /* 0, or the write number that fails */
    uint64_t writes_begun; /* chunk writes submitted */

    weft__spill_slot_t *slots;
    uint8_t *bufs;
    int inflight;

    /* blocks by id: index (low 32 bits - 1) and generation (high 32 bits) */
    weft__spill_block_t **blocks;
    uint32_t *gens;
    uint32_t nblocks, cap_blocks;
    uint32_t *free_ids;
    uint32_t nfree_ids;

    /* chunk records, a hash map over them, and file slots */
    weft__spill_chunk_t *chunks;
    uint32_t nchunks_cap, free_chunk; /* free list head through next */
    uint32_t *buckets;
    uint32_t nbuckets; /* a power of two */
    uint32_t chunks_live;
    uint64_t *free_slots;
    uint64_t nfree_slots, cap_free_slots;
    uint64_t file_slots; /* slots in use or free below the file's end */

    struct {
        weft__spill_block_t *head, *tail;
    } queue[2]; /* by weft__spill_queue_t */

    weft_spill_stats_t stats;
    uint64_t write_since, read_since; /* when writes (reads) became in flight, 0 if none */
    int writes_inflight, reads_inflight;
};

/* ---- spill.c ---- */
/* The block of @p id, or NULL. */
weft__spill_block_t *weft__spill_block(weft_spill_t *sp, uint64_t id);
/* Free @p b's memory (its chunk references are gone). */
void weft__spill_block_destroy(weft__spill_block_t *b);
/* Shorten the file to nothing when no chunk is held. */
void weft__spill_trim(weft_spill_t *sp);

/* ---- spill_block.c ---- */
/* Append @p b to queue @p q; take it out of @p q (no-op when not in it). */
void weft__spill_enqueue(weft_spill_t *sp, weft__spill_queue_t q, weft__spill_block_t *b);
void weft__spill_dequeue(weft_spill_t *sp, weft__spill_queue_t q, weft__spill_block_t *b);
/* The space is being freed (sp->mu held): its requests in flight fail from now on. */
void weft__spill_detach_requests(weft_spill_t *sp);

/* ---- spill_io.c ---- */
/* The worker thread's body; @p arg is the space. It returns once sp->stop is set and no
 * I/O is in flight. */
void *weft__spill_worker(void *arg);
/* Drop one reference to chunk record @p c; the record and its file slot are reused once
 * none is left and no write of it is in flight. */
void weft__spill_chunk_unref(weft_spill_t *sp, uint32_t c);
/* Wake the worker (sp->mu held). */
void weft__spill_wake(weft_spill_t *sp);

#endif
