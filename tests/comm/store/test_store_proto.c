/* Unit tests of the store's framing, message encoding and HMAC helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/store/proto.h"

static void hex_decode(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

static void test_hdr_roundtrip(void **state)
{
    (void)state;
    uint8_t hdr[WEFT__STORE_HDR_LEN];
    uint32_t len = 7;
    weft_store_msg_t type = WEFT__STORE_HELLO;
    uint32_t lens[] = {0, 1, 255, 256, 65536, WEFT_STORE_MAX_FRAME};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        for (int t = WEFT__STORE_HELLO; t <= WEFT__STORE_MSG_MAX; t++) {
            weft__store_hdr_encode(hdr, lens[i], (weft_store_msg_t)t);
            assert_int_equal(weft__store_hdr_decode(hdr, &len, &type), WEFT_OK);
            assert_int_equal(len, lens[i]);
            assert_int_equal(type, t);
        }
    }
    /* Network byte order, written out by hand. */
    weft__store_hdr_encode(hdr, 0x01020304u, WEFT__STORE_SET);
    const uint8_t expect[8] = {1, 2, 3, 4, WEFT__STORE_SET, 0, 0, 0};
    assert_memory_equal(hdr, expect, 8);
    assert_int_equal(weft__store_hdr_id(hdr), 0);
}

/* The last three header bytes are the request id, big-endian, and leave the rest alone. */
static void test_hdr_request_id(void **state)
{
    (void)state;
    const uint32_t ids[] = {1, 0x80, 0x0102, 0x010203, WEFT__STORE_MAX_ID};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        weft_store_buf_t b = {0};
        assert_int_equal(weft__store_frame_kv(&b, WEFT__STORE_GET, "k", 1, "1234", 4), WEFT_OK);
        weft__store_frame_set_id(&b, 0, ids[i]);
        assert_int_equal(weft__store_hdr_id(b.data), ids[i]);
        assert_int_equal(b.data[5], (uint8_t)(ids[i] >> 16));
        assert_int_equal(b.data[7], (uint8_t)ids[i]);
        uint32_t len;
        weft_store_msg_t type;
        assert_int_equal(weft__store_hdr_decode(b.data, &len, &type), WEFT_OK);
        assert_int_equal(len, 2 + 1 + 4);
        assert_int_equal(type, WEFT__STORE_GET);
        weft__store_buf_free(&b);
    }
}

static void test_hdr_rejects(void **state)
{
    (void)state;
    uint8_t hdr[WEFT__STORE_HDR_LEN];
    uint32_t len = 12345;
    weft_store_msg_t type = WEFT__STORE_EVENT;

    weft__store_hdr_encode(hdr, WEFT_STORE_MAX_FRAME + 1, WEFT__STORE_SET);
    assert_int_equal(weft__store_hdr_decode(hdr, &len, &type), WEFT_ERR_PROTOCOL);
    weft__store_hdr_encode(hdr, UINT32_MAX, WEFT__STORE_SET);
    assert_int_equal(weft__store_hdr_decode(hdr, &len, &type), WEFT_ERR_PROTOCOL);
    weft__store_hdr_encode(hdr, 4, (weft_store_msg_t)0);
    assert_int_equal(weft__store_hdr_decode(hdr, &len, &type), WEFT_ERR_PROTOCOL);
    weft__store_hdr_encode(hdr, 4, (weft_store_msg_t)(WEFT__STORE_MSG_MAX + 1));
    assert_int_equal(weft__store_hdr_decode(hdr, &len, &type), WEFT_ERR_PROTOCOL);
    /* Outputs untouched on failure. */
    assert_int_equal(len, 12345);
    assert_int_equal(type, WEFT__STORE_EVENT);
}

