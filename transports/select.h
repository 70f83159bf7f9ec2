/*
 * Topology discovery and transport selection.
 *
 * topo.c loads the hwloc topology of this host (or an XML file) with I/O devices and
 * condenses it into a weft_topo_summary_t: the hostname, the NVIDIA GPUs with their PCI
 * bus ids, the NICs with a guess of their GPUDirect RDMA capability, the PCIe path
 * between every pair of those devices and the NVLink bandwidth between GPUs. A summary
 * serializes to a few hundred bytes so that ranks can exchange them through the store.
 *
 * select.c decides, from two summaries and the memory type of a buffer, which transport
 * moves the buffer to that peer and says which rule chose it. The decision is a pure
 * function: it reads nothing but its arguments, so it is tested on XML topologies of
 * machines the tests do not run on. docs/transport-selection.md lists the rules.
 *
 * select.c also decides which path each chunk of a migration stream takes
 * (weft__select_chunk_path, below): the one place that picks between the message
 * transport, NCCL and the same-host mechanisms of transports/stream.h. The migration
 * engine (migrate/engine/engine_stream.c) gathers the facts, asks, and runs the protocol of
 * the path it is given. The rule:
 *
 *   NCCL  every chunk of the first round, when the group chose NCCL for the migration
 *         (its members' chunks to and from each other all in device memory, and
 *         weft__tsel_decide_group said NCCL: comm/device/, migrate/engine/nccl_path.c). A chunk
 *         sent again (the second round) takes the paths below.
 *   MSG   a peer on another host: header and data as messages of the message transport.
 *   RING  a peer on this host, through the stream's shared-memory ring
 *         (transports/stream_memfd.c; migrate/engine/ring.c runs its slots). A stream has one
 *         when WEFT_MIGRATE_SHM is on and it is long enough (weft__ring_fits), the members
 *         agreeing on that from facts they share; then the receiver makes one when its
 *         buffers are in host memory, its host is not oversubscribed (a ring needs both
 *         members running at once, a CMA read only the receiver) and memfd can reach the
 *         peer, and offers it (or offers none); the sender maps an offered ring when its
 *         buffers are in host memory. A ring that cannot be made or mapped leaves the
 *         stream without one (the chunks take the paths below). Every chunk of a stream
 *         whose ring is in use goes through it, contiguous or not.
 *   CMA   a peer on this host, no ring: WEFT_MIGRATE_CMA on, host memory on both sides,
 *         and the chunk contiguous in the sender's buffer: the header goes by message and
 *         the receiver reads the data from the sender's memory (transports/stream_cma.c).
 *         The sender cannot know the receiver's memory: it offers the read (the chunk's
 *         header carries its address) and a receiver that cannot take it refuses.
 *   MSG   everything else: device memory on a side, a chunk that is not contiguous,
 *         the settings off.
 * A read or ring the receiver refused or could not use (not permitted, device memory)
 * counts its chunk as bad; the verdict of the round says so and both members mark the
 * peer refused (weft_tl_stream_peer_t::refused): memfd and CMA then no longer reach it,
 * and what is sent again goes by message.
 *
 * Like every transport header, this one includes only public weft headers.
 */
#ifndef WEFT_SELECT_H
#define WEFT_SELECT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transports/stream.h"
#include "transports/transport.h"
#include "weft/status.h"

#define WEFT_TOPO_MAX_GPUS 16
#define WEFT_TOPO_MAX_NICS 16
#define WEFT_TOPO_STR 64 /* bytes of every string field, NUL included */

/*
 * How the PCIe path between two devices runs, from closest to farthest (the classes
 * NCCL prints as PIX/PXB/PHB/NODE/SYS).
 */
typedef enum weft_topo_path {
    WEFT_PATH_PIX = 0,     /* both below one PCIe bridge (one switch) */
    WEFT_PATH_PXB = 1,     /* through several PCIe bridges, not through the CPU */
    WEFT_PATH_PHB = 2,     /* through one CPU host bridge */
    WEFT_PATH_NODE = 3,    /* between host bridges of one NUMA node */
    WEFT_PATH_SYS = 4,     /* across the inter-socket link */
    WEFT_PATH_UNKNOWN = 5, /* not on PCI, or not found */
} weft_topo_path_t;

