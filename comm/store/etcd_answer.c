/*
 * The decoders of etcd's answers (etcd_answer.h): the bytes of answers and watch streams,
 * and what the etcd backend reads out of them, apart from the requests that fetch them.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/store/etcd_answer.h"
#include "comm/store/proto.h"

/* ---- the bytes of an answer ---- */

size_t weft__etcd_on_data(char *p, size_t size, size_t n, void *arg)
{
    weft_etcd_answer_t *a = arg;
    size_t got = size * n;
    if (got > WEFT__ETCD_MAX_ANSWER || a->len + got > WEFT__ETCD_MAX_ANSWER) {
        a->too_big = true;
        return 0; /* aborts the transfer */
    }
    if (a->len + got + 1 > a->cap) {
        size_t cap = (a->len + got + 1) * 2;
        cap = cap > WEFT__ETCD_MAX_ANSWER + 1 ? WEFT__ETCD_MAX_ANSWER + 1 : cap;
        char *q = realloc(a->p, cap);
        if (q == NULL) {
            return 0;
        }
        a->p = q;
        a->cap = cap;
    }
    if (got > 0) {
        memcpy(a->p + a->len, p, got);
    }
    a->len += got;
    a->p[a->len] = '\0';
    return got;
}

size_t weft__etcd_on_stream(char *p, size_t size, size_t n, void *arg)
{
    weft_etcd_stream_t *s = arg;
    size_t got = size * n;
    if (weft__etcd_on_data(p, size, n, &s->buf) != got) {
        s->malformed = true; /* a message past the cap */
        return 0;
    }
    char *nl;
    while (s->buf.len > 0 && (nl = memchr(s->buf.p, '\n', s->buf.len)) != NULL) {
        size_t line = (size_t)(nl - s->buf.p);
        weft_json_t doc;
        bool go = true;
        if (line > 0 && weft__json_parse(&doc, s->buf.p, line) == WEFT_OK) {
            go = s->fn(s->arg, &doc);
            weft__json_free(&doc);
        } else if (line > 0) {
            s->malformed = true;
            go = false;
        }
        memmove(s->buf.p, nl + 1, s->buf.len - line - 1);
        s->buf.len -= line + 1;
        s->buf.p[s->buf.len] = '\0';
        if (!go) {
            s->stopped = true;
            return 0;
        }
    }
    return got;
}

/* ---- pieces of an answer ---- */

bool weft__etcd_header_rev(const weft_json_t *doc, int r, int64_t *rev)
{
    return weft__json_i64(doc, weft__json_get(doc, weft__json_get(doc, r, "header"), "revision"),
                          rev);
}

bool weft__etcd_kv_value(const weft_json_t *doc, int kv, uint8_t **val, size_t *len)
{
    int v = weft__json_get(doc, kv, "value");
    if (v < 0) {
        *len = 0;
        return (*val = calloc(1, 1)) != NULL;
    }
    return weft__json_b64(doc, v, WEFT__STORE_MAX_VALUE, val, len) == WEFT_OK;
}

char *weft__etcd_user_key(const char *root, const weft_json_t *doc, int t, const char *dir)
{
    uint8_t *k;
    size_t n;
    if (weft__json_b64(doc, t, WEFT__ETCD_ROOT_LEN + 2 + WEFT_STORE_MAX_KEY, &k, &n) != WEFT_OK) {
        return NULL;
    }
    size_t rl = strlen(root), dl = strlen(dir), skip = rl + dl;
    if (n <= skip || memcmp(k, root, rl) != 0 || memcmp(k + rl, dir, dl) != 0 ||
        memchr(k, '\0', n) != NULL) {
        free(k);
        return NULL;
    }
    memmove(k, k + skip, n - skip + 1);
    return (char *)k;
}