static void test_kv_roundtrip(void **state)
{
    (void)state;
    weft_store_buf_t b = {0};
    const uint8_t val[] = {0, 1, 2, 0, 255};
    assert_int_equal(weft__store_frame_kv(&b, WEFT__STORE_SET, "k/1", 3, val, sizeof(val)),
                     WEFT_OK);
    assert_int_equal(b.len, WEFT__STORE_HDR_LEN + 2 + 3 + sizeof(val));

    uint32_t len;
    weft_store_msg_t type;
    assert_int_equal(weft__store_hdr_decode(b.data, &len, &type), WEFT_OK);
    assert_int_equal(type, WEFT__STORE_SET);
    assert_int_equal(len, 2 + 3 + sizeof(val));
    const uint8_t *body = b.data + WEFT__STORE_HDR_LEN;
    assert_int_equal(body[0], 0);
    assert_int_equal(body[1], 3);

    const char *key;
    const uint8_t *rest;
    size_t klen, rlen;
    assert_int_equal(weft__store_kv_decode(body, len, &key, &klen, &rest, &rlen), WEFT_OK);
    assert_int_equal(klen, 3);
    assert_memory_equal(key, "k/1", 3);
    assert_int_equal(rlen, sizeof(val));
    assert_memory_equal(rest, val, sizeof(val));

    /* Empty key (a watch prefix) and empty rest. */
    b.len = 0;
    assert_int_equal(weft__store_frame_kv(&b, WEFT__STORE_WATCH, "", 0, NULL, 0), WEFT_OK);
    assert_int_equal(b.len, WEFT__STORE_HDR_LEN + 2);
    assert_int_equal(
        weft__store_kv_decode(b.data + WEFT__STORE_HDR_LEN, 2, &key, &klen, &rest, &rlen), WEFT_OK);
    assert_int_equal(klen, 0);
    assert_int_equal(rlen, 0);
    weft__store_buf_free(&b);
}

static void test_kv_rejects(void **state)
{
    (void)state;
    const char *key = NULL;
    const uint8_t *rest = NULL;
    size_t klen = 99, rlen = 99;
    uint8_t body[WEFT_STORE_MAX_KEY + 8];
    memset(body, 'a', sizeof(body));

    /* Too short for the key length. */
    assert_int_equal(weft__store_kv_decode(body, 0, &key, &klen, &rest, &rlen), WEFT_ERR_PROTOCOL);
    assert_int_equal(weft__store_kv_decode(body, 1, &key, &klen, &rest, &rlen), WEFT_ERR_PROTOCOL);
    /* Key runs past the body. */
    body[0] = 0;
    body[1] = 5;
    assert_int_equal(weft__store_kv_decode(body, 6, &key, &klen, &rest, &rlen), WEFT_ERR_PROTOCOL);
    assert_int_equal(weft__store_kv_decode(body, 7, &key, &klen, &rest, &rlen), WEFT_OK);
    assert_int_equal(rlen, 0);
    /* Key longer than the limit, even though the bytes are there. */
    body[0] = (WEFT_STORE_MAX_KEY + 1) >> 8;
    body[1] = (WEFT_STORE_MAX_KEY + 1) & 255;
    assert_int_equal(weft__store_kv_decode(body, sizeof(body), &key, &klen, &rest, &rlen),
                     WEFT_ERR_PROTOCOL);
    body[0] = WEFT_STORE_MAX_KEY >> 8;
    body[1] = WEFT_STORE_MAX_KEY & 255;
    assert_int_equal(weft__store_kv_decode(body, sizeof(body), &key, &klen, &rest, &rlen), WEFT_OK);
    assert_int_equal(klen, WEFT_STORE_MAX_KEY);
    /* A NUL inside the key. */
    body[0] = 0;
    body[1] = 3;
    body[3] = '\0';
    klen = 99;
    assert_int_equal(weft__store_kv_decode(body, 8, &key, &klen, &rest, &rlen), WEFT_ERR_PROTOCOL);
    assert_int_equal(klen, 99);
    /* Encoder refuses an over-long key. */
    weft_store_buf_t b = {0};
    assert_int_equal(weft__store_frame_kv(&b, WEFT__STORE_SET, (const char *)body + 2,
                                          WEFT_STORE_MAX_KEY + 1, NULL, 0),
                     WEFT_ERR_INVALID_ARG);
    weft__store_buf_free(&b);
}

