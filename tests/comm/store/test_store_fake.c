/*
 * The store server's request path on fake connections (weft__store_server_fake and
 * _feed: no sockets, no thread), which the fuzz target drives: requests answered as on a
 * socket, frames split anywhere, a parked GET that stops the reading, a lease fired to a
 * watcher when its connection ends, a closed connection reported, and SCANs: parked,
 * released, their pages built within the cap on the output queued to all connections.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "comm/store/server.h" /* s->queued, to check the cap on it */

/* Append a request frame to @p b. */
static void put_kv(weft_store_buf_t *b, weft_store_msg_t type, const char *key, const void *rest,
                   size_t rlen)
{
    assert_int_equal(weft__store_frame_kv(b, type, key, strlen(key), rest, rlen), WEFT_OK);
}

/* Feed connection @p id one request frame; whether it stays open. */
static bool feed_kv(weft_store_server_t *s, int id, weft_store_msg_t type, const char *key,
                    const void *rest, size_t rlen, weft_store_buf_t *out)
{
    weft_store_buf_t b = {0};
    put_kv(&b, type, key, rest, rlen);
    bool open = weft__store_server_feed(s, id, b.data, b.len, false, out, NULL);
    weft__store_buf_free(&b);
    return open;
}

/* The next frame of @p b from *off: its type and body. */
static weft_store_msg_t next_frame(const weft_store_buf_t *b, size_t *off, const uint8_t **body,
                                   uint32_t *len)
{
    weft_store_msg_t type;
    assert_true(b->len - *off >= WEFT__STORE_HDR_LEN);
    assert_int_equal(weft__store_hdr_decode(b->data + *off, len, &type), WEFT_OK);
    *body = b->data + *off + WEFT__STORE_HDR_LEN;
    *off += WEFT__STORE_HDR_LEN + *len;
    assert_true(*off <= b->len);
    return type;
}

/* The next frame is a RESP with @p status and data @p want (NULL: not checked). */
static void expect_resp(const weft_store_buf_t *b, size_t *off, weft_status_t status,
                        const char *want)
{
    const uint8_t *body, *data;
    uint32_t len;
    size_t dlen;
    weft_status_t st;
    assert_int_equal(next_frame(b, off, &body, &len), WEFT__STORE_RESP);
    assert_int_equal(weft__store_resp_decode(body, len, &st, &data, &dlen), WEFT_OK);
    assert_int_equal(st, status);
    if (want != NULL) {
        assert_int_equal(dlen, strlen(want));
        assert_memory_equal(data, want, dlen);
    }
}

static void skip_hello(const weft_store_buf_t *b, size_t *off)
{
    const uint8_t *body;
    uint32_t len;
    assert_int_equal(next_frame(b, off, &body, &len), WEFT__STORE_HELLO);
}

static void test_requests(void **state)
{
    (void)state;
    weft_store_server_t *s;
    assert_int_equal(weft__store_server_fake("token", NULL, &s), WEFT_OK);
    int a = weft__store_server_fake_open(s, true, -1);
    assert_int_equal(a, 0);
    weft_store_buf_t in = {0}, out = {0};
    uint8_t timeout[4] = {0};
    put_kv(&in, WEFT__STORE_SET, "k", "v1", 2);
    put_kv(&in, WEFT__STORE_GET, "k", timeout, 4);
    /* One byte at a time: headers and bodies arrive split everywhere. */
    size_t used;
    for (size_t i = 0; i < in.len; i++) {
        assert_true(weft__store_server_feed(s, a, in.data + i, 1, false, &out, &used));
        assert_int_equal(used, 1);
    }
    size_t off = 0;
    skip_hello(&out, &off);
    expect_resp(&out, &off, WEFT_OK, "");
    expect_resp(&out, &off, WEFT_OK, "v1");
    assert_int_equal(off, out.len);
    /* A malformed body closes the connection. */
    uint8_t bad[WEFT__STORE_HDR_LEN + 1];
    weft__store_hdr_encode(bad, 1, WEFT__STORE_SET);
    assert_false(weft__store_server_feed(s, a, bad, sizeof(bad), false, NULL, NULL));
    assert_false(weft__store_server_feed(s, a, NULL, 0, false, NULL, NULL));
    weft__store_buf_free(&in);
    weft__store_buf_free(&out);
    weft__store_server_stop(s);
}

