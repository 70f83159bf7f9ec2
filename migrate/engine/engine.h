/*
 * The migration engine's state: per peer and direction a stream of chunks, each chunk a
 * sub-box of one transfer, moved WEFT_MIGRATE_WINDOW at a time as a header message
 * (checksum, length) and a data message. engine.c runs the streams; chunks.c cuts
 * transfers into chunks and says where a chunk lies in a member's packed buffer.
 */
#ifndef WEFT_MIGRATE_ENGINE_H
#define WEFT_MIGRATE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/core.h"
#include "migrate/layout/plan.h"

/* Chunks per stream are numbered in 20 bits of the tag; the last two numbers are the
 * verdict and the close. */
#define WEFT_MIG_SEQ_BITS 20
#define WEFT_MIG_VERDICT ((1u << WEFT_MIG_SEQ_BITS) - 1)
#define WEFT_MIG_CLOSE ((1u << WEFT_MIG_SEQ_BITS) - 2)

typedef struct weft_mig_chunk {
    uint32_t x;     /* index of its transfer in the plan */
    uint32_t order; /* position in plan order, for a stable priority sort */
    int prio;
    weft_box_t box;
    size_t bytes;
} weft_mig_chunk_t;

/* Append the chunks of transfer @p xi (at most @p chunk bytes each, at least one row of
 * the innermost dimension) to *arr. false on no memory. */
bool weft__mig_cut(const weft__xfer_t *x, uint32_t xi, size_t chunk, int prio,
                   weft_mig_chunk_t **arr, uint32_t *n, size_t *cap);

/* Sort chunks by priority (higher first), then plan order. */
void weft__mig_sort(weft_mig_chunk_t *c, uint32_t n);

/* Where sub-box @p b of region @p region (held from @p packed on, row-major) starts in
 * the packed buffer, if it is contiguous there; false if it is not. */
bool weft__mig_contiguous(const weft_box_t *region, size_t packed, const weft_box_t *b, int nd,
                          size_t elem, size_t *offset);

/* weft_imigrate() whose agreement also covers @p extra_key: members that pass
 * different keys all fail with WEFT_ERR_MISMATCH (a snapshot's step, say). */
weft_status_t weft__migrate_start_keyed(weft_group_t *g, const weft_plan_t *plan,
                                        const void *old_buf, void *new_buf,
                                        const weft_migrate_params_t *params, uint64_t extra_key,
                                        weft_req_t **req);

/* What a snapshot adds to a migration. */
typedef struct weft__mig_ext {
    /* Where destination regions of buffer 1 (lregion.buf == 1) go, at their space offset:
     * a snapshot's copies that are spilled to the SSD tier. */
    void *new_buf1;
    /* Where source regions of buffer 2 (lregion.buf == 2) lie, at their space offset: a
     * restore's live state buffer. */
    const void *old_buf2;
    /* Called, under the context's lock and without blocking, once every transfer of this
     * member is done and before the close, until it returns other than WEFT_INPROGRESS. An
     * error (its text in weft_last_error(NULL)) is this member's result in the close, so
     * the migration fails on every member alike. NULL: none. */
    weft_status_t (*before_close)(void *arg);
    void *arg;
} weft__mig_ext_t;

/* weft__migrate_start_keyed() with @p ext (NULL: none). */
weft_status_t weft__migrate_start_ext(weft_group_t *g, const weft_plan_t *plan, const void *old_buf,
                                      void *new_buf, const weft_migrate_params_t *params,
                                      uint64_t extra_key, const weft__mig_ext_t *ext,
                                      weft_req_t **req);

/* A migration request (weft_imigrate) that has not been freed. */
bool weft__mig_is(const weft_req_t *req);
/* Its plan. */
const weft_plan_t *weft__mig_plan(const weft_req_t *req);

/* Call @p fn for every chunk this member received from another and checked, with its
 * transfer and box; stops and returns false when @p fn does. */
typedef bool (*weft__mig_piece_fn)(void *arg, const weft__xfer_t *x, const weft_box_t *box);
bool weft__mig_received(const weft_req_t *req, weft__mig_piece_fn fn, void *arg);

/* Local copies of a migration that copies at least this much within a member write their
 * destination with non-temporal stores: far larger than the caches, not read again by the
 * migration, and without the read-for-ownership of the destination a 256 KiB piece of a
 * 256 MiB copy took 13-14 ms instead of 18-24 ms here. */
#define WEFT__MIG_STREAM_MIN ((size_t)4 << 20)

#endif
