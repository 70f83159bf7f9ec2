/*
 * weft-perf sendrecv: point-to-point between ranks 0 and 1 (other ranks idle).
 *
 * For each size:
 *  - bandwidth: rank 0 keeps a window of -W sends in flight to rank 1, which has the
 *    matching receives posted, then waits for a zero-byte ack; `time` is the time per
 *    message over -n such windows, algbw = busbw = size / time (unidirectional);
 *  - latency: ping-pong of -n round trips; `lat(us)` is half a round trip.
 * Like osu_bw and ucx_perftest, all messages of a window share one send and one receive
 * buffer; with --rotate each message of the stream has its own place in a pool of about
 * twice the last-level cache (cold memory, as a stream of distinct data such as a
 * migration reads and writes), cycled through across windows. With -c 1 an untimed pass per size sends patterns that depend on (source,
 * destination, size, round) both ways and counts wrong bytes; any wrong byte makes the
 * exit status 1.
 */
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define TAG_DATA 1
#define TAG_ACK 2
#define TAG_PING 3
#define TAG_CHECK 4
#define TAG_WRONG 5
#define CHECK_ROUNDS 2
#define POOL_MAX_BYTES (1ull << 30) /* --rotate: the most the pool of each side takes */

typedef struct sr_ctx {
    perf_world_t w;
    const perf_opts_t *o;
    int peer; /* 1 on rank 0, 0 on rank 1 */
    unsigned char *sbuf, *rbuf; /* pool_bytes each */
    size_t pool_bytes;
    size_t slots, next; /* messages of the current size the pool holds; the next one */
    weft_req_t **reqs;  /* [window] */
} sr_ctx_t;

/* A blocking send spelled out as start + wait, so each message is complete (its buffer
 * reusable) when this returns. */
static weft_status_t send_wait(weft_group_t *g, const void *buf, size_t len, int peer,
                               uint32_t tag)
{
    weft_req_t *req = NULL;
    weft_status_t st = weft_isend(g, buf, len, peer, tag, &req);
    if (st == WEFT_INPROGRESS) {
        st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
        weft_req_free(req);
    }
    return st;
}

/* Wait for every request of @p reqs[0..n) (NULL entries are complete); first error. */
static weft_status_t wait_all(weft_req_t **reqs, int n)
{
    weft_status_t first = WEFT_OK;
    for (int i = 0; i < n; i++) {
        if (reqs[i] == NULL) {
            continue; /* completed inline */
        }
        weft_status_t st = weft_wait(reqs[i], WEFT_TIMEOUT_DEFAULT);
        if (st != WEFT_OK && first == WEFT_OK) {
            first = st;
        }
        weft_req_free(reqs[i]);
        reqs[i] = NULL;
    }
    return first;
}

/* One window: rank 0 sends @p window messages and waits for the ack; rank 1 receives. */
static weft_status_t bw_window(sr_ctx_t *c, size_t size, int window)
{
    weft_status_t st = WEFT_OK;
    int posted = 0;
    for (; posted < window && st >= 0; posted++) {
        size_t at = (c->next++ % c->slots) * size; /* 0 unless --rotate */
        if (c->w.rank == 0) {
            st = weft_isend(c->w.world, c->sbuf + at, size, c->peer, TAG_DATA, &c->reqs[posted]);
        } else {
            st = weft_irecv(c->w.world, c->rbuf + at, size, c->peer, TAG_DATA, &c->reqs[posted]);
        }
    }
    if (st < 0) {
        wait_all(c->reqs, posted - 1);
        return st;
    }
    if ((st = wait_all(c->reqs, posted)) != WEFT_OK) {
        return st;
    }
    if (c->w.rank == 0) {
        return weft_recv(c->w.world, NULL, 0, c->peer, TAG_ACK, NULL);
    }
    return send_wait(c->w.world, NULL, 0, c->peer, TAG_ACK);
}

