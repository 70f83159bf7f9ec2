/* Unit tests of the etcd backend's bounded JSON reader, its base64, and the decoders of
 * etcd's answers (comm/store/json.h, comm/store/etcd_answer.h). The answers are etcd
 * 3.4's (tests/fuzz/corpus/etcd/), cut short; the fuzz target fuzz_etcd_json runs the
 * same code on arbitrary bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/store/etcd_answer.h"

#define ROOT "weft/0123456789abcdef/"
/* base64 of ROOT "k/job/x", ROOT "k/a/1", ROOT "k/a/2", ROOT "n/fail/7",
 * "weft/ffffffffffffffff/k/job/x" */
#define KEY_JOB_X "d2VmdC8wMTIzNDU2Nzg5YWJjZGVmL2svam9iL3g="
#define KEY_A1 "d2VmdC8wMTIzNDU2Nzg5YWJjZGVmL2svYS8x"
#define KEY_A2 "d2VmdC8wMTIzNDU2Nzg5YWJjZGVmL2svYS8y"
#define KEY_N7 "d2VmdC8wMTIzNDU2Nzg5YWJjZGVmL24vZmFpbC83"
#define KEY_OTHER_JOB "d2VmdC9mZmZmZmZmZmZmZmZmZmZmL2svam9iL3g="

static weft_status_t parse(weft_json_t *doc, const char *text)
{
    return weft__json_parse(doc, text, strlen(text));
}

static bool b64(const char *s, char *out, size_t *len)
{
    uint8_t buf[64];
    if (!weft__b64_decode(s, strlen(s), buf, len)) {
        return false;
    }
    memcpy(out, buf, *len);
    out[*len] = '\0';
    return true;
}

/* One spelling per byte string: bits past the last byte are refused (found by
 * fuzz_etcd_json: "...vNB==" read as "...vNA=="). */
static void test_b64_canonical(void **state)
{
    (void)state;
    char out[64];
    size_t len;
    assert_true(b64("QQ==", out, &len));
    assert_string_equal(out, "A");
    assert_true(b64("QUI=", out, &len));
    assert_string_equal(out, "AB");
    assert_true(b64("", out, &len));
    assert_int_equal(len, 0);
    assert_false(b64("QR==", out, &len));
    assert_false(b64("QUJ=", out, &len));
    assert_false(b64("QQ", out, &len));
    assert_false(b64("QQ==QQ==", out, &len));
    assert_false(b64("Q===", out, &len));
    assert_false(b64("QQ=A", out, &len));
    for (size_t n = 0; n < 40; n++) { /* every length round-trips */
        uint8_t in[40], dec[40];
        for (size_t i = 0; i < n; i++) {
            in[i] = (uint8_t)(i * 37 + n);
        }
        char enc[WEFT__B64_LEN(40) + 1];
        weft__b64_encode(in, n, enc);
        assert_true(weft__b64_decode(enc, strlen(enc), dec, &len));
        assert_int_equal(len, n);
        assert_memory_equal(dec, in, n);
    }
}

static void test_json_grammar(void **state)
{
    (void)state;
    weft_json_t doc;
    assert_int_equal(parse(&doc, " {\"a\":[1,\"2\",true,{}],\"b\":\"x\\\"y\"} "), WEFT_OK);
    int a = weft__json_get(&doc, 0, "a");
    int64_t v;
    assert_true(weft__json_i64(&doc, weft__json_item(&doc, a, 0), &v) && v == 1);
    assert_true(weft__json_i64(&doc, weft__json_item(&doc, a, 1), &v) && v == 2);
    assert_true(weft__json_true(&doc, weft__json_item(&doc, a, 2)));
    assert_int_equal(weft__json_item(&doc, a, 4), -1);
    assert_int_equal(weft__json_get(&doc, a, "b"), -1); /* an array has no members */
    assert_int_equal(weft__json_get(&doc, 0, "c"), -1);
    assert_false(weft__json_i64(&doc, weft__json_get(&doc, 0, "b"), &v));
    weft__json_free(&doc);
    const char *bad[] = {"",        "{",         "{\"a\"}", "{\"a\":1,}", "[1 2]", "\"\x01\"",
                         "\"\\x\"", "\"\\u12\"", "{} {}",   "{1:2}",      "[",     "]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse(&doc, bad[i]), WEFT_ERR_PROTOCOL);
    }
    char deep[2 * WEFT__JSON_MAX_DEPTH + 3];
    for (int depth = WEFT__JSON_MAX_DEPTH; depth <= WEFT__JSON_MAX_DEPTH + 1; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        deep[2 * depth] = '\0';
        assert_int_equal(parse(&doc, deep),
                         depth <= WEFT__JSON_MAX_DEPTH ? WEFT_OK : WEFT_ERR_PROTOCOL);
        weft__json_free(&doc);
    }
    assert_int_equal(parse(&doc, "[\"-9223372036854775808\",\"9223372036854775808\",\"1x\"]"),
                     WEFT_OK);
    assert_true(weft__json_i64(&doc, weft__json_item(&doc, 0, 0), &v) && v == INT64_MIN);
    assert_false(weft__json_i64(&doc, weft__json_item(&doc, 0, 1), &v));
    assert_false(weft__json_i64(&doc, weft__json_item(&doc, 0, 2), &v));
    weft__json_free(&doc);
}