/* Summary flags. */
#define WEFT_TOPO_CUDA_BUILT 0x1u /* this rank's weft was built with CUDA */
#define WEFT_TOPO_NCCL_BUILT 0x2u /* ... and with the NCCL transport */
#define WEFT_TOPO_FROM_XML 0x4u   /* loaded from an XML file, not discovered */

typedef struct weft_topo_gpu {
    char busid[WEFT_TOPO_STR]; /* "0000:07:00.0" */
    char name[WEFT_TOPO_STR];  /* OS device ("cuda0", "nvml0"), "" if hwloc had none */
    char model[WEFT_TOPO_STR]; /* "NVIDIA A100-SXM4-40GB", or the PCI id */
    int numa;                  /* OS index of the nearest NUMA node, -1 unknown */
} weft_topo_gpu_t;

typedef struct weft_topo_nic {
    char busid[WEFT_TOPO_STR];
    char name[WEFT_TOPO_STR];   /* OpenFabrics device ("mlx5_0"), else the netdev */
    char netdev[WEFT_TOPO_STR]; /* "ib0", "eth0"; "" if none */
    int numa;
    int rdma; /* has an OpenFabrics (verbs) device: GPUDirect RDMA is plausible */
} weft_topo_nic_t;

/* What one rank knows of its host, and which GPU it drives. */
typedef struct weft_topo_summary {
    char hostname[WEFT_TOPO_STR];
    char host_id[WEFT_TOPO_STR]; /* util/host_id.h of a discovered host; "" from XML */
    unsigned flags;              /* WEFT_TOPO_* */
    int numa_nodes, pus;
    int ngpus, nnics;
    int my_gpu; /* index in gpus[] of the GPU this rank drives; -1 none or unknown */
    weft_topo_gpu_t gpus[WEFT_TOPO_MAX_GPUS];
    weft_topo_nic_t nics[WEFT_TOPO_MAX_NICS];
    uint8_t gpu_path[WEFT_TOPO_MAX_GPUS][WEFT_TOPO_MAX_GPUS];     /* weft_topo_path_t */
    uint8_t gpu_nic_path[WEFT_TOPO_MAX_GPUS][WEFT_TOPO_MAX_NICS]; /* weft_topo_path_t */
    uint32_t nvlink_mbps[WEFT_TOPO_MAX_GPUS][WEFT_TOPO_MAX_GPUS]; /* 0: no NVLink */
} weft_topo_summary_t;

/* printf-style logger with the signature of weft_tl_params_t::log; may be NULL. */
typedef void (*weft_topo_log_fn)(void *arg, int level, const char *fmt, va_list ap);

/*
 * Build the summary of this host: from the hwloc XML file @p xml_path if not NULL,
 * else by discovering the machine. I/O devices are kept; GPUs are NVIDIA PCI devices
 * (class 0x0300/0x0302, vendor 0x10de), NICs are PCI devices with a network or
 * OpenFabrics OS device. my_gpu is -1 and the build flags are this library's.
 * Returns WEFT_OK, WEFT_ERR_IO when hwloc cannot load the topology (the file is missing
 * or invalid), WEFT_ERR_NO_MEMORY. Logs the reason of a failure once.
 */
weft_status_t weft__topo_load(const char *xml_path, weft_topo_log_fn log, void *log_arg,
                              weft_topo_summary_t *out);

/*
 * Index of the GPU with PCI bus id @p busid ("dddd:bb:dd.f" or CUDA's
 * "dddddddd:bb:dd.f", any case), or -1.
 */
int weft__topo_find_gpu(const weft_topo_summary_t *s, const char *busid);

/* Short name of a path class: "PIX", "PXB", "PHB", "NODE", "SYS", "unknown". */
const char *weft__topo_path_name(weft_topo_path_t p);

/*
 * Index of the RDMA-capable NIC closest to GPU @p gpu and its path class, or -1 when
 * the host has none. Ties go to the lower index.
 */
int weft__topo_nearest_rdma_nic(const weft_topo_summary_t *s, int gpu, weft_topo_path_t *path);

