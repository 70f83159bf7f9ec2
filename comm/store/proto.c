/* Framing, message encoding and the HMAC challenge-response of the rendezvous store. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/sha.h>

#include "comm/store/proto.h"
#include "comm/store/store.h"
#include "util/hex.h"

void weft__store_buf_free(weft_store_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

weft_status_t weft__store_buf_put(weft_store_buf_t *b, const void *p, size_t n)
{
    if (n > b->cap - b->len) {
        size_t cap = b->cap > 0 ? b->cap : 256;
        while (cap - b->len < n) {
            cap *= 2;
        }
        uint8_t *data = realloc(b->data, cap);
        if (data == NULL) {
            return WEFT_ERR_NO_MEMORY;
        }
        b->data = data;
        b->cap = cap;
    }
    if (n > 0) {
        memcpy(b->data + b->len, p, n);
    }
    b->len += n;
    return WEFT_OK;
}

weft_status_t weft__store_buf_put_u16(weft_store_buf_t *b, uint16_t v)
{
    uint8_t p[2] = {(uint8_t)(v >> 8), (uint8_t)v};
    return weft__store_buf_put(b, p, sizeof(p));
}

weft_status_t weft__store_buf_put_u32(weft_store_buf_t *b, uint32_t v)
{
    uint32_t be = htonl(v);
    return weft__store_buf_put(b, &be, sizeof(be));
}

weft_status_t weft__store_buf_put_u64(weft_store_buf_t *b, uint64_t v)
{
    weft_status_t st = weft__store_buf_put_u32(b, (uint32_t)(v >> 32));
    return st == WEFT_OK ? weft__store_buf_put_u32(b, (uint32_t)v) : st;
}

uint32_t weft__store_get_u32(const uint8_t *p)
{
    uint32_t be;
    memcpy(&be, p, sizeof(be));
    return ntohl(be);
}

uint64_t weft__store_get_u64(const uint8_t *p)
{
    return ((uint64_t)weft__store_get_u32(p) << 32) | weft__store_get_u32(p + 4);
}

void weft__store_set_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (56 - 8 * i));
    }
}

void weft__store_hdr_encode(uint8_t hdr[WEFT__STORE_HDR_LEN], uint32_t len, weft_store_msg_t type)
{
    uint32_t be = htonl(len);
    memcpy(hdr, &be, sizeof(be));
    hdr[4] = (uint8_t)type;
    hdr[5] = hdr[6] = hdr[7] = 0;
}

weft_status_t weft__store_hdr_decode(const uint8_t hdr[WEFT__STORE_HDR_LEN], uint32_t *len,
                                     weft_store_msg_t *type)
{
    uint32_t n = weft__store_get_u32(hdr);
    if (n > WEFT_STORE_MAX_FRAME || hdr[4] < WEFT__STORE_HELLO || hdr[4] > WEFT__STORE_MSG_MAX) {
        return WEFT_ERR_PROTOCOL;
    }
    *len = n;
    *type = (weft_store_msg_t)hdr[4];
    return WEFT_OK;
}

uint32_t weft__store_hdr_id(const uint8_t hdr[WEFT__STORE_HDR_LEN])
{
    return ((uint32_t)hdr[5] << 16) | ((uint32_t)hdr[6] << 8) | hdr[7];
}

void weft__store_frame_set_id(weft_store_buf_t *b, size_t start, uint32_t id)
{
    b->data[start + 5] = (uint8_t)(id >> 16);
    b->data[start + 6] = (uint8_t)(id >> 8);
    b->data[start + 7] = (uint8_t)id;
}

weft_status_t weft__store_frame_begin(weft_store_buf_t *b, weft_store_msg_t type, size_t *start)
{
    uint8_t hdr[WEFT__STORE_HDR_LEN];
    size_t at = b->len;
    weft__store_hdr_encode(hdr, 0, type);
    weft_status_t st = weft__store_buf_put(b, hdr, sizeof(hdr));
    if (st == WEFT_OK) {
        *start = at;
    }
    return st;
}

weft_status_t weft__store_frame_end(weft_store_buf_t *b, size_t start)
{
    size_t payload = b->len - start - WEFT__STORE_HDR_LEN;
    if (payload > WEFT_STORE_MAX_FRAME) {
        b->len = start;
        return WEFT_ERR_INVALID_ARG;
    }
    uint32_t be = htonl((uint32_t)payload);
    memcpy(b->data + start, &be, sizeof(be));
    return WEFT_OK;
}

weft_status_t weft__store_frame_bytes(weft_store_buf_t *b, weft_store_msg_t type, const void *p,
                                      size_t len)
{
    size_t start = b->len; /* what a failed frame_begin leaves: nothing to undo */
    if (len > WEFT_STORE_MAX_FRAME) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = weft__store_frame_begin(b, type, &start);
    if (st == WEFT_OK) {
        st = weft__store_buf_put(b, p, len);
    }
    if (st == WEFT_OK) {
        return weft__store_frame_end(b, start);
    }
    b->len = start;
    return st;
}

