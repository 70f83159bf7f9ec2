/*
 * Point-to-point through the public API, on every rank of a weftrun job (1, 2, 3, 4 and 8
 * ranks): every ordered pair exchanges 0 B, 1 B, odd sizes and 64 MiB messages whose
 * bytes depend on (source, destination, size, sequence), blocking and nonblocking with
 * many requests outstanding, plus sends to oneself, tag matching and truncation.
 *
 * 64 MiB messages go between all ordered pairs up to 4 ranks; beyond that only to the
 * ring neighbour, so 8 ranks on one machine keep to 128 MiB of buffers each.
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "weft/weft.h"

#define BIG ((size_t)64 << 20)
#define WAIT_NS (60ull * 1000000000ull) /* a hang guard for one request */

static weft_ctx_t *ctx;
static weft_group_t *world;
static int me, n;
static int test_passed; /* set by a test that ran to its end */

static const size_t small_sizes[] = {0, 1, 7, 4093, 65537};
#define NSMALL (sizeof(small_sizes) / sizeof(small_sizes[0]))

/* ---- patterns (an independent reference: a SplitMix64 stream per message) ---- */

static uint64_t mix(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static uint64_t seed_of(int src, int dst, size_t size, unsigned seq)
{
    return mix(mix(mix(mix((uint64_t)src) ^ (uint64_t)dst) ^ size) ^ seq);
}

static void fill(unsigned char *buf, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = mix(seed + i);
        size_t k = len - i < 8 ? len - i : 8;
        memcpy(buf + i, &v, k);
    }
}

/* Number of bytes that differ from fill(seed). */
static size_t count_bad(const unsigned char *buf, size_t len, uint64_t seed)
{
    size_t bad = 0;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = mix(seed + i);
        size_t k = len - i < 8 ? len - i : 8;
        if (memcmp(buf + i, &v, k) != 0) {
            const unsigned char *e = (const unsigned char *)&v;
            for (size_t j = 0; j < k; j++) {
                bad += buf[i + j] != e[j];
            }
        }
    }
    return bad;
}

static void *xmalloc(size_t len)
{
    void *p = malloc(len ? len : 1);
    assert_non_null(p);
    return p;
}

static void check_ok(weft_status_t st, const char *what)
{
    if (st != WEFT_OK) {
        fprintf(stderr, "rank %d: %s: %s (%s)\n", me, what, weft_status_str(st),
                weft_last_error(ctx));
    }
    assert_int_equal(st, WEFT_OK);
}

static void wait_ok(weft_req_t *req, size_t expect_bytes, const char *what)
{
    check_ok(weft_wait(req, WAIT_NS), what);
    if (req != NULL) {
        size_t got = SIZE_MAX;
        check_ok(weft_req_bytes(req, &got), "weft_req_bytes");
        assert_int_equal(got, expect_bytes);
    }
    check_ok(weft_req_free(req), "weft_req_free");
}

/* A barrier made of point-to-point messages (collectives are tested elsewhere). */
static void p2p_barrier(uint32_t tag)
{
    if (me == 0) {
        for (int r = 1; r < n; r++) {
            check_ok(weft_recv(world, NULL, 0, r, tag, NULL), "barrier recv");
        }
        for (int r = 1; r < n; r++) {
            check_ok(weft_send(world, NULL, 0, r, tag), "barrier send");
        }
    } else {
        check_ok(weft_send(world, NULL, 0, 0, tag), "barrier send");
        check_ok(weft_recv(world, NULL, 0, 0, tag, NULL), "barrier recv");
    }
}

/*
 * Blocking transfer of step (src -> dst). Every rank walks the same global list of steps
 * in order and takes part in those naming it, so the earliest unfinished step always
 * has both ranks at it: no deadlock even when a send waits for its receive.
 */
