/*
 * The core's private header: the layout of the context, groups and requests, and the
 * calls the core's folders (comm/) make to one another. Only comm/ may include it
 * (scripts/check-includes.py); the layers above reach the core through comm/core.h,
 * which this header includes.
 */
#ifndef WEFT_CORE_IMPL_H
#define WEFT_CORE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "comm/core.h"
#include "comm/ctx/config.h"
#include "comm/ctx/log.h"
#include "comm/shm/shm_job.h"
#include "comm/store/store.h"
#include "comm/ctx/tag.h"
#include "comm/fault.h"
#include "transports/transport.h"
#include "util/clock.h"
#include "util/host_id.h"
#include "weft/coll.h"
#include "weft/core.h"

/* One started message transport: the transport, its message table and this process's
 * instance of it. */
typedef struct weft_tl_inst {
    const weft_transport_t *transport;
    const weft_tl_msg_ops_t *ops; /* transport->msg */
    weft_tl_t *tl;
} weft_tl_inst_t;

/* Room for every message transport of weft__transports[]. */
#define WEFT_CTX_MAX_TLS 4

/* One other process (or this one), indexed by stable member id. */
typedef struct weft_peer {
    /* The instance that reaches it (ctx->tl_local or ctx->tl_remote), copied here so a
     * message costs one load and the ops call; NULL when none does. */
    const weft_tl_msg_ops_t *ops;
    weft_tl_t *tl;
    weft_tl_ep_t *ep;     /* NULL until first use */
    void *addr;           /* published transport address (malloc'ed), NULL if unknown */
    size_t addr_len;
    weft_status_t failed; /* WEFT_OK while alive; else why it is gone */
    bool noticed;         /* the store holds its failure notice (read, or our report taken) */
    bool same_host;       /* published the same host id as this process (util/host_id.h) */
    char host_id[WEFT__HOST_ID_LEN]; /* the host id it published; "" until its address is read */
} weft_peer_t;

typedef struct weft_user_op {
    weft_op_params_t params;
    bool in_use;
} weft_user_op_t;