weft_status_t weft__store_frame_kv(weft_store_buf_t *b, weft_store_msg_t type, const char *key,
                                   size_t klen, const void *rest, size_t rest_len)
{
    size_t start = b->len; /* what a failed frame_begin leaves: nothing to undo */
    if (klen > WEFT_STORE_MAX_KEY || rest_len > WEFT_STORE_MAX_FRAME) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = weft__store_frame_begin(b, type, &start);
    if (st == WEFT_OK) {
        st = weft__store_buf_put_u16(b, (uint16_t)klen);
    }
    if (st == WEFT_OK) {
        st = weft__store_buf_put(b, key, klen);
    }
    if (st == WEFT_OK) {
        st = weft__store_buf_put(b, rest, rest_len);
    }
    if (st == WEFT_OK) {
        return weft__store_frame_end(b, start);
    }
    b->len = start;
    return st;
}

weft_status_t weft__store_frame_resp(weft_store_buf_t *b, weft_status_t status, const void *data,
                                     size_t len)
{
    size_t start = b->len; /* what a failed frame_begin leaves: nothing to undo */
    if (len > WEFT_STORE_MAX_FRAME) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = weft__store_frame_begin(b, WEFT__STORE_RESP, &start);
    if (st == WEFT_OK) {
        st = weft__store_buf_put_u32(b, (uint32_t)(int32_t)status);
    }
    if (st == WEFT_OK) {
        st = weft__store_buf_put(b, data, len);
    }
    if (st == WEFT_OK) {
        return weft__store_frame_end(b, start);
    }
    b->len = start;
    return st;
}

weft_status_t weft__store_kv_decode(const uint8_t *p, size_t len, const char **key, size_t *klen,
                                    const uint8_t **rest, size_t *rest_len)
{
    if (len < 2) {
        return WEFT_ERR_PROTOCOL;
    }
    size_t n = ((size_t)p[0] << 8) | p[1];
    if (n > WEFT_STORE_MAX_KEY || n > len - 2 || memchr(p + 2, '\0', n) != NULL) {
        return WEFT_ERR_PROTOCOL;
    }
    *key = (const char *)(p + 2);
    *klen = n;
    *rest = p + 2 + n;
    *rest_len = len - 2 - n;
    return WEFT_OK;
}

weft_status_t weft__store_resp_decode(const uint8_t *p, size_t len, weft_status_t *status,
                                      const uint8_t **data, size_t *dlen)
{
    if (len < 4) {
        return WEFT_ERR_PROTOCOL;
    }
    int32_t s = (int32_t)weft__store_get_u32(p);
    switch (s) {
    case WEFT_OK:
    case WEFT_ERR_TIMEOUT:
    case WEFT_ERR_INVALID_ARG:
    case WEFT_ERR_NO_MEMORY:
    case WEFT_ERR_AUTH:
    case WEFT_ERR_PROTOCOL:
        break;
    default:
        return WEFT_ERR_PROTOCOL;
    }
    *status = (weft_status_t)s;
    *data = p + 4;
    *dlen = len - 4;
    return WEFT_OK;
}

