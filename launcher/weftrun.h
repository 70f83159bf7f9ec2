/*
 * weftrun internals: the options, the table of rank slots and the pieces of the
 * supervisor (spawning, output forwarding, the event loop, the --elastic decisions). Only
 * the weftrun*.c files include this.
 *
 * The supervisor is one thread with one poll() loop: a self-pipe delivers SIGCHLD and the
 * signals to forward, the pipes of --tag-output deliver the ranks' output, and the poll
 * timeout is the nearest deadline (the job timeout or the end of the grace period). The
 * store server runs on a thread of its own; the loop only calls
 * weft__store_server_set(), which is thread-safe.
 */
#ifndef WEFTRUN_H
#define WEFTRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include "comm/ctx/config.h"
#include "comm/ctx/log.h"
#include "comm/shm/shm_job.h"
#include "comm/store/store.h"
#include "comm/ctx/tag.h"
#include "util/clock.h"

/* Exit codes of weftrun itself, beside the ranks' own. */
#define WEFTRUN_EXIT_USAGE 2
#define WEFTRUN_EXIT_TIMEOUT 124
#define WEFTRUN_EXIT_NOT_FOUND 127
#define WEFTRUN_EXIT_FAILED 1 /* weftrun could not start the job (store, fork, ...) */

#define WEFTRUN_DEFAULT_GRACE_MS 3000
#define WEFTRUN_DEFAULT_BIND "127.0.0.1"
#define WEFTRUN_TOKEN_MIN 32 /* characters of a token given by the user: 128 bits in hex */
#define WEFTRUN_TOKEN_MAX 64
#define WEFTRUN_DEFAULT_MAX_RESTARTS 16
/* Member ids from here up are handed out by the store to processes that join without a
 * launcher (comm/ctx/ctx.c): the ids of weftrun's ranks and replacements stay below. */
#define WEFTRUN_MAX_MEMBER_IDS ((int)(WEFT_TAG_MAX_MEMBERS / 2))
/* The key prefix under which an abnormal exit of rank N is published, and the ranks'
 * leases lapse: "<WEFT_NAMESPACE>/failed/" (weftrun_job_t.failed_prefix). */
#define WEFTRUN_FAILED_FMT "%s/failed/"

typedef struct weftrun_opts {
    int nranks;            /* -n */
    bool tag_output;       /* --tag-output */
    bool member_secrets;   /* ranks get their own secret, not the token (not with --share-token) */
    bool cpu_bind;         /* --cpu-bind core: each rank pinned to its local rank's CPU */
    bool keep_going;       /* --keep-going */
    bool elastic;          /* --elastic */
    bool replace;          /* --replace (elastic only) */
    int min_alive;         /* --min (elastic only): fewer running processes stop the job */
    int max_restarts;      /* --max-restarts (elastic only): replacements for the whole job */
    bool store_only;       /* --store-only */
    uint64_t grace_ms;     /* --grace */
    uint64_t timeout_ms;   /* --timeout; 0: none */
    const char *bind_addr; /* --bind; NULL: the host of --store, else 127.0.0.1 */
    int port;              /* --port; 0: any free port */
    int nnodes;            /* --nnodes */
    int node_rank;         /* --node-rank */
    const char *store;     /* --store HOST:PORT; NULL: this weftrun picks the address */
    bool external_store;   /* --external-store: no node serves it */
    const char *token;     /* --token, --token-file or WEFT_JOB_TOKEN; NULL: a random one */
    char token_buf[72];    /* what --token-file held */
    const char *token_file; /* --token-file, or NULL */
    char bind_buf[256];    /* the host of --store, to bind to */
    int verbose;           /* -v, repeatable */
    char **argv;           /* the program and its arguments (NULL-terminated) */
} weftrun_opts_t;

/*
 * One output stream of a rank under --tag-output: the read end of a pipe, the bytes
 * of the line being assembled, and whether the next byte starts a line (and so gets
 * the prefix).
 */
typedef struct weftrun_stream {
    int fd;     /* -1 when closed */
    int out_fd; /* where the prefixed lines go: 1 or 2 */
    char *buf;  /* pending bytes of an unfinished line */
    size_t len;
    bool at_line_start;
} weftrun_stream_t;

/* The state of a rank slot. */
typedef enum weftrun_slot_state {
    WEFTRUN_SLOT_EMPTY = 0, /* never started */
    WEFTRUN_SLOT_RUNNING,   /* the process is alive (not reaped yet) */
    WEFTRUN_SLOT_EXITED,    /* reaped, exit status 0 */
    WEFTRUN_SLOT_FAILED,    /* reaped, non-zero exit or killed by a signal */
} weftrun_slot_state_t;