/* A fake connection that speaks as a member is held to the rules for members (what the
 * fuzz target reaches with bit 6 of its first byte): refused the launchers' keys and
 * another member's address, allowed its own and a program's key (weft_kv_*). */
static void test_member_rules(void **state)
{
    (void)state;
    weft_store_server_t *s;
    const weft_logger_t quiet = {.level = WEFT_LOG_ERROR, .rank = -1, .prefix = "test"};
    assert_int_equal(weft__store_server_fake("token", &quiet, &s), WEFT_OK);
    int m = weft__store_server_fake_open(s, true, 3);
    weft_store_buf_t out = {0};
    assert_true(feed_kv(s, m, WEFT__STORE_SET, "weftrun/stop", "x", 1, &out));
    assert_true(feed_kv(s, m, WEFT__STORE_SET, "weft/addr/2", "x", 1, &out));
    assert_true(feed_kv(s, m, WEFT__STORE_SET, "weft/addr/3", "x", 1, &out));
    assert_true(feed_kv(s, m, WEFT__STORE_SET,
                        "weft/kv/a\x1f"
                        "addr\x1f"
                        "2",
                        "x", 1, &out));
    assert_true(feed_kv(s, m, WEFT__STORE_DELETE,
                        "weft/kv/a\x1f"
                        "addr\x1f"
                        "2",
                        NULL, 0, &out));
    assert_true(feed_kv(s, m, WEFT__STORE_DELETE, "weft/addr/3", NULL, 0, &out));
    size_t off = 0;
    skip_hello(&out, &off);
    expect_resp(&out, &off, WEFT_ERR_AUTH, NULL);
    expect_resp(&out, &off, WEFT_ERR_AUTH, NULL);
    expect_resp(&out, &off, WEFT_OK, NULL);
    expect_resp(&out, &off, WEFT_OK, NULL);
    expect_resp(&out, &off, WEFT_OK, NULL);
    expect_resp(&out, &off, WEFT_ERR_AUTH, NULL); /* a member keeps its own address */
    assert_int_equal(off, out.len);
    weft__store_buf_free(&out);
    weft__store_server_stop(s);
}

