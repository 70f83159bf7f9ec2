/*
 * A collective abandoned by one member (its wait timed out, or its request was freed in
 * flight) is a group event (include/weft/group.h, "Abandoned collectives"): the epoch is
 * revoked on every member, the late member does not complete what another abandoned, and
 * the repairs of all members converge on one membership that keeps every live member.
 *
 * Usage: test_abandon SCENARIO [ROUNDS] [SEED]. Each round is one event, then recovery:
 *   timeout  the last rank arrives at an allreduce 2.5 x WEFT_TIMEOUT_MS late: the others
 *            time out; the late one must fail with WEFT_ERR_REVOKED
 *   small    rank 0 starts a 1 KiB iallreduce and frees it at once (a one-sided cancel);
 *            the others wait for theirs
 *   large    the same with 16 MiB
 *   random   each round draws one of those, a victim rank, a size (8 B-16 MiB), whether
 *            the cancel waits a little first, and whether the timeout is a blocking call
 *            or a nonblocking wait followed by a free; every rank draws the same
 * After each event every member repairs until a check passes at the new epoch: all hold
 * the same membership and epoch (MIN/MAX of a hash), every member is still in, and an
 * allreduce gives the right sum. The checks wait WAIT_MS, far above WEFT_TIMEOUT_MS, so
 * members that arrive at different times do not time out in them. Abandoning revokes
 * everything in flight in the epoch, the checks of a member still finishing them too: so
 * a round starts only once every member passed the last one, told by a barrier on a
 * copy of the world split off at the start, which no abandonment on the world touches.
 * Run through run_fault.sh: every member prints SURVIVOR-OK at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault_common.h"

#define WAIT_MS 60000ull
#define MAX_BYTES (16u << 20)

typedef struct round {
    enum { EV_TIMEOUT, EV_CANCEL } kind;
    int victim;         /* the late member, or the one that cancels */
    size_t bytes;       /* of the abandoned allreduce */
    int cancel_wait_us; /* the canceller tests its request this long before freeing it */
    int nonblocking;    /* timeout: iallreduce + weft_wait + weft_req_free */
} round_t;

static weft_ctx_t *ctx;
static char *buf_in, *buf_out;
static unsigned long long timeout_ms = 1000;

