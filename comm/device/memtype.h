/*
 * What kind of memory a buffer is, and which transport moves it: memory-type detection,
 * the CUDA state of contexts and groups (the group's stream, its NCCL communicator),
 * this rank's topology summary and its exchange through the store, and the transport
 * decision for a peer or a whole group (transports/select.h decides; this file feeds it).
 */
#ifndef WEFT_MEMTYPE_H
#define WEFT_MEMTYPE_H

#include <stdint.h>

#include "comm/core_impl.h"
#include "transports/select.h"

struct weft_nccl_group; /* comm/device/nccl_comm.c */

/* g->cuda: allocated on first use, released by weft__cuda_group_fini(). */
struct weft_cuda_group {
    void *stream;                 /* cudaStream_t for work on CUDA buffers; NULL: default */
    struct weft_nccl_group *nccl; /* NCCL communicator (comm/device/nccl_comm.c), NULL until used */
    uint32_t nccl_attempts;       /* communicators this group tried to make (store keys) */
    uint32_t sel_epoch;           /* group epoch the cached decisions are for */
    int sel_valid[2];             /* by weft_memtype_t */
    weft_tsel_t sel[2];
};

/* ctx->cuda: this rank's summary and those fetched from other members. */
struct weft_cuda_ctx {
    weft_topo_summary_t local;
    int published;                 /* local summary set in the store */
    weft_topo_summary_t **members; /* [nmembers] by member id; NULL where not fetched */
    int nmembers;
};

/* weft__memtype(): comm/core.h. */

/* CUDA devices visible to this process (probed once); 0 without CUDA. */
int weft__cuda_device_count(void);

/* g->cuda, allocated if needed. WEFT_ERR_NO_MEMORY. */
weft_status_t weft__cuda_group_get(weft_group_t *g, struct weft_cuda_group **out);

/* The stream work on CUDA buffers of @p g goes to (NULL: the default stream). */
void *weft__group_cuda_stream(const weft_group_t *g);

/*
 * This rank's topology summary, loaded on first use from WEFT_TOPO_XML or by discovery,
 * with my_gpu set from the current CUDA device (or, on a topology read from a file,
 * local rank modulo the GPU count, to simulate one GPU per rank). Owned by @p ctx.
 */
weft_status_t weft__topo_local(weft_ctx_t *ctx, const weft_topo_summary_t **out);

/*
 * The transport for member @p peer of @p g (a group rank) and memory type @p mt. The
 * peer's summary comes from the store, where every rank publishes its own on its first
 * decision: call this where the peer decides about this rank too (both ends of a
 * message, every member of a collective), or it waits for WEFT_CONNECT_TIMEOUT_MS.
 * *out is filled whenever WEFT_OK is returned (out->status may be UNSUPPORTED).
 */
weft_status_t weft__select_peer(weft_group_t *g, int peer, weft_memtype_t mt, weft_tsel_t *out);

/*
 * The transport every member of @p g uses for a collective on memory of type @p mt
 * (weft__tsel_decide_group over all members' summaries). Collective on first use per
 * group epoch: every member must call it; cached afterwards. Same result convention as
 * weft__select_peer().
 */
weft_status_t weft__select_group(weft_group_t *g, weft_memtype_t mt, weft_tsel_t *out);

/*
 * Whether WEFT_TRANSPORT can work on this rank: call once from weft_init so that a forced
 * choice that cannot work (NCCL not built, no GPU, UCX unavailable) fails at init. Loads
 * the topology only when NCCL is forced. WEFT_OK or WEFT_ERR_UNSUPPORTED (recorded).
 */
weft_status_t weft__transport_check(weft_ctx_t *ctx);

#endif