bool weft__etcd_kv_entry(const char *root, const weft_json_t *doc, int kv, const char *dir,
                         char **key, uint8_t **val, size_t *len)
{
    char *k = weft__etcd_user_key(root, doc, weft__json_get(doc, kv, "key"), dir);
    if (k == NULL || !weft__etcd_kv_value(doc, kv, val, len)) {
        free(k);
        return false;
    }
    *key = k;
    return true;
}

/* ---- answers ---- */

weft_status_t weft__etcd_first_kv(const weft_json_t *doc, int r, uint8_t **val, size_t *len,
                                  int64_t *mod_rev)
{
    int kv = weft__json_item(doc, weft__json_get(doc, r, "kvs"), 0);
    if (kv < 0) {
        return WEFT_INPROGRESS;
    }
    int64_t rev = 0;
    if (mod_rev != NULL && !weft__json_i64(doc, weft__json_get(doc, kv, "mod_revision"), &rev)) {
        return WEFT_ERR_PROTOCOL; /* a key without a revision */
    }
    int v = weft__json_get(doc, kv, "value");
    weft_status_t st = WEFT_OK;
    if (v < 0) { /* an empty value is left out */
        *val = calloc(1, 1);
        *len = 0;
        st = *val != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
    } else {
        st = weft__json_b64(doc, v, WEFT__STORE_MAX_VALUE, val, len);
    }
    if (st == WEFT_OK && mod_rev != NULL) {
        *mod_rev = rev;
    }
    return st;
}

weft_status_t weft__etcd_range_one(const weft_json_t *doc, uint8_t **val, size_t *len, int64_t *rev)
{
    weft_status_t st = weft__etcd_first_kv(doc, 0, val, len, NULL);
    if (st == WEFT_INPROGRESS && !weft__etcd_header_rev(doc, 0, rev)) {
        st = WEFT_ERR_PROTOCOL; /* an answer without a revision */
    }
    return st;
}

weft_status_t weft__etcd_txn(const weft_json_t *doc, const char *seq, weft_etcd_txn_out_t *out)
{
    weft_etcd_txn_out_t o = {.won = weft__json_true(doc, weft__json_get(doc, 0, "succeeded"))};
    if (o.won) {
        *out = o;
        return WEFT_OK;
    }
    /* The failure branch's reads: the key, then the marker. */
    int rs = weft__json_get(doc, 0, "responses");
    int r0 = weft__json_get(doc, weft__json_item(doc, rs, 0), "response_range");
    int r1 = weft__json_get(doc, weft__json_item(doc, rs, 1), "response_range");
    if (r0 < 0 || r1 < 0) {
        return WEFT_ERR_PROTOCOL;
    }
    uint8_t *mv = NULL;
    size_t mlen = 0, slen = strlen(seq);
    weft_status_t st = weft__etcd_first_kv(doc, r1, &mv, &mlen, NULL);
    o.ours = st == WEFT_OK && mlen == slen && memcmp(mv, seq, mlen) == 0;
    st = st == WEFT_INPROGRESS ? WEFT_OK : st;
    free(mv);
    if (st == WEFT_OK) {
        st = weft__etcd_first_kv(doc, r0, &o.cur, &o.cur_len, &o.cur_rev);
        st = st == WEFT_INPROGRESS ? WEFT_OK : st;
    }
    if (st == WEFT_OK) {
        *out = o;
    }
    return st;
}

weft_status_t weft__etcd_grant(const weft_json_t *doc, int64_t *id, int64_t *ttl_s)
{
    int64_t i, t;
    if (!weft__json_i64(doc, weft__json_get(doc, 0, "ID"), &i) ||
        !weft__json_i64(doc, weft__json_get(doc, 0, "TTL"), &t) || i == 0 || t <= 0) {
        return WEFT_ERR_PROTOCOL;
    }
    *id = i;
    *ttl_s = t;
    return WEFT_OK;
}