static void test_frame_cap(void **state)
{
    (void)state;
    weft_store_buf_t b = {0};
    uint8_t *big = calloc(1, WEFT_STORE_MAX_FRAME + 1);
    assert_non_null(big);
    /* A payload of exactly the cap fits; one byte more is refused and rolled back. */
    assert_int_equal(weft__store_frame_resp(&b, WEFT_OK, big, WEFT_STORE_MAX_FRAME - 4), WEFT_OK);
    size_t one = b.len;
    assert_int_equal(one, WEFT__STORE_HDR_LEN + WEFT_STORE_MAX_FRAME);
    assert_int_equal(weft__store_frame_resp(&b, WEFT_OK, big, WEFT_STORE_MAX_FRAME - 3),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(b.len, one);
    assert_int_equal(
        weft__store_frame_kv(&b, WEFT__STORE_SET, "k", 1, big, WEFT_STORE_MAX_FRAME - 2),
        WEFT_ERR_INVALID_ARG);
    assert_int_equal(b.len, one);
    /* The largest value fits in SET, EVENT and RESP frames with the longest key. */
    char key[WEFT_STORE_MAX_KEY];
    memset(key, 'k', sizeof(key));
    assert_int_equal(
        weft__store_frame_kv(&b, WEFT__STORE_EVENT, key, sizeof(key), big, WEFT__STORE_MAX_VALUE),
        WEFT_OK);
    assert_int_equal(weft__store_frame_resp(&b, WEFT_OK, big, WEFT__STORE_MAX_VALUE), WEFT_OK);
    free(big);
    weft__store_buf_free(&b);
}

static void test_resp_decode(void **state)
{
    (void)state;
    weft_store_buf_t b = {0};
    weft_status_t status = WEFT_OK;
    const uint8_t *data;
    size_t dlen;
    assert_int_equal(weft__store_frame_resp(&b, WEFT_ERR_TIMEOUT, "xy", 2), WEFT_OK);
    assert_int_equal(
        weft__store_resp_decode(b.data + WEFT__STORE_HDR_LEN, 6, &status, &data, &dlen), WEFT_OK);
    assert_int_equal(status, WEFT_ERR_TIMEOUT);
    assert_int_equal(dlen, 2);
    assert_memory_equal(data, "xy", 2);
    /* Too short, and a status the store never sends. */
    assert_int_equal(
        weft__store_resp_decode(b.data + WEFT__STORE_HDR_LEN, 3, &status, &data, &dlen),
        WEFT_ERR_PROTOCOL);
    const uint8_t odd[4] = {0x7f, 0, 0, 0};
    assert_int_equal(weft__store_resp_decode(odd, 4, &status, &data, &dlen), WEFT_ERR_PROTOCOL);
    weft__store_buf_free(&b);
}

static void test_ints(void **state)
{
    (void)state;
    weft_store_buf_t b = {0};
    assert_int_equal(weft__store_buf_put_u16(&b, 0xabcd), WEFT_OK);
    assert_int_equal(weft__store_buf_put_u32(&b, 0x01020304u), WEFT_OK);
    assert_int_equal(weft__store_buf_put_u64(&b, 0x1122334455667788ull), WEFT_OK);
    const uint8_t expect[] = {0xab, 0xcd, 1,    2,    3,    4,    0x11,
                              0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
    assert_int_equal(b.len, sizeof(expect));
    assert_memory_equal(b.data, expect, sizeof(expect));
    assert_int_equal(weft__store_get_u32(b.data + 2), 0x01020304u);
    assert_true(weft__store_get_u64(b.data + 6) == 0x1122334455667788ull);
    weft__store_buf_free(&b);
}

/* RFC 4231 test cases 1 and 2. */
static void test_hmac_rfc4231(void **state)
{
    (void)state;
    uint8_t out[32], expect[32], key[20];
    memset(key, 0x0b, sizeof(key));
    assert_int_equal(weft__store_hmac_sha256(key, sizeof(key), "Hi There", 8, out), WEFT_OK);
    hex_decode("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", expect, 32);
    assert_memory_equal(out, expect, 32);
    const char *data = "what do ya want for nothing?";
    assert_int_equal(weft__store_hmac_sha256("Jefe", 4, data, strlen(data), out), WEFT_OK);
    hex_decode("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", expect, 32);
    assert_memory_equal(out, expect, 32);
}

/* The session's secrets, proofs, keys and a frame tag, against Python's hmac module:
 * see the derivations in comm/store/proto.h. */
static void test_session_derivation(void **state)
{
    (void)state;
    const char *token = "0123456789abcdef0123456789abcdef";
    uint8_t sn[WEFT__STORE_NONCE_LEN], cn[WEFT__STORE_NONCE_LEN], t[WEFT__STORE_TRANSCRIPT_LEN];
    uint8_t secret[32], out[32], expect[32];
    for (int i = 0; i < WEFT__STORE_NONCE_LEN; i++) {
        sn[i] = (uint8_t)i;
        cn[i] = (uint8_t)(32 + i);
    }
    assert_int_equal(weft__store_session_secret(token, WEFT__STORE_ROLE_LAUNCHER, 0, secret),
                     WEFT_OK);
    hex_decode("3eb1bd439947eb762998e566ccc2e099c791118b2f40579cc4f7da2b5061b7f9", expect, 32);
    assert_memory_equal(secret, expect, 32);
    assert_int_equal(weft__store_session_secret(token, WEFT__STORE_ROLE_MEMBER, 7, secret),
                     WEFT_OK);
    hex_decode("e43cb515def0981a188b93779ac4048650d8e8af1e9ae560eab2967c5407eb3a", expect, 32);
    assert_memory_equal(secret, expect, 32);

    weft__store_transcript(t, sn, cn, WEFT__STORE_ROLE_MEMBER, 7);
    const struct {
        weft_store_derive_t what;
        const char *hex;
    } refs[] = {
        {WEFT__STORE_CLIENT_PROOF,
         "0471a75fbc4c1d1568479cc3ecbaeb1497cfd511eda307da34466d0deeb033c3"},
        {WEFT__STORE_SERVER_PROOF,
         "efa4e504be8b7984afb63c21293c9368e1fa16ecc4a4552068937441df7c9cbf"},
        {WEFT__STORE_KEY_C2S, "aa002bfccc7ec86cb3535b98e6ecadaee0a02c220afe1a2a47382715815e1170"},
        {WEFT__STORE_KEY_S2C, "1a4122f734559fe44954d600faa997508190a99becab9b19cb53dfede8153c04"},
    };
    for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++) {
        hex_decode(refs[i].hex, expect, 32);
        assert_int_equal(weft__store_derive(secret, refs[i].what, t, out), WEFT_OK);
        assert_memory_equal(out, expect, 32);
        assert_true(weft__store_proof_check(secret, refs[i].what, t, out, 32));
    }

    /* Every flipped bit, the other side's label, another member, a wrong length: refused. */
    uint8_t proof[32];
    assert_int_equal(weft__store_derive(secret, WEFT__STORE_CLIENT_PROOF, t, proof), WEFT_OK);
    for (int i = 0; i < 32 * 8; i++) {
        proof[i / 8] ^= (uint8_t)(1u << (i % 8));
        assert_false(weft__store_proof_check(secret, WEFT__STORE_CLIENT_PROOF, t, proof, 32));
        proof[i / 8] ^= (uint8_t)(1u << (i % 8));
    }
    assert_false(weft__store_proof_check(secret, WEFT__STORE_SERVER_PROOF, t, proof, 32));
    assert_false(weft__store_proof_check(secret, WEFT__STORE_CLIENT_PROOF, t, proof, 31));
    uint8_t other[32], t8[WEFT__STORE_TRANSCRIPT_LEN];
    assert_int_equal(weft__store_session_secret(token, WEFT__STORE_ROLE_MEMBER, 8, other), WEFT_OK);
    assert_false(weft__store_proof_check(other, WEFT__STORE_CLIENT_PROOF, t, proof, 32));
    weft__store_transcript(t8, sn, cn, WEFT__STORE_ROLE_MEMBER, 8);
    assert_false(weft__store_proof_check(secret, WEFT__STORE_CLIENT_PROOF, t8, proof, 32));
    weft__store_transcript(t8, sn, cn, WEFT__STORE_ROLE_LAUNCHER, 7);
    assert_false(weft__store_proof_check(secret, WEFT__STORE_CLIENT_PROOF, t8, proof, 32));
}

/* A sealed frame: its tag under the key and sequence number, checked once, in order. */
static void test_frame_tags(void **state)
{
    (void)state;
    weft_store_dir_t tx = {.seq = 5}, rx = {.seq = 5};
    hex_decode("aa002bfccc7ec86cb3535b98e6ecadaee0a02c220afe1a2a47382715815e1170", tx.key, 32);
    memcpy(rx.key, tx.key, 32);
    weft_store_buf_t b = {0};
    uint8_t expect[32];
    assert_int_equal(weft__store_frame_bytes(&b, WEFT__STORE_SET, "abc", 3), WEFT_OK);
    assert_int_equal(weft__store_seal(&b, 0, &tx), WEFT_OK);
    assert_int_equal(b.len, WEFT__STORE_HDR_LEN + 3 + WEFT__STORE_TAG_LEN);
    assert_int_equal(tx.seq, 6);
    /* Python: hmac.new(key, (5).to_bytes(8, "big") + header + b"abc", sha256) */
    hex_decode("e740963dc9b172f8ae3d63b01d94d8de686bf52c3470005271cb0c73162aeb56", expect, 32);
    assert_memory_equal(b.data + WEFT__STORE_HDR_LEN + 3, expect, 32);

    /* Altered anywhere (header, body, tag), or checked under another number: refused, and
     * the receiver's number stays where it was. */
    for (size_t i = 0; i < b.len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            b.data[i] ^= (uint8_t)(1u << bit);
            assert_false(weft__store_tag_check(&rx, b.data, b.data + WEFT__STORE_HDR_LEN, 3,
                                               b.data + WEFT__STORE_HDR_LEN + 3));
            b.data[i] ^= (uint8_t)(1u << bit);
        }
    }
    assert_int_equal(rx.seq, 5);
    rx.seq = 4;
    assert_false(weft__store_tag_check(&rx, b.data, b.data + WEFT__STORE_HDR_LEN, 3,
                                       b.data + WEFT__STORE_HDR_LEN + 3));
    rx.seq = 5;
    assert_true(weft__store_tag_check(&rx, b.data, b.data + WEFT__STORE_HDR_LEN, 3,
                                      b.data + WEFT__STORE_HDR_LEN + 3));
    assert_int_equal(rx.seq, 6);
    /* The same frame again (a replay) no longer matches. */
    assert_false(weft__store_tag_check(&rx, b.data, b.data + WEFT__STORE_HDR_LEN, 3,
                                       b.data + WEFT__STORE_HDR_LEN + 3));
    weft__store_buf_free(&b);
}