static void sleep_ms(unsigned long long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static round_t draw_round(const char *scenario, int size, unsigned seed, int i)
{
    round_t r = {.kind = EV_CANCEL, .victim = 0, .bytes = 1024};
    if (strcmp(scenario, "timeout") == 0) {
        r.kind = EV_TIMEOUT;
        r.victim = size - 1;
        r.bytes = 8;
    } else if (strcmp(scenario, "large") == 0) {
        r.bytes = MAX_BYTES;
    } else if (strcmp(scenario, "random") == 0) {
        unsigned s = seed * 7919u + (unsigned)i * 104729u;
        r.kind = rand_r(&s) % 4 == 0 ? EV_TIMEOUT : EV_CANCEL;
        r.victim = rand_r(&s) % size;
        r.bytes = (size_t)8 << (rand_r(&s) % 22); /* 8 B .. 16 MiB */
        r.cancel_wait_us = rand_r(&s) % 2 ? 0 : rand_r(&s) % 3000;
        r.nonblocking = rand_r(&s) % 2;
    }
    return r;
}

/* An allreduce of bytes/4 floats whose wait may time out; the request is freed either way. */
static void trace(int rank, const char *what, weft_status_t st)
{
    if (getenv("ABANDON_TRACE") != NULL) {
        fprintf(stderr, "trace rank %d: %s: %s\n", rank, what, weft_status_str(st));
    }
}

/* The end of a nonblocking start: wait up to @p wait_ns if it is in flight, then free it
 * (in flight or not). */
static weft_status_t wait_free(weft_status_t st, weft_req_t *req, uint64_t wait_ns)
{
    if (st == WEFT_INPROGRESS) {
        st = weft_wait(req, wait_ns);
    }
    weft_req_free(req);
    return st;
}

static weft_status_t allreduce_waiting(weft_group_t *g, size_t bytes, uint64_t wait_ns)
{
    weft_req_t *req = NULL;
    weft_status_t st = weft_iallreduce(g, buf_in, buf_out, bytes / 4, WEFT_F32, WEFT_SUM, &req);
    return wait_free(st, req, wait_ns);
}

/* An allreduce of 4 int64 with the checks' long wait. */
static weft_status_t allreduce4_long(weft_group_t *g, const int64_t *v, int64_t *out, weft_op_t op)
{
    weft_req_t *req = NULL;
    weft_status_t st = weft_iallreduce(g, v, out, 4, WEFT_I64, op, &req);
    return wait_free(st, req, WAIT_MS * 1000000ull);
}

/* The event of one round. Returns 0, or -1 when this member saw something wrong. */
static int run_event(weft_group_t *g, int rank, const round_t *r)
{
    weft_status_t st;
    if (r->kind == EV_TIMEOUT) {
        if (rank == r->victim) {
            sleep_ms(timeout_ms * 5 / 2);
            st = weft_allreduce(g, buf_in, buf_out, r->bytes / 4, WEFT_F32, WEFT_SUM);
            trace(rank, "late", st);
            if (st == WEFT_OK) {
                fprintf(stderr, "rank %d: completed an allreduce the others abandoned\n", rank);
                return -1;
            }
            return 0;
        }
        st = r->nonblocking ? allreduce_waiting(g, r->bytes, timeout_ms * 1000000ull)
                            : weft_allreduce(g, buf_in, buf_out, r->bytes / 4, WEFT_F32, WEFT_SUM);
        trace(rank, "waiting for the late one", st);
        if (st != WEFT_ERR_TIMEOUT && st != WEFT_ERR_REVOKED) {
            fprintf(stderr, "rank %d: waiting for a late member gave %s\n", rank,
                    weft_status_str(st));
            return -1;
        }
        return 0;
    }
    if (rank == r->victim) {
        weft_req_t *req = NULL;
        st = weft_iallreduce(g, buf_in, buf_out, r->bytes / 4, WEFT_F32, WEFT_SUM, &req);
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            struct timespec t1;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            long us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
            if (st != WEFT_INPROGRESS || us >= r->cancel_wait_us) {
                break;
            }
            st = weft_test(req);
        }
        trace(rank, "cancelling", st);
        weft_req_free(req); /* in flight or not: the others may have finished theirs */
        return 0;
    }
    /* The others' outcome may be either: finished before the cancel, or revoked. */
    st = allreduce_waiting(g, r->bytes, WAIT_MS * 1000000ull);
    trace(rank, "peer of the cancel", st);
    if (st != WEFT_OK && st != WEFT_ERR_REVOKED) {
        fprintf(stderr, "rank %d: the peer of a cancel got %s: %s\n", rank, weft_status_str(st),
                weft_last_error(ctx));
        return -1;
    }
    return 0;
}

/* Every member holds the same membership and epoch, checked with waits long enough for
 * members that arrive late. */
static weft_status_t membership_agrees(weft_group_t *g)
{
    int size, rank;
    uint32_t epoch;
    weft_group_size(g, &size);
    weft_group_rank(g, &rank);
    weft_group_epoch(g, &epoch);
    uint64_t h = 1469598103934665603ull;
    for (int r = 0; r < size; r++) {
        int id = -1;
        weft_group_member_id(g, r, &id);
        h = (h ^ (uint64_t)id) * 1099511628211ull;
    }
    int64_t v[4] = {(int64_t)(h >> 1), (int64_t)epoch, size, rank + 1}, lo[4], hi[4], sum[4];
    weft_status_t st = allreduce4_long(g, v, lo, WEFT_MIN);
    if (st == WEFT_OK) {
        st = allreduce4_long(g, v, hi, WEFT_MAX);
    }
    if (st == WEFT_OK) {
        st = allreduce4_long(g, v, sum, WEFT_SUM);
    }
    if (st == WEFT_OK &&
        (memcmp(lo, hi, 3 * sizeof(int64_t)) != 0 || sum[3] != (int64_t)size * (size + 1) / 2)) {
        fprintf(stderr, "rank %d: members disagree: epoch %lld..%lld, size %lld..%lld\n", rank,
                (long long)lo[1], (long long)hi[1], (long long)lo[2], (long long)hi[2]);
        st = WEFT_ERR_MISMATCH;
    }
    return st;
}

