/*
 * Fault injection and path counters, per context: one table in each weft_ctx_t, reached
 * through weft__ctx_faults(). Tests (which link the static library) set its switches to
 * make a path fail as it would on a machine that refuses it, and read its counters to
 * check which path carried the bytes. In normal runs every switch is off and the counters
 * only count.
 *
 * Without code, WEFT_DEBUG_FAULTS sets the switches at weft_init, in builds without
 * NDEBUG (Debug and sanitizer builds) only: a comma-separated list of NAME or NAME=VALUE,
 * NAME one of
 *   cma_refuse        reads of a sender's memory fail (as where process_vm_readv is not
 *                     permitted): chunks come again by message
 *   ring_refuse=1|2   1: senders cannot map a same-host ring; 2: receivers cannot make one
 *                     (bare ring_refuse is 1)
 *   snap_share_fail   the lowest holder's share of a restore plan with newcomers fails as
 *                     if out of memory
 * e.g. WEFT_DEBUG_FAULTS=cma_refuse,ring_refuse=2. A value that does not parse fails
 * weft_init (and weftrun refuses it) like any bad setting. Release and RelWithDebInfo
 * builds (NDEBUG) ignore the variable, with one warning at weft_init if it is set.
 *
 * Thread-safety: switches are set by the test between operations, not while a migration
 * runs; counters are atomic (jobs outside the context's lock add to them).
 */
#ifndef WEFT_COMM_FAULT_H
#define WEFT_COMM_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/core.h"

/*
 * Called with every chunk a migration received, before its checksum is checked (tests
 * flip a byte here to see the chunk sent again, or every member fail alike). @p arg is
 * weft__faults_t.recv_hook_arg; @p src_member the sender's member id, @p seq the chunk's
 * number in its stream, @p round the resend round (0 first), @p data and @p len the bytes
 * as they arrived (in a same-host ring: still in transit). Runs on a job thread, outside
 * the context's lock.
 */
typedef void (*weft__recv_hook_fn)(void *arg, int src_member, uint32_t seq, int round, void *data,
                                   size_t len);

/* Which path carried a migration's chunks, counted in this process (tests assert them). */
typedef struct weft__path_counts {
    /* Chunks read straight from a same-host sender's memory (process_vm_readv). */
    _Atomic uint64_t cma_reads;
    /* Chunks whose read of the sender's memory failed (refused, or cma_refuse): they came
     * again by message. */
    _Atomic uint64_t cma_fallbacks;
    /* Chunks received through a same-host shared-memory ring (migrate/engine/ring.h). */
    _Atomic uint64_t ring_chunks;
    /* Same-host rings this process made as a receiver and mapped as a sender
     * (migrate/engine/ring_cache.c): tests see a ring kept between migrations. */
    _Atomic uint64_t rings_made, rings_mapped;
    /* Chunks sent or received GPU to GPU through NCCL point-to-point (migrate/engine/nccl_path.c;
     * stays 0 without NCCL). */
    _Atomic uint64_t nccl_chunks;
} weft__path_counts_t;

typedef struct weft__faults {
    /* Every read of a sender's memory fails with EPERM. */
    bool cma_refuse;
    /* Same-host rings: 1, senders cannot map the offered ring; 2, receivers cannot make
     * one (they offer none); 0, neither. */
    int ring_refuse;
    /* The lowest holder's share of a restore plan with newcomers fails as if out of
     * memory (migrate/snapshot/snapshot_restore.c). */
    bool snap_share_fail;
    /* Bytes of rings kept per direction (migrate/engine/ring.h, WEFT_RING_BUDGET when 0): tests
     * make it small to see idle rings freed for new ones. */
    size_t ring_budget;
    /* Sees every received chunk before its checksum is checked; NULL: none. */
    weft__recv_hook_fn recv_hook;
    void *recv_hook_arg;
    weft__path_counts_t counts;
} weft__faults_t;

/* The fault table of @p ctx (never NULL for a context from weft_init). */
weft__faults_t *weft__ctx_faults(weft_ctx_t *ctx);

/*
 * Parse a WEFT_DEBUG_FAULTS value into the switches of @p f (the counters and the hook
 * are left alone); "" sets nothing. WEFT_OK, or WEFT_ERR_INVALID_ARG for an unknown
 * name or a bad value, with @p f unchanged.
 */
weft_status_t weft__faults_parse(const char *text, weft__faults_t *f);

#endif