/*
 * One slot per member id: the N ranks of the job, then, under --elastic --replace, one
 * per replacement. Member ids are never reused (the library refuses an id started twice
 * and a dead member's notice stays in the store), so a replacement gets a slot and an id
 * of its own rather than the dead one's. A slot outlives its process: its pipes are
 * drained and its process group signalled when the job ends.
 */
typedef struct weftrun_slot {
    int rank;       /* member id: WEFT_RANK and the [rank N] prefix */
    int local_rank; /* WEFT_LOCAL_RANK: a replacement takes the one of the member it replaces */
    int replaces;   /* member id of the dead process this one replaces; -1 for the first N */
    weftrun_slot_state_t state;
    pid_t pid;      /* also the process group of the rank and its descendants */
    /* Its process group was seen empty after it was reaped: the id may belong to a new,
     * unrelated group by now, so weftrun never signals it again. */
    bool group_gone;
    int wstatus;    /* from waitpid(), valid once reaped */
    int exec_errno; /* why the exec failed, 0 if it did not */
    bool fenced;    /* declared failed by its lapsed lease while running, then killed */
    bool fenced_early; /* ... before the job began to finish: no member at its end */
    /* Its replacement was started when it was fenced, before it was reaped. */
    bool replaced;
    /* Reported failed by a member (<ns>/failed/<id> set) before the job began to finish:
     * the members had repaired around it, so its end, however late it is reaped, does
     * not fail the finishing job. */
    bool reported_early;
    uint64_t stopped_since_ms; /* when the process was stopped (SIGSTOP...); 0: not stopped */
    weftrun_stream_t out, err;
} weftrun_slot_t;

/* How a process ended abnormally: for the messages, the store notice and the exit code. */
typedef struct weftrun_death {
    int code;      /* its exit code, or 128 + the signal number */
    char what[32]; /* the value of <ns>/failed/<id>: "exit N" or "signal N" */
    char text[64]; /* "exited with status N" or "was killed by signal N (Name)" */
} weftrun_death_t;

/* Why the job is being stopped; the first reason wins and gives the exit code. */
typedef enum weftrun_stop_reason {
    WEFTRUN_STOP_NONE = 0,
    WEFTRUN_STOP_RANK_FAILED,
    WEFTRUN_STOP_TOO_FEW, /* --elastic: a death left fewer than --min processes */
    WEFTRUN_STOP_SIGNAL,
    WEFTRUN_STOP_TIMEOUT,
    WEFTRUN_STOP_LAUNCH_FAILED, /* a rank could not be started (fork failed) */
    WEFTRUN_STOP_REMOTE,        /* another node stopped the job, or was lost */
    WEFTRUN_STOP_JOB_FAILED,    /* a rank exited WEFT_EXIT_JOB_FAILED: the job failed */
} weftrun_stop_reason_t;

typedef struct weftrun_nodes weftrun_nodes_t;

typedef struct weftrun_job {
    const weftrun_opts_t *opts;
    int world_size; /* ranks of the whole job: --nnodes x -n */
    int rank_base;  /* member id of this node's first rank: --node-rank x -n */
    bool replacement_node; /* a node started again: its ranks join as replacements */
    weftrun_nodes_t *nodes; /* the other nodes (weftrun_nodes.c); NULL in a one-node job */
    const weft_logger_t *lg;
    weft_config_t cfg; /* the WEFT_* settings of weftrun's environment, the ranks' too */
    char failed_prefix[48]; /* WEFTRUN_FAILED_FMT under the ranks' WEFT_NAMESPACE */
    weft_store_server_t *server;
    char store_addr[300]; /* host:port the ranks connect to */
    char token[65];
    char shm_job[WEFT_SHM_ID_HEX + 1]; /* <job> of the ranks' names in /dev/shm; "": unknown */
    char *prog_path;       /* argv[0] resolved against PATH */
    weftrun_slot_t *slots; /* the first nslots are in use: the N ranks, then replacements */
    int nslots;
    int max_slots;  /* N + --max-restarts under --replace, else N */
    int restarts;   /* replacements started so far */
    int sigfd;      /* read end of the self-pipe of SIGCHLD and forwarded signals */
    int fence_rd, fence_wr; /* member ids whose leases lapsed, from the store's thread */
    int nrunning;   /* slots in WEFTRUN_SLOT_RUNNING */
    bool finishing; /* --elastic: a process has exited 0, so the job is ending */
    weftrun_stop_reason_t stop_reason;
    int exit_code;        /* decided by the first failure or stop reason; 0 otherwise */
    bool have_failure;    /* exit_code was set by a rank's failure */
    uint64_t deadline_ms; /* job timeout (monotonic), 0: none */
    uint64_t kill_at_ms;  /* when SIGKILL follows SIGTERM, 0: not stopping */
    uint64_t stop_fence_ms; /* a rank stopped this long is fenced (WEFT_FAILURE_TIMEOUT_MS) */
    uint64_t stop_fence_at_ms; /* when the next stopped rank is due to be fenced, 0: none */
    uint64_t lease_at_ms; /* when this node's lease is due for renewal, 0: none */
} weftrun_job_t;