static void blocking_step(int src, int dst, size_t size, unsigned seq, uint32_t tag,
                          unsigned char *sbuf, unsigned char *rbuf)
{
    uint64_t seed = seed_of(src, dst, size, seq);
    if (me == src) {
        fill(sbuf, size, seed);
        check_ok(weft_send(world, sbuf, size, dst, tag), "weft_send");
        /* The buffer is ours again: a send that returned early shows as wrong bytes. */
        memset(sbuf, 0xee, size);
    } else if (me == dst) {
        size_t got = SIZE_MAX;
        memset(rbuf, 0x5a, size + 16);
        check_ok(weft_recv(world, rbuf, size + 16, src, tag, &got), "weft_recv");
        assert_int_equal(got, size);
        size_t bad = count_bad(rbuf, size, seed);
        if (bad != 0) {
            fprintf(stderr, "rank %d: %zu of %zu bytes from rank %d wrong (step %u)\n", me,
                    bad, size, src, seq);
        }
        assert_int_equal(bad, 0);
        for (size_t i = size; i < size + 16; i++) {
            assert_int_equal(rbuf[i], 0x5a); /* nothing past the message */
        }
    }
}

static void test_blocking_all_pairs(void **state)
{
    (void)state;
    unsigned char *sbuf = xmalloc(65537), *rbuf = xmalloc(65537 + 16);
    unsigned seq = 0;
    for (size_t k = 0; k < NSMALL; k++) {
        for (int src = 0; src < n; src++) {
            for (int dst = 0; dst < n; dst++) {
                if (src != dst) {
                    blocking_step(src, dst, small_sizes[k], seq, 100 + (uint32_t)k, sbuf,
                                  rbuf);
                }
                seq++;
            }
        }
    }
    free(sbuf);
    free(rbuf);
    p2p_barrier(199);
    test_passed = 1;
}

/* Nonblocking: to and from every other rank at once, every size, R messages per (pair,
 * size) with one tag so they must match in send order; waited in a scrambled order. */
static void test_nonblocking_all_pairs(void **state)
{
    (void)state;
    enum { R = 3 };
    size_t per_peer = 0;
    for (size_t k = 0; k < NSMALL; k++) {
        per_peer += R * small_sizes[k];
    }
    int npeers = n - 1;
    size_t nreq = 2 * (size_t)npeers * NSMALL * R;
    if (npeers == 0) {
        test_passed = 1;
        skip();
    }
    unsigned char *sbuf = xmalloc(per_peer * (size_t)npeers);
    unsigned char *rbuf = xmalloc(per_peer * (size_t)npeers);
    weft_req_t **reqs = calloc(nreq, sizeof(*reqs));
    size_t *expect = calloc(nreq, sizeof(*expect));
    unsigned char **sent = calloc(nreq, sizeof(*sent)); /* send buffer, NULL for receives */
    assert_non_null(reqs);
    assert_non_null(expect);
    assert_non_null(sent);
    size_t r = 0, off = 0;
    /* receives first for half the peers, sends first for the others */
    for (int phase = 0; phase < 2; phase++) {
        off = 0;
        for (int p = 1; p <= npeers; p++) {
            int to = (me + p) % n, from = (me - p + n) % n;
            for (size_t k = 0; k < NSMALL; k++) {
                for (unsigned q = 0; q < R; q++) {
                    size_t sz = small_sizes[k];
                    bool recv_now = (p % 2 == 0) == (phase == 0);
                    if (recv_now) {
                        weft_status_t st = weft_irecv(world, rbuf + off, sz, from,
                                                      200 + (uint32_t)k, &reqs[r]);
                        assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
                        expect[r++] = sz;
                    } else {
                        fill(sbuf + off, sz, seed_of(me, to, sz, q));
                        weft_status_t st = weft_isend(world, sbuf + off, sz, to,
                                                      200 + (uint32_t)k, &reqs[r]);
                        assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
                        sent[r] = sbuf + off;
                        expect[r++] = sz;
                    }
                    off += sz;
                }
            }
        }
    }
    assert_int_equal(r, nreq);
    /* wait in a scrambled order: odd indices backwards, then even ones forwards */
    for (size_t i = nreq; i-- > 0;) {
        if (i % 2 == 1) {
            wait_ok(reqs[i], expect[i], "nonblocking request");
            if (sent[i] != NULL) {
                memset(sent[i], 0xee, expect[i]); /* reusable once complete */
            }
        }
    }
    for (size_t i = 0; i < nreq; i += 2) {
        wait_ok(reqs[i], expect[i], "nonblocking request");
        if (sent[i] != NULL) {
            memset(sent[i], 0xee, expect[i]);
        }
    }
    /* check what arrived from each peer */
    off = 0;
    for (int p = 1; p <= npeers; p++) {
        int from = (me - p + n) % n;
        for (size_t k = 0; k < NSMALL; k++) {
            for (unsigned q = 0; q < R; q++) {
                size_t sz = small_sizes[k];
                assert_int_equal(count_bad(rbuf + off, sz, seed_of(from, me, sz, q)), 0);
                off += sz;
            }
        }
    }
    free(sbuf);
    free(rbuf);
    free(reqs);
    free(expect);
    free(sent);
    p2p_barrier(299);
    test_passed = 1;
}