static void test_make_token(void **state)
{
    (void)state;
    char a[65], b[65];
    memset(a, 'X', sizeof(a));
    assert_int_equal(weft__store_make_token(a), WEFT_OK);
    assert_int_equal(weft__store_make_token(b), WEFT_OK);
    assert_int_equal(strlen(a), 32);
    for (int i = 0; i < 32; i++) {
        assert_non_null(strchr("0123456789abcdef", a[i]));
    }
    assert_string_not_equal(a, b); /* 2^-128 chance of a false failure */
}

/* SCAN arguments: three big-endian words, then a resume key within the key's limits. */
static void test_scan_decode(void **state)
{
    (void)state;
    uint8_t rest[WEFT__STORE_SCAN_ARGS_LEN + WEFT_STORE_MAX_KEY + 1] = {
        0, 0, 0x27, 0x10, 0, 0, 0, 3, 0, 1, 0, 0, 'a', '/', '7'};
    weft_store_scan_wire_t a;
    assert_int_equal(weft__store_scan_decode(rest, WEFT__STORE_SCAN_ARGS_LEN + 3, &a), WEFT_OK);
    assert_int_equal(a.timeout_ms, 10000);
    assert_int_equal(a.min_count, 3);
    assert_int_equal(a.max_bytes, 65536);
    assert_int_equal(a.alen, 3);
    assert_memory_equal(a.after, "a/7", 3);
    assert_int_equal(weft__store_scan_decode(rest, WEFT__STORE_SCAN_ARGS_LEN, &a), WEFT_OK);
    assert_int_equal(a.alen, 0);
    assert_int_equal(weft__store_scan_decode(rest, WEFT__STORE_SCAN_ARGS_LEN - 1, &a),
                     WEFT_ERR_PROTOCOL);
    memset(rest + WEFT__STORE_SCAN_ARGS_LEN, 'k', WEFT_STORE_MAX_KEY + 1);
    assert_int_equal(weft__store_scan_decode(rest, sizeof(rest) - 1, &a), WEFT_OK);
    assert_int_equal(weft__store_scan_decode(rest, sizeof(rest), &a), WEFT_ERR_PROTOCOL);
    rest[WEFT__STORE_SCAN_ARGS_LEN + 5] = '\0';
    assert_int_equal(weft__store_scan_decode(rest, WEFT__STORE_SCAN_ARGS_LEN + 9, &a),
                     WEFT_ERR_PROTOCOL);
}