weft_status_t weft__store_hmac_sha256(const void *key, size_t klen, const void *data, size_t dlen,
                                      uint8_t out[WEFT__STORE_PROOF_LEN])
{
    unsigned int n = 0;
    if (klen > INT32_MAX || HMAC(EVP_sha256(), key, (int)klen, data, dlen, out, &n) == NULL ||
        n != WEFT__STORE_PROOF_LEN) {
        return WEFT_ERR_INVALID_ARG;
    }
    return WEFT_OK;
}

void weft__store_transcript(uint8_t t[WEFT__STORE_TRANSCRIPT_LEN],
                            const uint8_t sn[WEFT__STORE_NONCE_LEN],
                            const uint8_t cn[WEFT__STORE_NONCE_LEN], weft_store_role_t role,
                            uint32_t id)
{
    memcpy(t, sn, WEFT__STORE_NONCE_LEN);
    memcpy(t + WEFT__STORE_NONCE_LEN, cn, WEFT__STORE_NONCE_LEN);
    uint8_t *p = t + 2 * WEFT__STORE_NONCE_LEN;
    p[0] = (uint8_t)role;
    uint32_t be = htonl(id);
    memcpy(p + 1, &be, sizeof(be));
}

weft_status_t weft__store_session_secret(const char *token, weft_store_role_t role, uint32_t id,
                                         uint8_t out[WEFT__STORE_PROOF_LEN])
{
    if (role == WEFT__STORE_ROLE_LAUNCHER) {
        return SHA256((const unsigned char *)token, strlen(token), out) != NULL
                   ? WEFT_OK
                   : WEFT_ERR_NO_MEMORY;
    }
    uint8_t msg[sizeof("weft-member-v1") - 1 + 4];
    memcpy(msg, "weft-member-v1", sizeof(msg) - 4);
    uint32_t be = htonl(id);
    memcpy(msg + sizeof(msg) - 4, &be, sizeof(be));
    return weft__store_hmac_sha256(token, strlen(token), msg, sizeof(msg), out);
}

weft_status_t weft__store_data_key(const char *token, uint8_t out[32])
{
    static const char label[] = "weft-data-v1";
    return weft__store_hmac_sha256(token, strlen(token), label, sizeof(label) - 1, out);
}

weft_status_t weft__store_data_hex(const char *token, char out[65])
{
    uint8_t key[32];
    weft_status_t st = weft__store_data_key(token, key);
    if (st != WEFT_OK) {
        memset(key, 0, sizeof(key));
    }
    weft__hex_encode(key, sizeof(key), out);
    OPENSSL_cleanse(key, sizeof(key));
    return st;
}

int weft__store_member_line(const char *token, int id, char line[WEFT__STORE_MEMBER_LINE])
{
    uint8_t secret[WEFT__STORE_PROOF_LEN], data[32];
    char secret_hex[2 * sizeof(secret) + 1], data_hex[2 * sizeof(data) + 1];
    int n = -1;
    if (id >= 0 &&
        weft__store_session_secret(token, WEFT__STORE_ROLE_MEMBER, (uint32_t)id, secret) ==
            WEFT_OK &&
        weft__store_data_key(token, data) == WEFT_OK) {
        weft__hex_encode(secret, sizeof(secret), secret_hex);
        weft__hex_encode(data, sizeof(data), data_hex);
        n = snprintf(line, WEFT__STORE_MEMBER_LINE, "weft-member-v1 %d %s %s\n", id, secret_hex,
                     data_hex);
    }
    OPENSSL_cleanse(secret, sizeof(secret));
    OPENSSL_cleanse(data, sizeof(data));
    OPENSSL_cleanse(secret_hex, sizeof(secret_hex));
    OPENSSL_cleanse(data_hex, sizeof(data_hex));
    if (n < 0 || n >= WEFT__STORE_MEMBER_LINE) {
        OPENSSL_cleanse(line, WEFT__STORE_MEMBER_LINE);
        return -1;
    }
    return n;
}