struct weft_ctx {
    weft_config_t cfg;
    weft_logger_t logger;
    int rank, size;             /* world rank = stable member id of this process */
    int local_rank, local_size;
    char launcher[16];          /* "weftrun", "mpirun", "srun", "singleton" */
    char store_addr[256];
    struct weft_pmix *pmix;     /* bootstrapped through PMIx (comm/ctx/boot_pmix.h) */
    char token[128];            /* the job token; "" in a rank that holds only its own secret */
    bool member_only;           /* cred.secret, not the token, proves who it is to the store */
    weft_store_cred_t cred;     /* its id and member secret (member_only), the job's data key */
    char data_hex[65];          /* cred.data_key in hex; "" without a store */
    char host_id[WEFT__HOST_ID_LEN]; /* util/host_id.h: peers with the same share memory */
    weft_shm_job_t shm_job;     /* names of its shared-memory segments, the job lock */
    weft_store_client_t *store; /* request/response connection */
    weft_store_client_t *watch; /* store, once it watches the failure notices; NULL once lost */
    weft_store_health_t store_health; /* of store (its requests, watch and lease) */
    /* This member's own failure notice, once its watch delivered it (it was declared
     * failed: the others go on without it). */
    bool declared_failed;
    char declared_failed_why[128];
    struct weft_heartbeat *heartbeat; /* liveness lease (comm/liveness/heartbeat.c) */
    /* Message transports started for host memory, in weft__transports[] order: every
     * built-in one that init()s this process and is needed (comm/ctx/ctx.c). */
    weft_tl_inst_t tls[WEFT_CTX_MAX_TLS];
    int ntls;
    const weft_tl_inst_t *tl_local;  /* reaches this process (WEFT_TL_LOOPBACK) */
    const weft_tl_inst_t *tl_remote; /* reaches the others, by its published address;
                                      * NULL without a store (one process, no joins) */
    weft_peer_t *peers;         /* [npeers] by member id; grows as members join */
    int npeers;
    bool joining;               /* started as a new member (WEFT_JOIN=1), not in the world */
    int world_size_at_start;    /* WEFT_WORLD_SIZE of the original job */
    weft_group_t *world;
    weft_group_t *groups;       /* every group of this context, world included */
    int64_t local_group_ids;    /* subgroup ids handed out without a store (one process) */
    uint32_t next_group_id;
    struct weft_req *live;      /* requests in flight */
    struct weft_req *req_pool;  /* freed requests kept for reuse (singly linked) */
    int req_pool_len;
    weft_user_op_t *user_ops;
    int n_user_ops;
    uint64_t progress_calls;
    uint64_t shm_moves, shm_moves_seen; /* steps of shared-memory collectives (progress news) */
    char last_error[512];
    struct weft_cuda_ctx *cuda; /* topology summaries (comm/device/memtype.c); NULL until used */
    /* The progress thread (comm/progress/progress_thread.c). */
    pthread_mutex_t lock;       /* held by public calls and by the thread's passes */
    pthread_cond_t pt_cv;       /* with job_lock: wakes the thread for published requests
                                 * or queued jobs (pt_sleeping: written under both locks) */
    pthread_t pt;
    bool pt_running, pt_sleeping;
    atomic_bool pt_stop;        /* set under the lock, except by the exit handler */
    uint64_t pt_pass_ns;        /* when the thread last ended a pass (weft__now_ns) */
    int lock_depth;             /* nesting of public calls on this thread */
    _Atomic int api_waiting;    /* public calls waiting for the lock: the thread yields */
    /* Until then (weft__now_ns) idle waits yield instead of sleeping: a transfer through
     * shared memory is under way whose next step is microseconds away and wakes nobody
     * (weft__ctx_spin_until). */
    _Atomic uint64_t spin_until_ns;
    /* This host runs more of the job's ranks than it has cores: they take turns, so
     * nothing may count on a peer running at the same time (waits do not spin, and
     * migrations use no shared-memory rings). */
    bool oversubscribed;
    struct weft_req *bg;        /* published requests still in flight */
    /* Jobs (comm/progress/job.h): queued data work, run outside the lock above. */
    pthread_mutex_t job_lock;
    struct weft_job *jobs_head, *jobs_tail;
    struct weft__retired {      /* buffers cancelled sends may still read (weft__retire) */
        void *ptr;
        size_t big_bytes; /* 0: from malloc; else from weft__bigmem_alloc, this size */
    } *retired;
    size_t nretired, cap_retired;
    /* State the layers above keep per context (weft__ctx_ext in comm/core.h). */
    struct weft__ctx_ext {
        const void *key; /* NULL: free slot */
        void *value;
        weft__ctx_ext_fini_fn fini;
    } ext[WEFT__CTX_EXT_MAX];
    /* The process's live contexts, which its exit handler stops (comm/ctx/ctx_exit.c):
     * both fields are that file's, under its lock. */
    struct weft_ctx *exit_next;
    int exit_state;
    pid_t exit_pid;             /* the process that made it (a forked child did not) */
    /* Test faults and path counters (comm/fault.h); everything reaches it through
     * weft__ctx_faults(). */
    weft__faults_t faults;
};

struct weft_group {
    weft_ctx_t *ctx;
    uint32_t id;         /* agreed by all members, never reused in the job: store keys, names */
    uint32_t tag_id;     /* in every tag (12 bits): no two live groups of a member share one */
    uint32_t epoch;      /* goes up with every membership edit */
    int rank, size;
    int *members;        /* [size]: group rank -> stable member id */
    uint32_t coll_seq;   /* sequence number of the next collective */
    uint64_t coll_count; /* collectives started (weft_group_coll_count) */
    weft_status_t revoked; /* WEFT_OK, or what every operation now returns */
    uint32_t join_lo;      /* joiner registrations consumed by admitted edits */
    struct weft_group *parent;
    struct weft_group *next; /* in ctx->groups */
    /* Shared-memory collectives (comm/shm/shm.h): the segment of this epoch, or NULL. */
    struct weft_shm *shm;
    struct weft_shm *shm_old; /* the previous epoch's, unmapped after the next collective */
    uint32_t shm_epoch; /* epoch + 1 once decided for that epoch; 0: not yet */
    /* CUDA stream and NCCL communicator (comm/device/memtype.c, comm/device/nccl_comm.c); NULL until used */
    struct weft_cuda_group *cuda;
    /* weft__group_hosts of epoch hosts_epoch - 1 (0: not computed), for the collectives */
    int *hosts;
    int nhosts;
    int host_ranks; /* ranks on each host when every host has as many, else 0 */
    uint32_t hosts_epoch;
};