static weft_status_t pingpong(sr_ctx_t *c, size_t size)
{
    weft_status_t st;
    if (c->w.rank == 0) {
        st = send_wait(c->w.world, c->sbuf, size, c->peer, TAG_PING);
        if (st == WEFT_OK) {
            st = weft_recv(c->w.world, c->rbuf, size, c->peer, TAG_PING, NULL);
        }
    } else {
        st = weft_recv(c->w.world, c->rbuf, size, c->peer, TAG_PING, NULL);
        if (st == WEFT_OK) {
            st = send_wait(c->w.world, c->sbuf, size, c->peer, TAG_PING);
        }
    }
    return st;
}

/* Untimed check: patterns both ways; returns the wrong bytes seen by both ranks (on
 * rank 0) or by this rank (on rank 1) in *wrong. */
static weft_status_t check_pass(sr_ctx_t *c, size_t size, long *wrong)
{
    long bad = 0;
    weft_status_t st = WEFT_OK;
    for (int round = 0; round < CHECK_ROUNDS && st == WEFT_OK; round++) {
        for (int sender = 0; sender < 2 && st == WEFT_OK; sender++) {
            uint64_t seed = perf_seed((uint64_t)sender, (uint64_t)(1 - sender), size,
                                      (uint64_t)round);
            if (c->w.rank == sender) {
                perf_fill_pattern(c->sbuf, size, seed);
                st = send_wait(c->w.world, c->sbuf, size, c->peer, TAG_CHECK);
                continue;
            }
            size_t got = SIZE_MAX;
            memset(c->rbuf, 0xa5, size);
            st = weft_recv(c->w.world, c->rbuf, size, c->peer, TAG_CHECK, &got);
            if (st == WEFT_OK) {
                bad += (long)perf_check_pattern(c->rbuf, size, seed);
                bad += got != size ? 1 : 0;
            }
        }
    }
    if (st != WEFT_OK) {
        return st;
    }
    int64_t theirs = 0, mine = bad;
    if (c->w.rank == 1) {
        st = send_wait(c->w.world, &mine, sizeof(mine), c->peer, TAG_WRONG);
    } else {
        st = weft_recv(c->w.world, &theirs, sizeof(theirs), c->peer, TAG_WRONG, NULL);
    }
    *wrong = (long)(mine + theirs);
    return st;
}

/* Measure one size; rank 0 fills @p row. */
static weft_status_t run_size(sr_ctx_t *c, size_t size, perf_row_t *row)
{
    const perf_opts_t *o = c->o;
    weft_status_t st = WEFT_OK;
    long wrong = -1;
    if (o->check && (st = check_pass(c, size, &wrong)) != WEFT_OK) {
        return st;
    }
    c->slots = o->reuse || size == 0 ? 1 : c->pool_bytes / size;
    c->next = 0;
    for (int i = 0; i < o->warmup && st == WEFT_OK; i++) {
        st = bw_window(c, size, o->window);
    }
    uint64_t t0 = perf_now_ns();
    for (int i = 0; i < o->iters && st == WEFT_OK; i++) {
        st = bw_window(c, size, o->window);
    }
    double bw_us = (double)(perf_now_ns() - t0) / 1e3;
    for (int i = 0; i < o->warmup && st == WEFT_OK; i++) {
        st = pingpong(c, size);
    }
    t0 = perf_now_ns();
    for (int i = 0; i < o->iters && st == WEFT_OK; i++) {
        st = pingpong(c, size);
    }
    double pp_us = (double)(perf_now_ns() - t0) / 1e3;
    if (st != WEFT_OK) {
        return st;
    }
    double n = o->iters > 0 ? (double)o->iters : 1.0;
    memset(row, 0, sizeof(*row));
    row->bytes = size;
    row->count = size / perf_dtype_size(o->dtype);
    row->op = "none";
    row->root = -1;
    row->time_us = bw_us / (n * o->window);
    row->algbw_gbs = perf_gbs(size, row->time_us);
    row->busbw_gbs = row->algbw_gbs;
    row->wrong = wrong;
    row->extra[0] = pp_us / (2.0 * n);
    row->extra[1] = (double)(c->next < c->slots ? c->next : c->slots); /* places used */
    return WEFT_OK;
}

