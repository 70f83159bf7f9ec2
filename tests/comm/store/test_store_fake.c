/*
 * The store server's request path on fake connections (weft__store_server_fake and
 * _feed: no sockets, no thread), which the fuzz target drives: requests answered as on a
 * socket, frames split anywhere, a parked GET that stops the reading, a lease fired to a
 * watcher when its connection ends, and a closed connection reported.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "comm/store/proto.h"

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
    int a = weft__store_server_fake_open(s, true);
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

static void test_parked_and_lease(void **state)
{
    (void)state;
    weft_store_server_t *s;
    assert_int_equal(weft__store_server_fake("token", NULL, &s), WEFT_OK);
    int getter = weft__store_server_fake_open(s, true);
    int watcher = weft__store_server_fake_open(s, true);
    int holder = weft__store_server_fake_open(s, true);
    int stranger = weft__store_server_fake_open(s, false);
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
    int getter = weft__store_server_fake_open(s, true);
    int setter = weft__store_server_fake_open(s, true);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_parked_and_lease),
        cmocka_unit_test(test_waits_capped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