/* A request. P2P requests wrap one transport request; compound requests (collectives)
 * advance a state machine in progress(). */
struct weft_req {
    weft_ctx_t *ctx;
    weft_group_t *group;
    weft_status_t status; /* WEFT_INPROGRESS until complete */
    size_t bytes;
    int peer_id;          /* P2P: peer's member id; -1 for compound */
    uint32_t epoch;       /* group epoch when started: an edit of the group fails it */
    const weft_tl_msg_ops_t *ops;
    weft_tl_t *tl;
    void *tl_req;         /* NULL once the transport request is finished */
    /* Compound requests: advance, returning WEFT_INPROGRESS or the final status. */
    weft_status_t (*progress)(struct weft_req *req);
    /* Compound requests: cancel and free children and impl (called once). */
    void (*cleanup)(struct weft_req *req);
    void *impl;
    struct weft_req *prev, *next; /* in ctx->live while in flight */
    struct weft_req *bg_next;     /* in ctx->bg while published and in flight */
    bool in_bg;
    bool detached; /* nobody holds it: whoever completes it frees it (a refusal) */
    /* A wait on it runs queued jobs while it waits (comm/progress/job.h): set by requests whose
     * own work is jobs (migrations, snapshots). A wait on anything else leaves them to
     * the progress thread, so a small collective never waits behind a chunk's copy. */
    bool runs_jobs;
    /* weft_irecv: the buffer's size and the tag, for the error of a message too long. */
    size_t recv_cap;
    uint32_t recv_tag;
};

/* ---- store keys ---- */
/* Format a store key under the context's namespace: "<ns>/" followed by fmt. */
void weft__key(const weft_ctx_t *ctx, char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));


/* ---- a lost store (comm/liveness/store_loss.c) ---- */
/* Log the loss of the store, unless that was done already (once per process). */
void weft__store_loss_report(weft_ctx_t *ctx);
/* weft__error's rule: appends the loss to @p msg when @p status follows from it and
 * returns the level to log at; @p level for other errors. */
weft_log_level_t weft__store_loss_explain(weft_ctx_t *ctx, weft_status_t status, char *msg,
                                          size_t len, weft_log_level_t level);
/* How long (ns) a wait on peers that began at @p start (weft__now_ns) may last: its
 * @p timeout_ns, or once the store is lost, WEFT_FAILURE_TIMEOUT_MS counted from the start
 * or the loss, whichever is later (a hung peer can no longer be told from a slow one). */
uint64_t weft__wait_limit(const weft_ctx_t *ctx, uint64_t start, uint64_t timeout_ns);
/* WEFT_ERR_TIMEOUT for a wait on peers, @p what, that began at @p start and passed
 * weft__wait_limit: records and logs the time waited and, if the lost store cut the wait
 * short, that. */
weft_status_t weft__wait_timeout(weft_ctx_t *ctx, uint64_t start, uint64_t timeout_ns,
                                 const char *what);

/* ---- transports ---- */
/* Point ctx->peers[id] at the instance that reaches it. */
static inline void weft__peer_route(weft_ctx_t *ctx, int id)
{
    const weft_tl_inst_t *t = id == ctx->rank ? ctx->tl_local : ctx->tl_remote;
    ctx->peers[id].ops = t != NULL ? t->ops : NULL;
    ctx->peers[id].tl = t != NULL ? t->tl : NULL;
}
/* Drop unexpected messages whose tag matches @p tag under @p mask in every transport
 * (the messages of an epoch that an edit closed). */
void weft__ctx_discard(weft_ctx_t *ctx, uint64_t tag, uint64_t mask);

/* ---- the progress thread (comm/progress/progress_thread.c; WEFT_API_LOCK in comm/core.h) ---- */
void weft__req_unpublish(weft_req_t *req);
weft_status_t weft__progress_thread_start(weft_ctx_t *ctx);
/* Whether @p req is left to the progress thread, which is keeping up (it ended a pass
 * within the last millisecond): weft_test then only reads its status. */