/* A barrier on @p sync that waits as long as the checks. */
static weft_status_t sync_point(weft_group_t *sync)
{
    weft_req_t *req = NULL;
    weft_status_t st = weft_ibarrier(sync, &req);
    return wait_free(st, req, WAIT_MS * 1000000ull);
}

/* Repair until the check passes at the new epoch; the group must keep every member. */
static int recover(weft_group_t *g, int rank, int width)
{
    weft_status_t st = WEFT_ERR_REVOKED;
    for (int attempt = 0; attempt < 20; attempt++) {
        weft_edit_info_t info = {.size = sizeof(info)};
        st = weft_group_repair(g, &info);
        if (st != WEFT_OK) {
            fprintf(stderr, "rank %d: repair: %s: %s\n", rank, weft_status_str(st),
                    weft_last_error(ctx));
            return -1;
        }
        st = membership_agrees(g);
        trace(rank, "check after repair", st);
        if (st == WEFT_OK) {
            break;
        }
        if (st != WEFT_ERR_REVOKED && st != WEFT_ERR_PEER_FAILED) {
            fprintf(stderr, "rank %d: check after repair: %s\n", rank, weft_status_str(st));
            return -1;
        }
    }
    int size;
    weft_group_size(g, &size);
    if (st != WEFT_OK || size != width) {
        fprintf(stderr, "rank %d: after recovery: %s, %d of %d members\n", rank,
                weft_status_str(st), size, width);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *scenario = argc > 1 ? argv[1] : "timeout";
    int rounds = argc > 2 ? atoi(argv[2]) : 1;
    unsigned seed = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 1;
    const char *t = getenv("WEFT_TIMEOUT_MS");
    if (t != NULL) {
        timeout_ms = strtoull(t, NULL, 10);
    }
    weft_group_t *g;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        printf("SURVIVOR-FAIL init\n");
        return 1;
    }
    weft_ctx_world(ctx, &g);
    int rank, width;
    weft_group_rank(g, &rank);
    weft_group_size(g, &width);
    buf_in = calloc(1, MAX_BYTES);
    buf_out = calloc(1, MAX_BYTES);
    weft_group_t *sync = NULL;
    if (weft_group_split(g, 0, rank, &sync) != WEFT_OK) {
        SURVIVOR_FAIL(rank, "split");
        return 1;
    }
    weft_status_t st =
        buf_in == NULL || buf_out == NULL ? WEFT_ERR_NO_MEMORY : membership_agrees(g);
    if (st != WEFT_OK) {
        fprintf(stderr, "rank %d: setup: %s: %s\n", rank, weft_status_str(st),
                weft_last_error(ctx));
        SURVIVOR_FAIL(rank, "setup");
        return 1;
    }
    for (int i = 0; i < rounds; i++) {
        round_t r = draw_round(scenario, width, seed, i);
        if (sync_point(sync) != WEFT_OK) {
            printf("SURVIVOR-FAIL rank %d: barrier before round %d\n", rank, i);
            fflush(stdout);
            _exit(1);
        }
        int bad = run_event(g, rank, &r);
        uint32_t e0;
        weft_group_epoch(g, &e0);
        bad = bad != 0 || recover(g, rank, width) != 0;
        if (getenv("ABANDON_TRACE") != NULL) {
            uint32_t e1;
            weft_group_epoch(g, &e1);
            fprintf(stderr, "trace rank %d round %d: epoch %u -> %u\n", rank, i, e0, e1);
        }
        if (bad) {
            printf("SURVIVOR-FAIL rank %d: round %d (%s, victim %d, %zu bytes)\n", rank, i,
                   r.kind == EV_TIMEOUT ? "timeout" : "cancel", r.victim, r.bytes);
            fflush(stdout);
            _exit(1);
        }
    }
    uint32_t epoch;
    weft_group_epoch(g, &epoch);
    if (rank == 0) {
        printf("abandon: %d round(s) of %s on %d ranks: epoch %u, %d members (%s)\n", rounds,
               scenario, width, epoch, width, fault_uses_shm(g) ? "shared memory" : "messages");
    }
    SURVIVOR_OK(rank);
    free(buf_in);
    free(buf_out);
    weft_group_free(sync);
    weft_finalize(ctx);
    return 0;
}