static void test_parked_and_lease(void **state)
{
    (void)state;
    weft_store_server_t *s;
    assert_int_equal(weft__store_server_fake("token", NULL, &s), WEFT_OK);
    int getter = weft__store_server_fake_open(s, true, -1);
    int watcher = weft__store_server_fake_open(s, true, -1);
    int holder = weft__store_server_fake_open(s, true, -1);
    int stranger = weft__store_server_fake_open(s, false, -1);
    assert_true(getter >= 0 && watcher >= 0 && holder >= 0 && stranger >= 0);
    weft_store_buf_t in = {0}, out = {0};
    uint8_t wait[4] = {0, 0, 0xea, 0x60}; /* 60 s */
    put_kv(&in, WEFT__STORE_GET, "late", wait, 4);
    weft__store_frame_set_id(&in, 0, 7);
    size_t parked_len = in.len;
    put_kv(&in, WEFT__STORE_SET, "x", "", 0);
    weft__store_frame_set_id(&in, parked_len, 8);
    size_t used;
    assert_true(weft__store_server_feed(s, getter, in.data, in.len, false, &out, &used));
    /* It read on behind the parked GET and answered the SET, by its id. */
    assert_int_equal(used, in.len);
    size_t goff = 0;
    skip_hello(&out, &goff);
    assert_int_equal(weft__store_hdr_id(out.data + goff), 8);
    expect_resp(&out, &goff, WEFT_OK, "");
    assert_int_equal(goff, out.len);
    out.len = 0;
    assert_true(feed_kv(s, watcher, WEFT__STORE_WATCH, "dead/", NULL, 0, &out));
    uint8_t lease[4 + 4] = {0, 0, 0xea, 0x60, 'g', 'o', 'n', 'e'};
    assert_true(feed_kv(s, holder, WEFT__STORE_LEASE, "dead/2", lease, 8, NULL));
    /* The holder's stream ends: its lease fires, the watcher hears of it. */
    assert_false(weft__store_server_feed(s, holder, NULL, 0, true, NULL, NULL));
    assert_true(weft__store_server_feed(s, watcher, NULL, 0, false, &out, NULL));
    size_t off = 0;
    const uint8_t *body, *rest;
    uint32_t len;
    const char *key;
    size_t klen, rlen;
    skip_hello(&out, &off);
    expect_resp(&out, &off, WEFT_OK, "");
    assert_int_equal(next_frame(&out, &off, &body, &len), WEFT__STORE_EVENT);
    assert_int_equal(weft__store_kv_decode(body, len, &key, &klen, &rest, &rlen), WEFT_OK);
    assert_int_equal(klen, 6);
    assert_memory_equal(key, "dead/2", 6);
    assert_int_equal(rlen, 4);
    /* The hosting process sets the parked key: the GET is answered. */
    assert_int_equal(weft__store_server_set(s, "late", "v", 1), WEFT_OK);
    out.len = 0;
    assert_true(weft__store_server_feed(s, getter, NULL, 0, false, &out, NULL));
    off = 0;
    assert_int_equal(weft__store_hdr_id(out.data), 7);
    expect_resp(&out, &off, WEFT_OK, "v"); /* its HELLO went with its first feed */
    /* An unauthenticated connection that sends a request is closed. */
    assert_false(feed_kv(s, stranger, WEFT__STORE_SET, "x", "", 0, NULL));
    weft__store_buf_free(&in);
    weft__store_buf_free(&out);
    weft__store_server_stop(s);
}

/* One connection may have WEFT__STORE_MAX_WAITS GETs waiting: the next is refused by its
 * id, the connection goes on serving, and a set answers every waiting GET by its own. */
static void test_waits_capped(void **state)
{
    (void)state;
    weft_store_server_t *s;
    assert_int_equal(weft__store_server_fake("token", NULL, &s), WEFT_OK);
    int getter = weft__store_server_fake_open(s, true, -1);
    int setter = weft__store_server_fake_open(s, true, -1);
    assert_true(getter >= 0 && setter >= 0);
    weft_store_buf_t in = {0}, out = {0};
    uint8_t wait[4] = {0, 0, 0xea, 0x60}; /* 60 s */
    for (uint32_t i = 0; i <= WEFT__STORE_MAX_WAITS; i++) {
        size_t start = in.len;
        put_kv(&in, WEFT__STORE_GET, "later", wait, 4);
        weft__store_frame_set_id(&in, start, 100 + i);
    }
    size_t start = in.len;
    put_kv(&in, WEFT__STORE_SET, "now", "x", 1);
    weft__store_frame_set_id(&in, start, 7);
    assert_true(weft__store_server_feed(s, getter, in.data, in.len, false, &out, NULL));
    size_t off = 0;
    skip_hello(&out, &off);
    assert_int_equal(weft__store_hdr_id(out.data + off), 100 + WEFT__STORE_MAX_WAITS);
    expect_resp(&out, &off, WEFT_ERR_NO_MEMORY, "");
    assert_int_equal(weft__store_hdr_id(out.data + off), 7);
    expect_resp(&out, &off, WEFT_OK, "");
    assert_int_equal(off, out.len);
    assert_true(feed_kv(s, setter, WEFT__STORE_SET, "later", "v", 1, NULL));
    out.len = 0;
    assert_true(weft__store_server_feed(s, getter, NULL, 0, false, &out, NULL));
    off = 0;
    bool answered[WEFT__STORE_MAX_WAITS] = {false};
    for (uint32_t i = 0; i < WEFT__STORE_MAX_WAITS; i++) {
        uint32_t id = weft__store_hdr_id(out.data + off);
        assert_true(id >= 100 && id < 100 + WEFT__STORE_MAX_WAITS && !answered[id - 100]);
        answered[id - 100] = true;
        expect_resp(&out, &off, WEFT_OK, "v");
    }
    assert_int_equal(off, out.len);
    weft__store_buf_free(&in);
    weft__store_buf_free(&out);
    weft__store_server_stop(s);
}