weft_status_t weft__store_derive(const uint8_t key[WEFT__STORE_PROOF_LEN], weft_store_derive_t what,
                                 const uint8_t t[WEFT__STORE_TRANSCRIPT_LEN],
                                 uint8_t out[WEFT__STORE_PROOF_LEN])
{
    /* Distinct labels: neither side's proof is the other's, nor a key of either way. */
    static const char *const labels[] = {
        [WEFT__STORE_CLIENT_PROOF] = "weft-store-client-v2",
        [WEFT__STORE_SERVER_PROOF] = "weft-store-server-v2",
        [WEFT__STORE_KEY_C2S] = "weft-store-c2s-v2",
        [WEFT__STORE_KEY_S2C] = "weft-store-s2c-v2",
    };
    uint8_t msg[32 + WEFT__STORE_TRANSCRIPT_LEN];
    size_t llen = strlen(labels[what]);
    memcpy(msg, labels[what], llen);
    memcpy(msg + llen, t, WEFT__STORE_TRANSCRIPT_LEN);
    return weft__store_hmac_sha256(key, WEFT__STORE_PROOF_LEN, msg,
                                   llen + WEFT__STORE_TRANSCRIPT_LEN, out);
}

bool weft__store_proof_check(const uint8_t key[WEFT__STORE_PROOF_LEN], weft_store_derive_t what,
                             const uint8_t t[WEFT__STORE_TRANSCRIPT_LEN], const uint8_t *proof,
                             size_t len)
{
    uint8_t expect[WEFT__STORE_PROOF_LEN];
    if (len != WEFT__STORE_PROOF_LEN || weft__store_derive(key, what, t, expect) != WEFT_OK) {
        return false;
    }
    bool ok = CRYPTO_memcmp(expect, proof, WEFT__STORE_PROOF_LEN) == 0;
    OPENSSL_cleanse(expect, sizeof(expect));
    return ok;
}

/* HMAC-SHA256(d->key, seq || a || b) without advancing the sequence number. */
static weft_status_t tag_at(const weft_store_dir_t *d, const uint8_t *a, size_t alen,
                            const uint8_t *b, size_t blen, uint8_t tag[WEFT__STORE_TAG_LEN])
{
    uint8_t seq[8];
    weft__store_set_u64(seq, d->seq);
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    size_t n = 0;
    bool ok = ctx != NULL && EVP_MAC_init(ctx, d->key, sizeof(d->key), params) == 1 &&
              EVP_MAC_update(ctx, seq, sizeof(seq)) == 1 && EVP_MAC_update(ctx, a, alen) == 1 &&
              (blen == 0 || EVP_MAC_update(ctx, b, blen) == 1) &&
              EVP_MAC_final(ctx, tag, &n, WEFT__STORE_TAG_LEN) == 1 && n == WEFT__STORE_TAG_LEN;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return ok ? WEFT_OK : WEFT_ERR_NO_MEMORY;
}

weft_status_t weft__store_seal(weft_store_buf_t *b, size_t start, weft_store_dir_t *d)
{
    uint8_t tag[WEFT__STORE_TAG_LEN];
    weft_status_t st = tag_at(d, b->data + start, b->len - start, NULL, 0, tag);
    if (st == WEFT_OK) {
        st = weft__store_buf_put(b, tag, sizeof(tag));
    }
    if (st == WEFT_OK) {
        d->seq++;
    } else {
        b->len = start; /* no frame rather than one without its tag */
    }
    return st;
}

