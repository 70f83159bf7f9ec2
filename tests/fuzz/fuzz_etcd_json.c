/*
 * Fuzz target: the etcd backend's reading of etcd's answers, which come from the network
 * (an endpoint, or anything that answers on its port): the bounded JSON reader
 * (comm/store/json.c) and the decoders of comm/store/etcd_answer.c that the client
 * (etcd_client.c) calls on every answer: ranges, transactions, lease grants and
 * keepalives, counts, scan pages and the messages of a streamed watch.
 *
 * The input is the text of one answer, or of a watch stream (one message a line), as the
 * seeds are: answers of a real etcd 3.4 (tests/fuzz/corpus/etcd/, keys under ROOT). It is
 * parsed, and every decoder runs on the document; then the same bytes go through the
 * answer buffer and the stream splitter in pieces (as libcurl hands them over), each
 * message to the watch decoders. Checked besides crashes, leaks and sanitizer reports:
 * tokens lie inside the text and nest, base64 that decodes encodes back to the same
 * text, decoded keys are user keys (non-empty, no NUL, at most WEFT_STORE_MAX_KEY bytes),
 * values are NUL-terminated and bounded, a page holds what was accepted, in order.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/store/etcd_answer.h"
#include "comm/store/proto.h"

#define ROOT "weft/0123456789abcdef/"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_value(const uint8_t *val, size_t len)
{
    if (val == NULL || len > WEFT__STORE_MAX_VALUE || val[len] != '\0') {
        abort();
    }
}

static void check_key(const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n > WEFT_STORE_MAX_KEY) {
        abort();
    }
}

/* The tokens: inside the text, strings between quotes, subtrees nested. */
static void check_tokens(const weft_json_t *j, size_t len)
{
    for (uint32_t i = 0; i < j->n; i++) {
        const weft_json_tok_t *t = &j->tok[i];
        if (t->start > t->end || t->end > len || t->next <= i || t->next > j->n) {
            abort();
        }
        if (t->type == WEFT__JSON_STRING &&
            (t->start == 0 || j->text[t->start - 1] != '"' || j->text[t->end] != '"')) {
            abort();
        }
        if (t->type == WEFT__JSON_OBJECT || t->type == WEFT__JSON_ARRAY) {
            for (uint32_t k = i + 1; k < t->next; k = j->tok[k].next) {
                if (j->tok[k].next > t->next || j->tok[k].start < t->start) {
                    abort();
                }
            }
        }
    }
}

/* Every string that is base64 encodes back to itself (the decoder is strict). */
static void check_base64(const weft_json_t *j)
{
    for (uint32_t i = 0; i < j->n; i++) {
        uint8_t *b;
        size_t n;
        if (weft__json_b64(j, (int)i, 8192, &b, &n) != WEFT_OK) {
            continue;
        }
        size_t tl = j->tok[i].end - j->tok[i].start;
        char *e = malloc(WEFT__B64_LEN(n) + 1);
        if (e == NULL) {
            abort();
        }
        weft__b64_encode(b, n, e);
        if (b[n] != '\0' || strlen(e) != tl || memcmp(e, j->text + j->tok[i].start, tl) != 0) {
            abort();
        }
        free(e);
        free(b);
        int64_t v;
        (void)weft__json_i64(j, (int)i, &v);
        (void)weft__json_true(j, (int)i);
        (void)weft__json_item(j, (int)i, 0);
    }
}

static void run_answers(const weft_json_t *doc)
{
    uint8_t *val;
    size_t len;
    int64_t rev, id, ttl, count;
    if (weft__etcd_range_one(doc, &val, &len, &rev) == WEFT_OK) {
        check_value(val, len);
        free(val);
    }
    for (uint32_t t = 0; t < doc->n && t < 64; t++) {
        if (weft__etcd_first_kv(doc, (int)t, &val, &len, &rev) == WEFT_OK) {
            check_value(val, len);
            free(val);
        }
        char *key;
        if (weft__etcd_kv_entry(ROOT, doc, (int)t, "k/", &key, &val, &len)) {
            check_key(key);
            check_value(val, len);
            free(key);
            free(val);
        }
    }
    weft_etcd_txn_out_t o;
    if (weft__etcd_txn(doc, "1", &o) == WEFT_OK) {
        if (o.won && o.cur != NULL) {
            abort();
        }
        if (o.cur != NULL) {
            check_value(o.cur, o.cur_len);
        }
        free(o.cur);
    }
    if (weft__etcd_grant(doc, &id, &ttl) == WEFT_OK && (id == 0 || ttl <= 0)) {
        abort();
    }
    (void)weft__etcd_keepalive_alive(doc);
    if (weft__etcd_count(doc, &count) == WEFT_OK && count < 0) {
        abort();
    }
    (void)weft__etcd_header_rev(doc, 0, &rev);
}

