/* Framing, message encoding and the HMAC challenge-response of the rendezvous store. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "comm/store/proto.h"

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
    if (n > WEFT_STORE_MAX_FRAME || hdr[4] < WEFT__STORE_HELLO || hdr[4] > WEFT__STORE_MSG_MAX ||
        (hdr[5] | hdr[6] | hdr[7]) != 0) {
        return WEFT_ERR_PROTOCOL;
    }
    *len = n;
    *type = (weft_store_msg_t)hdr[4];
    return WEFT_OK;
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

weft_status_t weft__store_auth_proof(const char *token, const uint8_t nonce[WEFT__STORE_NONCE_LEN],
                                     uint8_t proof[WEFT__STORE_PROOF_LEN])
{
    uint8_t msg[WEFT__STORE_NONCE_LEN + sizeof(WEFT__STORE_AUTH_CONTEXT) - 1];
    memcpy(msg, nonce, WEFT__STORE_NONCE_LEN);
    memcpy(msg + WEFT__STORE_NONCE_LEN, WEFT__STORE_AUTH_CONTEXT,
           sizeof(WEFT__STORE_AUTH_CONTEXT) - 1);
    return weft__store_hmac_sha256(token, strlen(token), msg, sizeof(msg), proof);
}

bool weft__store_auth_check(const char *token, const uint8_t nonce[WEFT__STORE_NONCE_LEN],
                            const uint8_t *proof, size_t len)
{
    uint8_t expect[WEFT__STORE_PROOF_LEN];
    if (len != WEFT__STORE_PROOF_LEN || weft__store_auth_proof(token, nonce, expect) != WEFT_OK) {
        return false;
    }
    return CRYPTO_memcmp(expect, proof, WEFT__STORE_PROOF_LEN) == 0;
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