/* The rest of a SCAN's body. */
static size_t scan_rest(uint8_t *rest, uint32_t timeout_ms, uint32_t min_count, uint32_t max_bytes,
                        const char *after)
{
    uint32_t w[3] = {timeout_ms, min_count, max_bytes};
    for (int i = 0; i < 12; i++) {
        rest[i] = (uint8_t)(w[i / 4] >> (24 - 8 * (i % 4)));
    }
    memcpy(rest + 12, after, strlen(after));
    return 12 + strlen(after);
}

/* The next frame is a RESP with a page of @p count entries, @p more after them, the first
 * of them @p first (not checked when NULL). */
static void expect_page(const weft_store_buf_t *b, size_t *off, uint32_t count, bool more,
                        const char *first)
{
    const uint8_t *body, *data, *p, *val;
    const char *key;
    uint32_t len, n;
    size_t dlen, left, klen, vlen;
    weft_status_t st;
    bool m;
    assert_int_equal(next_frame(b, off, &body, &len), WEFT__STORE_RESP);
    assert_int_equal(weft__store_resp_decode(body, len, &st, &data, &dlen), WEFT_OK);
    assert_int_equal(st, WEFT_OK);
    assert_int_equal(weft__store_page_decode(data, dlen, &m, &n, &p, &left), WEFT_OK);
    assert_int_equal(n, count);
    assert_int_equal(m, more);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(weft__store_page_entry(&p, &left, &key, &klen, &val, &vlen), WEFT_OK);
        if (i == 0 && first != NULL) {
            assert_int_equal(klen, strlen(first));
            assert_memory_equal(key, first, klen);
        }
    }
    assert_int_equal(left, 0);
}

/* Parked until the count is there (a value changed does not count, a key deleted uncounts),
 * then answered by its id; a second parked SCAN of the connection answers the first
 * WEFT_ERR_TIMEOUT; the timer answers one WEFT_ERR_TIMEOUT; the connection reads on. */