bool weft__store_tag_check(weft_store_dir_t *d, const uint8_t hdr[WEFT__STORE_HDR_LEN],
                           const uint8_t *body, size_t blen, const uint8_t *tag)
{
    uint8_t expect[WEFT__STORE_TAG_LEN];
    if (tag_at(d, hdr, WEFT__STORE_HDR_LEN, body, blen, expect) != WEFT_OK ||
        CRYPTO_memcmp(expect, tag, WEFT__STORE_TAG_LEN) != 0) {
        return false;
    }
    d->seq++;
    return true;
}

weft_status_t weft__store_random(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return WEFT_ERR_IO;
        }
        p += n;
        len -= (size_t)n;
    }
    return WEFT_OK;
}

weft_status_t weft__store_make_token(char out[65])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t raw[16];
    weft_status_t st = weft__store_random(raw, sizeof(raw));
    if (st != WEFT_OK) {
        return st;
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * sizeof(raw)] = '\0';
    return WEFT_OK;
}

weft_status_t weft__store_scan_decode(const uint8_t *rest, size_t len, weft_store_scan_wire_t *out)
{
    if (len < WEFT__STORE_SCAN_ARGS_LEN) {
        return WEFT_ERR_PROTOCOL;
    }
    const char *after = (const char *)rest + WEFT__STORE_SCAN_ARGS_LEN;
    size_t alen = len - WEFT__STORE_SCAN_ARGS_LEN;
    if (alen > WEFT_STORE_MAX_KEY || memchr(after, '\0', alen) != NULL) {
        return WEFT_ERR_PROTOCOL;
    }
    out->timeout_ms = weft__store_get_u32(rest);
    out->min_count = weft__store_get_u32(rest + 4);
    out->max_bytes = weft__store_get_u32(rest + 8);
    out->after = after;
    out->alen = alen;
    return WEFT_OK;
}

weft_status_t weft__store_page_decode(const uint8_t *p, size_t len, bool *more, uint32_t *count,
                                      const uint8_t **entries, size_t *elen)
{
    if (len < WEFT__STORE_PAGE_HDR_LEN || p[0] > 1) {
        return WEFT_ERR_PROTOCOL;
    }
    *more = p[0] == 1;
    *count = weft__store_get_u32(p + 1);
    *entries = p + WEFT__STORE_PAGE_HDR_LEN;
    *elen = len - WEFT__STORE_PAGE_HDR_LEN;
    return WEFT_OK;
}

weft_status_t weft__store_page_entry(const uint8_t **p, size_t *left, const char **key,
                                     size_t *klen, const uint8_t **val, size_t *vlen)
{
    const uint8_t *q = *p;
    size_t n = *left;
    if (n < WEFT__STORE_PAGE_ENTRY_LEN) {
        return WEFT_ERR_PROTOCOL;
    }
    size_t kl = ((size_t)q[0] << 8) | q[1];
    if (kl == 0 || kl > WEFT_STORE_MAX_KEY || kl > n - WEFT__STORE_PAGE_ENTRY_LEN ||
        memchr(q + 2, '\0', kl) != NULL) {
        return WEFT_ERR_PROTOCOL;
    }
    size_t vl = weft__store_get_u32(q + 2 + kl);
    if (vl > n - WEFT__STORE_PAGE_ENTRY_LEN - kl) {
        return WEFT_ERR_PROTOCOL;
    }
    *key = (const char *)q + 2;
    *klen = kl;
    *val = q + WEFT__STORE_PAGE_ENTRY_LEN + kl;
    *vlen = vl;
    *p = q + WEFT__STORE_PAGE_ENTRY_LEN + kl + vl;
    *left = n - WEFT__STORE_PAGE_ENTRY_LEN - kl - vl;
    return WEFT_OK;
}

int weft__store_key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c != 0 ? c : (alen > blen) - (alen < blen);
}
