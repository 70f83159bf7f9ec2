/*
 * Settings: one declarative table (config.c) of WEFT_* environment variables with
 * defaults and documentation, parsed once at init into weft_config_t. Unknown WEFT_*
 * variables are warned about. `weft-info --config` lists the table.
 */
#ifndef WEFT_CONFIG_H
#define WEFT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "comm/ctx/log.h"
#include "weft/core.h"

typedef struct weft_config {
    weft_log_level_t log_level;
    uint64_t timeout_ms;          /* default for blocking calls */
    uint64_t connect_timeout_ms;  /* store connection and start-up rendezvous */
    uint64_t finalize_timeout_ms; /* how long finalize waits for the others to finalize */
    char transport[16];           /* auto | ucx | nccl */
    uint64_t heartbeat_ms;
    uint64_t failure_timeout_ms;
    size_t coll_small_max;        /* bytes: latency algorithms at or below */
    size_t coll_chunk;            /* bytes: pipelining chunk of ring algorithms */
    size_t coll_net_chunk;        /* bytes: the same for rings with links across hosts */
    size_t coll_net_small_max;    /* bytes: coll_small_max for groups over several hosts */
    size_t coll_hier_max;         /* bytes: hierarchical allreduce over hosts at or below */
    size_t coll_hier_segment;     /* bytes: segment of the sliced allreduce over hosts; 0 off */
    int coll_shm;                 /* 1: same-host groups collect through shared memory */
    size_t shm_small_max;         /* bytes: collectives carried in the shared slots */
    int shm_bcast_eager;          /* 1: small broadcast roots return once their data is posted */
    size_t shm_stream_min;        /* bytes: outputs written with non-temporal stores */
    size_t shm_chunk;             /* bytes: pipelining chunk of shared-memory collectives */
    int progress_thread;          /* 1: a progress thread per context */
    uint64_t progress_sleep_us;   /* its longest pause between idle passes */
    int progress_idle;            /* 1: the progress thread runs under SCHED_IDLE */
    size_t migrate_chunk;         /* bytes: chunk of parameter migration */
    size_t migrate_window;        /* chunks in flight per pair of members */
    int migrate_cma;              /* 1: same-host chunks read by transports/stream_cma.c */
    int migrate_shm;              /* 1: long same-host streams go through a shared ring */
    int yield_spins;              /* progress polls before a wait starts yielding; -1: auto */
    char ns[32];                  /* prefix of this context's store keys */
    char connect[8];              /* lazy | local | all: peers connected eagerly */
    char topo_xml[512];           /* hwloc XML file standing for this host; "" discovers */
    char nccl_library[512];       /* NCCL opened on first use (read by transports/nccl_lib.c) */
    char pmix_library[512];       /* PMIx opened by a PMIx bootstrap (comm/ctx/boot_pmix.c) */
    char curl_library[512];       /* listed only: the store's etcd backend reads it itself */
    char boot_addr[64];           /* IP literal rank 0 serves the store on under PMIx; "" auto */
    char debug_faults[128];       /* test faults (comm/fault.h); used without NDEBUG only */
} weft_config_t;

/* Variables that are not settings but are read from the environment: the launcher's, and
 * WEFT_LIBRARY (the Python binding's). */
extern const char *const weft__env_known[];

/*
 * Fill @p cfg from the table's defaults and the environment. Errors name the variable
 * and the value via the logger and in weft_last_error(NULL) (the calling thread's).
 * Warns about unknown WEFT_* variables.
 */
weft_status_t weft__config_load(weft_config_t *cfg, const weft_logger_t *lg);

/* Text of a setting's value in @p cfg (for listings); NULL for an unknown index. */
const char *weft__config_value(const weft_config_t *cfg, size_t index, char *buf,
                               size_t buflen);

#endif