static void test_scan_parked(void **state)
{
    (void)state;
    weft_store_server_t *s;
    assert_int_equal(weft__store_server_fake("token", NULL, &s), WEFT_OK);
    int a = weft__store_server_fake_open(s, true, -1);
    int b = weft__store_server_fake_open(s, true, -1);
    weft_store_buf_t in = {0}, out = {0};
    uint8_t rest[12 + WEFT_STORE_MAX_KEY];
    size_t start = in.len;
    put_kv(&in, WEFT__STORE_SCAN, "k/", rest, scan_rest(rest, 60000, 9, 0, ""));
    weft__store_frame_set_id(&in, start, 5);
    start = in.len;
    put_kv(&in, WEFT__STORE_SCAN, "k/", rest, scan_rest(rest, 60000, 3, 0, ""));
    weft__store_frame_set_id(&in, start, 6);
    start = in.len;
    put_kv(&in, WEFT__STORE_SET, "other", "x", 1);
    weft__store_frame_set_id(&in, start, 7);
    assert_true(weft__store_server_feed(s, a, in.data, in.len, false, &out, NULL));
    size_t off = 0;
    skip_hello(&out, &off);
    assert_int_equal(weft__store_hdr_id(out.data + off), 5);
    expect_resp(&out, &off, WEFT_ERR_TIMEOUT, ""); /* given way to 6 */
    assert_int_equal(weft__store_hdr_id(out.data + off), 7);
    expect_resp(&out, &off, WEFT_OK, "");
    assert_int_equal(off, out.len);

    assert_true(feed_kv(s, b, WEFT__STORE_SET, "k/1", "1", 1, NULL));
    assert_true(feed_kv(s, b, WEFT__STORE_SET, "k/1", "one", 3, NULL));
    assert_true(feed_kv(s, b, WEFT__STORE_SET, "k/0", "0", 1, NULL));
    assert_true(feed_kv(s, b, WEFT__STORE_DELETE, "k/0", NULL, 0, NULL));
    out.len = 0;
    assert_true(weft__store_server_feed(s, a, NULL, 0, false, &out, NULL));
    assert_true(feed_kv(s, b, WEFT__STORE_SET, "k/2", "2", 1, NULL));
    assert_true(weft__store_server_feed(s, a, NULL, 0, false, &out, NULL));
    assert_int_equal(out.len, 0); /* two keys under k/: k/0 came and went */
    assert_true(feed_kv(s, b, WEFT__STORE_SET, "k/3", "3", 1, NULL));
    assert_true(weft__store_server_feed(s, a, NULL, 0, false, &out, NULL));
    off = 0;
    assert_int_equal(weft__store_hdr_id(out.data + off), 6);
    expect_page(&out, &off, 3, false, "k/1");
    assert_int_equal(off, out.len);

    /* Expiry: a 1 ms wait, run out by the timers of a later feed (which run after it took
     * the connection's output: the answer comes with the feed after). */
    out.len = 0;
    assert_true(feed_kv(s, a, WEFT__STORE_SCAN, "none/", rest, scan_rest(rest, 1, 1, 0, ""), &out));
    struct timespec ms2 = {0, 2000000};
    nanosleep(&ms2, NULL);
    assert_true(weft__store_server_feed(s, a, NULL, 0, false, &out, NULL));
    assert_true(weft__store_server_feed(s, a, NULL, 0, false, &out, NULL));
    off = 0;
    expect_resp(&out, &off, WEFT_ERR_TIMEOUT, "");
    /* A connection that ends with SCANs parked and due: dropped with it. */
    in.len = 0;
    put_kv(&in, WEFT__STORE_SCAN, "k/", rest, scan_rest(rest, 60000, 9, 0, ""));
    put_kv(&in, WEFT__STORE_SCAN, "k/", rest, scan_rest(rest, 0, 0, 0, ""));
    assert_false(weft__store_server_feed(s, a, in.data, in.len, true, NULL, NULL));
    assert_true(feed_kv(s, b, WEFT__STORE_SET, "k/4", "4", 1, NULL));
    weft__store_buf_free(&in);
    weft__store_buf_free(&out);
    weft__store_server_stop(s);
}

/*
 * Many connections whose pages are due at once (released by one set): the pages are built
 * while the output queued to all stays below WEFT__STORE_SCAN_QUEUED, by a page at most;
 * the others wait until output is taken (fake connections keep theirs until fed), and
 * each connection gets its whole page once.
 */
static void test_scan_queue_capped(void **state)
{
    (void)state;
    enum { CONNS = 150, KEYS = 1000, VLEN = 1000 };
    weft_store_server_t *s;
    assert_int_equal(weft__store_server_fake("token", NULL, &s), WEFT_OK);
    int setter = weft__store_server_fake_open(s, true, -1), id[CONNS];
    char key[32];
    static char val[VLEN];
    memset(val, 'v', sizeof(val));
    for (int k = 0; k < KEYS - 1; k++) {
        snprintf(key, sizeof(key), "big/%04d", k);
        assert_true(feed_kv(s, setter, WEFT__STORE_SET, key, val, VLEN, NULL));
    }
    uint8_t rest[12];
    weft_store_buf_t out = {0};
    for (int i = 0; i < CONNS; i++) {
        id[i] = weft__store_server_fake_open(s, true, -1);
        assert_true(id[i] >= 0);
        assert_true(feed_kv(s, id[i], WEFT__STORE_SCAN, "big/", rest,
                            scan_rest(rest, 60000, KEYS, 0, ""), NULL));
    }
    assert_true(feed_kv(s, setter, WEFT__STORE_SET, "big/9999", val, VLEN, NULL));
    size_t page = WEFT__STORE_PAGE_HDR_LEN + KEYS * (WEFT__STORE_PAGE_ENTRY_LEN + 8 + VLEN);
    assert_true(s->queued >= WEFT__STORE_SCAN_QUEUED);
    assert_true(s->queued < WEFT__STORE_SCAN_QUEUED + page + 4096);
    bool got[CONNS] = {false};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < CONNS; i++) {
            out.len = 0;
            assert_true(weft__store_server_feed(s, id[i], NULL, 0, false, &out, NULL));
            assert_true(s->queued < WEFT__STORE_SCAN_QUEUED + page + 4096);
            size_t off = 0;
            if (round == 0) {
                skip_hello(&out, &off);
            }
            if (off < out.len) {
                assert_false(got[i]);
                got[i] = true;
                expect_page(&out, &off, KEYS, false, "big/0000");
            }
            assert_int_equal(off, out.len);
        }
    }
    for (int i = 0; i < CONNS; i++) {
        assert_true(got[i]);
    }
    weft__store_buf_free(&out);
    weft__store_server_stop(s);
}