static void test_big(void **state)
{
    (void)state;
    unsigned char *sbuf = xmalloc(BIG), *rbuf = xmalloc(BIG + 16);
    if (n <= 4) {
        unsigned seq = 0;
        for (int src = 0; src < n; src++) {
            for (int dst = 0; dst < n; dst++, seq++) {
                if (src != dst) {
                    blocking_step(src, dst, BIG, seq, 300, sbuf, rbuf);
                }
            }
        }
    } else {
        /* ring neighbour, both ways, nonblocking */
        int right = (me + 1) % n, left = (me - 1 + n) % n;
        weft_req_t *rq = NULL, *sq = NULL;
        fill(sbuf, BIG, seed_of(me, right, BIG, 0));
        weft_status_t st = weft_irecv(world, rbuf, BIG, left, 301, &rq);
        assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
        st = weft_isend(world, sbuf, BIG, right, 301, &sq);
        assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
        wait_ok(sq, BIG, "64 MiB send");
        memset(sbuf, 0xee, BIG);
        wait_ok(rq, BIG, "64 MiB receive");
        assert_int_equal(count_bad(rbuf, BIG, seed_of(left, me, BIG, 0)), 0);
    }
    free(sbuf);
    free(rbuf);
    p2p_barrier(399);
    test_passed = 1;
}

/* A rank sending to itself, blocking (receive posted first) and unexpected. */
static void test_self(void **state)
{
    (void)state;
    for (size_t k = 0; k < NSMALL; k++) {
        size_t sz = small_sizes[k];
        unsigned char *s = xmalloc(sz), *d = xmalloc(sz);
        uint64_t seed = seed_of(me, me, sz, 7);
        fill(s, sz, seed);
        weft_req_t *rq = NULL, *sq = NULL;
        weft_status_t st = weft_irecv(world, d, sz, me, 400, &rq);
        assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
        check_ok(weft_send(world, s, sz, me, 400), "send to self");
        wait_ok(rq, sz, "receive from self");
        assert_int_equal(count_bad(d, sz, seed), 0);
        /* unexpected: the send comes first */
        memset(d, 0, sz);
        st = weft_isend(world, s, sz, me, 401, &sq);
        assert_true(st == WEFT_OK || st == WEFT_INPROGRESS);
        size_t got = SIZE_MAX;
        check_ok(weft_recv(world, d, sz, me, 401, &got), "receive from self");
        assert_int_equal(got, sz);
        wait_ok(sq, sz, "send to self");
        assert_int_equal(count_bad(d, sz, seed), 0);
        free(s);
        free(d);
    }
    test_passed = 1;
}

/* Different user tags between one pair match by tag, not by arrival. */
static void test_tags(void **state)
{
    (void)state;
    if (n < 2 || me > 1) {
        p2p_barrier(599);
        test_passed = 1;
        return;
    }
    uint32_t v[3] = {0};
    if (me == 0) {
        for (uint32_t t = 0; t < 3; t++) {
            uint32_t x = 1000 + t;
            check_ok(weft_send(world, &x, sizeof(x), 1, 500 + t), "tagged send");
        }
        check_ok(weft_send(world, NULL, 0, 1, WEFT_TAG_MAX), "largest tag");
    } else {
        for (int t = 2; t >= 0; t--) {
            check_ok(weft_recv(world, &v[t], sizeof(v[t]), 0, 500 + (uint32_t)t, NULL),
                     "tagged recv");
        }
        check_ok(weft_recv(world, NULL, 0, 0, WEFT_TAG_MAX, NULL), "largest tag");
        assert_int_equal(v[0], 1000);
        assert_int_equal(v[1], 1001);
        assert_int_equal(v[2], 1002);
    }
    weft_req_t *rq = NULL;
    assert_int_equal(weft_isend(world, NULL, 0, 1 - me, WEFT_TAG_MAX + 1, &rq),
                     WEFT_ERR_INVALID_ARG);
    p2p_barrier(599);
    test_passed = 1;
}

