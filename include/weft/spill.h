/**
 * @file weft/spill.h
 * @brief Spill space on the SSD tier: blocks of memory written out in the background,
 * read back later, gone when the process ends.
 *
 * A process that wants bytes out of memory for a while (the activations a forward pass
 * saves for the backward pass, in the Python package's weft.torch.offload) writes them
 * as a block and gets an id; once the block's source is free it may drop or reuse that
 * memory, and later it reads the block back into a buffer of its choice and frees it.
 *
 * - **Asynchronous.** A worker thread of the spill space copies each block's bytes in
 *   chunks into a small pool of aligned buffers (queue_depth x chunk_bytes of memory, the
 *   only memory the space holds besides its tables) and writes them through io_uring with
 *   several writes and reads in flight, O_DIRECT where the filesystem allows it, so the
 *   caller computes meanwhile. Reads go before writes.
 * - **Deduplicated.** Each chunk is named by its XXH3-128 hash; a chunk whose content is
 *   held already is not written again (bytes_deduplicated in the statistics).
 * - **Checked.** Each chunk read back is hashed again and compared with the hash taken
 *   when it was written: a torn or corrupted chunk fails the read with WEFT_ERR_IO, never
 *   hands back wrong bytes.
 * - **Private, and left nowhere.** The directory is created 0700 (with any missing
 *   parent); an existing one must be a directory of the effective user's with no
 *   permission for group or others, not a symbolic link (else WEFT_ERR_INVALID_ARG,
 *   saying which). The space is one file in it, created unlinked (O_TMPFILE, or created
 *   0600 with O_EXCL under a random name and unlinked at once where the filesystem has
 *   no O_TMPFILE): no other process can open it, and it is gone when the process ends,
 *   however it ends. Its length drops to 0 whenever no block is held.
 * - **Failures are the block's.** A write that fails (the directory's filesystem full, an
 *   I/O error, the space's max_bytes reached) fails every block holding that chunk, with
 *   WEFT_ERR_IO and the reason in weft_last_error() (file offset, errno's text); a read of
 *   such a block fails the same way. Other blocks are unaffected.
 *
 * A write and a read hand back a request (weft_test, weft_wait: bounded by the context's
 * WEFT_TIMEOUT_MS by default). A spill space may be used from several threads; its calls
 * take its lock briefly and never wait for I/O, except weft_spill_free().
 */
#ifndef WEFT_SPILL_H
#define WEFT_SPILL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_spill weft_spill_t;

/** What weft_spill_state() reports of a block, as bits. */
enum {
    /** Every byte has been taken from the block's source: the caller may free or reuse
     * it. */
    WEFT_SPILL_SOURCE_FREE = 1u << 0,
    /** Every byte of the block is in the file. */
    WEFT_SPILL_STORED = 1u << 1,
    /** The last weft_spill_read_start() of the block has filled its destination, checked. */
    WEFT_SPILL_LOADED = 1u << 2,
};

/** Settings of a spill space; zero fields take the defaults. */
typedef struct weft_spill_params {
    size_t size;        /**< sizeof(weft_spill_params_t). */
    size_t chunk_bytes; /**< Bytes per chunk, a multiple of 4096 (0: 1 MiB). */
    int queue_depth;    /**< Chunk writes and reads in flight, 1..256 (0: 8). */
    int buffered;       /**< Nonzero: never O_DIRECT (buffered writes, no sync). */
    uint64_t max_bytes; /**< The file's largest length; a write past it fails (0: none). */
    /** Chunk reads and writes started per second, in bytes (each counted as chunk_bytes),
     * with a burst of one chunk: the space's I/O paced so that it leaves CPU and device
     * time to others, such as a training step's collectives (0: as fast as it goes). */
    uint64_t max_rate;
    /** For tests of failure handling: the n-th chunk write this space submits fails as if
     * the device had returned EIO (0: none). */
    uint64_t fail_write;
} weft_spill_params_t;

/** Counters of a spill space since it was opened. */
typedef struct weft_spill_stats {
    uint64_t bytes_submitted;    /**< Bytes of every block written. */
    uint64_t bytes_written;      /**< Chunk bytes written to the file. */
    uint64_t bytes_deduplicated; /**< Chunk bytes not written: the content was held. */
    uint64_t bytes_read;         /**< Chunk bytes read back from the file. */
    uint64_t blocks_held;        /**< Blocks written and not yet freed. */
    uint64_t file_bytes;         /**< The file's length now ... */
    uint64_t file_bytes_peak;    /**< ... and at its longest. */
    uint64_t write_ns;           /**< Time with at least one write in flight ... */
    uint64_t read_ns;            /**< ... and with at least one read in flight. */
    int direct;                  /**< 1 while the file is written with O_DIRECT. */
} weft_spill_stats_t;

/**
 * Make a spill space of context @p ctx (its requests and errors are the context's) in
 * directory @p dir (created 0700 if missing). @p params may be NULL. Free it with
 * weft_spill_free() before weft_finalize().
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG (bad settings, or a directory refused as above);
 *         WEFT_ERR_IO (the directory or file cannot be created); WEFT_ERR_UNSUPPORTED
 *         (io_uring is not available); WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_spill_create(weft_ctx_t *ctx, const char *dir,
                                         const weft_spill_params_t *params, weft_spill_t **out);

/** Free @p sp (NULL: no-op): waits for the I/O in flight, then drops every block and the
 * file; its requests still in flight fail. Sources of blocks still being copied must
 * stay valid until it returns. */
WEFT_API weft_status_t weft_spill_free(weft_spill_t *sp);

/**
 * Start writing @p bytes at @p src (0 bytes allowed) as a new block; its id into *id.
 * *req (unless @p req is NULL) completes when the block's state has
 * WEFT_SPILL_SOURCE_FREE, or with the block's error; until then @p src must stay valid
 * and unchanged (freeing the request does not stop the write: weft_spill_drop() does).
 */
WEFT_API weft_status_t weft_spill_write_start(weft_spill_t *sp, const void *src, size_t bytes,
                                              uint64_t *id, weft_req_t **req);

/**
 * Start reading block @p id into @p dst of exactly the block's @p bytes; *req (unless
 * NULL) completes when the state has WEFT_SPILL_LOADED, or with the read's error. The
 * block may still be being written: its chunks are read as they reach the file. @p dst
 * must stay valid until then, or until the block is dropped.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG (unknown id, a read of it in flight, another
 *         size); the block's error if a write of it failed.
 */
WEFT_API weft_status_t weft_spill_read_start(weft_spill_t *sp, uint64_t id, void *dst, size_t bytes,
                                             weft_req_t **req);

/** The WEFT_SPILL_* bits block @p id has now, into *state; returns the block's error if
 * a write or read of it failed (the text in weft_last_error() of the space's context),
 * WEFT_ERR_INVALID_ARG for an unknown id. */
WEFT_API weft_status_t weft_spill_state(weft_spill_t *sp, uint64_t id, unsigned *state);

/** Drop block @p id: its chunks' room in the file is reused, its requests fail. Copies
 * from its source and reads into its destination stop (one chunk already under way
 * finishes first). */
WEFT_API weft_status_t weft_spill_drop(weft_spill_t *sp, uint64_t id);

/** The space's counters into *stats. */
WEFT_API weft_status_t weft_spill_stats(weft_spill_t *sp, weft_spill_stats_t *stats);

#ifdef __cplusplus
}
#endif

#endif