/* GETs and SCANs of one connection share its WEFT__STORE_MAX_WAITS. */
static void test_scan_waits_capped(void **state)
{
    (void)state;
    weft_store_server_t *s;
    assert_int_equal(weft__store_server_fake("token", NULL, &s), WEFT_OK);
    int c = weft__store_server_fake_open(s, true, -1);
    weft_store_buf_t in = {0}, out = {0};
    uint8_t wait[4] = {0, 0, 0xea, 0x60}, rest[12];
    for (uint32_t i = 0; i < WEFT__STORE_MAX_WAITS; i++) {
        put_kv(&in, WEFT__STORE_GET, "later", wait, 4);
    }
    put_kv(&in, WEFT__STORE_SCAN, "p/", rest, scan_rest(rest, 60000, 1, 0, ""));
    assert_true(weft__store_server_feed(s, c, in.data, in.len, false, &out, NULL));
    size_t off = 0;
    skip_hello(&out, &off);
    expect_resp(&out, &off, WEFT_ERR_NO_MEMORY, "");
    assert_int_equal(off, out.len);
    weft__store_buf_free(&in);
    weft__store_buf_free(&out);
    weft__store_server_stop(s);
}

/* A connection's output buffer is given back once it has sent a large answer: idle
 * watchers and readers do not keep their peak (the server's own memory, apart from the
 * data cap). */
static void test_output_shrinks(void **state)
{
    (void)state;
    weft_store_server_t *s;
    assert_int_equal(weft__store_server_fake("token", NULL, &s), WEFT_OK);
    int a = weft__store_server_fake_open(s, true, -1);
    weft_store_buf_t out = {0};
    size_t big = 512 * 1024;
    uint8_t *val = calloc(1, big), timeout[4] = {0};
    assert_non_null(val);
    assert_true(feed_kv(s, a, WEFT__STORE_SET, "big", val, big, &out));
    assert_true(feed_kv(s, a, WEFT__STORE_GET, "big", timeout, sizeof(timeout), &out));
    size_t off = 0;
    skip_hello(&out, &off);
    expect_resp(&out, &off, WEFT_OK, "");
    const uint8_t *body;
    uint32_t len;
    assert_int_equal(next_frame(&out, &off, &body, &len), WEFT__STORE_RESP);
    assert_true(len > big);
    /* The answer went out: the connection holds no buffer near its size any more. */
    store_conn_t *c = s->conns[0];
    assert_true(c->out.cap <= 64 * 1024);
    assert_true(c->in_cap <= 64 * 1024);
    /* And it still serves. */
    assert_true(feed_kv(s, a, WEFT__STORE_SET, "k", "v", 1, &out));
    expect_resp(&out, &off, WEFT_OK, "");
    free(val);
    weft__store_buf_free(&out);
    weft__store_server_stop(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests),          cmocka_unit_test(test_member_rules),
        cmocka_unit_test(test_output_shrinks),    cmocka_unit_test(test_parked_and_lease),
        cmocka_unit_test(test_waits_capped),      cmocka_unit_test(test_scan_parked),
        cmocka_unit_test(test_scan_queue_capped), cmocka_unit_test(test_scan_waits_capped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