/* ---- weftrun_args.c ---- */

/* Parse the command line into @p o. Returns -1 when the options are fine, else the exit
 * code (0 after --help or --version, having printed it). */
int weftrun_parse_args(int argc, char **argv, weftrun_opts_t *o);

/* ---- weftrun_spawn.c ---- */

/*
 * Resolve @p name like execvp() does: names with a '/' are used as they are, others
 * are searched in PATH. Logs and returns WEFT_ERR_INVALID_ARG when nothing executable
 * is found; *path (malloc'ed) is set on success.
 */
weft_status_t weftrun_resolve_program(const char *name, const weft_logger_t *lg, char **path);

/*
 * Start the process of @p slot: its own process group, the WEFT_* environment,
 * stdout/stderr to pipes under --tag-output. On an exec failure in the child the
 * child exits 127 and this logs why; the slot is RUNNING either way once fork worked.
 */
weft_status_t weftrun_spawn_rank(weftrun_job_t *job, weftrun_slot_t *slot);

/* ---- weftrun_output.c ---- */

void weftrun_stream_init(weftrun_stream_t *s, int fd, int out_fd);
/*
 * Read what @p s has (one read), write the complete lines with the prefix of @p rank.
 * Closes the stream at end of file, flushing an unfinished last line with a newline.
 */
void weftrun_stream_pump(weftrun_stream_t *s, int rank);
/* Read everything available now (no waiting), then close as at end of file. */
void weftrun_stream_drain(weftrun_stream_t *s, int rank);
void weftrun_stream_close(weftrun_stream_t *s, int rank);

/* ---- weftrun_signals.c ---- */

/*
 * Install the handlers of SIGCHLD, SIGINT, SIGTERM and SIGHUP, which write the signal
 * number to a self-pipe whose read end is *sigfd; ignore SIGPIPE.
 */
weft_status_t weftrun_signals_init(int *sigfd, const weft_logger_t *lg);
/* In a forked child before exec: default actions again (async-signal-safe). */
void weftrun_signals_reset_in_child(void);
/* The next signal noted on @p sigfd, 0 when none is waiting. */
int weftrun_next_signal(int sigfd);
/*
 * Wait for SIGINT/SIGTERM/SIGHUP on @p sigfd (--store-only), at most @p timeout_ms
 * (0: no limit). Returns false when the time ran out.
 */
bool weftrun_wait_for_signal(int sigfd, uint64_t timeout_ms, const weft_logger_t *lg);

/* ---- weftrun_fence.c ---- */

/* The pipe of lapsed leases: fence_rd and fence_wr, both non-blocking. */
weft_status_t weftrun_fence_init(weftrun_job_t *job);
void weftrun_fence_close(weftrun_job_t *job);
/* The store's on_lapse hook (its thread, its lock held): passes the member id on. */
void weftrun_fence_on_lapse(void *arg, const char *key);
/* Kill the rank of member id @p id if it runs here, saying @p why (marking it fenced). */
void weftrun_fence_id(weftrun_job_t *job, int id, const char *why);
/* Kill every still running rank whose lease lapsed (marking its slot fenced); lapsed ids
 * of other nodes are passed on to them. */
void weftrun_fence_read(weftrun_job_t *job);
/* Kill every rank that has been stopped for stop_fence_ms or longer (marking it fenced);
 * returns the nearest time (monotonic ms) at which another would be due, 0 for none. */
uint64_t weftrun_fence_stopped(weftrun_job_t *job, uint64_t now);

/* ---- weftrun_supervise.c ---- */