/* A page read from the answer: with no bound, and with a small one, under two prefixes. */
static void run_page(const weft_json_t *doc, const char *prefix, size_t budget)
{
    weft_etcd_page_acc_t acc = {0};
    size_t got;
    bool full, more;
    weft_status_t st = weft__etcd_page_add(ROOT, doc, prefix, "", budget, &acc, &got, &full, &more);
    if (st == WEFT_OK) {
        if (acc.n > got || (acc.n > 1 && acc.used > budget)) {
            abort();
        }
        weft_store_page_t page;
        if (weft__etcd_acc_page(&acc, full, &page) == WEFT_OK) {
            for (size_t i = 0; i < page.n; i++) {
                check_key(page.kv[i].key);
                check_value(page.kv[i].val, page.kv[i].len);
                if (strncmp(page.kv[i].key, prefix, strlen(prefix)) != 0 ||
                    (i > 0 && strcmp(page.kv[i - 1].key, page.kv[i].key) >= 0) ||
                    strcmp(page.kv[i].key, acc.keys[i]) != 0 || page.kv[i].len != acc.lens[i]) {
                    abort();
                }
            }
            weft__store_page_free(&page);
        }
    }
    weft__etcd_acc_free(&acc);
}

/* A watch message, as a get's wait and as a prefix's watch read it. */
static bool on_message(void *arg, const weft_json_t *doc)
{
    (void)arg;
    uint8_t *val;
    size_t len;
    if (weft__etcd_get_event(doc, &val, &len) == WEFT_OK) {
        check_value(val, len);
        free(val);
    }
    bool canceled;
    int r = weft__etcd_watch_result(doc, &canceled), ev;
    for (size_t i = 0; (ev = weft__json_item(doc, weft__json_get(doc, r, "events"), i)) >= 0; i++) {
        weft_etcd_event_t e;
        if (!weft__etcd_watch_event(ROOT, doc, ev, &e)) {
            return false; /* the watch ends, as the client's does */
        }
        if ((e.kind == WEFT__ETCD_EV_IGNORE) != (e.key == NULL)) {
            abort();
        }
        if (e.key != NULL) {
            check_key(e.key);
            check_value(e.val, e.len);
        }
        free(e.key);
        free(e.val);
    }
    return true;
}

/* The bytes as libcurl hands them over, in pieces of @p piece bytes. */
static void run_stream(const uint8_t *data, size_t size, size_t piece)
{
    weft_etcd_answer_t a = {0};
    weft_etcd_stream_t s = {.fn = on_message};
    bool whole = true;
    for (size_t off = 0; off < size; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        if (whole && weft__etcd_on_data((char *)data + off, 1, n, &a) != n) {
            abort(); /* inputs are far below the bound */
        }
        if (!s.stopped && weft__etcd_on_stream((char *)data + off, 1, n, &s) != n && !s.stopped &&
            !s.malformed) {
            abort();
        }
    }
    if (a.len != size || (size > 0 && memcmp(a.p, data, size) != 0)) {
        abort();
    }
    free(a.p);
    free(s.buf.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weft_json_t doc;
    if (weft__json_parse(&doc, (const char *)data, size) == WEFT_OK) {
        check_tokens(&doc, size);
        check_base64(&doc);
        run_answers(&doc);
        run_page(&doc, "", WEFT__STORE_MAX_PAGE);
        run_page(&doc, "a", 64);
        (void)on_message(NULL, &doc);
        weft__json_free(&doc);
    }
    run_stream(data, size, 1 + size % 61);
    return 0;
}