bool weft__progress_thread_owns(const weft_req_t *req);
/* Wake the thread if it sleeps for want of work (call with the context's lock held). It
 * sleeps on pt_cv with job_lock, so a queued job wakes it while a caller holds the lock. */
void weft__pt_wake(weft_ctx_t *ctx);
/* Stop and join the thread (weft_finalize, before anything is torn down). */
void weft__progress_thread_stop(weft_ctx_t *ctx);
/* The exit handler's: tell the thread to stop, without the context's lock, and join it
 * by @p deadline (CLOCK_REALTIME); false if it could not be joined. Frees nothing. */
bool weft__progress_thread_stop_at_exit(weft_ctx_t *ctx, const struct timespec *deadline);

/* ---- process exit without weft_finalize (comm/ctx/ctx_exit.c) ---- */
/* Put @p ctx, whose threads now run, on the process's list of live contexts; the first
 * call registers the exit handler that stops their threads (call after OpenSSL is
 * initialised, so that the handler runs before OpenSSL's). */
void weft__exit_watch(weft_ctx_t *ctx);
/* Take @p ctx off that list (weft_finalize, first). False when the exit handler has
 * already stopped its threads: the process is ending, and weft_finalize must leave the
 * context alone. */
bool weft__exit_forget(weft_ctx_t *ctx);


/* ---- progress and requests ---- */
/* Release the requests kept for reuse (weft_finalize). */
void weft__req_pool_drain(weft_ctx_t *ctx);
/* Free every request of @p g (NULL: of the context), owners before what they own. */
void weft__req_free_all(weft_ctx_t *ctx, const weft_group_t *g);
/* Whether shared-memory collectives moved since the last call (consumes the news). */
static inline bool weft__shm_news(weft_ctx_t *ctx)
{
    bool news = ctx->shm_moves != ctx->shm_moves_seen;
    ctx->shm_moves_seen = ctx->shm_moves;
    return news;
}

/* ---- point-to-point inside the library ---- */
/*
 * Establish connections with group ranks @p ranks[0..n) now (an empty control message
 * each way), so later operations do not pay for connection set-up. Collective between
 * the pairs: each side must list the other. WEFT_OK or the first error.
 */
weft_status_t weft__warm_up(weft_group_t *g, const int *ranks, int n);
/* Group ranks of @p g to warm up with under WEFT_CONNECT (local: same host; all; lazy:
 * none), excluding this rank. *ranks is malloc'ed. */
weft_status_t weft__warm_up_peers(weft_group_t *g, int **ranks, int *n);
/* Poll the launcher's failure notices (weft/failed/<rank>) without blocking. */
void weft__poll_failure_notices(weft_ctx_t *ctx);

/* ---- liveness (comm/liveness/heartbeat.c) ---- */
weft_status_t weft__heartbeat_start(weft_ctx_t *ctx);
/* Stop renewing the lease; @p disarm: leaving on purpose, not failing. Without it the
 * store publishes this member's failure notice once the connection closes. */
void weft__heartbeat_stop(weft_ctx_t *ctx, bool disarm);
/* The exit handler's: stop the thread, leaving the lease armed (the process's end is a
 * failure the others must see), and join it by @p deadline (CLOCK_REALTIME); false if
 * it could not be joined (it is in a store call). Frees nothing. */
bool weft__heartbeat_stop_at_exit(weft_ctx_t *ctx, const struct timespec *deadline);
/*
 * Store work nobody waits for (deleting keys of finished epochs): @p fn runs on the
 * heartbeat's thread with a copy of the @p len bytes at @p arg, at its next renewal
 * (within WEFT_HEARTBEAT_MS), off the caller's path, in the order queued, and before
 * weft_finalize closes the store. Without the thread, now. @p fn may use ctx->store,
 * ctx->logger and weft__key, nothing else of the context.
 */
void weft__store_chore(weft_ctx_t *ctx, void (*fn)(weft_ctx_t *ctx, const void *arg),
                       const void *arg, size_t len);
/* A chore that deletes @p key. */
void weft__store_chore_delete(weft_ctx_t *ctx, const char *key);