bool weft__etcd_keepalive_alive(const weft_json_t *doc)
{
    int64_t ttl = 0;
    weft__json_i64(doc, weft__json_get(doc, weft__json_get(doc, 0, "result"), "TTL"), &ttl);
    return ttl > 0;
}

weft_status_t weft__etcd_count(const weft_json_t *doc, int64_t *count)
{
    int t = weft__json_get(doc, 0, "count");
    int64_t n = 0; /* a count of 0 is left out */
    if (t >= 0 && (!weft__json_i64(doc, t, &n) || n < 0)) {
        return WEFT_ERR_PROTOCOL;
    }
    *count = n;
    return WEFT_OK;
}

/* ---- watch messages ---- */

int weft__etcd_watch_result(const weft_json_t *doc, bool *canceled)
{
    int r = weft__json_get(doc, 0, "result");
    *canceled = weft__json_true(doc, weft__json_get(doc, r, "canceled"));
    return r;
}

weft_status_t weft__etcd_get_event(const weft_json_t *doc, uint8_t **val, size_t *len)
{
    bool canceled;
    int r = weft__etcd_watch_result(doc, &canceled);
    if (r < 0 || canceled) {
        return WEFT_ERR_PROTOCOL;
    }
    int ev;
    for (size_t i = 0; (ev = weft__json_item(doc, weft__json_get(doc, r, "events"), i)) >= 0; i++) {
        if (weft__json_get(doc, ev, "type") >= 0) {
            continue; /* a DELETE; a PUT's type is left out */
        }
        int v = weft__json_get(doc, weft__json_get(doc, ev, "kv"), "value");
        if (v >= 0) {
            return weft__json_b64(doc, v, WEFT__STORE_MAX_VALUE, val, len);
        }
        *len = 0;
        return (*val = calloc(1, 1)) != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
    }
    return WEFT_INPROGRESS;
}

bool weft__etcd_watch_event(const char *root, const weft_json_t *doc, int ev,
                            weft_etcd_event_t *out)
{
    weft_etcd_event_t e = {.kind = WEFT__ETCD_EV_IGNORE};
    bool del = weft__json_str_is(doc, weft__json_get(doc, ev, "type"), "DELETE");
    int kv = weft__json_get(doc, ev, "kv");
    if (!weft__json_i64(doc, weft__json_get(doc, kv, "mod_revision"), &e.rev)) {
        return false;
    }
    int key = weft__json_get(doc, kv, "key");
    if ((e.key = weft__etcd_user_key(root, doc, key, "k/")) != NULL) { /* a user key */
        if (!del) {
            weft__json_i64(doc, weft__json_get(doc, kv, "version"), &e.version);
            if (!weft__etcd_kv_value(doc, kv, &e.val, &e.len)) {
                free(e.key);
                return false;
            }
            e.kind = WEFT__ETCD_EV_PUT;
        }
    } else if ((e.key = weft__etcd_user_key(root, doc, key, "n/")) != NULL) { /* a notice */
        int prev = weft__json_get(doc, ev, "prev_kv");
        int64_t lease = 0;
        weft__json_i64(doc, weft__json_get(doc, prev, "lease"), &lease);
        if (del && prev >= 0 && lease != 0) { /* else armed, renewed, or disarmed */
            if (!weft__etcd_kv_value(doc, prev, &e.val, &e.len)) {
                free(e.key);
                return false;
            }
            e.kind = WEFT__ETCD_EV_LAPSE;
        }
    } else {
        return false;
    }
    if (e.kind == WEFT__ETCD_EV_IGNORE) {
        free(e.key);
        e.key = NULL;
    }
    *out = e;
    return true;
}

/* ---- scan pages ---- */

void weft__etcd_acc_free(weft_etcd_page_acc_t *acc)
{
    for (size_t i = 0; i < acc->n; i++) {
        free(acc->keys[i]);
        free(acc->vals[i]);
    }
    free(acc->keys);
    free(acc->vals);
    free(acc->lens);
    *acc = (weft_etcd_page_acc_t){0};
}