static void test_range_and_txn(void **state)
{
    (void)state;
    weft_json_t doc;
    uint8_t *val;
    size_t len;
    int64_t rev = 0;
    assert_int_equal(parse(&doc,
                           "{\"header\":{\"revision\":\"3\"},\"kvs\":[{\"key\":\"" KEY_JOB_X
                           "\",\"mod_revision\":\"2\",\"value\":\"aGVsbG8=\"}],\"count\":\"1\"}"),
                     WEFT_OK);
    assert_int_equal(weft__etcd_range_one(&doc, &val, &len, &rev), WEFT_OK);
    assert_int_equal(len, 5);
    assert_string_equal((char *)val, "hello");
    free(val);
    weft__json_free(&doc);
    assert_int_equal(parse(&doc, "{\"header\":{\"revision\":\"7\"}}"), WEFT_OK);
    assert_int_equal(weft__etcd_range_one(&doc, &val, &len, &rev), WEFT_INPROGRESS);
    assert_int_equal(rev, 7);
    weft__json_free(&doc);
    assert_int_equal(parse(&doc, "{\"kvs\":[]}"), WEFT_OK); /* no key, no revision */
    assert_int_equal(weft__etcd_range_one(&doc, &val, &len, &rev), WEFT_ERR_PROTOCOL);
    weft__json_free(&doc);
    /* A lost compare-and-swap: the key's value and revision, and the marker (ours). */
    weft_etcd_txn_out_t o;
    assert_int_equal(parse(&doc,
                           "{\"responses\":[{\"response_range\":{\"kvs\":[{\"key\":\"" KEY_JOB_X
                           "\",\"mod_revision\":\"9\",\"value\":\"MA==\"}]}},"
                           "{\"response_range\":{\"kvs\":[{\"value\":\"MQ==\"}]}}]}"),
                     WEFT_OK);
    assert_int_equal(weft__etcd_txn(&doc, "1", &o), WEFT_OK);
    assert_true(!o.won && o.ours && o.cur_len == 1 && o.cur[0] == '0' && o.cur_rev == 9);
    free(o.cur);
    assert_int_equal(weft__etcd_txn(&doc, "2", &o), WEFT_OK);
    assert_false(o.ours);
    free(o.cur);
    weft__json_free(&doc);
    assert_int_equal(parse(&doc, "{\"responses\":[]}"), WEFT_OK); /* lost, no reads */
    assert_int_equal(weft__etcd_txn(&doc, "1", &o), WEFT_ERR_PROTOCOL);
    weft__json_free(&doc);
    int64_t id, ttl, count;
    assert_int_equal(parse(&doc, "{\"ID\":\"29\",\"TTL\":\"0\",\"count\":\"-1\"}"), WEFT_OK);
    assert_int_equal(weft__etcd_grant(&doc, &id, &ttl), WEFT_ERR_PROTOCOL);
    assert_int_equal(weft__etcd_count(&doc, &count), WEFT_ERR_PROTOCOL);
    assert_false(weft__etcd_keepalive_alive(&doc));
    weft__json_free(&doc);
}

/* A page takes keys under the prefix in ascending order only, and stops at its bytes. */
static void test_page(void **state)
{
    (void)state;
    const char *answers[] = {
        "{\"kvs\":[{\"key\":\"" KEY_A1 "\",\"value\":\"eA==\"},{\"key\":\"" KEY_A2 "\"}],"
        "\"more\":true}",
        "{\"kvs\":[{\"key\":\"" KEY_A2 "\"},{\"key\":\"" KEY_A1 "\"}]}", /* out of order */
        "{\"kvs\":[{\"key\":\"" KEY_JOB_X "\"}]}",                       /* not under a/ */
        "{\"kvs\":[{\"key\":\"" KEY_OTHER_JOB "\"}]}",                   /* another job's */
        "{\"kvs\":[{\"key\":\"" KEY_A1 "\",\"value\":\"eA=\"}]}",        /* bad value */
    };
    weft_status_t want[] = {WEFT_OK, WEFT_ERR_PROTOCOL, WEFT_ERR_PROTOCOL, WEFT_ERR_PROTOCOL,
                            WEFT_ERR_PROTOCOL};
    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        weft_json_t doc;
        assert_int_equal(parse(&doc, answers[i]), WEFT_OK);
        weft_etcd_page_acc_t acc = {0};
        size_t got;
        bool full, more;
        assert_int_equal(
            weft__etcd_page_add(ROOT, &doc, "a/", "", 1 << 20, &acc, &got, &full, &more), want[i]);
        if (i == 0) {
            assert_true(got == 2 && !full && more && acc.n == 2);
            weft_store_page_t page;
            assert_int_equal(weft__etcd_acc_page(&acc, false, &page), WEFT_OK);
            assert_string_equal(page.kv[0].key, "a/1");
            assert_string_equal((const char *)page.kv[0].val, "x");
            assert_true(page.kv[1].len == 0 && strcmp(page.kv[1].key, "a/2") == 0);
            weft__store_page_free(&page);
            weft__etcd_acc_free(&acc);
            /* A budget of one entry: the second is left for the next page. */
            assert_int_equal(weft__etcd_page_add(ROOT, &doc, "a/", "", 1, &acc, &got, &full, &more),
                             WEFT_OK);
            assert_true(full && acc.n == 1);
            weft__etcd_acc_free(&acc);
            /* Resuming after a/1: a/1 again is out of order. */
            assert_int_equal(
                weft__etcd_page_add(ROOT, &doc, "a/", "a/1", 1 << 20, &acc, &got, &full, &more),
                WEFT_ERR_PROTOCOL);
        }
        weft__etcd_acc_free(&acc);
        weft__json_free(&doc);
    }
}