static int sweep(sr_ctx_t *c)
{
    static const perf_col_t cols[] = {{"lat(us)", "lat_us", 2}, {"sets", "buffer_sets", 0}};
    perf_table_t t;
    int active = c->w.rank < 2;
    perf_table_begin(&t, c->o, "sendrecv", c->w.size, cols, 2, c->w.rank == 0);
    size_t size = c->o->min_bytes;
    do {
        perf_row_t row;
        if (!active) {
            break;
        }
        weft_status_t st = run_size(c, size, &row);
        if (st != WEFT_OK) {
            char what[64];
            snprintf(what, sizeof(what), "sendrecv of %zu bytes", size);
            perf_report_error(&c->w, what, st);
            return PERF_EXIT_ERROR;
        }
        /* Rank 1 counts its own wrong bytes too, so its exit status tells as well. */
        perf_table_row(&t, &row);
    } while (perf_next_size(c->o, &size));
    return perf_table_end(&t);
}

static void usage_note(void)
{
    printf("\nsendrecv: ranks 0 and 1 exchange messages; other ranks idle.\n"
           "  time(us)  per message, streaming a window of -W sends (algbw = busbw = size/time)\n"
           "  lat(us)   half a ping-pong round trip\n"
           "  sets      places in the buffers the stream's messages went through\n"
           "Without --rotate every message of a window uses the same send and receive buffer\n"
           "(osu_bw, cache-warm); with it, each message its own place in a pool of about twice\n"
           "the last-level cache per side (cache-cold, as a migration's stream of distinct data).\n");
}

static int extras_handler(void *arg, const char *name, const char *val)
{
    (void)name;
    (void)val;
    *(bool *)arg = true; /* --rotate */
    return 0;
}

int perf_sendrecv_main(int argc, char **argv)
{
    perf_opts_t o;
    perf_opts_default(&o);
    o.dtype = WEFT_U8; /* messages are bytes: count = size */
    o.reuse = true;    /* one send and one receive buffer, as osu_bw: said in the output */
    o.uses = PERF_USE_SIZES | PERF_USE_ITERS | PERF_USE_WARMUP | PERF_USE_CHECK | PERF_USE_WINDOW |
             PERF_USE_JSON;
    static const perf_extra_opt_t extras[] = {
        {"--rotate", false, NULL,
         "each message its own place in a pool larger than the cache (cold memory)"}};
    bool rotate = false;
    int rc = perf_parse_opts(argc, argv, &o, "sendrecv", extras, 1, extras_handler, &rotate);
    if (rc == PERF_HELP) {
        usage_note();
        return PERF_EXIT_OK;
    }
    if (rc != PERF_CONTINUE) {
        return rc == PERF_BAD ? PERF_EXIT_USAGE : PERF_EXIT_OK;
    }
    sr_ctx_t c = {.o = &o};
    if (perf_world_open(&c.w) != 0) {
        return PERF_EXIT_ERROR;
    }
    if (c.w.size < 2) {
        fprintf(stderr, "weft-perf sendrecv: needs at least 2 ranks (weftrun -n 2)\n");
        perf_world_close(&c.w);
        return PERF_EXIT_USAGE;
    }
    c.peer = c.w.rank == 0 ? 1 : 0;
    o.reuse = !rotate; /* the table header and the JSON say which */
    c.pool_bytes = rotate ? perf_rotation_count(o.max_bytes, POOL_MAX_BYTES) * o.max_bytes
                          : o.max_bytes;
    c.sbuf = perf_alloc(c.pool_bytes);
    c.rbuf = perf_alloc(c.pool_bytes);
    c.reqs = calloc((size_t)o.window, sizeof(*c.reqs));
    if (c.sbuf == NULL || c.rbuf == NULL || c.reqs == NULL) {
        fprintf(stderr, "weft-perf sendrecv: no memory for %zu-byte buffers\n", c.pool_bytes);
        rc = PERF_EXIT_ERROR;
    } else {
        /* Touch the buffers so page faults stay out of the timed loops. */
        memset(c.sbuf, 1, c.pool_bytes);
        memset(c.rbuf, 0, c.pool_bytes);
        rc = sweep(&c);
    }
    free(c.reqs);
    perf_free(c.sbuf);
    perf_free(c.rbuf);
    perf_world_close(&c.w);
    return rc;
}