/* Serialized size bound: a buffer of this many bytes always suffices. */
#define WEFT_TOPO_PACKED_MAX                                                                       \
    (16 + 2 * WEFT_TOPO_STR + WEFT_TOPO_MAX_GPUS * (3 * WEFT_TOPO_STR + 8) +                       \
     WEFT_TOPO_MAX_NICS * (3 * WEFT_TOPO_STR + 8) +                                                \
     WEFT_TOPO_MAX_GPUS * (WEFT_TOPO_MAX_GPUS * 5 + WEFT_TOPO_MAX_NICS))

/*
 * Serialize @p s into @p buf (at least WEFT_TOPO_PACKED_MAX bytes are always enough);
 * *len is the number of bytes written. WEFT_ERR_INVALID_ARG if @p cap is too small or
 * the summary is inconsistent.
 */
weft_status_t weft__topo_pack(const weft_topo_summary_t *s, void *buf, size_t cap, size_t *len);

/*
 * Parse bytes written by weft__topo_pack(). Every length and index is checked:
 * WEFT_ERR_PROTOCOL for truncated, oversized or inconsistent input.
 */
weft_status_t weft__topo_unpack(const void *buf, size_t len, weft_topo_summary_t *out);

/* ---- the decision ---- */

typedef enum weft_tsel_transport {
    WEFT_TSEL_NONE = 0, /* no transport can move this buffer: see status */
    WEFT_TSEL_SELF = 1, /* a rank sending to itself: memory copy */
    WEFT_TSEL_UCX = 2,
    WEFT_TSEL_NCCL = 3,
} weft_tsel_transport_t;

/* The WEFT_TRANSPORT setting. */
typedef enum weft_tsel_override {
    WEFT_TSEL_AUTO = 0,
    WEFT_TSEL_FORCE_UCX = 1,
    WEFT_TSEL_FORCE_NCCL = 2,
} weft_tsel_override_t;

typedef struct weft_tsel {
    weft_status_t status;            /* WEFT_OK, or WEFT_ERR_UNSUPPORTED */
    weft_tsel_transport_t transport; /* WEFT_TSEL_NONE when status is an error */
    int staged;                      /* CUDA data goes through host buffers weft copies */
    const char *rule;                /* stable rule name, see docs/transport-selection.md */
    char why[320];                   /* the rule with the facts that chose it */
} weft_tsel_t;

/* "auto", "ucx", "nccl" (any case) -> override; WEFT_ERR_INVALID_ARG otherwise. */
weft_status_t weft__tsel_parse_override(const char *text, weft_tsel_override_t *ov);
const char *weft__tsel_override_name(weft_tsel_override_t ov);
/* "none", "self", "ucx", "nccl". */
const char *weft__tsel_transport_name(weft_tsel_transport_t t);

/*
 * Which transport moves a buffer of type @p mt from the rank described by @p me to the
 * rank described by @p peer (the same summary and @p peer_is_self for the rank itself).
 * Pure: the built-in capabilities come from the summaries' flags. The decision is
 * symmetric (swapping me and peer gives the same transport), so two ranks agree.
 * Fills *out and returns WEFT_OK whenever a decision was made, including the decision
 * that nothing can move the buffer (out->status WEFT_ERR_UNSUPPORTED);
 * WEFT_ERR_INVALID_ARG for NULL or inconsistent arguments (*out untouched).
 */
weft_status_t weft__tsel_decide(const weft_topo_summary_t *me, const weft_topo_summary_t *peer,
                                int peer_is_self, weft_memtype_t mt, weft_tsel_override_t ov,
                                weft_tsel_t *out);

/*
 * The transport for a collective on a buffer of type @p mt over the @p n members
 * described by @p members (each summary names the GPU its rank drives): NCCL only if
 * weft__tsel_decide() says NCCL for every pair of members; otherwise the first pair's
 * decision that is not NCCL (an error, or staging). Every member computes the same
 * answer from the same summaries. A single member gets its decision about itself.
 * Cost grows with the number of distinct (host, GPU) pairs within each host, not with
 * the square of @p n: between hosts a decision depends on each side only through its
 * build flags, whether it drives a GPU and whether a GPUDirect NIC is near it.
 * WEFT_OK with *out filled, or WEFT_ERR_INVALID_ARG / WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft__tsel_decide_group(const weft_topo_summary_t *const *members, int n,
                                      weft_memtype_t mt, weft_tsel_override_t ov, weft_tsel_t *out);

/*
 * Whether the override can work at all on this rank, checked once at init: NCCL forced
 * but not built or no GPU on this host, UCX forced but the UCX transport unavailable.
 * WEFT_OK, or WEFT_ERR_UNSUPPORTED with the reason written to @p why.
 */
