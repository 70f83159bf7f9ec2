/*
 * weftrun internals: the options, the table of rank slots and the pieces of the
 * supervisor (spawning, output forwarding, the event loop). Only the weftrun*.c files
 * include this.
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

#include "comm/log.h"
#include "comm/store.h"

/* Exit codes of weftrun itself, beside the ranks' own. */
#define WEFTRUN_EXIT_USAGE 2
#define WEFTRUN_EXIT_TIMEOUT 124
#define WEFTRUN_EXIT_NOT_FOUND 127
#define WEFTRUN_EXIT_FAILED 1 /* weftrun could not start the job (store, fork, ...) */

#define WEFTRUN_DEFAULT_GRACE_MS 3000
#define WEFTRUN_DEFAULT_BIND "127.0.0.1"
/* The key prefix under which an abnormal exit of rank N is published. */
#define WEFTRUN_FAILED_PREFIX "weft/failed/"

typedef struct weftrun_opts {
    int nranks;            /* -n */
    bool tag_output;       /* --tag-output */
    bool keep_going;       /* --keep-going */
    bool store_only;       /* --store-only */
    uint64_t grace_ms;     /* --grace */
    uint64_t timeout_ms;   /* --timeout; 0: none */
    const char *bind_addr; /* --bind */
    int port;              /* --port; 0: any free port */
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

/*
 * The state of a rank slot. A slot outlives its process so that an elastic mode can
 * start a replacement in it later (a new process, the same rank).
 */
typedef enum weftrun_slot_state {
    WEFTRUN_SLOT_EMPTY = 0, /* never started */
    WEFTRUN_SLOT_RUNNING,   /* the process is alive (not reaped yet) */
    WEFTRUN_SLOT_EXITED,    /* reaped, exit status 0 */
    WEFTRUN_SLOT_FAILED,    /* reaped, non-zero exit or killed by a signal */
} weftrun_slot_state_t;

typedef struct weftrun_slot {
    int rank;
    weftrun_slot_state_t state;
    pid_t pid;      /* also the process group of the rank and its descendants */
    int wstatus;    /* from waitpid(), valid once reaped */
    int starts;     /* how many processes this slot has had (replacements later) */
    int exec_errno; /* why the last exec failed, 0 if it did not */
    weftrun_stream_t out, err;
} weftrun_slot_t;

/* Why the job is being stopped; the first reason wins and gives the exit code. */
typedef enum weftrun_stop_reason {
    WEFTRUN_STOP_NONE = 0,
    WEFTRUN_STOP_RANK_FAILED,
    WEFTRUN_STOP_SIGNAL,
    WEFTRUN_STOP_TIMEOUT,
    WEFTRUN_STOP_LAUNCH_FAILED, /* a rank could not be started (fork failed) */
} weftrun_stop_reason_t;

typedef struct weftrun_job {
    const weftrun_opts_t *opts;
    const weft_logger_t *lg;
    weft_store_server_t *server;
    char store_addr[300]; /* host:port the ranks connect to */
    char token[65];
    char *prog_path;       /* argv[0] resolved against PATH */
    weftrun_slot_t *slots; /* opts->nranks of them */
    int sigfd;             /* read end of the self-pipe of SIGCHLD and forwarded signals */
    int nrunning;          /* slots in WEFTRUN_SLOT_RUNNING */
    weftrun_stop_reason_t stop_reason;
    int exit_code;        /* decided by the first failure or stop reason; 0 otherwise */
    bool have_failure;    /* exit_code was set by a rank's failure */
    uint64_t deadline_ms; /* job timeout (monotonic), 0: none */
    uint64_t kill_at_ms;  /* when SIGKILL follows SIGTERM, 0: not stopping */
} weftrun_job_t;

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

/* ---- weftrun_supervise.c ---- */

/* Start every rank and supervise until all have exited; returns weftrun's exit code. */
int weftrun_run_job(weftrun_job_t *job);

/* Monotonic clock in milliseconds. */
uint64_t weftrun_now_ms(void);

#endif