/* A message longer than the receive buffer: WEFT_ERR_MISMATCH on the receiver. */
static void test_truncation(void **state)
{
    (void)state;
    if (n < 2 || me > 1) {
        p2p_barrier(699);
        test_passed = 1;
        return;
    }
    const size_t sizes[] = {100, 1u << 20};
    for (size_t k = 0; k < 2; k++) {
        unsigned char *b = xmalloc(sizes[k]);
        memset(b, 1, sizes[k]);
        if (me == 0) {
            check_ok(weft_send(world, b, sizes[k], 1, 600), "send");
        } else {
            assert_int_equal(weft_recv(world, b, sizes[k] / 2, 0, 600, NULL),
                             WEFT_ERR_MISMATCH);
            /* The detail says what differed, not the collectives' generic text. */
            if (strstr(weft_last_error(ctx), "longer than the") == NULL) {
                fail_msg("truncation: %s", weft_last_error(ctx));
            }
        }
        free(b);
    }
    /* the pair still works afterwards */
    uint32_t x = 77, y = 0;
    if (me == 0) {
        check_ok(weft_send(world, &x, 4, 1, 601), "send");
    } else {
        check_ok(weft_recv(world, &y, 4, 0, 601, NULL), "recv");
        assert_int_equal(y, 77);
    }
    p2p_barrier(699);
    test_passed = 1;
}

static void test_bad_args(void **state)
{
    (void)state;
    weft_req_t *rq = NULL;
    char c = 0;
    assert_int_equal(weft_isend(world, &c, 1, n, 1, &rq), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_irecv(world, &c, 1, -1, 1, &rq), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_isend(world, NULL, 1, me, 1, &rq), WEFT_ERR_INVALID_ARG);
    assert_null(rq);
    test_passed = 1;
}

static int before_test(void **state)
{
    (void)state;
    test_passed = 0;
    return 0;
}

/* The ranks run the tests in lock-step: after a failed check the others would wait for
 * messages that never come. Exiting at once makes weftrun stop the job. */
static int after_test(void **state)
{
    (void)state;
    if (!test_passed) {
        fprintf(stderr, "rank %d: a check failed; exiting so that weftrun stops the job\n", me);
        fflush(NULL);
        _exit(1);
    }
    return 0;
}

#define P2P_TEST(f) cmocka_unit_test_setup_teardown(f, before_test, after_test)

int main(void)
{
    /* A hang becomes a WEFT_ERR_TIMEOUT failure well within the test's time limit. */
    setenv("WEFT_TIMEOUT_MS", "60000", 0);
    weft_status_t st = weft_init(NULL, &ctx);
    if (st != WEFT_OK) {
        fprintf(stderr, "weft_init: %s\n", weft_status_str(st));
        return 1;
    }
    if (weft_ctx_world(ctx, &world) != WEFT_OK || weft_group_rank(world, &me) != WEFT_OK ||
        weft_group_size(world, &n) != WEFT_OK) {
        fprintf(stderr, "world group: %s\n", weft_last_error(ctx));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        P2P_TEST(test_bad_args),
        P2P_TEST(test_self),
        P2P_TEST(test_blocking_all_pairs),
        P2P_TEST(test_nonblocking_all_pairs),
        P2P_TEST(test_tags),
        P2P_TEST(test_truncation),
        P2P_TEST(test_big),
    };
    char name[32];
    snprintf(name, sizeof(name), "p2p rank %d of %d", me, n);
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    /* Everyone is done before anyone finalizes: a rank leaving early would look like a
     * failed peer to those still talking to it. */
    if (failed == 0) {
        p2p_barrier(999);
    }
    weft_finalize(ctx);
    return failed;
}