weft_status_t weft__tsel_check_override(const weft_topo_summary_t *me, weft_tsel_override_t ov,
                                        int ucx_available, char *why, size_t why_len);

/* ---- the path of a migration chunk (the rule is in the comment at the top) ---- */

typedef enum weft_tl_path {
    WEFT_TL_PATH_MSG = 0,  /* header and data as messages of the message transport */
    WEFT_TL_PATH_CMA = 1,  /* header by message; the receiver reads the sender's memory */
    WEFT_TL_PATH_RING = 2, /* through the stream's shared-memory ring */
    WEFT_TL_PATH_NCCL = 3, /* GPU to GPU, NCCL point-to-point */
} weft_tl_path_t;

/* A stream's ring as the asking member sees it. */
typedef enum weft_chunk_ring {
    /* Before the members exchange an offer: asks whether they do (RING: yes). Decided
     * from facts both members share, so both ask alike. */
    WEFT_CHUNK_RING_UNDECIDED = 0,
    /* The offer: the receiver asks whether it makes a ring to offer, the sender whether
     * it maps the ring offered (an offer of none is OFF). RING: yes. */
    WEFT_CHUNK_RING_OFFER = 1,
    /* The ring is in use: the sender mapped it; the receiver made it and the chunk's
     * header names a slot of it. */
    WEFT_CHUNK_RING_ON = 2,
    WEFT_CHUNK_RING_OFF = 3, /* none, or not for this chunk */
} weft_chunk_ring_t;

/*
 * The facts a member of a migration stream has about one of its chunks. The stream's
 * part is filled once (weft__select_reach adds what the stream mechanisms reach); the
 * chunk's part (nccl_round, ring, ring_refused, contiguous) at each question.
 */
typedef struct weft_chunk_path_query {
    size_t size;          /* sizeof(weft_chunk_path_query_t) */
    bool receiver;        /* asked by the receiving member (else the sender) */
    bool same_host;       /* the peer runs on this host */
    bool migrate_shm;     /* WEFT_MIGRATE_SHM (the members agreed on it) */
    bool migrate_cma;     /* WEFT_MIGRATE_CMA */
    bool oversubscribed;  /* this host runs more ranks than cores */
    bool ring_fits;       /* the stream is long enough for a ring (weft__ring_fits) */
    bool ring_reach;      /* weft__tl_stream_memfd can reach the peer */
    bool cma_reach;       /* weft__tl_stream_cma can reach the peer */
    bool nccl_round;      /* the group moves this round GPU to GPU through NCCL */
    weft_chunk_ring_t ring;
    bool ring_refused;    /* this side may not make (receiver) or map (sender) a ring */
    /* The chunk lies contiguous in the sender's host buffer: the sender knows; the
     * receiver knows it when the chunk's header offers its address for a read. */
    bool contiguous;
} weft_chunk_path_query_t;

/*
 * Fill q->ring_reach and q->cma_reach by asking each stream mechanism's can_reach()
 * about @p peer. Once per stream, and again when the peer changes (it refused).
 */
void weft__select_reach(const weft_tl_stream_peer_t *peer, weft_chunk_path_query_t *q);

/*
 * The path of the chunk described by @p q, by the rule at the top of this header. Pure:
 * it reads nothing but @p q, and makes no indirect call (it is on the per-chunk path).
 * Asked with the ring UNDECIDED or OFFER, only whether the answer is RING matters.
 */
weft_tl_path_t weft__select_chunk_path(const weft_chunk_path_query_t *q);

/* "msg", "cma", "ring", "nccl". */
const char *weft__tl_path_name(weft_tl_path_t p);

#endif