/* ---- membership ---- */
/* Make ctx->peers[id] exist (growing the table); WEFT_ERR_INVALID_ARG past the tag limit. */
weft_status_t weft__peer_slot(weft_ctx_t *ctx, int id);
/* Look up member @p id's transport address in the store (waiting up to timeout_ms);
 * expect_size > 0 also checks the world size it was started with. */
weft_status_t weft__fetch_address(weft_ctx_t *ctx, int id, int timeout_ms, int expect_size);
/* Publish that member @p id failed, so every member learns it (idempotent). The store
 * refuses the report while it sees @p id alive (its lease renewed): weft__failure_noticed
 * then waits for the notice before an edit removes it. */
void weft__report_failure(weft_ctx_t *ctx, int id, const char *why);
/*
 * Whether the store holds member @p id's failure notice, waiting for it up to
 * WEFT_FAILURE_TIMEOUT_MS and two renewals more (by then a member that died or hangs has
 * one: its lease fired or lapsed), and sending this member's report again each renewal
 * period (the store takes it once @p id's renewals are late). WEFT_OK when it does (or
 * the store cannot answer: the edit's own requests then fail), WEFT_ERR_TIMEOUT when
 * @p id stayed alive to the store all along.
 */
weft_status_t weft__failure_noticed(weft_ctx_t *ctx, int id);
/* Fail every in-flight request of @p g with @p why (used when its epoch changes). */
void weft__group_fail_requests(weft_group_t *g, weft_status_t why);
/* Revoke @p g on this member alone (WEFT_ERR_REVOKED, its requests in flight failed);
 * false when it was revoked already. */
bool weft__group_revoke_here(weft_group_t *g);
/* Publish the revocation of @p g's epoch @p epoch ("failed/g<id>.<epoch>", read by every
 * member's watch of failures); @p why is the notice's text. */
weft_status_t weft__group_publish_revoke(weft_group_t *g, uint32_t epoch, const char *why);
/*
 * This member abandoned an operation of @p g's epoch @p epoch half way (@p what, e.g.
 * "allreduce #3 (timed out)"): the others may be waiting in it, or have finished it, so the
 * epoch is revoked for every member (locally, through the shared-memory segment, and by a
 * notice in the store), and every member's repair moves the group on to one new epoch.
 * Nothing when the group was revoked or edited since: the others know already.
 */
void weft__group_abandon(weft_group_t *g, uint32_t epoch, const char *what);
/* Mark member @p id failed (idempotent); revokes every group containing it. */
void weft__peer_failed(weft_ctx_t *ctx, int id, weft_status_t why);
/* The same table for @p g's current epoch, computed once per epoch and kept in the group;
 * NULL when out of memory. *@p nhosts gets the number of hosts. */
const int *weft__group_host_table(weft_group_t *g, int *nhosts);
/* From the same table: the number of ranks on each host when every host of @p g has as
 * many, else 0 (0 also when out of memory). */
int weft__group_host_ranks(weft_group_t *g);
/* Create a group from member ids (ordered) with an agreed id and tag id (see struct
 * weft_group); appended to ctx->groups. */
weft_status_t weft__group_create(weft_ctx_t *ctx, const int *members, int size, uint32_t id,
                                 uint32_t tag_id, weft_group_t *parent, weft_group_t **out);
/* Free @p g with its requests; messages of its tag id still waiting here are dropped. */
void weft__group_destroy(weft_group_t *g);

/* ---- CUDA state (comm/device/memtype.c) ---- */
/* Release g->cuda (NCCL communicator included); weft__group_destroy must call it. */
void weft__cuda_group_fini(weft_group_t *g);
/* Release ctx->cuda; weft_finalize must call it before closing the store. */
void weft__cuda_ctx_fini(weft_ctx_t *ctx);

/* ---- per-context extensions (comm/ctx/contract.c) ---- */
/* Release every extension value, last set first (weft_finalize). */
void weft__ctx_ext_fini_all(weft_ctx_t *ctx);

/* ---- user operators ---- */
/* The params of user operator @p op, or NULL if it is not a live user operator. */
const weft_op_params_t *weft__user_op(const weft_ctx_t *ctx, weft_op_t op);

#endif
