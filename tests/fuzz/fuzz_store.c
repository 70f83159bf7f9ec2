/*
 * Fuzz target: the rendezvous store's frame reader and request handling.
 *
 * The input is a script for a fake server (weft__store_server_fake: no sockets, no
 * thread): up to four connections, authenticated or not, are fed bytes in pieces of any
 * size (so frames arrive split anywhere), closed, polled, or have keys set under them by
 * the hosting process. What the server sends back must be well-formed frames, a HELLO
 * only first; a crash, a leak or a sanitizer report is a finding too. The frame decoders
 * (SCAN arguments and pages among them) also read the raw input as a stream of frames.
 *
 * Script: byte 0 = connections - 1 (bits 0-1), which are authenticated (bits 2-5), and
 * whether those speak as members (bit 6: connection i as member i, under the store's
 * rules for members) or as launchers;
 * then records of an op byte (bits 0-1 connection, 2-3 kind, 4-7 piece size, 0 = whole):
 *   kind 0 feed:      u16 length (big-endian), then that many bytes
 *   kind 1 close:     end of stream
 *   kind 2 poll:      collect what the connection was sent
 *   kind 3 host set:  u8 key length, key, u8 value length, value
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/store/proto.h"

enum { MAX_CONNS = 4 };

static void quiet(weft_log_level_t level, int rank, const char *msg, void *arg)
{
    (void)level;
    (void)rank;
    (void)msg;
    (void)arg;
}

/* Every log line is formatted (that code runs too), then dropped. */
static const weft_logger_t logger = {
    .level = WEFT_LOG_TRACE, .rank = -1, .fn = quiet, .prefix = "fuzz"};

/* What the server sent one connection: whole frames of the types it may send. */
static void check_sent(const weft_store_buf_t *b, bool *greeted)
{
    size_t off = 0;
    while (off < b->len) {
        uint32_t n;
        weft_store_msg_t type;
        if (b->len - off < WEFT__STORE_HDR_LEN ||
            weft__store_hdr_decode(b->data + off, &n, &type) != WEFT_OK) {
            abort();
        }
        off += WEFT__STORE_HDR_LEN;
        if (n > b->len - off) {
            abort();
        }
        /* Answers carry the id of their request; nothing else carries one. */
        if (type != WEFT__STORE_RESP && weft__store_hdr_id(b->data + off - WEFT__STORE_HDR_LEN) != 0) {
            abort();
        }
        const uint8_t *p = b->data + off;
        const char *key;
        const uint8_t *rest;
        size_t klen, rlen;
        weft_status_t status;
        switch (type) {
        case WEFT__STORE_HELLO:
            if (*greeted || n != WEFT__STORE_HELLO_LEN || p[0] != WEFT__STORE_VERSION) {
                abort();
            }
            break;
        case WEFT__STORE_RESP:
            if (weft__store_resp_decode(p, n, &status, &rest, &rlen) != WEFT_OK) {
                abort();
            }
            break;
        case WEFT__STORE_EVENT:
            if (weft__store_kv_decode(p, n, &key, &klen, &rest, &rlen) != WEFT_OK || klen == 0) {
                abort();
            }
            break;
        default:
            abort();
        }
        *greeted = true;
        off += n;
    }
}

/* A page's decoders on @p n bytes: every entry they take lies within them. */
static void decode_page(const uint8_t *data, size_t n)
{
    bool more;
    uint32_t count;
    const uint8_t *p, *val;
    const char *key;
    size_t left, klen, vlen;
    if (weft__store_page_decode(data, n, &more, &count, &p, &left) != WEFT_OK) {
        return;
    }
    while (count-- > 0 && weft__store_page_entry(&p, &left, &key, &klen, &val, &vlen) == WEFT_OK) {
        if (klen == 0 || klen > WEFT_STORE_MAX_KEY || memchr(key, 0, klen) || val + vlen != p ||
            p + left != data + n) {
            abort();
        }
    }
}