/* Start every rank and supervise until all have exited; returns weftrun's exit code. */
int weftrun_run_job(weftrun_job_t *job);

/*
 * Take the next free slot and start a process in it as member @p id (local rank
 * @p local_rank, replacing member @p replaces or -1). *slot is set when it started.
 */
weft_status_t weftrun_start_slot(weftrun_job_t *job, int id, int local_rank, int replaces,
                                 weftrun_slot_t **slot);
/* A member id never used in this job, for a replacement: the next after the job's
 * ranks and the replacements so far, from the store's counter in a multi-node job. */
weft_status_t weftrun_new_member_id(weftrun_job_t *job, int *id);

/* Signal @p s's process group (its process alone if it has none yet, while it runs). */
void weftrun_signal_slot(weftrun_slot_t *s, int sig);

/* Stop every process: @p sig now, SIGKILL after the grace period. The first reason wins. */
void weftrun_begin_stop(weftrun_job_t *job, weftrun_stop_reason_t reason, int exit_code, int sig);

/* ---- weftrun_elastic.c ---- */

/*
 * --elastic: decide what the abnormal end @p d of @p s means (already reaped and
 * published): start a replacement, let the others go on, or stop the job.
 */
void weftrun_elastic_on_death(weftrun_job_t *job, const weftrun_slot_t *s,
                              const weftrun_death_t *d);
/* --elastic --replace: @p s was fenced (SIGKILL sent); start its replacement now, not when
 * it is reaped (marks it replaced). */
void weftrun_elastic_on_fenced(weftrun_job_t *job, weftrun_slot_t *s);
/* --elastic: a process exited 0. */
void weftrun_elastic_on_success(weftrun_job_t *job, const weftrun_slot_t *s);
/* --elastic: the job is finishing (@p why: what said so), unless it already was. */
void weftrun_elastic_finishing(weftrun_job_t *job, const char *why);

/* ---- weftrun_nodes.c ---- */

/*
 * A job over several nodes: connect to the store (waiting for it up to
 * WEFT_CONNECT_TIMEOUT_MS), watch the other nodes' news, and, on a node that does not
 * serve the store, register and arm this node's lease. Sets job->replacement_node.
 */
weft_status_t weftrun_nodes_start(weftrun_job_t *job);
/* The descriptor to poll for the other nodes' news; -1 when there is none. */
int weftrun_nodes_fd(const weftrun_job_t *job);
/* Act on the news waiting: stops, fences, nodes lost or ended, the job finishing. */
void weftrun_nodes_read(weftrun_job_t *job);
/* Renew this node's lease if due; returns when it is next due (monotonic ms), 0: never. */
uint64_t weftrun_nodes_tick(weftrun_job_t *job, uint64_t now);
/* Set weftrun/... @p key to "<code> <node> <why>", or to "<node>" when @p code < 0. */
void weftrun_nodes_publish(weftrun_job_t *job, const char *key, int code, const char *why);
/* A member id for a replacement, from the store's counter. */
weft_status_t weftrun_nodes_new_id(weftrun_job_t *job, int *id);
/* Before rank @p id starts: on etcd, puts it under this node's lease
 * (weftrun/ranks/<R>.<k>/<id>) and returns true with the value of its WEFT_NODE_LEASE in
 * @p var ("<ns>/failed/<id> <that key>"); the rank then holds no lease of its own. False
 * elsewhere, or if the key cannot be set. */
bool weftrun_nodes_rank_started(weftrun_job_t *job, int id, char *var, size_t len);
/* Rank @p id was reaped (@p clean: it exited 0): takes it from under the node's lease,
 * publishing <ns>/failed/<id> for a clean exit if the rank had not left with the others
 * (a failure is published by the supervisor before this). */
void weftrun_nodes_rank_ended(weftrun_job_t *job, int id, bool clean);
/* This node's ranks have ended with @p code: say so, or on the node serving the store
 * wait for every other node to end; then close the connections. Returns weftrun's exit
 * status: @p code, or on the serving node, when that is 0, the status of a stop another
 * node published meanwhile (the job failed, though this node's ranks did not). */
int weftrun_nodes_finish(weftrun_job_t *job, int code);
/* Set or look up a key: through the server when this weftrun serves it, else through
 * the connection of weftrun_nodes.c. */
weft_status_t weftrun_store_set(weftrun_job_t *job, const char *key, const char *val);
bool weftrun_store_has(weftrun_job_t *job, const char *key);

#endif