static bool acc_push(weft_etcd_page_acc_t *acc, char *key, uint8_t *val, size_t len)
{
    if (acc->n == acc->cap) {
        size_t cap = acc->cap > 0 ? acc->cap * 2 : 64;
        char **k = realloc(acc->keys, cap * sizeof(*k));
        if (k == NULL) {
            return false;
        }
        acc->keys = k;
        uint8_t **v = realloc(acc->vals, cap * sizeof(*v));
        if (v == NULL) {
            return false;
        }
        acc->vals = v;
        size_t *l = realloc(acc->lens, cap * sizeof(*l));
        if (l == NULL) {
            return false;
        }
        acc->lens = l;
        acc->cap = cap;
    }
    acc->keys[acc->n] = key;
    acc->vals[acc->n] = val;
    acc->lens[acc->n] = len;
    acc->n++;
    return true;
}

weft_status_t weft__etcd_page_add(const char *root, const weft_json_t *doc, const char *prefix,
                                  const char *after, size_t budget, weft_etcd_page_acc_t *acc,
                                  size_t *got, bool *full, bool *more)
{
    size_t plen = strlen(prefix);
    int kvs = weft__json_get(doc, 0, "kvs"), kv;
    *got = 0;
    *full = false;
    *more = weft__json_true(doc, weft__json_get(doc, 0, "more"));
    for (; (kv = weft__json_item(doc, kvs, *got)) >= 0; (*got)++) {
        char *key;
        uint8_t *val;
        size_t len;
        if (!weft__etcd_kv_entry(root, doc, kv, "k/", &key, &val, &len)) {
            return WEFT_ERR_PROTOCOL;
        }
        size_t klen = strlen(key);
        const char *prev = acc->n > 0 ? acc->keys[acc->n - 1] : after;
        if (klen < plen || memcmp(key, prefix, plen) != 0 ||
            (prev[0] != '\0' && strcmp(prev, key) >= 0)) {
            free(key); /* out of the prefix, or out of order */
            free(val);
            return WEFT_ERR_PROTOCOL;
        }
        size_t cost = WEFT__STORE_PAGE_ENTRY_LEN + klen + len;
        if (acc->n > 0 && acc->used + cost > budget) {
            free(key);
            free(val);
            *full = true;
            return WEFT_OK;
        }
        if (cost > WEFT__STORE_MAX_PAGE || !acc_push(acc, key, val, len)) {
            free(key); /* the first entry, which no page holds: read it with a get */
            free(val);
            return WEFT_ERR_NO_MEMORY;
        }
        acc->used += cost;
    }
    return WEFT_OK;
}

weft_status_t weft__etcd_acc_page(const weft_etcd_page_acc_t *acc, bool more,
                                  weft_store_page_t *page)
{
    size_t total = 1;
    for (size_t i = 0; i < acc->n; i++) {
        total += strlen(acc->keys[i]) + 1 + acc->lens[i] + 1;
    }
    weft_store_kv_t *kv = malloc(sizeof(*kv) * (acc->n > 0 ? acc->n : 1));
    char *mem = malloc(total);
    if (kv == NULL || mem == NULL) {
        free(kv);
        free(mem);
        return WEFT_ERR_NO_MEMORY;
    }
    char *p = mem;
    for (size_t i = 0; i < acc->n; i++) {
        size_t kl = strlen(acc->keys[i]);
        memcpy(p, acc->keys[i], kl + 1);
        kv[i].key = p;
        p += kl + 1;
        memcpy(p, acc->vals[i], acc->lens[i]);
        p[acc->lens[i]] = '\0';
        kv[i].val = p;
        kv[i].len = acc->lens[i];
        p += acc->lens[i] + 1;
    }
    *page = (weft_store_page_t){.kv = kv, .n = acc->n, .more = more, .mem = mem};
    return WEFT_OK;
}