/* The decoders on the raw input, read as frames. */
static void decode_raw(const uint8_t *data, size_t size)
{
    while (size >= WEFT__STORE_HDR_LEN) {
        uint32_t n;
        weft_store_msg_t type;
        if (weft__store_hdr_decode(data, &n, &type) != WEFT_OK) {
            return;
        }
        data += WEFT__STORE_HDR_LEN;
        size -= WEFT__STORE_HDR_LEN;
        n = n < size ? n : (uint32_t)size;
        const char *key;
        const uint8_t *rest;
        size_t klen, rlen;
        weft_status_t status;
        if (weft__store_kv_decode(data, n, &key, &klen, &rest, &rlen) == WEFT_OK &&
            (klen > WEFT_STORE_MAX_KEY || rest + rlen != data + n || memchr(key, 0, klen))) {
            abort();
        }
        if (weft__store_resp_decode(data, n, &status, &rest, &rlen) == WEFT_OK &&
            rest + rlen != data + n) {
            abort();
        }
        weft_store_scan_wire_t scan;
        if (weft__store_scan_decode(data, n, &scan) == WEFT_OK &&
            (scan.alen > WEFT_STORE_MAX_KEY || scan.after + scan.alen != (const char *)data + n ||
             memchr(scan.after, 0, scan.alen))) {
            abort();
        }
        decode_page(data, n);
        data += n;
        size -= n;
    }
}

typedef struct script {
    const uint8_t *p;
    size_t left;
} script_t;

static bool take(script_t *s, size_t n, const uint8_t **out)
{
    n = n < s->left ? n : s->left;
    *out = s->p;
    s->p += n;
    s->left -= n;
    return n > 0;
}

static size_t take_len(script_t *s, size_t width)
{
    const uint8_t *b;
    size_t v = 0;
    if (s->left < width) {
        s->left = 0;
        return 0;
    }
    (void)take(s, width, &b);
    for (size_t i = 0; i < width; i++) {
        v = v << 8 | b[i];
    }
    return v;
}

/* Feed @p n bytes to connection @p id in pieces; false once it is closed. */
static bool feed(weft_store_server_t *srv, int id, const uint8_t *p, size_t n, size_t piece,
                 weft_store_buf_t *sent)
{
    do {
        size_t k = piece == 0 || piece > n ? n : piece, used = 0;
        if (!weft__store_server_feed(srv, id, p, k, false, sent, &used)) {
            return false;
        }
        if (used < k) {
            return true; /* it stopped reading (a parked GET): the rest is not delivered */
        }
        p += k;
        n -= k;
    } while (n > 0);
    return true;
}

static void host_set(weft_store_server_t *srv, script_t *s)
{
    char key[256];
    const uint8_t *b, *val;
    size_t klen = take_len(s, 1);
    klen = take(s, klen, &b) ? (size_t)(s->p - b) : 0;
    memcpy(key, b, klen);
    key[klen] = '\0';
    size_t vlen = take_len(s, 1);
    vlen = take(s, vlen, &val) ? (size_t)(s->p - val) : 0;
    (void)weft__store_server_set(srv, key, val, vlen);
    (void)weft__store_server_has(srv, key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    decode_raw(data, size);
    if (size == 0) {
        return 0;
    }
    weft_store_server_t *srv;
    if (weft__store_server_fake("fuzz-token", &logger, &srv) != WEFT_OK) {
        abort();
    }
    int nconns = 1 + (data[0] & 3), ids[MAX_CONNS];
    bool open[MAX_CONNS] = {false}, greeted[MAX_CONNS] = {false};
    weft_store_buf_t sent = {0};
    for (int i = 0; i < nconns; i++) {
        ids[i] =
            weft__store_server_fake_open(srv, (data[0] >> (2 + i)) & 1, (data[0] & 0x40) ? i : -1);
        open[i] = ids[i] >= 0;
    }
    script_t s = {data + 1, size - 1};
    while (s.left > 0) {
        const uint8_t *op;
        (void)take(&s, 1, &op);
        int i = *op & 3, kind = (*op >> 2) & 3;
        size_t piece = *op >> 4;
        sent.len = 0;
        if (kind == 0) {
            const uint8_t *bytes;
            size_t n = take_len(&s, 2);
            n = take(&s, n, &bytes) ? (size_t)(s.p - bytes) : 0;
            if (i < nconns && open[i]) {
                open[i] = feed(srv, ids[i], bytes, n, piece, &sent);
            }
        } else if (kind == 1 && i < nconns && open[i]) {
            open[i] = weft__store_server_feed(srv, ids[i], NULL, 0, true, &sent, NULL);
        } else if (kind == 2 && i < nconns && open[i]) {
            open[i] = weft__store_server_feed(srv, ids[i], NULL, 0, false, &sent, NULL);
        } else if (kind == 3) {
            host_set(srv, &s);
        }
        check_sent(&sent, &greeted[i]);
    }
    for (int i = 0; i < nconns; i++) {
        sent.len = 0;
        if (open[i] && weft__store_server_feed(srv, ids[i], NULL, 0, false, &sent, NULL)) {
            check_sent(&sent, &greeted[i]);
        }
    }
    weft__store_buf_free(&sent);
    weft__store_server_stop(srv);
    return 0;
}