static bool count_message(void *arg, const weft_json_t *doc)
{
    (void)doc;
    (*(int *)arg)++;
    return true;
}

/* Watch messages: a put, a deleted key, a notice deleted with its lease; a stream split
 * anywhere. */
static void test_watch(void **state)
{
    (void)state;
    const char *msg =
        "{\"result\":{\"events\":[{\"kv\":{\"key\":\"" KEY_JOB_X "\",\"mod_revision\":\"12\","
        "\"version\":\"1\",\"value\":\"ZGVhZA==\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":"
        "\"" KEY_JOB_X "\",\"mod_revision\":\"13\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":\"" KEY_N7
        "\",\"mod_revision\":\"15\"},\"prev_kv\":{\"key\":\"" KEY_N7 "\",\"value\":\"cmFuayA3\","
        "\"lease\":\"29\"}},{\"kv\":{\"key\":\"" KEY_OTHER_JOB "\",\"mod_revision\":\"16\"}}]}}";
    weft_json_t doc;
    assert_int_equal(parse(&doc, msg), WEFT_OK);
    uint8_t *val;
    size_t len;
    assert_int_equal(weft__etcd_get_event(&doc, &val, &len), WEFT_OK);
    assert_string_equal((char *)val, "dead");
    free(val);
    bool canceled;
    int r = weft__etcd_watch_result(&doc, &canceled);
    int evs = weft__json_get(&doc, r, "events");
    weft_etcd_event_t e;
    assert_true(weft__etcd_watch_event(ROOT, &doc, weft__json_item(&doc, evs, 0), &e));
    assert_true(e.kind == WEFT__ETCD_EV_PUT && e.rev == 12 && e.version == 1);
    assert_string_equal(e.key, "job/x");
    assert_string_equal((char *)e.val, "dead");
    free(e.key);
    free(e.val);
    assert_true(weft__etcd_watch_event(ROOT, &doc, weft__json_item(&doc, evs, 1), &e));
    assert_true(e.kind == WEFT__ETCD_EV_IGNORE && e.key == NULL && e.rev == 13);
    assert_true(weft__etcd_watch_event(ROOT, &doc, weft__json_item(&doc, evs, 2), &e));
    assert_true(e.kind == WEFT__ETCD_EV_LAPSE && e.rev == 15);
    assert_string_equal(e.key, "fail/7");
    assert_string_equal((char *)e.val, "rank 7");
    free(e.key);
    free(e.val);
    assert_false(weft__etcd_watch_event(ROOT, &doc, weft__json_item(&doc, evs, 3), &e));
    weft__json_free(&doc);
    assert_int_equal(parse(&doc, "{\"result\":{\"canceled\":true}}"), WEFT_OK);
    assert_int_equal(weft__etcd_get_event(&doc, &val, &len), WEFT_ERR_PROTOCOL);
    weft__json_free(&doc);

    const char stream[] = "{\"result\":{}}\n\n{\"result\":{\"events\":[]}}\n{\"res";
    for (size_t piece = 1; piece < sizeof(stream); piece++) {
        int n = 0;
        weft_etcd_stream_t s = {.fn = count_message, .arg = &n};
        for (size_t off = 0; off < sizeof(stream) - 1; off += piece) {
            size_t k = sizeof(stream) - 1 - off < piece ? sizeof(stream) - 1 - off : piece;
            assert_int_equal(weft__etcd_on_stream((char *)stream + off, 1, k, &s), k);
        }
        assert_true(n == 2 && !s.malformed && !s.stopped && s.buf.len == 5);
        free(s.buf.p);
    }
    int n = 0;
    weft_etcd_stream_t s = {.fn = count_message, .arg = &n};
    assert_int_equal(weft__etcd_on_stream((char *)"{\"a\":}\n", 1, 7, &s), 0);
    assert_true(s.malformed && s.stopped && n == 0);
    free(s.buf.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64_canonical), cmocka_unit_test(test_json_grammar),
        cmocka_unit_test(test_range_and_txn), cmocka_unit_test(test_page),
        cmocka_unit_test(test_watch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
