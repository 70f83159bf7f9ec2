/*
 * weft-store-scale: many lightweight clients of one store (store_scale.c runs the store
 * and the phases; store_scale_client.c the worker processes and their clients).
 *
 * The parent sends each worker one byte per phase (its scale_phase_t; 0: exit) on a pipe,
 * and the worker answers with one scale_report_t once every client of its own is done
 * with that phase, one has failed, or the phase's deadline has passed.
 */
#ifndef WEFT_TESTS_STORE_SCALE_H
#define WEFT_TESTS_STORE_SCALE_H

#include <stdint.h>

#define SCALE_PER_HOST 8                  /* clients per source address, as ranks per host */
#define SCALE_ADDR_LEN 64                 /* bytes of each client's bench/addr/<id> value */
#define SCALE_FAILED_KEY "bench/failed/7" /* the failure notice the launcher sets */
#define SCALE_FAILED_VALUE "member 7 failed (weft-store-scale)"
#define SCALE_END_KEY "bench/failed/end"

typedef enum scale_phase {
    SCALE_QUIT = 0,
    SCALE_CONNECT = 1,    /* connect and authenticate as member <id> */
    SCALE_RENDEZVOUS = 2, /* SET bench/addr/<id>, ADD bench/arrived, GET bench/go */
    SCALE_WATCH = 3,      /* WATCH bench/failed/ (untimed set-up of the fan-out) */
    SCALE_FANOUT = 4,     /* the EVENT of bench/failed/7 reaches every client */
    SCALE_CHECK = 5,      /* the EVENT of bench/failed/end: nothing came twice before it */
    SCALE_NPHASES = 6,
} scale_phase_t;

/* What every worker is told. */
typedef struct scale_opts {
    int clients;    /* N, in all workers */
    int procs;      /* worker processes */
    int port;       /* the store's, on 127.0.0.1 */
    int timeout_ms; /* of every phase */
    int window;     /* handshakes in flight per worker; 0: no limit */
    const char *token;
} scale_opts_t;

/* One worker's answer to one phase (smaller than PIPE_BUF: written at once). */
typedef struct scale_report {
    int32_t phase;
    int32_t count;     /* the worker's clients */
    int32_t done;      /* of them, done with the phase */
    int32_t failed;    /* of them, failed (a wrong answer, a closed connection) */
    int32_t timed_out; /* 1: the deadline passed first */
    int32_t winners;   /* rendezvous: clients whose ADD returned N */
    int64_t add_sum;   /* rendezvous: the sum of the values ADD returned */
    uint64_t busy;     /* handshakes the store answered "busy" (WEFT_ERR_NO_MEMORY) */
    uint64_t dropped;  /* handshakes it closed before answering */
    uint64_t refused;  /* connect() calls that failed */
    char why[200];     /* the first failure, "" if none */
} scale_report_t;

/* A worker process's life: clients [first, first + count). Returns the exit status. */
int scale_worker(const scale_opts_t *o, int first, int count, int cmd_fd, int report_fd);

/* The value client @p id writes to bench/addr/<id>. */
void scale_addr_value(uint32_t id, char out[SCALE_ADDR_LEN]);

#endif