/* A page: its header, then entries that each stay within what is left of it. */
static void test_page_decode(void **state)
{
    (void)state;
    const uint8_t page[] = {1, 0, 0, 0, 2,                     /* more, two entries */
                            0, 2, 'k', '1', 0, 0, 0, 1, 'v',   /* k1 = v */
                            0, 2, 'k', '2', 0, 0, 0, 0};       /* k2 = "" */
    bool more = false;
    uint32_t count = 0;
    const uint8_t *p, *val;
    const char *key;
    size_t left, klen, vlen;
    assert_int_equal(weft__store_page_decode(page, sizeof(page), &more, &count, &p, &left),
                     WEFT_OK);
    assert_true(more);
    assert_int_equal(count, 2);
    assert_int_equal(weft__store_page_entry(&p, &left, &key, &klen, &val, &vlen), WEFT_OK);
    assert_int_equal(klen, 2);
    assert_memory_equal(key, "k1", 2);
    assert_int_equal(vlen, 1);
    assert_int_equal(val[0], 'v');
    assert_int_equal(weft__store_page_entry(&p, &left, &key, &klen, &val, &vlen), WEFT_OK);
    assert_int_equal(vlen, 0);
    assert_int_equal(left, 0);
    assert_int_equal(weft__store_page_entry(&p, &left, &key, &klen, &val, &vlen),
                     WEFT_ERR_PROTOCOL);
    assert_int_equal(weft__store_page_decode(page, 4, &more, &count, &p, &left), WEFT_ERR_PROTOCOL);
    const uint8_t bad_more[] = {2, 0, 0, 0, 0};
    assert_int_equal(weft__store_page_decode(bad_more, 5, &more, &count, &p, &left),
                     WEFT_ERR_PROTOCOL);
    /* Entries that lie: a value past the end, an empty key, a key with a NUL, a key past
     * the end, a key over the limit. */
    const uint8_t *bad[] = {
        (const uint8_t[]){0, 1, 'k', 0, 0, 0, 2, 'v'},
        (const uint8_t[]){0, 0, 0, 0, 0, 0, 0, 0},
        (const uint8_t[]){0, 2, 'k', 0, 0, 0, 0, 0},
        (const uint8_t[]){0, 9, 'k', 0, 0, 0, 0, 0},
        (const uint8_t[]){1, 1, 'k', 0, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = bad[i];
        left = 8;
        assert_int_equal(weft__store_page_entry(&p, &left, &key, &klen, &val, &vlen),
                         WEFT_ERR_PROTOCOL);
        assert_ptr_equal(p, bad[i]);
    }
}

static void test_key_order(void **state)
{
    (void)state;
    assert_true(weft__store_key_cmp("a/10", 4, "a/2", 3) < 0);
    assert_true(weft__store_key_cmp("a", 1, "a/", 2) < 0);
    assert_true(weft__store_key_cmp("a/", 2, "a", 1) > 0);
    assert_int_equal(weft__store_key_cmp("ab", 2, "ab", 2), 0);
    assert_true(weft__store_key_cmp("\xff", 1, "a", 1) > 0); /* bytes, unsigned */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr_request_id),
        cmocka_unit_test(test_hdr_rejects),
        cmocka_unit_test(test_kv_rejects),
        cmocka_unit_test(test_frame_cap),
        cmocka_unit_test(test_hdr_roundtrip),
        cmocka_unit_test(test_kv_roundtrip),
        cmocka_unit_test(test_resp_decode),
        cmocka_unit_test(test_ints),
        cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_session_derivation),
        cmocka_unit_test(test_frame_tags),
        cmocka_unit_test(test_make_token),
        cmocka_unit_test(test_scan_decode),
        cmocka_unit_test(test_page_decode),
        cmocka_unit_test(test_key_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
